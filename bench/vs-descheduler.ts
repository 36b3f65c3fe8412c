// Side by side with the descheduler on the same incident, on the same cluster, in the same run: pods stuck in
// ContainerCreating on one IO-saturated node, and pods stuck on another node for a non-IO cause (a CNI failure).
// Phase A runs the descheduler (sigs.k8s.io/descheduler, PodLifeTime with states [ContainerCreating]); phase B runs
// this operator with one agent per node. Each phase gets fresh, identical kwok nodes and a fresh namespace, and
// nothing of the other tool runs.
//
// One phase: NODES kwok nodes; the tool starts; the incident starts on node 0 (containerd's name-reservation
// failure; its agent, in phase B, reads a /proc with the PSI recorded under stress-ng) and on node 1 (a Calico
// CNI failure; its agent reads an idle /proc); WARMUP seconds later WAVES Deployments of REPLICAS/WAVES pods each,
// INTERVAL/WAVES seconds apart, each spread evenly over the nodes (topology spread, maxSkew 1 per hostname), so
// each incident node holds REPLICAS/NODES stuck pods; OBSERVE seconds after the first, the tool is stopped.
//
// Everything is measured outside both tools: bindings and evictions from the apiserver's audit log (its receive
// times, microseconds), pod placement from a watch, peak RSS from the kernel (VmHWM), API writes from the audit
// log by user (each tool runs as a ServiceAccount of its own, bench/descheduler/identities.yaml; the operator as
// config/rbac's).
//
//   npx tsx bench/vs-descheduler.ts [--nodes 6] [--replicas 36] [--threshold-seconds 30] [--interval-seconds 30]
//                                   [--warmup-seconds 20] [--observe-seconds 180] [--waves 3]
//                                   [--only descheduler|operator]
//                                   [--descheduler PATH]
import { Watch, type V1Pod } from '@kubernetes/client-node';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { auditEvents, resourceOf, succeeded, type AuditEvent } from '../test/support/audit.js';
import {
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  isClusterUp,
  kubeConfig,
  kubectl,
  startCluster,
} from '../test/support/cluster.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import { applyCrds, applyRbac } from '../test/support/operator-process.js';
import { ProcRoot } from '../test/support/proc-root.js';
import { applyPolicy, getHealth } from '../test/support/resources.js';
import { createToken, writeTokenKubeconfig } from '../test/support/tokens.js';
import { createSpreadDeployment, isRunning, podsOf, startIncident } from '../test/support/workloads.js';
import { MeasuredProcess } from './descheduler/measured-process.js';
import { percentile } from './stats.js';

function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1]! : fallback;
}
const NODES = Number(flag('nodes', '6'));
const REPLICAS = Number(flag('replicas', '36'));
/** Our stuckThresholdSeconds and the descheduler's maxPodLifeTimeSeconds: the same number, as the issue asks. */
const THRESHOLD_SECONDS = Number(flag('threshold-seconds', '30'));
const INTERVAL_SECONDS = Number(flag('interval-seconds', '30'));
const WARMUP_SECONDS = Number(flag('warmup-seconds', '20'));
const OBSERVE_SECONDS = Number(flag('observe-seconds', '180'));
const ONLY = flag('only', '');
/** Deployments created INTERVAL/WAVES apart, so the first wave meets the descheduler's timer at every phase. */
const WAVES = Number(flag('waves', '3'));
const APPS = Array.from({ length: WAVES }, (_, i) => `web-${i}`);
const CNI_MESSAGE =
  'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "{id}": plugin type="calico" failed (add): error getting ClusterInformation: connection is unauthorized: Unauthorized';

