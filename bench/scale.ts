// Scale: the operator on a cluster of 100, 300 and 1,000 kwok nodes with 30 Running pods each, one policy over all of
// them. For each size the bench starts the compiled CLI as a user would (its own process, the operator's
// ServiceAccount and RBAC) and records: start to synced and ready; RSS and V8 heap after sync, and heap per cached
// pod; idle CPU over a minute; LISTs after sync (from the apiserver's audit log); then an incident on 10 nodes with
// 10 new pods each: detection latency p50/p99 (first FailedCreatePodSandBox Event, once the threshold passed, to the
// pod listed with its cause in SandboxHealth), time to the cordon and to the first eviction (from the node's first
// such Event), the operator's CPU, its API writes per second and the apiserver's own time for its SandboxHealth
// patches (audit log). The operator runs with the environment config/manager/manager.yaml deploys (its V8 and malloc
// settings, when it sets any) and the node options of its tree's image (the Dockerfile's ENTRYPOINT). At the largest
// size more runs follow: its memory as deployed against Node's defaults, one after the other (only when the
// Deployment or the image sets anything); the incident again on 10 other nodes under a CPU profile (--cpu-prof,
// summarised: busy share, GC, the functions with the most self time); and a storm: thousands of pods that kwok starts only after 30-300 s (a mass
// rollout), every node degraded, and the same incident on 10 other nodes, measured the same way.
//
//   make build && npx tsx bench/scale.ts [--sizes 100,300,1000] [--pods-per-node 30] [--storm-pods-per-node 5]
//     [--idle-seconds 60] [--before <commit> [--after-first] [--rounds 1]] [--results scale-dev.json] [--keep]
//     [--quick [--profile]]
//
// With --before, each size and the storm are measured twice on the same cluster, one after the other: the operator
// of that commit (a worktree built into ~/.cache/sandbox-remediator/bench, kept by commit), then this checkout's;
// the results hold both, and their ratios side by side. --rounds N measures each size N times per tree, in turn
// (before, after, after, before...), and compares by the geometric mean of each round's ratio.
//
// The cluster grows from size to size (nodes and pods are created in parallel batches and kept); --keep leaves the
// last one up, otherwise the bench deletes what it created.
import {
  Watch,
  type CoreV1Event,
  type KubernetesObject,
  type V1Node,
  type V1Pod,
} from '@kubernetes/client-node';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import {
  createReadStream,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { cpus, homedir, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { NODE_CONDITION_TYPE, type SandboxHealthStatus } from '../src/api/v1alpha1/index.js';
import { AUDIT_LOG, type AuditEvent } from '../test/support/audit.js';
import { api, Cleanup, isClusterUp, kubeConfig, kubectl, startCluster } from '../test/support/cluster.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import { applyCrds, applyRbac, OperatorProcess } from '../test/support/operator-process.js';
import { createToken, writeTokenKubeconfig } from '../test/support/tokens.js';
import { FAST_IO } from '../test/support/proc-root.js';
import { SaturatedNode } from '../test/support/saturated-node.js';
import { summarizeProfile } from './cpu-profile.js';
import { deployedEnv, imageNodeArgs } from './deployed-env.js';
import { percentile } from './stats.js';

const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? (process.argv[i + 1] ?? fallback) : fallback;
};
const SIZES = arg('sizes', '100,300,1000').split(',').map(Number);
const PODS_PER_NODE = Number(arg('pods-per-node', '30'));
const STORM_PODS_PER_NODE = Number(arg('storm-pods-per-node', '5'));
const IDLE_SECONDS = Number(arg('idle-seconds', '60'));
const INCIDENT_NODES = 10;
const INCIDENT_PODS_PER_NODE = 10;
const THRESHOLD_SECONDS = 1;
const KEEP = process.argv.includes('--keep');
// While working on the operator: the sizes' runs only (no memory against Node's defaults, no profile; the storm with
// --storm-pods-per-node 0 off too), into scale-dev.json unless --results says otherwise.
const QUICK = process.argv.includes('--quick');
// With --quick, the profiled incident after all (--profile).
const PROFILE = !QUICK || process.argv.includes('--profile');
const BEFORE = arg('before', '');
// Each size and the storm measure the before tree first unless --after-first: the one measured second runs on a
// cluster an incident older (more Events, a longer audit log), so a ratio is worth reading in both orders.
const AFTER_FIRST = process.argv.includes('--after-first');
// With --before, each size is measured --rounds times per tree, the order turned round each round (AB, BA, AB...):
// each round's ratio is its own after over its own before, and the comparison is their geometric mean, in which a
// drift the cluster's age brings cancels out over an even number of rounds.
const ROUNDS = Number(arg('rounds', '1'));
if (!Number.isInteger(ROUNDS) || ROUNDS < 1)
  throw new Error(`--rounds ${arg('rounds', '')}: a whole number, 1 or more`);
if (ROUNDS > 1 && !BEFORE) throw new Error('--rounds compares two trees: give --before <commit> too');
// Only make bench-scale writes scale.json, the file the docs' figures come from; a run by hand writes beside it.
const RESULTS = arg('results', 'scale-dev.json');
const NAMESPACE = 'bench-scale';
const POOL_LABEL = 'sandbox.remediator.io/bench-scale';
const POLICY = 'bench-scale';
const OPERATOR_USER = 'system:serviceaccount:sandbox-remediator-system:sandbox-remediator-operator';
const STORM_STAGE = 'sr-bench-storm';
const CONCURRENCY = 32;
const TICKS = 100; // getconf CLK_TCK on Linux x86_64

const started = Date.now();
const log = (msg: string) => {
  console.error(`[scale ${Math.round((Date.now() - started) / 1000)}s] ${msg}`);
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs fn over items, at most `limit` at a time, logging progress on long runs. */
async function inParallel<T>(
  what: string,
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  let done = 0;
  let lastLog = Date.now();
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++]!;
      for (let attempt = 1; ; attempt++) {
        try {
          await fn(item);
          break;
        } catch (err) {
          const code = (err as { code?: number }).code;
          if (code === 409) break; // already there: the cluster grows from the last size
          if (attempt >= 5) throw err;
          await sleep(500 * attempt);
        }
      }
      done++;
      if (Date.now() - lastLog > 10_000) {
        log(`${what}: ${done}/${items.length}`);
        lastLog = Date.now();
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

async function until(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastLog = Date.now();
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    if (Date.now() - lastLog > 15_000) {
      log(`waiting for ${what}`);
      lastLog = Date.now();
    }
    await sleep(250);
  }
}

function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}
function statusKiB(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  return Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
}
const mib = (kib: number) => Math.round((kib / 1024) * 10) / 10;
const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;

/**
 * The operator's audit events at or after `since`: a stream, filtered by user before parsing (the log is big), over the
 * log and its rotated backup (200 MB each: an incident can rotate it, and its first writes are then in the backup).
 */
async function operatorAudit(since: Date, users = [OPERATOR_USER]): Promise<AuditEvent[]> {
  const events: AuditEvent[] = [];
  const dir = dirname(AUDIT_LOG);
  const files = readdirSync(dir).filter((f) => /^audit.*\.log$/.test(f));
  const quoted = users.map((user) => `"${user}"`);
  for (const file of files) {
    const lines = createInterface({ input: createReadStream(join(dir, file)), crlfDelay: Infinity });
    for await (const line of lines) {
      if (!quoted.some((user) => line.includes(user))) continue;
      const event = JSON.parse(line) as AuditEvent;
      if (event.stage === 'RequestReceived') continue; // its ResponseComplete line counts the request
      if (users.includes(event.user.username) && new Date(event.requestReceivedTimestamp) >= since)
        events.push(event);
    }
  }
  return events.sort((a, b) => a.requestReceivedTimestamp.localeCompare(b.requestReceivedTimestamp));
}

const done = (e: AuditEvent) => new Date(e.stageTimestamp ?? e.requestReceivedTimestamp).getTime();

/** The apiserver's answer to the first Event the injector created for each pod, by "namespace/name". */
function firstInjectedEvents(injected: AuditEvent[]): Map<string, number> {
  const first = new Map<string, number>();
  for (const e of injected) {
    if (e.verb !== 'create' || e.objectRef?.resource !== 'events' || (e.responseStatus?.code ?? 0) >= 300)
      continue;
    const pod = `${e.objectRef.namespace}/${(e.objectRef.name ?? '').replace(/\.[0-9a-f]+$/, '')}`;
    const at = done(e);
    if (at < (first.get(pod) ?? Infinity)) first.set(pod, at);
  }
  return first;
}

/**
 * The cordon as the apiserver timed it, apart from the bench's watches: per node, from its answer to the first Event
 * of a pod on the node (the injector's) to its receipt of the operator's first node patch after it (the cordon, the
 * first change of the node's spec in an incident), both on this machine's clock, sorted.
 */
function serverCordonLatencies(
  world: World,
  nodes: readonly string[],
  injected: AuditEvent[],
  operatorWrites: AuditEvent[],
): number[] {
  const firstEvent = new Map<string, number>();
  for (const [pod, at] of firstInjectedEvents(injected)) {
    const node = world.nodeOfPodName.get(pod);
    if (node && at < (firstEvent.get(node) ?? Infinity)) firstEvent.set(node, at);
  }
  const latencies: number[] = [];
  for (const node of nodes) {
    const event = firstEvent.get(node);
    if (event === undefined) continue;
    const patched = operatorWrites
      .filter(
        (e) =>
          e.verb === 'patch' &&
          e.objectRef?.resource === 'nodes' &&
          !e.objectRef.subresource &&
          e.objectRef.name === node,
      )
      .map((e) => new Date(e.requestReceivedTimestamp).getTime())
      .filter((at) => at >= event)
      .sort((a, b) => a - b)[0];
    if (patched !== undefined) latencies.push(patched - event);
  }
  return latencies.sort((a, b) => a - b);
}

/**
 * Where the time from a node's first Event to its cordon goes, as the apiserver saw it: per incident node, from the
 * first injected Event on it, each write of the operator to the node's objects (the node, its SandboxHealth) and to
 * the policy, as "ms verb resource/subresource name", up to the node's first patch (for reading, not a figure).
 */
function writeTimeline(
  world: World,
  nodes: readonly string[],
  injected: AuditEvent[],
  operatorWrites: AuditEvent[],
): Record<string, string[]> {
  const firstEvent = new Map<string, number>();
  for (const [pod, at] of firstInjectedEvents(injected)) {
    const node = world.nodeOfPodName.get(pod);
    if (node && at < (firstEvent.get(node) ?? Infinity)) firstEvent.set(node, at);
  }
  const timeline: Record<string, string[]> = {};
  for (const node of nodes) {
    const start = firstEvent.get(node);
    if (start === undefined) continue;
    const lines: string[] = [];
    for (const e of operatorWrites) {
      const at = new Date(e.requestReceivedTimestamp).getTime() - start;
      const ref = e.objectRef;
      const mine =
        ref?.name === node || ref?.name?.startsWith(`${node}.`) || ref?.resource === 'sandboxpolicies';
      if (at < -2000 || !mine) continue;
      const answered = done(e) - start;
      lines.push(
        `${at} ${answered} ${e.verb} ${[ref?.resource, ref?.subresource].filter(Boolean).join('/')} ${ref?.name ?? ''}`,
      );
      if (e.verb === 'patch' && ref?.resource === 'nodes' && !ref.subresource && at >= 0) break;
    }
    timeline[node] = lines;
  }
  return timeline;
}

/**
 * Detection as the apiserver timed it, apart from when the bench's own watches delivered it (a bench busy with 30,000
 * pods can take both an Event and a SandboxHealth late, in one batch): from the apiserver's answer to the first Event
 * of the pod (the injector's, as the admin) to its answer to the last status patch of the pod's SandboxHealth by the
 * operator that had completed when the bench saw the pod listed (an upper bound: the write that listed it may be an
 * earlier one), both on this machine's clock; threshold as for the bench's own figure.
 */
function serverDetection(
  world: World,
  pods: [string, string][],
  injected: AuditEvent[],
  healthPatches: AuditEvent[],
): number[] {
  const firstEvent = firstInjectedEvents(injected);
  const latencies: number[] = [];
  for (const [uid, node] of pods) {
    const seen = world.detected.get(uid);
    const event = firstEvent.get(`${NAMESPACE}/${world.podName.get(uid) ?? ''}`);
    const created = world.podCreated.get(uid);
    if (seen === undefined || event === undefined || created === undefined) continue;
    const written = healthPatches
      .filter((e) => e.objectRef?.name === node && done(e) <= seen)
      .reduce((latest, e) => Math.max(latest, done(e)), -Infinity);
    if (written > -Infinity)
      latencies.push(Math.max(0, written - Math.max(event, created + THRESHOLD_SECONDS * 1000)));
  }
  return latencies.sort((a, b) => a - b);
}
/** The user the incident's injector writes its Events as. */
const INJECTOR_USER = 'kubernetes-admin';
const WRITES = new Set(['create', 'update', 'patch', 'delete', 'deletecollection']);

/** Every series of the operator's metrics by name, summed over its labels (prom-client writes no timestamps). */
async function scrape(port: number): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const sums = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const name = line.split(/[{ ]/, 1)[0]!;
    const value = Number(line.split(' ').at(-1));
    sums.set(name, (sums.get(name) ?? 0) + value);
    // Each labelled series under its own name too: name{label="value"}.
    if (line[name.length] === '{') sums.set(line.slice(0, line.lastIndexOf(' ')), value);
  }
  return sums;
}
async function metric(port: number, name: string): Promise<number> {
  return (await scrape(port)).get(name) ?? NaN;
}