const BENCH_NAMESPACE = 'sandbox-remediator-bench';
const OPERATOR_NAMESPACE = 'sandbox-remediator-system';
const OPERATOR_ACCOUNT = 'sandbox-remediator-operator';
const USERS = {
  descheduler: `system:serviceaccount:${BENCH_NAMESPACE}:descheduler`,
  operator: `system:serviceaccount:${OPERATOR_NAMESPACE}:${OPERATOR_ACCOUNT}`,
  agents: `system:serviceaccount:${BENCH_NAMESPACE}:agent`,
};
const WRITE_VERBS = new Set(['create', 'update', 'patch', 'delete', 'deletecollection']);

const log = (msg: string) => {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);
};

/** The descheduler `hack/cluster/build.sh descheduler` builds, keyed by DESCHEDULER_VERSION. */
function deschedulerBinary(): { path: string; version: string } {
  const versions = readFileSync(join(REPO_ROOT, 'hack', 'cluster', 'versions.env'), 'utf8');
  const version = /^DESCHEDULER_VERSION=(\S+)$/m.exec(versions)?.[1] ?? 'unknown';
  const cache = process.env.SANDBOX_REMEDIATOR_CACHE ?? join(homedir(), '.cache', 'sandbox-remediator');
  const path = flag('descheduler', join(cache, 'bin', `descheduler-v${version}`, 'descheduler'));
  if (!existsSync(path))
    throw new Error(
      `no descheduler at ${path}: run hack/cluster/build.sh descheduler (make bench-vs-descheduler does)`,
    );
  return { path, version };
}

// ---------------------------------------------------------------------------------------------------------------
// The two configurations, written out: what each tool is told, and why that is a fair telling.

/**
 * The descheduler's policy. Everything not set here is the descheduler's default, on purpose: this is how a
 * platform team runs it against stuck ContainerCreating pods.
 */
function deschedulerPolicy(pool: string) {
  return {
    apiVersion: 'descheduler/v1alpha2',
    kind: 'DeschedulerPolicy',
    // The same nodes the SandboxPolicy selects: each tool sees exactly the bench's pool.
    nodeSelector: `sandbox.remediator.io/test-pool=${pool}`,
    // No maxNoOfPodsToEvictPerNode/PerNamespace/Total: unlimited, the default. The operator's own brake
    // (maxEvictionsPerMinute, 10) is above the stuck pods of one node here, so neither tool is held back by a cap.
    profiles: [
      {
        name: 'stuck-container-creating',
        pluginConfig: [
          {
            name: 'DefaultEvictor',
            // The defaults, spelled out. Its default protections (local storage, DaemonSet, system-critical and
            // bare pods) spare none of the bench's pods: they are owned by a ReplicaSet of a Deployment, mount no
            // emptyDir or hostPath (the ServiceAccount token is a projected volume, not local storage), claim no
            // PVC and have no priority class, so evictLocalStoragePods and the other opt-outs would change nothing.
            // nodeFit stays false (its default): with it, the descheduler would still evict, because the pod fits
            // the other nodes; and the operator does not check it either.
            args: { nodeFit: false },
          },
          {
            name: 'PodLifeTime',
            // The configuration: maxPodLifeTimeSeconds equal to our stuckThresholdSeconds, and only pods
            // with a container waiting in ContainerCreating. PodLifeTime counts from the pod's creation, the
            // operator from its scheduling; a Deployment's pod is scheduled within a second of its creation.
            args: { maxPodLifeTimeSeconds: THRESHOLD_SECONDS, states: ['ContainerCreating'] },
          },
        ],
        plugins: {
          filter: { enabled: ['DefaultEvictor'] },
          preevictionfilter: { enabled: ['DefaultEvictor'] },
          deschedule: { enabled: ['PodLifeTime'] },
        },
      },
    ],
  };
}

/**
 * The descheduler's flags: every INTERVAL seconds (30 s is aggressive for it; its examples run every few
 * minutes or as a CronJob), one process, no leader election (as the operator here), verbosity 1 (each eviction
 * and each pass logged, like the operator's info level), no HTTPS metrics server (nothing scrapes either tool).
 */
const deschedulerFlags = (kubeconfig: string, policyFile: string) => [
  `--client-connection-kubeconfig=${kubeconfig}`,
  `--policy-config-file=${policyFile}`,
  `--descheduling-interval=${INTERVAL_SECONDS}s`,
  '--secure-port=0',
  '--v=1',
];

/**
 * The SandboxPolicy: defaults but the stuck threshold and one IO threshold. Remediation (cordon, evict stuck pods,
 * require IO pressure) and safety (20 % storm limit, 10 evictions a minute, 300 s cooldown) are the defaults.
 */
function sandboxPolicy(pool: string) {
  return {
    nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
    detection: { stuckThresholdSeconds: THRESHOLD_SECONDS },
    // The crafted /proc's PSI is the one recorded under stress-ng on this machine (some avg10 38 %), under the
    // default 40 %; every other reading of the fixture is idle. sustainSeconds stays at its default 30.
    ioPressure: { thresholds: { psiSomeAvg10Percent: 30 } },
  };
}

// ---------------------------------------------------------------------------------------------------------------
// One phase.

type Tool = 'descheduler' | 'operator';

interface PhaseObservations {
  tool: Tool;
  namespace: string;
  saturated: string;
  cni: string;
  startedAt: Date;
  /** When the Deployment was created: the incident window, of the same length in both phases, starts here. */
  deployedAt: Date;
  stoppedAt: Date;
  /** Pod name -> node, from the watch (evicted pods are gone by the end). */
  nodeOf: Map<string, string>;
  runningAtEnd: number;
  peakRssKiB: { tool: number; agentsMax?: number; agentsTotal?: number };
  audit: AuditEvent[];
}

async function kubeconfigFor(dir: string, namespace: string, account: string): Promise<string> {
  return writeTokenKubeconfig(dir, account, await createToken(namespace, account));
}

/** Pod name -> node for every pod of the namespace, as the watch sees them bound. */
async function watchPlacement(namespace: string, nodeOf: Map<string, string>) {
  return new Watch(kubeConfig()).watch(
    `/api/v1/namespaces/${namespace}/pods`,
    {},
    (_type, pod: V1Pod) => {
      const name = pod.metadata?.name;
      const node = pod.spec?.nodeName;
      if (name && node) nodeOf.set(name, node);
    },
    () => undefined,
  );
}