/** The operator's metrics the incident's `pipeline` figures come from. */
const PIPELINE = [
  'sandbox_remediator_reconcile_duration_seconds_sum',
  'sandbox_remediator_reconcile_duration_seconds_count',
  'sandbox_remediator_reconcile_nodes_observed_total',
  'sandbox_remediator_health_report_wait_seconds_sum',
  'sandbox_remediator_health_report_wait_seconds_count',
  'sandbox_remediator_health_reports_fenced_total{outcome="landed"}',
  'sandbox_remediator_health_reports_fenced_total{outcome="refused"}',
] as const;
async function pipelineMetrics(port: number): Promise<Record<(typeof PIPELINE)[number], number>> {
  const sums = await scrape(port);
  return Object.fromEntries(PIPELINE.map((name) => [name, sums.get(name) ?? 0])) as Record<
    (typeof PIPELINE)[number],
    number
  >;
}

/**
 * What the operator's own metrics say of an incident's window: its passes (how many, their mean and total time, the
 * nodes they looked at) and its SandboxHealth reports (how many, their mean wait from being asked for to written, and
 * how many went beside their node's write in flight).
 */
function pipelineDuring(
  before: Awaited<ReturnType<typeof pipelineMetrics>>,
  after: Awaited<ReturnType<typeof pipelineMetrics>>,
) {
  const d = (name: (typeof PIPELINE)[number]) => after[name] - before[name];
  const passes = d('sandbox_remediator_reconcile_duration_seconds_count');
  const reports = d('sandbox_remediator_health_report_wait_seconds_count');
  return {
    passes,
    passMeanMs: round(
      (d('sandbox_remediator_reconcile_duration_seconds_sum') * 1000) / Math.max(passes, 1),
      1,
    ),
    passTotalMs: Math.round(d('sandbox_remediator_reconcile_duration_seconds_sum') * 1000),
    nodesObserved: d('sandbox_remediator_reconcile_nodes_observed_total'),
    reports,
    reportWaitMeanMs: round(
      (d('sandbox_remediator_health_report_wait_seconds_sum') * 1000) / Math.max(reports, 1),
      1,
    ),
    // Reports sent beside their node's write in flight (ADR 0026): landed right after it, or refused.
    fencedLanded: d('sandbox_remediator_health_reports_fenced_total{outcome="landed"}'),
    fencedRefused: d('sandbox_remediator_health_reports_fenced_total{outcome="refused"}'),
  };
}

// --------------------------------------------------------------------------------------------------------------
// What the bench watches: pods of its namespace, its nodes, SandboxHealths, failure Events.

class World {
  readonly phase = new Map<string, string>();
  readonly podNode = new Map<string, string>();
  readonly podCreated = new Map<string, number>();
  readonly deletedAt = new Map<string, number>();
  /** uid -> name, for the audit log's Events. */
  readonly podName = new Map<string, string>();
  /** namespace/name -> node, for the audit log's evictions. */
  readonly nodeOfPodName = new Map<string, string>();
  readonly firstEvent = new Map<string, number>();
  readonly firstEventOnNode = new Map<string, number>();
  readonly detected = new Map<string, number>();
  readonly cordonedAt = new Map<string, number>();
  readonly healths = new Set<string>();
  private readonly aborts: AbortController[] = [];

  async start(): Promise<void> {
    const kc = kubeConfig();
    const watch = async (
      path: string,
      query: Record<string, string>,
      on: (type: string, o: never) => void,
    ) => {
      const restart = async (): Promise<void> => {
        const deliver = (type: string, o: unknown) => {
          on(type, o as never);
        };
        const controller = await new Watch(kc).watch(path, query, deliver, () => {
          if (!this.stopped) setTimeout(() => void restart(), 1000);
        });
        this.aborts.push(controller);
      };
      await restart();
    };
    await watch(`/api/v1/namespaces/${NAMESPACE}/pods`, {}, (type, p: V1Pod) => {
      const uid = p.metadata?.uid;
      if (!uid) return;
      if (type === 'DELETED' || p.metadata?.deletionTimestamp) {
        if (!this.deletedAt.has(uid)) this.deletedAt.set(uid, Date.now());
        if (type === 'DELETED') this.phase.delete(uid);
        return;
      }
      this.phase.set(uid, p.status?.phase ?? 'Pending');
      if (p.spec?.nodeName) {
        this.podNode.set(uid, p.spec.nodeName);
        this.nodeOfPodName.set(`${p.metadata?.namespace}/${p.metadata?.name}`, p.spec.nodeName);
      }
      if (p.metadata?.name) this.podName.set(uid, p.metadata.name);
      // A pod waits from its scheduling, as the operator counts it (stuckThresholdSeconds): its creation stands in only
      // until the scheduler has placed it (a pod first seen unscheduled would otherwise keep its creation time, and
      // the scheduler's own delay, up to a second and more under load, would count as the operator's).
      const scheduled = p.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'True');
      if (scheduled?.lastTransitionTime)
        this.podCreated.set(uid, new Date(scheduled.lastTransitionTime).getTime());
      else if (p.metadata?.creationTimestamp && !this.podCreated.has(uid))
        this.podCreated.set(uid, new Date(p.metadata.creationTimestamp).getTime());
    });
    await watch(
      `/api/v1/namespaces/${NAMESPACE}/events`,
      { fieldSelector: 'reason=FailedCreatePodSandBox' },
      (_t, e: CoreV1Event) => {
        const uid = e.involvedObject.uid;
        if (!uid || this.firstEvent.has(uid)) return;
        const now = Date.now();
        this.firstEvent.set(uid, now);
        const node = this.podNode.get(uid);
        if (node && !this.firstEventOnNode.has(node)) this.firstEventOnNode.set(node, now);
      },
    );
    await watch(
      '/apis/sandbox.remediator.io/v1alpha1/sandboxhealths',
      {},
      (type, h: KubernetesObject & { status?: SandboxHealthStatus }) => {
        const name = h.metadata?.name ?? '';
        if (type === 'DELETED') this.healths.delete(name);
        else this.healths.add(name);
        const now = Date.now();
        for (const p of h.status?.stuckPods ?? [])
          if (p.cause !== 'Unknown' && !this.detected.has(p.uid)) this.detected.set(p.uid, now);
      },
    );
    await watch('/api/v1/nodes', { labelSelector: POOL_LABEL }, (_t, n: V1Node) => {
      const name = n.metadata?.name ?? '';
      if (n.spec?.unschedulable && !this.cordonedAt.has(name)) this.cordonedAt.set(name, Date.now());
    });
  }
  private stopped = false;
  stop(): void {
    this.stopped = true;
    for (const a of this.aborts) a.abort();
  }
  /** Forgets the last incident: each size's incident is measured on its own. */
  resetIncident(): void {
    for (const map of [
      this.firstEvent,
      this.firstEventOnNode,
      this.detected,
      this.cordonedAt,
      this.deletedAt,
    ])
      map.clear();
  }
  count(phase: string): number {
    let n = 0;
    for (const p of this.phase.values()) if (p === phase) n++;
    return n;
  }
}

// --------------------------------------------------------------------------------------------------------------
// The cluster: nodes, pods, the policy, the storm Stage.

const nodeName = (i: number) => `scale-${String(i).padStart(4, '0')}`;

async function ensureNodes(count: number): Promise<void> {
  const { core } = api();
  const names = Array.from({ length: count }, (_, i) => nodeName(i));
  await inParallel('nodes', names, CONCURRENCY, (name) =>
    core.createNode({
      body: {
        metadata: {
          name,
          annotations: { 'kwok.x-k8s.io/node': 'fake' },
          labels: {
            type: 'kwok',
            'kubernetes.io/hostname': name,
            'kubernetes.io/os': 'linux',
            [POOL_LABEL]: 'true',
          },
        },
      },
    }),
  );
  const deadline = Date.now() + Math.max(300_000, count * 120);
  for (;;) {
    const list = await core.listNode({ labelSelector: POOL_LABEL });
    const ready = list.items.filter((n) =>
      n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
    ).length;
    if (ready >= count) return;
    if (Date.now() > deadline) throw new Error(`only ${ready}/${count} nodes Ready`);
    log(`${ready}/${count} nodes Ready`);
    await sleep(3000);
  }
}

/** A pod of a ReplicaSet-less owner would be refused eviction: bench pods are plain, incident pods are owned. */
function plainPod(name: string, node: string, labels: Record<string, string> = {}): V1Pod {
  return {
    metadata: { name, labels: { app: 'scale', ...labels } },
    spec: {
      nodeName: node,
      terminationGracePeriodSeconds: 0,
      containers: [
        {
          name: 'app',
          image: 'registry.local/app:1',
          resources: { requests: { cpu: '10m', memory: '16Mi' } },
        },
      ],
    },
  };
}