async function runPhase(tool: Tool, dir: string, descheduler: string): Promise<PhaseObservations> {
  const cleanup = new Cleanup();
  const processes: MeasuredProcess[] = [];
  let watch: AbortController | undefined;
  try {
    const namespace = await createNamespace(cleanup, `vs-${tool}`);
    const { pool, names } = await createNodes(cleanup, NODES);
    const [saturated, cni] = [names[0]!, names[1]!];
    log(`${tool}: ${NODES} nodes ${pool}-*; IO incident on ${saturated}, CNI incident on ${cni}`);
    const startedAt = new Date();
    const agents: MeasuredProcess[] = [];
    let main: MeasuredProcess;
    if (tool === 'descheduler') {
      const policyFile = join(dir, `descheduler-policy-${pool}.json`);
      writeFileSync(policyFile, JSON.stringify(deschedulerPolicy(pool), null, 2)); // JSON is YAML
      const kubeconfig = await kubeconfigFor(dir, BENCH_NAMESPACE, 'descheduler');
      main = new MeasuredProcess('descheduler', descheduler, deschedulerFlags(kubeconfig, policyFile));
      processes.push(main);
      await main.waitForLine('Number of evictions/requests', 60_000); // its first pass is done
    } else {
      await applyPolicy(cleanup, `vs-descheduler-${pool}`, sandboxPolicy(pool));
      const kubeconfig = await kubeconfigFor(dir, OPERATOR_NAMESPACE, OPERATOR_ACCOUNT);
      main = new MeasuredProcess('operator', process.execPath, [
        join(REPO_ROOT, 'dist', 'src', 'main.js'),
        'operator',
        `--kubeconfig=${kubeconfig}`,
        '--metrics-bind-address=0',
        '--health-probe-bind-address=0',
        '--log-level=info',
      ]);
      processes.push(main);
      await main.waitForLine('"Started controller"', 90_000);
      // The agents publish into their node's SandboxHealth, which the operator creates for the policy's nodes.
      await eventually(
        'a SandboxHealth for every node',
        async () => (await Promise.all(names.map(getHealth))).every((h) => h !== undefined),
        { timeoutMs: 60_000 },
      );
      const agentKubeconfig = await kubeconfigFor(dir, BENCH_NAMESPACE, 'agent');
      for (const node of names) {
        const proc = new ProcRoot();
        const procDir = await proc.create();
        cleanup.add(() => proc.remove());
        if (node === saturated) await proc.setPressure('load');
        // The agent as the DaemonSet runs it: compiled JavaScript, every default (1 s samples, 60 s heartbeat).
        const agent = new MeasuredProcess(`agent ${node}`, process.execPath, [
          join(REPO_ROOT, 'dist', 'src', 'main.js'),
          'agent',
          `--node-name=${node}`,
          `--kubeconfig=${agentKubeconfig}`,
          `--proc-root=${procDir}`,
          '--metrics-bind-address=0',
        ]);
        agents.push(agent);
        processes.push(agent);
      }
    }

    // The Event daemon outlives the phase, so every pod stuck in it keeps getting kubelet's Events.
    const incidentSeconds = ['--max-duration-seconds', String(WARMUP_SECONDS + OBSERVE_SECONDS + 120)];
    await startIncident(cleanup, saturated, incidentSeconds);
    await startIncident(cleanup, cni, ['--message', CNI_MESSAGE, ...incidentSeconds]);
    await sleep(WARMUP_SECONDS * 1000);

    const nodeOf = new Map<string, string>();
    watch = await watchPlacement(namespace, nodeOf);
    const deployedAt = new Date();
    const running = async () =>
      (await Promise.all(APPS.map((app) => podsOf(namespace, app)))).flat().filter(isRunning).length;
    // A rollout in waves: where a wave falls in the descheduler's 30 s cycle decides how long its first pods
    // wait, so the waves cover the cycle evenly instead of one arbitrary offset deciding the figure.
    for (const [i, app] of APPS.entries()) {
      if (i > 0) await sleep((INTERVAL_SECONDS / WAVES) * 1000);
      await createSpreadDeployment(cleanup, namespace, app, pool, REPLICAS / WAVES);
    }
    log(`${tool}: ${REPLICAS} pods in ${WAVES} Deployments; observing for ${OBSERVE_SECONDS} s`);
    for (let waited = 0; waited < OBSERVE_SECONDS; waited += 30) {
      await sleep(
        Math.max(0, Math.min(waited + 30, OBSERVE_SECONDS) * 1000 - (Date.now() - deployedAt.getTime())),
      );
      for (const p of processes)
        if (!p.isRunning()) throw new Error(`${p.name} exited during the phase:\n${p.tail()}`);
      log(`${tool}: +${Math.min(waited + 30, OBSERVE_SECONDS)} s, ${await running()}/${REPLICAS} Running`);
    }
    const runningAtEnd = await running();
    const agentPeaks = agents.map((a) => a.peakRssKiB());
    const peakRssKiB = {
      tool: main.peakRssKiB(),
      ...(agents.length
        ? { agentsMax: Math.max(...agentPeaks), agentsTotal: agentPeaks.reduce((a, b) => a + b, 0) }
        : {}),
    };
    for (const p of processes.splice(0)) await p.stop();
    const stoppedAt = new Date();
    await sleep(2000); // the audit log's last lines
    return {
      tool,
      namespace,
      saturated,
      cni,
      startedAt,
      deployedAt,
      stoppedAt,
      nodeOf,
      runningAtEnd,
      peakRssKiB,
      audit: await auditEvents(startedAt),
    };
  } finally {
    watch?.abort();
    for (const p of processes) await p.stop();
    await cleanup.run();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// What a phase shows.

interface PhaseResult {
  /**
   * Per pod that reached the threshold on the saturated node, from then to its first eviction. Only pods that
   * reached it at least one descheduling interval and 10 s before the tool stopped count, so a pod that no pass
   * of either tool could have seen yet is neither a sample nor a miss.
   */
  stuckToFirstEvictionSeconds: Latencies & {
    /** Split: pods bound before the phase's first eviction, and replacements bound after it. */
    firstWave: Latencies;
    replacements: Latencies;
  };
  /** Of those pods, how many were never evicted. */
  stuckOnSaturatedNeverEvicted: number;
  evictions: { saturatedNode: number; cniNode: number; healthyNodes: number };
  /** Pods bound to the saturated node after the tool's first eviction, and to any node. */
  replacementsOnSaturatedNode: number;
  replacementsTotal: number;
  cniStuckPods: number;
  cniStuckPodsEvicted: number;
  runningAtEnd: number;
  peakRssMiB: { tool: number; agentMax?: number; agentsTotal?: number };
  /**
   * Write requests by the tool (and by the agents, in the operator's phase): in the incident window (from the
   * Deployment's creation to the stop, the same length in both phases) and over the tool's whole run (from its
   * start, which includes the operator's SandboxHealth creation and the agents' first readings).
   */
  apiWrites: {
    incidentWindow: { tool: WriteCount; agents?: WriteCount };
    wholeRun: { tool: WriteCount; agents?: WriteCount };
  };
  incidentWindowSeconds: number;
  wholeRunSeconds: number;
}

interface Latencies {
  p50: number | null;
  p99: number | null;
  max: number | null;
  samples: number;
}

interface WriteCount {
  total: number;
  failed: number;
  byResource: Record<string, number>;
}

const seconds = (ms: number) => Number((ms / 1000).toFixed(2));
const mib = (kib: number) => Number((kib / 1024).toFixed(1));
const at = (e: AuditEvent) => new Date(e.requestReceivedTimestamp).getTime();

function latencies(millis: number[]): Latencies {
  const sorted = [...millis].sort((a, b) => a - b);
  const stat = (q: number) => (sorted.length ? seconds(percentile(sorted, q)) : null);
  return { p50: stat(0.5), p99: stat(0.99), max: stat(1), samples: sorted.length };
}

function writesBy(events: AuditEvent[], user: string, from: Date): WriteCount {
  const count: WriteCount = { total: 0, failed: 0, byResource: {} };
  for (const e of events) {
    if (e.user.username !== user || !WRITE_VERBS.has(e.verb) || at(e) < from.getTime()) continue;
    count.total++;
    if (!succeeded(e)) count.failed++;
    const resource = resourceOf(e);
    count.byResource[resource] = (count.byResource[resource] ?? 0) + 1;
  }
  return count;
}

function measure(o: PhaseObservations): PhaseResult {
  const end = o.stoppedAt.getTime();
  const window = o.audit.filter((e) => at(e) <= end);
  const podCreate = (e: AuditEvent, subresource: string) =>
    e.verb === 'create' &&
    e.objectRef?.namespace === o.namespace &&
    e.objectRef.resource === 'pods' &&
    e.objectRef.subresource === subresource &&
    e.objectRef.name !== undefined &&
    succeeded(e);
  const toolUser = USERS[o.tool];
  const boundAt = new Map<string, number>();
  for (const e of window) if (podCreate(e, 'binding')) boundAt.set(e.objectRef!.name!, at(e));
  const evictions = window.filter((e) => podCreate(e, 'eviction') && e.user.username === toolUser);
  const firstEvictedAt = new Map<string, number>();
  for (const e of evictions)
    if (!firstEvictedAt.has(e.objectRef!.name!)) firstEvictedAt.set(e.objectRef!.name!, at(e));
  const firstEviction = Math.min(...evictions.map(at));

  // Both tools know when a pod was scheduled (or created) only to the second, as the API's timestamps hold it:
  // the threshold counts from that second, or the operator would seem to act up to a second before a pod is stuck.
  const stuckAt = (pod: string) => Math.floor(boundAt.get(pod)! / 1000) * 1000 + THRESHOLD_SECONDS * 1000;
  const horizon = end - (INTERVAL_SECONDS + 10) * 1000;
  const podsOn = (node: string) => [...boundAt.keys()].filter((pod) => o.nodeOf.get(pod) === node);
  const stuckOnSaturated = podsOn(o.saturated).filter((pod) => stuckAt(pod) <= horizon);
  const waits = (pods: string[]) =>
    pods.filter((pod) => firstEvictedAt.has(pod)).map((pod) => firstEvictedAt.get(pod)! - stuckAt(pod));
  const isFirstWave = (pod: string) => boundAt.get(pod)! < firstEviction;
  const cniStuck = podsOn(o.cni).filter((pod) => stuckAt(pod) <= end);
  const nodeOfEviction = (e: AuditEvent) => o.nodeOf.get(e.objectRef!.name!) ?? '';
  const evictedOn = (node: string) => evictions.filter((e) => nodeOfEviction(e) === node).length;
  const replacements = [...boundAt.entries()].filter(([, t]) => t > firstEviction).map(([pod]) => pod);
  const writes = (from: Date) => ({
    tool: writesBy(window, toolUser, from),
    ...(o.tool === 'operator' ? { agents: writesBy(window, USERS.agents, from) } : {}),
  });
  return {
    stuckToFirstEvictionSeconds: {
      ...latencies(waits(stuckOnSaturated)),
      firstWave: latencies(waits(stuckOnSaturated.filter(isFirstWave))),
      replacements: latencies(waits(stuckOnSaturated.filter((pod) => !isFirstWave(pod)))),
    },
    stuckOnSaturatedNeverEvicted: stuckOnSaturated.filter((pod) => !firstEvictedAt.has(pod)).length,
    evictions: {
      saturatedNode: evictedOn(o.saturated),
      cniNode: evictedOn(o.cni),
      healthyNodes: evictions.filter((e) => ![o.saturated, o.cni].includes(nodeOfEviction(e))).length,
    },
    replacementsOnSaturatedNode: replacements.filter((pod) => o.nodeOf.get(pod) === o.saturated).length,
    replacementsTotal: replacements.length,
    cniStuckPods: cniStuck.length,
    cniStuckPodsEvicted: cniStuck.filter((pod) => firstEvictedAt.has(pod)).length,
    runningAtEnd: o.runningAtEnd,
    peakRssMiB: {
      tool: mib(o.peakRssKiB.tool),
      ...(o.peakRssKiB.agentsMax !== undefined ? { agentMax: mib(o.peakRssKiB.agentsMax) } : {}),
      ...(o.peakRssKiB.agentsTotal !== undefined ? { agentsTotal: mib(o.peakRssKiB.agentsTotal) } : {}),
    },
    apiWrites: { incidentWindow: writes(o.deployedAt), wholeRun: writes(o.startedAt) },
    incidentWindowSeconds: seconds(end - o.deployedAt.getTime()),
    wholeRunSeconds: seconds(end - o.startedAt.getTime()),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Results.

const ratio = (ours: number | null | undefined, theirs: number | null | undefined) =>
  ours === null || ours === undefined || theirs === null || theirs === undefined || theirs === 0
    ? null
    : Number((ours / theirs).toFixed(3));

function ratios(d: PhaseResult, o: PhaseResult) {
  const { incidentWindow: ours } = o.apiWrites;
  const theirs = d.apiWrites.incidentWindow.tool.total;
  return {
    stuckToFirstEvictionP50: ratio(o.stuckToFirstEvictionSeconds.p50, d.stuckToFirstEvictionSeconds.p50),
    stuckToFirstEvictionP99: ratio(o.stuckToFirstEvictionSeconds.p99, d.stuckToFirstEvictionSeconds.p99),
    replacementsOnSaturatedNode: ratio(o.replacementsOnSaturatedNode, d.replacementsOnSaturatedNode),
    cniStuckPodsEvicted: ratio(o.cniStuckPodsEvicted, d.cniStuckPodsEvicted),
    peakRssOperatorToDescheduler: ratio(o.peakRssMiB.tool, d.peakRssMiB.tool),
    apiWritesOperatorToDescheduler: ratio(ours.tool.total, theirs),
    apiWritesOperatorAndAgentsToDescheduler: ratio(ours.tool.total + (ours.agents?.total ?? 0), theirs),
  };
}

function table(d: PhaseResult | undefined, o: PhaseResult | undefined): string {
  const r = d && o ? ratios(d, o) : undefined;
  const s = (v: number | null | undefined, unit = '') =>
    v === null || v === undefined ? '–' : `${v}${unit}`;
  const split = (l: Latencies | undefined) =>
    l?.samples ? `${l.p50} s / ${l.p99} s (${l.samples} pods)` : '–';
  const rows: [string, string, string, string][] = [
    ['', 'descheduler (PodLifeTime)', 'sandbox-remediator', 'ratio'],
    [
      'stuck → first eviction, p50',
      s(d?.stuckToFirstEvictionSeconds.p50, ' s'),
      s(o?.stuckToFirstEvictionSeconds.p50, ' s'),
      s(r?.stuckToFirstEvictionP50),
    ],
    [
      'stuck → first eviction, p99',
      s(d?.stuckToFirstEvictionSeconds.p99, ' s'),
      s(o?.stuckToFirstEvictionSeconds.p99, ' s'),
      s(r?.stuckToFirstEvictionP99),
    ],
    [
      'the same, first wave only: p50 / p99',
      split(d?.stuckToFirstEvictionSeconds.firstWave),
      split(o?.stuckToFirstEvictionSeconds.firstWave),
      '',
    ],
    [
      'the same, replacements only: p50 / p99',
      split(d?.stuckToFirstEvictionSeconds.replacements),
      split(o?.stuckToFirstEvictionSeconds.replacements),
      '',
    ],
    [
      'evictions from the saturated node',
      s(d?.evictions.saturatedNode),
      s(o?.evictions.saturatedNode),
      s(ratio(o?.evictions.saturatedNode, d?.evictions.saturatedNode)),
    ],
    [
      'replacements bound to the saturated node again',
      s(d?.replacementsOnSaturatedNode),
      s(o?.replacementsOnSaturatedNode),
      s(r?.replacementsOnSaturatedNode),
    ],
    [
      'CNI-stuck pods evicted (of those stuck)',
      d ? `${d.cniStuckPodsEvicted} of ${d.cniStuckPods}` : '–',
      o ? `${o.cniStuckPodsEvicted} of ${o.cniStuckPods}` : '–',
      s(r?.cniStuckPodsEvicted),
    ],
    [
      `pods Running at the end (of ${REPLICAS})`,
      s(d?.runningAtEnd),
      s(o?.runningAtEnd),
      s(ratio(o?.runningAtEnd, d?.runningAtEnd)),
    ],
    [
      'peak RSS',
      s(d?.peakRssMiB.tool, ' MiB'),
      o ? `${o.peakRssMiB.tool} MiB (+ ${o.peakRssMiB.agentMax} MiB per node agent)` : '–',
      s(r?.peakRssOperatorToDescheduler),
    ],
    [
      `API writes in the ${OBSERVE_SECONDS} s after the Deployment`,
      s(d?.apiWrites.incidentWindow.tool.total),
      o
        ? `${o.apiWrites.incidentWindow.tool.total} (+ ${o.apiWrites.incidentWindow.agents?.total} by ${NODES} agents)`
        : '–',
      r
        ? `${r.apiWritesOperatorToDescheduler} (${r.apiWritesOperatorAndAgentsToDescheduler} with agents)`
        : '–',
    ],
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  const line = (row: string[]) => `| ${row.map((cell, i) => cell.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(rows[0]!), line(widths.map((w) => '-'.repeat(w))), ...rows.slice(1).map(line)].join('\n');
}

const binary = deschedulerBinary();
if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'main.js')))
  throw new Error('no dist/src/main.js: run make build (make bench-vs-descheduler does)');
if (!(await isClusterUp())) await startCluster();
await applyCrds();
await applyRbac();
const identities = await kubectl(['apply', '-f', join(REPO_ROOT, 'bench', 'descheduler', 'identities.yaml')]);
if (identities.code !== 0) throw new Error(`identities: ${identities.stderr}`);

const dir = await mkdtemp(join(tmpdir(), 'vs-descheduler-'));
const results: Partial<Record<Tool, PhaseResult>> = {};
try {
  for (const tool of ['descheduler', 'operator'] as const) {
    if (ONLY && ONLY !== tool) continue;
    results[tool] = measure(await runPhase(tool, dir, binary.path));
    log(`${tool}: ${JSON.stringify(results[tool])}`);
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}

const { descheduler, operator } = results;
const result = {
  date: new Date().toISOString(),
  machine: `${cpus().length} cores`,
  scenario: {
    nodes: NODES,
    replicas: REPLICAS,
    deployments: WAVES,
    secondsBetweenDeployments: INTERVAL_SECONDS / WAVES,
    stuckPodsPerIncidentNode: REPLICAS / NODES,
    thresholdSeconds: THRESHOLD_SECONDS,
    deschedulingIntervalSeconds: INTERVAL_SECONDS,
    warmupSeconds: WARMUP_SECONDS,
    observeSeconds: OBSERVE_SECONDS,
    saturatedNode:
      'incident with the default (name reservation) message; its agent reads PSI some avg10 38 %',
    cniNode: `incident with: ${CNI_MESSAGE}`,
  },
  descheduler: {
    version: binary.version,
    flags: deschedulerFlags('<token kubeconfig>', '<policy file>'),
    policy: deschedulerPolicy('<pool>'),
  },
  sandboxPolicy: sandboxPolicy('<pool>'),
  method: [
    "stuck = bound (the scheduler binding in the audit log, to the second, as the pod's timestamps hold it) + the threshold; first eviction = the first successful pods/eviction create by the tool for that pod in the audit log; samples = pods on the saturated node stuck at least one descheduling interval + 10 s before the tool stopped, evicted by then (the others are stuckOnSaturatedNeverEvicted)",
    'the Deployments are created INTERVAL/WAVES apart, so the first wave of stuck pods meets the descheduler at three points of its cycle rather than at one arbitrary offset; a replacement is created right after the pass that evicted its predecessor, so its wait is set by the cycle, whatever the offset',
    'replacements = pods bound after the first eviction of the phase; each Deployment spreads its pods with a hard topology spread constraint (maxSkew 1 per hostname, DoNotSchedule, taints honoured), so a node that lost pods is where the scheduler must put the next ones unless it is cordoned',
    'peak RSS = VmHWM of the process; the operator and the agents run as compiled JavaScript (dist/), the descheduler as its Go binary',
    'API writes = create, update, patch and delete requests in the audit log by the tool user (and the agents user): in the incident window (Deployment creation to stop) and over the whole run (tool start to stop)',
  ],
  phases: results,
  ratiosOperatorToDescheduler: descheduler && operator ? ratios(descheduler, operator) : null,
};
const file = join(REPO_ROOT, 'bench', 'results', 'vs-descheduler.json');
writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
console.log(table(descheduler, operator));
console.log(`\nwrote ${file}`);