async function ensurePods(world: World, nodes: number): Promise<void> {
  const { core } = api();
  const items: { name: string; node: string }[] = [];
  for (let i = 0; i < nodes; i++)
    for (let j = 0; j < PODS_PER_NODE; j++) items.push({ name: `${nodeName(i)}-p${j}`, node: nodeName(i) });
  await inParallel('pods', items, CONCURRENCY, ({ name, node }) =>
    core.createNamespacedPod({ namespace: NAMESPACE, body: plainPod(name, node) }),
  );
  // kwok starts a few hundred pods a second on 2 cores: 150,000 take most of an hour.
  await until(
    `${items.length} Running pods`,
    () => world.count('Running') >= items.length,
    Math.max(900_000, items.length * 30),
  );
}

function policyManifest(): string {
  return JSON.stringify({
    apiVersion: 'sandbox.remediator.io/v1alpha1',
    kind: 'SandboxPolicy',
    metadata: { name: POLICY },
    spec: {
      nodeSelector: { matchLabels: { [POOL_LABEL]: 'true' } },
      detection: { stuckThresholdSeconds: THRESHOLD_SECONDS },
      // The crafted /proc's PSI is the reading that moves (38 % under load): FAST_IO judges on it alone.
      ioPressure: { source: 'agent', ...FAST_IO },
      remediation: { cordon: true, evictStuckPods: true },
      safety: { maxEvictionsPerMinute: 30, cooldownSeconds: 60 },
    },
  });
}

/** kwok starts these pods only after 30-300 s: a mass rollout the nodes are slow to start. */
function stormStage(): string {
  const running = readFileSync(join(REPO_ROOT, 'hack', 'cluster', 'stages', 'pod-running.yaml'), 'utf8');
  const template = /statusTemplate: \|\n([\s\S]*)$/.exec(running)?.[1] ?? '';
  const indented = template.replace(/^ {6}/gm, '      ');
  return `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ${STORM_STAGE}
spec:
  resourceRef: { apiGroup: v1, kind: Pod }
  selector:
    matchExpressions:
      - { key: '.metadata.labels.bench-storm', operator: In, values: ['held'] }
      - { key: '.metadata.deletionTimestamp', operator: DoesNotExist }
      - { key: '.status.phase', operator: In, values: ['Pending'] }
  weight: 100000
  delay: { durationMilliseconds: 30000, jitterDurationMilliseconds: 300000 }
  next:
    statusTemplate: |
${indented}`;
}

// --------------------------------------------------------------------------------------------------------------
// The incident: a real agent per node reading a crafted /proc under load, the injector's Events, and 10 new
// Deployment-owned pods per node (owned, so they may be evicted).

interface Incident {
  nodes: string[];
  /** When the incident's pods were created: the agents and injectors run by then. */
  podsFrom: number;
  stop(): Promise<void>;
}

async function startIncident(nodes: string[], tag: string): Promise<Incident> {
  const cleanup = new Cleanup();
  const started = await Promise.allSettled(
    nodes.map(async (node) => {
      const saturated = new SaturatedNode(node, cleanup);
      await saturated.start();
      await saturated.pressure('load');
    }),
  );
  const failed = started.find((s) => s.status === 'rejected');
  if (failed) {
    await cleanup.run(); // the agents and daemons that did start
    throw failed.reason;
  }
  const { apps } = api();
  const podsFrom = Date.now();
  await inParallel('incident deployments', nodes, 10, (node) =>
    apps.createNamespacedDeployment({
      namespace: NAMESPACE,
      body: {
        metadata: { name: `incident-${tag}-${node}` },
        spec: {
          replicas: INCIDENT_PODS_PER_NODE,
          selector: { matchLabels: { incident: `${tag}-${node}` } },
          template: {
            metadata: { labels: { incident: `${tag}-${node}` } },
            spec: {
              // Through the scheduler, as a Deployment's pods go: once the node is cordoned, replacements wait
              // (Pending, unschedulable) instead of landing on it again past the cordon.
              nodeSelector: { 'kubernetes.io/hostname': node },
              terminationGracePeriodSeconds: 0,
              containers: [{ name: 'app', image: 'registry.local/app:1' }],
            },
          },
        },
      },
    }),
  );
  return {
    nodes,
    podsFrom,
    async stop() {
      await Promise.all(
        nodes.map((node) =>
          apps
            .deleteNamespacedDeployment({ namespace: NAMESPACE, name: `incident-${tag}-${node}` })
            .catch(() => undefined),
        ),
      );
      await cleanup.run(); // injectors and agents
    },
  };
}

interface IncidentResult {
  pods: number;
  detected: number;
  detectionP50Ms: number;
  detectionP99Ms: number;
  detectionMaxMs: number;
  /** The same, timed by the apiserver (audit log): its answer to the pod's first Event to its answer to the report. */
  serverDetectionP50Ms: number;
  serverDetectionP99Ms: number;
  cordonP50Ms: number;
  /** The cordon as the apiserver timed it: its answer to the node's first Event to the operator's node patch. */
  serverCordonP50Ms: number;
  serverCordonP99Ms: number;
  cordonP99Ms: number;
  cordoned: number;
  firstEvictionP50Ms: number;
  firstEvictionP99Ms: number;
  evictedNodes: number;
  operatorCpuPercent: number;
  operatorWritesPerSecond: number;
  operatorWrites: Record<string, number>;
  /** Incident pods the injector got a FailedCreatePodSandBox Event out for: none means no incident to detect. */
  podsWithEvent: number;
  /** How long the apiserver took to answer the operator's SandboxHealth status patches (audit log). */
  apiserverHealthPatchP50Ms: number;
  apiserverHealthPatchP99Ms: number;
  /** The operator's passes and reports in the incident's window, from its own metrics (absent on older trees). */
  pipeline?: ReturnType<typeof pipelineDuring>;
}

async function measureIncident(
  world: World,
  operator: OperatorProcess,
  nodes: string[],
  tag: string,
  seconds: number,
): Promise<IncidentResult> {
  const pid = operator.pid!;
  const from = new Date();
  world.resetIncident();
  const incident = await startIncident(nodes, tag);
  const t0 = incident.podsFrom;
  // From the incident's first pod: the agents' and daemons' start-up before it is not the operator's.
  const ticks = cpuTicks(pid);
  const metricsFrom = await pipelineMetrics(operator.metricsPort);
  let stoppedAt = new Date();
  let metricsTo: Awaited<ReturnType<typeof pipelineMetrics>> | undefined;
  const incidentNodes = new Set(nodes);
  const incidentPods = () =>
    [...world.podNode].filter(([uid, n]) => incidentNodes.has(n) && world.podCreated.get(uid)! >= t0 - 1000);
  try {
    const deadline = Date.now() + seconds * 1000;
    while (Date.now() < deadline) {
      const pods = incidentPods();
      // Pods created once their node is cordoned wait unscheduled: only those scheduled onto the nodes count.
      const done =
        pods.length > 0 &&
        pods.every(([uid]) => world.detected.has(uid) || world.deletedAt.has(uid)) &&
        nodes.every((n) => world.cordonedAt.has(n));
      if (done && Date.now() - t0 > 30_000) break;
      await sleep(500);
    }
  } finally {
    stoppedAt = new Date();
    metricsTo = await pipelineMetrics(operator.metricsPort).catch(() => undefined);
    const late = nodes.filter((n) => !world.cordonedAt.has(n));
    if (late.length > 0) {
      const health = await kubectl(['get', 'sandboxhealth', late[0]!, '-o', 'jsonpath={.status}']);
      log(
        `incident ${tag}: ${late.length} node(s) not cordoned; ${late[0]}: ${health.stdout.slice(0, 3000)}`,
      );
    }
    log(`incident ${tag}: stopping`);
    await incident.stop();
  }
  const elapsed = (stoppedAt.getTime() - t0) / 1000;
  const cpu = ((cpuTicks(pid) - ticks) / TICKS / ((Date.now() - t0) / 1000)) * 100;
  const pipeline = metricsTo ? pipelineDuring(metricsFrom, metricsTo) : undefined;
  const latencies: number[] = [];
  const firstPods = incidentPods().filter(([uid]) => world.podCreated.get(uid)! < t0 + 20_000);
  for (const [uid] of firstPods) {
    const seen = world.detected.get(uid);
    const event = world.firstEvent.get(uid);
    const created = world.podCreated.get(uid);
    if (seen === undefined || event === undefined || created === undefined) continue;
    latencies.push(Math.max(0, seen - Math.max(event, created + THRESHOLD_SECONDS * 1000)));
  }
  latencies.sort((a, b) => a - b);
  writeFileSync(
    join(REPO_ROOT, '.cluster', 'logs', `scale-${tag}-operator.log`),
    operator.logs.map((l) => JSON.stringify(l)).join('\n'),
  );
  const perPod = firstPods.map(([uid, node]) => ({
    node,
    uid: uid.slice(0, 8),
    created: (world.podCreated.get(uid) ?? 0) - t0,
    event: (world.firstEvent.get(uid) ?? 0) - t0,
    seen: (world.detected.get(uid) ?? 0) - t0,
  }));
  writeFileSync(
    join(REPO_ROOT, '.cluster', 'logs', `scale-${tag}-pods.json`),
    JSON.stringify(perPod, null, 1),
  );
  // The incident's window only: from the start to the stop, before the bench's own cleanup deletes anything.
  // One read of the log for the operator's writes and the injector's Events.
  const read = await operatorAudit(from, [OPERATOR_USER, INJECTOR_USER]);
  const audit = read.filter(
    (e) =>
      e.user.username === OPERATOR_USER &&
      WRITES.has(e.verb) &&
      new Date(e.requestReceivedTimestamp) <= stoppedAt,
  );
  // Evictions as the apiserver saw them: the operator's successful pods/eviction creates.
  const evictedAt = new Map<string, number>();
  for (const e of audit) {
    if (e.objectRef?.subresource !== 'eviction' || (e.responseStatus?.code ?? 0) >= 300) continue;
    const node = world.nodeOfPodName.get(`${e.objectRef.namespace}/${e.objectRef.name}`);
    const at = new Date(e.requestReceivedTimestamp).getTime();
    if (node && at < (evictedAt.get(node) ?? Infinity)) evictedAt.set(node, at);
  }
  const cordon: number[] = [];
  const eviction: number[] = [];
  for (const node of nodes) {
    const first = world.firstEventOnNode.get(node);
    if (first === undefined) continue;
    const cordoned = world.cordonedAt.get(node);
    if (cordoned !== undefined) cordon.push(cordoned - first);
    const evicted = evictedAt.get(node);
    if (evicted !== undefined) eviction.push(evicted - first);
  }
  cordon.sort((a, b) => a - b);
  eviction.sort((a, b) => a - b);
  const writes: Record<string, number> = {};
  for (const e of audit) {
    const key = `${e.verb} ${[e.objectRef?.resource, e.objectRef?.subresource].filter(Boolean).join('/')}`;
    writes[key] = (writes[key] ?? 0) + 1;
  }
  const healthPatches = audit.filter(
    (e) => e.objectRef?.resource === 'sandboxhealths' && e.objectRef.subresource === 'status',
  );
  const injected = read.filter((e) => e.user.username === INJECTOR_USER);
  const serverLatencies = serverDetection(world, firstPods, injected, healthPatches);
  const serverCordon = serverCordonLatencies(world, nodes, injected, audit);
  writeFileSync(
    join(REPO_ROOT, '.cluster', 'logs', `scale-${tag}-timeline.json`),
    JSON.stringify(writeTimeline(world, nodes, injected, audit), null, 1),
  );
  // The apiserver's own time for each SandboxHealth status patch: a report cannot be seen before it is written.
  const patchMs = healthPatches
    .map(
      (e) =>
        new Date(e.stageTimestamp ?? e.requestReceivedTimestamp).getTime() -
        new Date(e.requestReceivedTimestamp).getTime(),
    )
    .sort((a, b) => a - b);
  return {
    pods: firstPods.length,
    detected: latencies.length,
    detectionP50Ms: Math.round(percentile(latencies, 0.5)),
    detectionP99Ms: Math.round(percentile(latencies, 0.99)),
    detectionMaxMs: Math.round(latencies.at(-1) ?? NaN),
    serverDetectionP50Ms: Math.round(percentile(serverLatencies, 0.5)),
    serverDetectionP99Ms: Math.round(percentile(serverLatencies, 0.99)),
    cordonP50Ms: Math.round(percentile(cordon, 0.5)),
    cordonP99Ms: Math.round(percentile(cordon, 0.99)),
    serverCordonP50Ms: Math.round(percentile(serverCordon, 0.5)),
    serverCordonP99Ms: Math.round(percentile(serverCordon, 0.99)),
    cordoned: cordon.length,
    firstEvictionP50Ms: Math.round(percentile(eviction, 0.5)),
    firstEvictionP99Ms: Math.round(percentile(eviction, 0.99)),
    evictedNodes: eviction.length,
    operatorCpuPercent: round(cpu),
    operatorWritesPerSecond: round(audit.length / elapsed, 2),
    operatorWrites: writes,
    podsWithEvent: firstPods.filter(([uid]) => world.firstEvent.has(uid)).length,
    apiserverHealthPatchP50Ms: Math.round(percentile(patchMs, 0.5)),
    apiserverHealthPatchP99Ms: Math.round(percentile(patchMs, 0.99)),
    ...(pipeline && pipeline.passes > 0 ? { pipeline } : {}),
  };
}

/** Puts incident nodes back as they were before the operator acted: uncordoned, no stamps, no SandboxHealths. */
async function resetNodes(nodes: string[]): Promise<void> {
  for (const node of nodes) {
    await kubectl(['uncordon', node]);
    const annotations = JSON.parse(
      (await kubectl(['get', 'node', node, '-o', 'jsonpath={.metadata.annotations}'])).stdout || '{}',
    ) as Record<string, string>;
    const ours = Object.keys(annotations).filter(
      (k) => k.startsWith('sandbox.remediator.io/') && k !== 'sandbox.remediator.io/bench-scale',
    );
    if (ours.length > 0) await kubectl(['annotate', 'node', node, ...ours.map((k) => `${k}-`)]);
    // Our Node condition too: the next operator measured would otherwise begin by taking back the last one's verdict,
    // and count those writes as its own incident's.
    const types = (
      await kubectl(['get', 'node', node, '-o', 'jsonpath={.status.conditions[*].type}'])
    ).stdout.split(' ');
    const at = types.indexOf(NODE_CONDITION_TYPE);
    if (at >= 0) {
      const remove = [
        { op: 'test', path: `/status/conditions/${at}/type`, value: NODE_CONDITION_TYPE },
        { op: 'remove', path: `/status/conditions/${at}` },
      ];
      const args = [
        'patch',
        'node',
        node,
        '--subresource=status',
        '--type=json',
        '-p',
        JSON.stringify(remove),
      ];
      const patched = await kubectl(args);
      if (patched.code !== 0)
        throw new Error(`removing ${NODE_CONDITION_TYPE} from ${node}: ${patched.stderr}`);
    }
  }
  await kubectl(['delete', 'sandboxhealths', '--all', '--wait=false']);
}

// --------------------------------------------------------------------------------------------------------------

interface SizeResult {
  nodes: number;
  pods: number;
  startToReadyMs: number;
  startToFirstReportMs: number;
  rssMiB: number;
  peakRssMiB: number;
  heapUsedMiB: number;
  heapBytesPerPod: number;
  idleCpuPercent: number;
  listsAtStart: number;
  listsAfterSync: number;
  idleWritesPerSecond: number;
  incident: IncidentResult;
}

/** The operator's environment as config/manager/manager.yaml deploys it (its V8 and malloc settings). */
const OPERATOR_ENV = deployedEnv('config/manager/manager.yaml', 'Deployment', 'operator');
/** This tree's options for node, as its image's entrypoint gives them (each tree measured is started with its own). */
const OPERATOR_NODE_ARGS = imageNodeArgs(REPO_ROOT);

async function measureSize(world: World, size: number, kubeconfig: string, tree: Tree): Promise<SizeResult> {
  const pods = size * PODS_PER_NODE;
  await healthsGone(world);
  await kubectl(['apply', '-f', '-'], policyManifest());
  const operator = new OperatorProcess();
  const t0 = Date.now();
  const startedAt = new Date(t0 - 1000);
  log(
    `${size} nodes: starting the ${tree.name} operator, ${tree.commit} (${JSON.stringify(OPERATOR_ENV)}, node ${tree.nodeArgs.join(' ')})`,
  );
  await operator.start(
    [`--kubeconfig=${kubeconfig}`, `--log-level=${process.env.OPERATOR_LOG_LEVEL ?? 'info'}`],
    {
      built: true,
      root: tree.root,
      waitForStarted: false,
      env: OPERATOR_ENV,
      nodeArgs: tree.nodeArgs,
    },
  );
  let readyAt = 0;
  while (Date.now() - t0 < 300_000) {
    if ((await operator.get('/readyz')).status === 200) {
      readyAt = Date.now();
      break;
    }
    await sleep(100);
  }
  if (!readyAt) throw new Error(`operator not ready in 300 s:\n${operator.tail()}`);
  await until(
    `${size} SandboxHealths`,
    () => [...world.healths].filter((h) => h.startsWith('scale-')).length >= size,
    600_000,
  );
  const firstReportAt = Date.now();
  log(`${size} nodes: ready in ${readyAt - t0} ms, every node reported after ${firstReportAt - t0} ms`);
  await sleep(10_000); // settle: the first pass's writes come back through the watches
  const pid = operator.pid!;
  const syncedAt = new Date();
  const ticks = cpuTicks(pid);
  await sleep(IDLE_SECONDS * 1000);
  const idleCpu = ((cpuTicks(pid) - ticks) / TICKS / IDLE_SECONDS) * 100;
  const rss = statusKiB(pid, 'VmRSS');
  const heap = await metric(operator.metricsPort, 'nodejs_heap_size_used_bytes');
  // The informers' first LISTs must be in the log, or the cluster predates LIST logging and 0 below would mean nothing.
  const listsAtStart = (await operatorAudit(startedAt)).filter(
    (e) => e.verb === 'list' && new Date(e.requestReceivedTimestamp) < syncedAt,
  ).length;
  if (listsAtStart === 0)
    throw new Error(
      "no LIST by the operator's ServiceAccount in the audit log: the cluster runs an older audit policy (make cluster-down first)",
    );
  const idleAudit = await operatorAudit(syncedAt);
  const lists = idleAudit.filter((e) => e.verb === 'list').length;
  const idleWrites = idleAudit.filter((e) => WRITES.has(e.verb)).length;
  log(
    `${size} nodes: idle CPU ${round(idleCpu)}%, RSS ${mib(rss)} MiB, heap ${round(heap / 2 ** 20)} MiB, ${lists} LISTs`,
  );
  const incidentNodes = Array.from({ length: INCIDENT_NODES }, (_, i) =>
    nodeName(Math.floor((i * size) / INCIDENT_NODES)),
  );
  const incident = await measureIncident(world, operator, incidentNodes, `s${size}${suffix(tree)}`, 180);
  log(`${size} nodes: incident ${JSON.stringify(incident)}`);
  const peak = statusKiB(pid, 'VmHWM');
  await operator.stop();
  await kubectl(['delete', 'sandboxpolicy', POLICY, '--wait=false']);
  await resetNodes(incidentNodes);
  return {
    nodes: size,
    pods,
    startToReadyMs: readyAt - t0,
    startToFirstReportMs: firstReportAt - t0,
    rssMiB: mib(rss),
    peakRssMiB: mib(peak),
    heapUsedMiB: round(heap / 2 ** 20),
    heapBytesPerPod: Math.round(heap / pods),
    idleCpuPercent: round(idleCpu, 2),
    listsAtStart,
    listsAfterSync: lists,
    idleWritesPerSecond: round(idleWrites / IDLE_SECONDS, 2),
    incident,
  };
}

/**
 * Memory of the operator as deployed and of one without the deployed environment and node options (Node's
 * defaults), one after the other (once each, in that order) on the same cluster, each the same way: started with
 * no SandboxHealth (its first pass creates every one), every node reported, 10 s to settle, then the idle minute. Its peak is the first
 * pass's over every node; a storm's peak is not compared.
 */
async function measureDeployedEnv(world: World, size: number, kubeconfig: string) {
  await kubectl(['apply', '-f', '-'], policyManifest());
  const once = async (env: Record<string, string>, nodeArgs: string[]) => {
    // Each from no SandboxHealth, as measureSize starts: its first pass creates every one (its peak), and the runs
    // that follow (the profile's, the storm's) wait for none.
    await healthsGone(world);
    const operator = new OperatorProcess();
    // Variables the deployment sets are emptied, so the bench's own environment does not stand in for them.
    const cleared = Object.fromEntries(Object.keys(OPERATOR_ENV).map((k) => [k, env[k] ?? '']));
    await operator.start([`--kubeconfig=${kubeconfig}`, '--log-level=info'], {
      built: true,
      env: cleared,
      nodeArgs,
    });
    await until(
      `${size} SandboxHealths`,
      () => [...world.healths].filter((h) => h.startsWith('scale-')).length >= size,
      600_000,
    );
    await sleep(10_000 + IDLE_SECONDS * 1000);
    const result = {
      env,
      nodeArgs,
      rssMiB: mib(statusKiB(operator.pid!, 'VmRSS')),
      peakRssMiB: mib(statusKiB(operator.pid!, 'VmHWM')),
      heapUsedMiB: round((await metric(operator.metricsPort, 'nodejs_heap_size_used_bytes')) / 2 ** 20),
      heapTotalMiB: round((await metric(operator.metricsPort, 'nodejs_heap_size_total_bytes')) / 2 ** 20),
    };
    await operator.stop();
    await kubectl(['delete', 'sandboxhealths', '--all', '--wait=false']);
    return result;
  };
  const deployed = await once(OPERATOR_ENV, OPERATOR_NODE_ARGS);
  const defaults = await once({}, []);
  await kubectl(['delete', 'sandboxpolicy', POLICY, '--wait=false']);
  log(`${size} nodes: deployed ${JSON.stringify(deployed)}, Node defaults ${JSON.stringify(defaults)}`);
  return {
    nodes: size,
    deployed,
    defaults,
    rssRatio: round(deployed.rssMiB / defaults.rssMiB, 2),
    peakRssRatio: round(deployed.peakRssMiB / defaults.peakRssMiB, 2),
  };
}

/**
 * Where the operator's time goes during an incident: the same incident, on 10 other nodes, with an operator that
 * writes a CPU profile (--cpu-prof). Its own run, so the profiler's cost is in no other figure.
 */
async function measureProfiledIncident(world: World, size: number, kubeconfig: string) {
  await healthsGone(world);
  await kubectl(['apply', '-f', '-'], policyManifest());
  const dir = join(REPO_ROOT, '.cluster', 'profiles');
  await rm(dir, { recursive: true, force: true });
  const operator = new OperatorProcess();
  await operator.start([`--kubeconfig=${kubeconfig}`, '--log-level=info'], {
    built: true,
    env: OPERATOR_ENV,
    nodeArgs: [...OPERATOR_NODE_ARGS, '--cpu-prof', `--cpu-prof-dir=${dir}`],
  });
  // Its first pass over every node, and the settle, as measureSize waits.
  await until(
    `${size} SandboxHealths`,
    () => [...world.healths].filter((h) => h.startsWith('scale-')).length >= size,
    600_000,
  );
  await sleep(10_000);
  const nodes = Array.from({ length: INCIDENT_NODES }, (_, i) =>
    nodeName(Math.floor((i * size) / INCIDENT_NODES) + 2),
  );
  const from = Date.now();
  const incident = await measureIncident(world, operator, nodes, 'profiled', 180);
  const to = Date.now();
  await operator.stop();
  const exited = Date.now();
  await kubectl(['delete', 'sandboxpolicy', POLICY, '--wait=false']);
  await resetNodes(nodes);
  const file = existsSync(dir) ? readdirSync(dir).find((f) => f.endsWith('.cpuprofile')) : undefined;
  if (!file) throw new Error(`no CPU profile in ${dir}: did the operator exit cleanly?`);
  // The profile ends when the operator exits: the incident is the span from (exited - from) to (exited - to)
  // before its end (the bench's audit reading after the incident, and the shutdown, are left out).
  const profile = summarizeProfile(join(dir, file), { fromEndMs: exited - from, toEndMs: exited - to }, 20);
  log(`profiled incident: ${JSON.stringify(incident)}; profile ${JSON.stringify(profile)}`);
  return { nodes: size, profileFile: join('.cluster', 'profiles', file), incident, profile };
}

async function measureStorm(world: World, size: number, kubeconfig: string, tree: Tree) {
  const { core } = api();
  await healthsGone(world);
  await kubectl(['apply', '-f', '-'], stormStage());
  await kubectl(['apply', '-f', '-'], policyManifest());
  const operator = new OperatorProcess();
  log(`storm: starting the ${tree.name} operator, ${tree.commit}`);
  await operator.start([`--kubeconfig=${kubeconfig}`, '--log-level=info'], {
    built: true,
    root: tree.root,
    env: OPERATOR_ENV,
    nodeArgs: tree.nodeArgs,
  });
  await until(
    `${size} SandboxHealths`,
    () => [...world.healths].filter((h) => h.startsWith('scale-')).length >= size,
    600_000,
  );
  const stormFrom = new Date();
  const items: { name: string; node: string }[] = [];
  for (let i = 0; i < size; i++)
    for (let j = 0; j < STORM_PODS_PER_NODE; j++)
      items.push({ name: `storm${suffix(tree)}-${nodeName(i)}-${j}`, node: nodeName(i) });
  log(`storm: creating ${items.length} pods that kwok starts after 30-300 s`);
  await inParallel('storm pods', items, CONCURRENCY, ({ name, node }) =>
    core.createNamespacedPod({ namespace: NAMESPACE, body: plainPod(name, node, { 'bench-storm': 'held' }) }),
  );
  // The storm's pods of the run before are gone (their names are taken again), and kwok holds these back.
  await sleep(20_000); // the first storm pods cross the threshold: every node degrades
  const pending = world.count('Pending');
  const incidentNodes = Array.from({ length: INCIDENT_NODES }, (_, i) =>
    nodeName(Math.floor((i * size) / INCIDENT_NODES) + 1),
  );
  const incident = await measureIncident(world, operator, incidentNodes, `storm${suffix(tree)}`, 180);
  const stormAudit = (await operatorAudit(stormFrom)).filter((e) => WRITES.has(e.verb));
  const events = stormAudit.filter((e) => e.objectRef?.resource === 'events').length;
  const seconds = (Date.now() - stormFrom.getTime()) / 1000;
  const peak = statusKiB(operator.pid!, 'VmHWM');
  log(`storm: ${pending} pending pods; incident ${JSON.stringify(incident)}`);
  await operator.stop();
  await kubectl(['delete', 'sandboxpolicy', POLICY, '--wait=false']);
  await resetNodes(incidentNodes);
  await kubectl(['delete', 'stage.kwok.x-k8s.io', STORM_STAGE, '--ignore-not-found']);
  await kubectl(['delete', 'pods', '-n', NAMESPACE, '-l', 'bench-storm=held', '--wait=false']);
  // Gone before the next run, whose operator would otherwise count them.
  for (const deadline = Date.now() + 600_000; Date.now() < deadline; await sleep(2000)) {
    const left = await core.listNamespacedPod({
      namespace: NAMESPACE,
      labelSelector: 'bench-storm=held',
      limit: 1,
    });
    if (left.items.length === 0) break;
  }
  return {
    nodes: size,
    stormPods: items.length,
    pendingWhenMeasured: pending,
    operatorEvents: events,
    operatorWritesPerSecond: round(stormAudit.length / seconds, 2),
    peakRssMiB: mib(peak),
    incident,
  };
}

// --------------------------------------------------------------------------------------------------------------

// --------------------------------------------------------------------------------------------------------------
// The trees measured: this checkout, and with --before that commit.

interface Tree {
  name: 'before' | 'after';
  /** The checkout whose dist/src/main.js runs. */
  root: string;
  commit: string;
  /** The options its image's entrypoint gives node: each tree runs as its own image runs it. */
  nodeArgs: string[];
}

const git = (...args: string[]) =>
  execFileSync('git', ['-C', REPO_ROOT, ...args], { encoding: 'utf8' }).trim();
const suffix = (tree: Tree) => (tree.name === 'before' ? '-before' : '');

/** A worktree of `commit`, built, kept in ~/.cache by commit: its node_modules are this checkout's (same lock). */
function beforeTree(commit: string): Tree {
  const sha = git('rev-parse', `${commit}^{commit}`);
  const root = join(homedir(), '.cache', 'sandbox-remediator', 'bench', `tree-${sha.slice(0, 12)}`);
  if (!existsSync(join(root, 'dist', 'src', 'main.js'))) {
    log(`building ${sha.slice(0, 12)} into ${root}`);
    if (existsSync(root)) git('worktree', 'remove', '--force', root);
    mkdirSync(dirname(root), { recursive: true });
    git('worktree', 'add', '--detach', root, sha);
    symlinkSync(join(REPO_ROOT, 'node_modules'), join(root, 'node_modules'));
    execFileSync(join(REPO_ROOT, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.build.json'], {
      cwd: root,
      stdio: 'inherit',
    });
  }
  return { name: 'before', root, commit: sha.slice(0, 12), nodeArgs: imageNodeArgs(root) };
}

function afterTree(): Tree {
  const dirty = git('status', '--porcelain', '--untracked-files=no', '--', 'src') !== '';
  return {
    name: 'after',
    root: REPO_ROOT,
    commit: `${git('rev-parse', '--short=12', 'HEAD')}${dirty ? '+dirty' : ''}`,
    nodeArgs: OPERATOR_NODE_ARGS,
  };
}

/** No SandboxHealth of the bench's nodes left from the run before: "every node reported" counts from none. */
async function healthsGone(world: World): Promise<void> {
  await until(
    "the last run's SandboxHealths to go",
    () => ![...world.healths].some((h) => h.startsWith('scale-')),
    300_000,
  );
}

if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'main.js')))
  throw new Error('run make build first: the bench starts dist/src/main.js');
const trees = [...(BEFORE ? [beforeTree(BEFORE)] : []), afterTree()];
if (AFTER_FIRST) trees.reverse();
if (!(await isClusterUp())) await startCluster();
if (!existsSync(AUDIT_LOG)) throw new Error('no audit log: restart the cluster with hack/cluster/up.sh');
await applyCrds();
await applyRbac();
await kubectl(['create', 'namespace', NAMESPACE]);
const dir = await mkdtemp(join(tmpdir(), 'scale-'));
const kubeconfig = await writeTokenKubeconfig(
  dir,
  'operator',
  await createToken('sandbox-remediator-system', 'sandbox-remediator-operator'),
);
const world = new World();
await world.start();
type Storm = Awaited<ReturnType<typeof measureStorm>>;
// Per tree, per size, one result per round.
const results: Record<Tree['name'], { sizes: SizeResult[][]; storm?: Storm }> = {
  before: { sizes: [] },
  after: { sizes: [] },
};
let deployedEnvEffect: Awaited<ReturnType<typeof measureDeployedEnv>> | undefined;
let profiled: Awaited<ReturnType<typeof measureProfiledIncident>> | undefined;
try {
  for (const size of SIZES) {
    log(`growing the cluster to ${size} nodes, ${size * PODS_PER_NODE} pods`);
    await ensureNodes(size);
    await ensurePods(world, size);
    for (const tree of trees) results[tree.name].sizes.push([]);
    for (let round = 0; round < ROUNDS; round++)
      for (const tree of round % 2 === 0 ? trees : [...trees].reverse()) {
        if (ROUNDS > 1) log(`${size} nodes: round ${round + 1} of ${ROUNDS}`);
        results[tree.name].sizes.at(-1)!.push(await measureSize(world, size, kubeconfig, tree));
        writeResults();
      }
  }
  // Only when the deployment sets anything: Node's defaults against themselves would say nothing.
  if (!QUICK && (Object.keys(OPERATOR_ENV).length > 0 || OPERATOR_NODE_ARGS.length > 0)) {
    deployedEnvEffect = await measureDeployedEnv(world, SIZES.at(-1)!, kubeconfig);
    writeResults();
  }
  if (PROFILE) {
    profiled = await measureProfiledIncident(world, SIZES.at(-1)!, kubeconfig);
    writeResults();
  }
  if (STORM_PODS_PER_NODE > 0)
    for (const tree of trees) {
      results[tree.name].storm = await measureStorm(world, SIZES.at(-1)!, kubeconfig, tree);
      writeResults();
    }
} finally {
  world.stop();
  await rm(dir, { recursive: true, force: true });
  if (!KEEP) {
    log('deleting what the bench created');
    await kubectl(['delete', 'namespace', NAMESPACE, '--wait=false']);
    await kubectl(['delete', 'nodes', '-l', POOL_LABEL, '--wait=false']);
  }
}

/**
 * After over before for each figure both runs have, side by side: below 1 is better for every one of them. With
 * several rounds, `before` and `after` are the rounds' medians, `ratio` the geometric mean of the rounds' own ratios
 * (`ratios`), which is not the ratio of the medians.
 */
function compared(before: readonly (SizeResult | Storm)[], after: readonly (SizeResult | Storm)[]) {
  const rounds = Math.min(before.length, after.length);
  if (rounds === 0) return undefined;
  const pick = (r: SizeResult | Storm) => ({
    detectionP50Ms: r.incident.detectionP50Ms,
    detectionP99Ms: r.incident.detectionP99Ms,
    cordonP50Ms: r.incident.cordonP50Ms,
    cordonP99Ms: r.incident.cordonP99Ms,
    serverCordonP50Ms: r.incident.serverCordonP50Ms,
    serverCordonP99Ms: r.incident.serverCordonP99Ms,
    firstEvictionP50Ms: r.incident.firstEvictionP50Ms,
    firstEvictionP99Ms: r.incident.firstEvictionP99Ms,
    apiserverHealthPatchP99Ms: r.incident.apiserverHealthPatchP99Ms,
    operatorCpuPercent: r.incident.operatorCpuPercent,
    operatorWritesPerSecond: r.incident.operatorWritesPerSecond,
    peakRssMiB: r.peakRssMiB,
    ...('idleCpuPercent' in r ? { idleCpuPercent: r.idleCpuPercent, rssMiB: r.rssMiB } : {}),
  });
  const b = before.slice(0, rounds).map(pick);
  const a = after.slice(0, rounds).map(pick);
  // Nearest rank: of two rounds, the lower.
  const median = (values: number[]) =>
    percentile(
      [...values].sort((x, y) => x - y),
      0.5,
    );
  return Object.fromEntries(
    Object.keys(a[0]!).map((key) => {
      const of = (r: ReturnType<typeof pick>) => r[key as keyof typeof r] ?? NaN;
      const ratios = a.map((r, i) => of(r) / Math.max(of(b[i]!), 0.01));
      const ratio = round(Math.exp(ratios.reduce((sum, x) => sum + Math.log(x), 0) / rounds), 2);
      const figures = { before: median(b.map(of)), after: median(a.map(of)), ratio };
      return [key, rounds > 1 ? { ...figures, ratios: ratios.map((x) => round(x, 2)) } : figures];
    }),
  );
}

function writeResults(): void {
  const after = results.after.sizes.map((rounds) => rounds[0]!).filter(Boolean);
  const first = after[0];
  const last = after.at(-1);
  const growth =
    first && last && last !== first
      ? {
          nodes: last.nodes / first.nodes,
          startToReady: round(last.startToReadyMs / first.startToReadyMs, 2),
          rss: round(last.rssMiB / first.rssMiB, 2),
          heap: round(last.heapUsedMiB / first.heapUsedMiB, 2),
          idleCpu: round(last.idleCpuPercent / Math.max(first.idleCpuPercent, 0.01), 2),
          detectionP99: round(last.incident.detectionP99Ms / Math.max(first.incident.detectionP99Ms, 1), 2),
        }
      : undefined;
  const before = trees.find((t) => t.name === 'before');
  writeFileSync(
    join(REPO_ROOT, 'bench', 'results', RESULTS),
    `${JSON.stringify(
      {
        date: new Date().toISOString(),
        machine: `${cpus().length} cores`,
        podsPerNode: PODS_PER_NODE,
        thresholdSeconds: THRESHOLD_SECONDS,
        incident: `${INCIDENT_NODES} nodes x ${INCIDENT_PODS_PER_NODE} new pods`,
        commit: trees.find((t) => t.name === 'after')!.commit, // the tree measured, as it was when the run began
        ...(before ? { order: trees.map((t) => t.name), roundsPerTree: ROUNDS } : {}),
        sizes: after,
        ...(growth ? { growthFirstToLast: growth } : {}),
        ...(deployedEnvEffect ? { deployedEnvEffect } : {}),
        ...(profiled ? { profiledIncident: profiled } : {}),
        ...(results.after.storm ? { storm: results.after.storm } : {}),
        ...(before
          ? {
              before: {
                commit: before.commit,
                sizes: results.before.sizes.map((rounds) => rounds[0]),
                storm: results.before.storm,
              },
              ...(ROUNDS > 1 ? { rounds: { before: results.before.sizes, after: results.after.sizes } } : {}),
              comparison: {
                sizes: after.map((a, i) => ({
                  nodes: a.nodes,
                  ...compared(results.before.sizes[i] ?? [], results.after.sizes[i]!),
                })),
                storm: compared(
                  results.before.storm ? [results.before.storm] : [],
                  results.after.storm ? [results.after.storm] : [],
                ),
              },
            }
          : {}),
      },
      null,
      2,
    )}\n`,
  );
}
