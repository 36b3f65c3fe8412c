// `make demo`: the whole story on the embedded default. A local cluster with 6 kwok nodes; the operator and a node
// agent reading this machine's real /proc and cgroup tree; a workload; then the incident played for real: a noisy
// neighbour (a bounded stress-ng inside the cgroup of one of the shop's pods, made on this machine's real cgroup tree
// where kubelet would put it: neighbour.ts) saturates this machine's disk, kubelet's production message on one node,
// new pods stuck in ContainerCreating; detection, the IO evidence, the culprit named with its share, the cordon, the
// evictions, the replacements Running elsewhere and the paused rollout; then the culprit moved (its replacement
// Running on another node) and its IO gone with it; the node recovers and everything is undone. It ends with a
// timeline drawn from the cluster's Events and the SandboxHealth status, and leaves the cluster up (make cluster-down
// stops it). It needs root (the pod cgroup), and refuses to run beside a kubelet with the systemd cgroup driver
// (neighbour.ts says why).
//
// Without a terminal it prints the same. A step that does not happen in time fails the demo: exit 1, naming the
// step, what was last seen and where the logs are.
//
// Knobs (environment): THRESHOLD (stuck seconds, 20), LOAD_SECONDS (the neighbour's stress-ng bound, 300),
// DEMO_NODE_PREFIX (kwok-node-), DEMO_NAMESPACE (demo), DEMO_POLICY (demo), DEMO_PORT_BASE (18080: metrics,
// +1 probes, +2 agent), DEMO_TIMELINE_JSON (also write the timeline there). `--cleanup` removes what the demo
// created at the end (its processes, namespace, policy and nodes), for tests. On every exit (an error, SIGINT,
// SIGTERM) the neighbour's load is stopped and its cgroup removed. `--limit-io` (make demo-limit-io) takes the other
// remedy: the neighbour is limited in place (limitIo; the agent with --allow-io-limits writes its real
// blkio.throttle/io.max file), not moved; it runs on, limited, until its load ends (LOAD_SECONDS 150), and its limit is
// lifted after, the file back as it was.
import {
  ApiextensionsV1Api,
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  type CoreV1Event,
  type KubeConfig,
  type V1Deployment,
  type V1Node,
  type V1Pod,
} from '@kubernetes/client-node';
import { spawn, spawnSync } from 'node:child_process';
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { API_VERSION, GROUP, ROLLOUT_STAMP, STAMP, VERSION } from '../../src/api/v1alpha1/index.js';
import { loadKubeConfig } from '../../src/kube/client.js';
import { describeError, isNotFound } from '../../src/kube/errors.js';
import {
  CGROUP_ROOT,
  type Culprit,
  NoisyNeighbour,
  refusal,
  removeLeftovers,
  STRESS_ARGS,
} from './neighbour.js';
import { buildTimeline, formatTimeline, type StatusAction, type TimelineEntry } from './timeline.js';

const REPO = join(import.meta.dirname, '..', '..');
const CLUSTER_DIR = process.env.CLUSTER_DIR ?? join(REPO, '.cluster');
const KUBECONFIG = join(CLUSTER_DIR, 'kubeconfig');
const KUBECTL = process.env.KUBECTL ?? 'kubectl';
const TSX = join(REPO, 'node_modules', 'tsx', 'dist', 'esm', 'index.mjs');

const int = (name: string, fallback: number) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value <= 0)
    throw new Error(`${name} must be a positive integer, not ${process.env[name]}`);
  return value;
};
const THRESHOLD = int('THRESHOLD', 20);
const LIMIT_IO = process.argv.includes('--limit-io');
const LOAD_SECONDS = int('LOAD_SECONDS', LIMIT_IO ? 150 : 300);
const PORT_BASE = int('DEMO_PORT_BASE', 18080);
const PREFIX = process.env.DEMO_NODE_PREFIX ?? 'kwok-node-';
const NAMESPACE = process.env.DEMO_NAMESPACE ?? 'demo';
const POLICY = process.env.DEMO_POLICY ?? 'demo';
const TIMELINE_JSON = process.env.DEMO_TIMELINE_JSON;
const DIAGNOSE_JSON = process.env.DEMO_DIAGNOSE_JSON;
const CLEANUP = process.argv.includes('--cleanup');
const NODES = Array.from({ length: 6 }, (_, i) => `${PREFIX}${i}`);
const SICK = `${PREFIX}1`;
const DEMO_LABEL = 'sandbox.remediator.io/demo';
/** Deployments whose rollouts the incident catches mid-way. */
const ROLLOUTS = ['checkout', 'catalog'];
const STEPS = 10;

const tty = process.stderr.isTTY;
const bold = (s: string) => (tty ? `\x1b[1m${s}\x1b[0m` : s);
const dim = (s: string) => (tty ? `\x1b[2m${s}\x1b[0m` : s);
const say = (s = '') => process.stderr.write(`${s}\n`);
const started = Date.now();
const clock = () => {
  const s = Math.round((Date.now() - started) / 1000);
  return `${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}`;
};

// Read once the cluster is up (step 1 writes the kubeconfig).
let config: KubeConfig | undefined;
const kc = () => (config ??= loadKubeConfig(KUBECONFIG));
const core = () => kc().makeApiClient(CoreV1Api);
const apps = () => kc().makeApiClient(AppsV1Api);
const custom = () => kc().makeApiClient(CustomObjectsApi);
const extensions = () => kc().makeApiClient(ApiextensionsV1Api);

class StepFailed extends Error {}

let stepNo = 0;
let stepTitle = '';
async function step(title: string, body: () => Promise<void>): Promise<void> {
  stepNo++;
  stepTitle = title;
  say();
  say(bold(`== ${stepNo}/${STEPS} ${title}`) + dim(`  (+${clock()})`));
  await body();
}

/** Retries `check` until it holds, printing what it sees every 5 s; fails the step after `timeoutSeconds`. */
async function waitFor(
  label: string,
  timeoutSeconds: number,
  check: () => Promise<boolean>,
  seen: () => Promise<string> = () => Promise.resolve(''),
): Promise<void> {
  const from = Date.now();
  let last = from;
  for (;;) {
    let error: unknown;
    const ok = await check().catch((err: unknown) => {
      error = err;
      return false;
    });
    if (ok) {
      say(`   ${label}: after ${Math.round((Date.now() - from) / 1000)}s`);
      return;
    }
    const waited = (Date.now() - from) / 1000;
    if (waited >= timeoutSeconds) {
      const what = await seen().catch((err: unknown) => describeError(err));
      const failed = error === undefined ? '' : `; the last check failed: ${describeError(error)}`;
      throw new StepFailed(
        `${label}: not within ${timeoutSeconds}s${what ? `; last seen: ${what}` : ''}${failed}`,
      );
    }
    if (Date.now() - last >= 5000) {
      last = Date.now();
      const what = await seen().catch(() => '');
      say(dim(`   … waiting for ${label}: ${Math.round(waited)}s${what ? ` (${what})` : ''}`));
    }
    await sleep(500);
  }
}

/** Runs a command, showing it and its output as a user would see it. */
function show(args: string[], { quiet = false } = {}): string {
  const printable = ['kubectl', ...args].join(' ');
  const result = spawnSync(KUBECTL, [`--kubeconfig=${KUBECONFIG}`, ...args], { encoding: 'utf8' });
  if (!quiet) {
    say(`$ ${printable}`);
    process.stderr.write(result.stdout);
  }
  if (result.status !== 0) throw new StepFailed(`${printable} failed: ${result.stderr.trim()}`);
  return result.stdout;
}
const kubectl = (args: string[]) => show(args, { quiet: true });

/** `sandbox-remediator diagnose ARGS` on the demo's cluster: its standard output. */
function diagnose(args: string[]): string {
  const result = spawnSync(
    process.execPath,
    ['--import', TSX, join(REPO, 'src', 'main.ts'), 'diagnose', `--kubeconfig=${KUBECONFIG}`, ...args],
    { encoding: 'utf8', env: { ...process.env, NODE_V8_COVERAGE: '' } },
  );
  if (result.status !== 0)
    throw new StepFailed(`diagnose ${args.join(' ')} exited ${result.status}: ${result.stderr.trim()}`);
  return result.stdout;
}

function run(command: string, args: string[], env: Record<string, string> = {}): void {
  const result = spawnSync(command, args, {
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, ...env },
  });
  if (result.status !== 0) throw new StepFailed(`${command} ${args.join(' ')} exited ${result.status}`);
}

// --- what the demo reads -------------------------------------------------------------------------------------

interface Health {
  spec?: { ioLimits?: { podUid: string; device: string; limit: Record<string, unknown> }[] };
  status?: {
    ioLimits?: { applied?: { podUid: string }[] };
    state?: string;
    stuckPodCount?: number;
    stuckPods?: {
      namespace: string;
      name: string;
      cause: string;
      reservedFor?: string;
      waitingSince: string;
    }[];
    ioReading?: Record<string, unknown> & { source?: string; observedTime?: string };
    ioPressure?: { observation: string; since: string; exceeded?: string[] };
    conditions?: {
      type: string;
      status: string;
      reason: string;
      message: string;
      lastTransitionTime?: string;
    }[];
    blocked?: { kind: string; target: string; guard: string; message: string }[];
    actions?: StatusAction[];
    ioCause?: {
      cause: string;
      message: string;
      consumers?: { kind: string; namespace?: string; name?: string; sharePercent?: number; role: string }[];
    };
    topConsumer?: string;
  };
}
const readHealth = async (node: string) =>
  (await custom()
    .getClusterCustomObject({ group: GROUP, version: VERSION, plural: 'sandboxhealths', name: node })
    .catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    })) as Health | undefined;
const condition = (h: Health | undefined, type: string) =>
  h?.status?.conditions?.find((c) => c.type === type);
const readNode = (name: string): Promise<V1Node> => core().readNode({ name });
const podsOn = async (node: string): Promise<V1Pod[]> =>
  (await core().listNamespacedPod({ namespace: NAMESPACE, fieldSelector: `spec.nodeName=${node}` })).items;
const isStuck = (p: V1Pod) =>
  p.status?.phase === 'Pending' &&
  !p.metadata?.deletionTimestamp &&
  (p.status.containerStatuses ?? []).some((c) => c.state?.waiting?.reason === 'ContainerCreating');
const readDeployment = (name: string): Promise<V1Deployment> =>
  apps().readNamespacedDeployment({ name, namespace: NAMESPACE });
const pausedByUs = (d: V1Deployment) => Boolean(d.metadata?.annotations?.[ROLLOUT_STAMP.policy]);
const rolledOut = (d: V1Deployment) =>
  (d.status?.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0) &&
  d.status?.updatedReplicas === d.spec?.replicas &&
  d.status?.availableReplicas === d.spec?.replicas &&
  d.status?.replicas === d.spec?.replicas;

/** A reading in words: PSI, disk busy, blocked and D-state tasks, with its source and age. */
function describeReading(reading: Record<string, unknown>): string {
  const n = (key: string) => reading[key];
  const parts: string[] = [];
  const add = (key: string, text: (v: number) => string) => {
    const v = n(key);
    if (typeof v === 'number') parts.push(text(v));
  };
  add('psiSomeAvg10Percent', (v) => `PSI some ${v.toFixed(1)}%`);
  add('psiFullAvg10Percent', (v) => `full ${v.toFixed(1)}%`);
  add('diskBusyPercent', (v) => `disk busy ${v.toFixed(0)}%`);
  add('blockedProcesses', (v) => `${v} blocked`);
  if (Array.isArray(reading.dStateTasks)) parts.push(`${reading.dStateTasks.length} D-state task(s)`);
  const source = typeof reading.source === 'string' ? reading.source : '?';
  const age =
    typeof reading.observedTime === 'string'
      ? `, ${Math.max(0, Math.round((Date.now() - new Date(reading.observedTime).getTime()) / 1000))}s old`
      : '';
  return `${parts.join(', ')} (${source}${age})`;
}

async function healthLine(): Promise<string> {
  const h = await readHealth(SICK);
  if (!h?.status) return `${SICK}: no SandboxHealth yet`;
  const io = condition(h, 'IoPressureHigh');
  const reading = h.status.ioReading;
  const psi = reading?.psiSomeAvg10Percent;
  const busy = reading?.diskBusyPercent;
  return `${SICK}: ${h.status.state ?? '?'}, ${h.status.stuckPodCount ?? 0} stuck, IoPressureHigh=${io?.status ?? '?'} ${io?.reason ?? ''}${typeof psi === 'number' ? `, PSI some ${psi.toFixed(0)}%` : ''}${typeof busy === 'number' ? `, disk busy ${busy.toFixed(0)}%` : ''}`;
}

// --- processes the demo starts ---------------------------------------------------------------------------------

const pidFile = (name: string) => join(CLUSTER_DIR, 'pids', `${name}.pid`);
const logFile = (name: string) => join(CLUSTER_DIR, 'logs', `${name}.log`);

/** Stops a process the demo started before (by its pid file, if it is still ours). */
function stopRecorded(name: string): void {
  const file = pidFile(name);
  if (!existsSync(file)) return;
  const pid = Number(readFileSync(file, 'utf8'));
  try {
    if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('src/main.ts')) process.kill(pid, 'SIGTERM');
  } catch {
    // gone already
  }
  rmSync(file, { force: true });
}

function startDetached(name: string, args: string[]): void {
  stopRecorded(name);
  mkdirSync(join(CLUSTER_DIR, 'logs'), { recursive: true });
  mkdirSync(join(CLUSTER_DIR, 'pids'), { recursive: true });
  const out = openSync(logFile(name), 'a');
  const child = spawn(process.execPath, ['--import', TSX, join(REPO, 'src', 'main.ts'), ...args], {
    detached: true,
    stdio: ['ignore', out, out],
    env: { ...process.env, NODE_V8_COVERAGE: '' },
  });
  closeSync(out);
  child.unref();
  writeFileSync(pidFile(name), String(child.pid));
}

/** The changes the neighbour made to the cgroup tree, for the next run to undo should this one be killed. */
const NEIGHBOUR_STATE = join(CLUSTER_DIR, 'neighbour-cgroups.json');
let neighbour: NoisyNeighbour | undefined;
let culprit: Culprit | undefined;

/** Stops the neighbour's load and removes its cgroup; whether it was running (exit handlers call it too). */
function stopNeighbour(): boolean {
  const stopping = neighbour;
  neighbour = undefined;
  for (const problem of stopping?.stop() ?? []) say(`   left behind: ${problem}`);
  return stopping !== undefined;
}

/** As kubelet stops a deleted pod's containers and removes its cgroup: the load ends once its pod is gone. */
async function stopWithItsPod(pod: Culprit): Promise<void> {
  while (neighbour) {
    const gone = await core()
      .readNamespacedPod({ namespace: pod.namespace, name: pod.name })
      .then(
        (p) => p.metadata?.uid !== pod.uid || p.metadata.deletionTimestamp !== undefined,
        (err: unknown) => (isNotFound(err) ? true : undefined), // unknown: ask again
      );
    if (gone && stopNeighbour()) {
      mark(
        `pod/${pod.namespace}/${pod.name}`,
        'LoadStopped',
        'its pod was deleted: its stress-ng stopped and its cgroup removed, as kubelet does',
        true,
      );
      return;
    }
    await sleep(1000);
  }
}

// --- the story ----------------------------------------------------------------------------------------------------

const actions: TimelineEntry[] = [];
/** What the demo did; a reaction (to what the operator did) goes after the operator's entries of its second. */
const mark = (object: string, reason: string, message: string, reaction = false) =>
  actions.push({
    time: new Date().toISOString(),
    actor: 'demo',
    object,
    reason,
    message,
    ...(reaction ? { reaction } : {}),
  });
let evidence: TimelineEntry | undefined;

function policyYaml(): string {
  return `apiVersion: ${API_VERSION}
kind: SandboxPolicy
metadata:
  name: ${POLICY}
spec:
  nodeSelector:
    matchLabels: { ${DEMO_LABEL}: "${NAMESPACE}" }
  detection:
    stuckThresholdSeconds: ${THRESHOLD}   # default 180: the demo does not wait three minutes
  ioPressure:
    source: agent
    sustainSeconds: 5        # default 30
    recoverySeconds: 15      # default 120
    # What the neighbour's stress-ng reaches on a small machine; the defaults (PSI some 40%, disk busy 90%) suit
    # production disks.
    thresholds: { psiSomeAvg10Percent: 20, diskBusyPercent: 60, psiFullAvg10Percent: 100, blockedProcesses: 10000 }
  remediation:
${
  LIMIT_IO
    ? `    limitIo:                 # limit the pods the agent measures doing the disk's IO, in place (minSharePercent 25)
      sustainSeconds: 10     # default 30: a step down if the pressure lasts this long under a limit
      recoverySeconds: 15    # default 60: lifted once the pod wants no more than its limit this long
      cooldownSeconds: 30    # default 300`
    : `    migrateWorkloads:
      by: measuredIo         # move the pods the agent measures doing the disk's IO (minSharePercent 25)`
}
    throttleRollouts:
      maxConcurrentRollouts: 1
  safety:
    cooldownSeconds: 15      # default 300; maxUnhealthyNodes stays at its default, 20% (1 of 6 nodes)
    maxEvictionsPerMinute: 1 # default 10: the demo shows an eviction held back by the rate limit
`;
}

/** A Deployment of the demo; each new pod must be Ready for `minReadySeconds` (rollouts take a while, as real ones do). */
function deployment(name: string, replicas: number, minReadySeconds: number, prefer?: string): V1Deployment {
  const match = { app: name };
  return {
    metadata: { name },
    spec: {
      replicas,
      minReadySeconds,
      strategy: { rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      selector: { matchLabels: match },
      template: {
        metadata: { labels: match },
        spec: {
          nodeSelector: { [DEMO_LABEL]: NAMESPACE },
          terminationGracePeriodSeconds: 0,
          ...(prefer
            ? {
                affinity: {
                  nodeAffinity: {
                    preferredDuringSchedulingIgnoredDuringExecution: [
                      {
                        weight: 100,
                        preference: {
                          matchExpressions: [
                            { key: 'kubernetes.io/hostname', operator: 'In', values: [prefer] },
                          ],
                        },
                      },
                    ],
                  },
                },
              }
            : {
                topologySpreadConstraints: [
                  {
                    maxSkew: 1,
                    topologyKey: 'kubernetes.io/hostname',
                    whenUnsatisfiable: 'DoNotSchedule',
                    nodeTaintsPolicy: 'Honor',
                    labelSelector: { matchLabels: match },
                  },
                ],
              }),
          containers: [{ name: 'app', image: `registry.local/${name}:1` }],
        },
      },
    },
  };
}

/** Waits for the neighbour's pod to be moved (a Migrate action), its load to stop with it, and its replacement to run. */
async function moveCulprit(): Promise<void> {
  const moved = culprit;
  if (!moved) return;
  const target = `pod/${moved.namespace}/${moved.name}`;
  // maxEvictionsPerMinute 1: the stuck pods go first, a minute apart, then the culprit.
  await waitFor(
    `${moved.namespace}/${moved.name} moved off ${SICK}`,
    180,
    async () => {
      const actions = (await readHealth(SICK))?.status?.actions ?? [];
      const migrated = actions.find(
        (a) => a.kind === 'Migrate' && a.target === target && a.outcome === 'Succeeded',
      );
      if (migrated) moved.movedAt = migrated.time;
      return migrated !== undefined;
    },
    async () => {
      const status = (await readHealth(SICK))?.status;
      const held = status?.blocked?.filter((b) => b.target === target).map((b) => `${b.guard}: ${b.message}`);
      return `${held?.length ? held.join('; ') : 'not held'}; top IO ${status?.topConsumer ?? 'none'}`;
    },
  );
  await waitFor('its load stopped and its cgroup removed (as kubelet does)', 30, () =>
    Promise.resolve(neighbour === undefined && !existsSync(moved.cgroup)),
  );
  const since = Math.floor(Date.parse(moved.movedAt ?? '') / 1000) * 1000;
  await waitFor(`its replacement Running on another node`, 120, async () => {
    const pods = (await core().listNamespacedPod({ namespace: NAMESPACE, labelSelector: 'app=shop' })).items;
    const replacement = pods.find(
      (p) =>
        p.status?.phase === 'Running' &&
        p.spec?.nodeName !== SICK &&
        new Date(p.metadata?.creationTimestamp ?? 0).getTime() >= since,
    );
    const { name } = replacement?.metadata ?? {};
    const node = replacement?.spec?.nodeName;
    if (!name || !node) return false;
    moved.replacement = { name, node };
    return true;
  });
  const { name, node } = moved.replacement ?? {};
  mark(
    `pod/${NAMESPACE}/${name}`,
    'ReplacementRunning',
    `on ${node}, in place of ${moved.name}, moved off ${SICK}`,
    true,
  );
  say(
    `   ${moved.namespace}/${moved.name} (${moved.sharePercent}% of the disk's IO) now runs as ${name} on ${node}`,
  );
  show(['get', 'pods', '-n', NAMESPACE, '-o', 'wide', '-l', 'app=shop']);
}

/** The limit file of the neighbour's cgroup on the device (v1 blkio.throttle.write_bps_device, v2 io.max). */
function limitFile(): { path: string; text: string } | undefined {
  const at = culprit?.cgroup;
  if (!at) return undefined;
  const path = join(at, existsSync(join(at, 'io.max')) ? 'io.max' : 'blkio.throttle.write_bps_device');
  return existsSync(path) ? { path, text: readFileSync(path, 'utf8').trim() || '(empty)' } : undefined;
}

/** Waits for the operator to want a limit on the neighbour's pod and for the agent to apply it, and shows both. */
async function limitCulprit(): Promise<void> {
  const limited = culprit;
  if (!limited) return;
  const who = `${limited.namespace}/${limited.name}`;
  let wish: { device: string; limit: Record<string, unknown> } | undefined;
  await waitFor(
    `a limit wanted on ${who} (spec.ioLimits)`,
    120,
    async () => {
      wish = (await readHealth(SICK))?.spec?.ioLimits?.find((l) => l.podUid === limited.uid);
      return wish !== undefined;
    },
    healthLine,
  );
  await waitFor(`the agent reports it applied (status.ioLimits)`, 60, async () =>
    Boolean((await readHealth(SICK))?.status?.ioLimits?.applied?.some((a) => a.podUid === limited.uid)),
  );
  const file = limitFile();
  say(`$ cat ${file?.path ?? '(no limit file)'}`);
  say(`   ${file?.text ?? ''}`);
  say(
    `   the limit wanted: ${JSON.stringify(wish?.limit)} on device ${wish?.device}; its stress-ng runs on: ${neighbour?.running === true}`,
  );
  mark(`pod/${who}`, 'LimitApplied', `${file?.path ?? ''}: ${file?.text ?? ''}`, true);
  // The throttle's own stall is in the node's PSI; with a limit in force the disk's busy time says (ADR 0031).
  await waitFor(
    `the disk quiet under the limit, its load still running (IoPressureHigh False)`,
    120,
    async () =>
      condition(await readHealth(SICK), 'IoPressureHigh')?.status === 'False' && neighbour?.running === true,
    healthLine,
  );
  // What the disk's recovery gives on a real node: kubelet creates sandboxes again (here, the injected failures end).
  run(join(REPO, 'hack', 'cluster', 'incident'), ['stop', '--node', SICK]);
  mark(
    `node/${SICK}`,
    'IncidentEnded',
    'its culprit limited, the disk is quiet: kubelet creates sandboxes again',
  );
  await waitFor(
    `the pods stuck on ${SICK} Running where they are`,
    120,
    async () => (await podsOn(SICK)).filter(isStuck).length === 0,
    async () => `${(await podsOn(SICK)).filter(isStuck).length} still stuck`,
  );
  show(['get', 'sandboxhealth']);
  show(['get', 'pods', '-n', NAMESPACE, '-o', 'wide', `--field-selector=spec.nodeName=${SICK}`]);
  show(['get', 'events', '-n', limited.namespace, '--field-selector', `involvedObject.name=${limited.name}`]);
}

/** Waits for the neighbour's load to end and its limit to be lifted, the file back as it was. */
async function liftedCulprit(): Promise<void> {
  const limited = culprit;
  if (!limited) return;
  await waitFor(`its stress-ng ended (LOAD_SECONDS ${LOAD_SECONDS})`, LOAD_SECONDS + 30, () =>
    Promise.resolve(neighbour?.running !== true),
  );
  await waitFor(
    'its limit lifted (no longer wanted, and reported lifted)',
    180,
    async () => {
      const h = await readHealth(SICK);
      const wanted = h?.spec?.ioLimits?.some((l) => l.podUid === limited.uid) === true;
      const applied = h?.status?.ioLimits?.applied?.some((a) => a.podUid === limited.uid) === true;
      return !wanted && !applied;
    },
    healthLine,
  );
  const file = limitFile();
  say(`$ cat ${file?.path ?? '(no limit file)'}`);
  say(`   ${file?.text ?? ''}`);
  show(['get', 'events', '-n', limited.namespace, '--field-selector', `involvedObject.name=${limited.name}`]);
  stopNeighbour();
}

/** Waits for the operator to name the neighbour's pod as the culprit (status.ioCause), and shows it. */
async function nameCulprit(): Promise<void> {
  const wanted = culprit;
  if (!wanted) return;
  const who = `${wanted.namespace}/${wanted.name}`;
  await waitFor(
    `the culprit named: ${who}`,
    90,
    async () => {
      const cause = (await readHealth(SICK))?.status?.ioCause;
      const named = cause?.consumers?.find(
        (c) => c.role === 'Culprit' && c.namespace === wanted.namespace && c.name === wanted.name,
      );
      if (cause?.cause !== 'Pod' || named?.sharePercent === undefined) return false;
      wanted.sharePercent = named.sharePercent;
      return true;
    },
    async () => {
      const status = (await readHealth(SICK))?.status;
      return `${status?.ioCause?.cause ?? 'no cause'}; top IO ${status?.topConsumer ?? 'none'}`;
    },
  );
  show(['get', 'sbh']);
  say(`   ${(await readHealth(SICK))?.status?.ioCause?.message ?? ''}`);
}

/** One of the shop's pods on the sick node becomes the noisy neighbour: its cgroup made, the load started in it. */
async function startNeighbour(): Promise<void> {
  const pod = (await podsOn(SICK)).find(
    (p) =>
      p.metadata?.labels?.app === 'shop' && p.status?.phase === 'Running' && !p.metadata.deletionTimestamp,
  );
  const { name, uid } = pod?.metadata ?? {};
  if (!name || !uid) throw new StepFailed(`no Running shop pod on ${SICK} to be the noisy neighbour`);
  const qosClass = pod?.status?.qosClass;
  mkdirSync(join(CLUSTER_DIR, 'logs'), { recursive: true });
  neighbour = NoisyNeighbour.start({
    uid,
    qosClass,
    seconds: LOAD_SECONDS,
    // On the disk, not in /tmp: Debian 13 mounts /tmp as tmpfs, where the load would stay in memory.
    tempDir: mkdtempSync(join(CLUSTER_DIR, 'stress-')),
    logFile: logFile('neighbour'),
    stateFile: NEIGHBOUR_STATE,
  });
  culprit = { namespace: NAMESPACE, name, uid, cgroup: neighbour.cgroup, ...(qosClass ? { qosClass } : {}) };
  const load = `stress-ng ${STRESS_ARGS.join(' ')} --timeout ${LOAD_SECONDS}s`;
  say(`   the noisy neighbour: pod ${NAMESPACE}/${name} (${qosClass ?? 'no QoS class'}, uid ${uid})`);
  say(`$ mkdir -p ${neighbour.cgroup}   (where kubelet's systemd cgroup driver puts this pod)`);
  say(`$ sh -c 'echo $$ >${neighbour.cgroup}/cgroup.procs; exec ${load}'   (stops by itself)`);
  say(
    dim(
      `   O_DIRECT writes: cgroup ${neighbour.version} charges buffered writeback to the flusher, direct IO to the pod`,
    ),
  );
  await neighbour.ensureCounted().catch((err: unknown) => {
    throw new StepFailed(describeError(err));
  });
  say(
    neighbour.throttleRule
      ? `   this kernel counted the pod's IO only once a throttle rule was set on the disk: ${neighbour.throttleRule} (1 TiB/s, no limit) on its cgroup`
      : `   the kernel counts its IO in the pod's cgroup${neighbour.version === 'v1' ? ' (blkio.throttle.io_service_bytes) without a throttle rule from the demo' : ''}`,
  );
  mark(`pod/${NAMESPACE}/${name}`, 'LoadStarted', `${load} in this pod's cgroup, ${neighbour.cgroup}`);
  void stopWithItsPod(culprit).catch((err: unknown) =>
    say(`   watching the neighbour's pod failed: ${describeError(err)}`),
  );
}

async function main(): Promise<void> {
  say(
    bold('sandbox-remediator demo') +
      ` — ${SICK}'s disk is saturated; watch the operator prove it, act and undo.`,
  );
  say(dim(`Logs: ${logFile('operator')}, ${logFile('agent')}. Stop everything: make cluster-down.`));

  await step(
    'A local cluster: etcd, kube-apiserver, controller-manager, scheduler and kwok with 6 nodes',
    async () => {
      // Before anything is made: the noisy neighbour's pod cgroup needs root, and no kubelet owning its tree.
      const why = refusal();
      if (why) throw new StepFailed(`the noisy neighbour cannot run here: ${why}`);
      for (const problem of removeLeftovers(NEIGHBOUR_STATE))
        say(`   a previous run's cgroup left behind: ${problem}`);
      // With a node prefix of its own (tests), the demo makes its nodes itself and leaves kwok-node-* as they are.
      run(join(REPO, 'hack', 'cluster', 'up.sh'), [], { NODES: PREFIX === 'kwok-node-' ? '6' : '0' });
      for (const name of NODES) {
        const exists = await readNode(name).then(
          () => true,
          (err: unknown) => {
            if (isNotFound(err)) return false;
            throw err;
          },
        );
        if (!exists) run(join(REPO, 'hack', 'cluster', 'node.sh'), ['create', name]);
        kubectl(['label', 'node', name, `${DEMO_LABEL}=${NAMESPACE}`, '--overwrite']);
      }
      await waitFor('6 Ready nodes', 120, async () => {
        const nodes = await Promise.all(NODES.map(readNode));
        return nodes.every((n) =>
          n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
        );
      });
    },
  );

  await step(
    `The CRDs and a SandboxPolicy (demo clocks: stuck after ${THRESHOLD}s, IO proven after 5s)`,
    async () => {
      kubectl(['apply', '--server-side', '--force-conflicts', '-f', join(REPO, 'crds')]);
      // Read, not `kubectl wait`: that fails at once on a CRD the apiserver has given no condition yet.
      await waitFor('the CRDs established', 60, async () => {
        const crds = await Promise.all(
          ['sandboxpolicies', 'sandboxhealths'].map((plural) =>
            extensions().readCustomResourceDefinition({ name: `${plural}.${GROUP}` }),
          ),
        );
        return crds.every((crd) =>
          crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True'),
        );
      });
      // A fresh namespace each run: the demo's story starts from nothing stuck.
      if (
        await core()
          .readNamespace({ name: NAMESPACE })
          .then(
            () => true,
            () => false,
          )
      ) {
        say(`   deleting the previous run's namespace ${NAMESPACE}`);
        await core().deleteNamespace({ name: NAMESPACE });
        await waitFor(`namespace ${NAMESPACE} gone`, 120, () =>
          core()
            .readNamespace({ name: NAMESPACE })
            .then(
              () => false,
              () => true,
            ),
        );
      }
      await core().createNamespace({ body: { metadata: { name: NAMESPACE } } });
      const yaml = policyYaml();
      say(dim(yaml.replace(/^/gm, '   ')));
      const applied = spawnSync(KUBECTL, [`--kubeconfig=${KUBECONFIG}`, 'apply', '-f', '-'], {
        input: yaml,
        encoding: 'utf8',
      });
      if (applied.status !== 0) throw new StepFailed(`kubectl apply of the policy failed: ${applied.stderr}`);
    },
  );

  await step(
    `The operator, and the node agent for ${SICK} reading this machine's /proc and cgroups`,
    async () => {
      startDetached('operator', [
        'operator',
        `--kubeconfig=${KUBECONFIG}`,
        `--metrics-bind-address=127.0.0.1:${PORT_BASE}`,
        `--health-probe-bind-address=127.0.0.1:${PORT_BASE + 1}`,
      ]);
      await waitFor(
        'the operator ready (/readyz)',
        90,
        async () => (await fetch(`http://127.0.0.1:${PORT_BASE + 1}/readyz`)).ok,
        () => Promise.resolve(readFileSync(logFile('operator'), 'utf8').trim().split('\n').at(-1) ?? ''),
      );
      // The agent publishes into the SandboxHealth the operator creates for each node its policies select; started
      // before that, it would ask again only at its next heartbeat (a minute).
      await waitFor(
        `${SICK}'s SandboxHealth, created by the operator`,
        60,
        async () => (await readHealth(SICK)) !== undefined,
      );
      startDetached('agent', [
        'agent',
        `--node-name=${SICK}`,
        `--kubeconfig=${KUBECONFIG}`,
        `--metrics-bind-address=127.0.0.1:${PORT_BASE + 2}`,
        // The real tree (the default, said here): it finds the neighbour's pod cgroup by kubelet's path rules.
        `--cgroup-root=${CGROUP_ROOT}`,
        // Writing on: it applies the limits the operator wants on its node's pods (limitIo), and lifts them.
        ...(LIMIT_IO ? ['--allow-io-limits'] : []),
      ]);
      await waitFor(
        `the agent's first reading in ${SICK}'s SandboxHealth`,
        60,
        async () => {
          const h = await readHealth(SICK);
          return h?.status?.ioReading?.source === 'agent';
        },
        healthLine,
      );
      show(['get', 'sandboxpolicies']);
    },
  );

  await step(
    `A workload: shop (6 pods, one per node), catalog (3) and checkout (3 that prefer ${SICK})`,
    async () => {
      // A run that failed half-way may have left the node cordoned: the operator undoes that first.
      await waitFor(
        `${SICK} schedulable, with no remediation of ours on it`,
        180,
        async () => {
          const node = await readNode(SICK);
          return !node.spec?.unschedulable && !node.metadata?.annotations?.[STAMP.policy];
        },
        healthLine,
      );
      await apps().createNamespacedDeployment({ namespace: NAMESPACE, body: deployment('shop', 6, 0) });
      await apps().createNamespacedDeployment({ namespace: NAMESPACE, body: deployment('catalog', 3, 0) });
      await apps().createNamespacedDeployment({
        namespace: NAMESPACE,
        body: deployment('checkout', 3, 0, SICK),
      });
      await waitFor('every pod Running', 120, async () =>
        (await Promise.all(ROLLOUTS.concat('shop').map(readDeployment))).every(rolledOut),
      );
      // From here on each new pod must stay Ready 15 s before the next is replaced: rollouts last about a minute.
      for (const name of ROLLOUTS)
        await apps().patchNamespacedDeployment(
          { name, namespace: NAMESPACE, body: { spec: { minReadySeconds: 15 } } },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        );
      show(['get', 'pods', '-n', NAMESPACE, '-o', 'wide']);
    },
  );

  await step(
    `The incident on ${SICK}: a noisy neighbour saturates the disk, and containerd cannot create sandboxes in time`,
    async () => {
      await startNeighbour();
      run(join(REPO, 'hack', 'cluster', 'incident'), [
        'start',
        '--node',
        SICK,
        '--interval-seconds',
        '5',
        '--max-duration-seconds',
        String(LOAD_SECONDS + 300),
      ]);
      mark(
        `node/${SICK}`,
        'IncidentStarted',
        'kubelet reports FailedCreatePodSandBox: failed to reserve sandbox name',
      );
      say('$ kubectl scale deployment/shop --replicas=12');
      kubectl(['scale', 'deployment/shop', '-n', NAMESPACE, '--replicas=12']);
      for (const name of ROLLOUTS) {
        say(`$ kubectl rollout restart deployment/${name}`);
        kubectl(['rollout', 'restart', `deployment/${name}`, '-n', NAMESPACE]);
        mark(`deployment/${NAMESPACE}/${name}`, 'RolloutStarted', 'kubectl rollout restart');
      }
      await waitFor(
        `new pods stuck in ContainerCreating on ${SICK}`,
        60,
        async () => (await podsOn(SICK)).filter(isStuck).length >= 2,
      );
      show(['get', 'pods', '-n', NAMESPACE, '-o', 'wide', `--field-selector=spec.nodeName=${SICK}`]);
    },
  );

  await step(
    `Detection: pods stuck longer than ${THRESHOLD}s, classified from kubelet's messages`,
    async () => {
      await waitFor(
        'SandboxCreationDegraded',
        THRESHOLD + 60,
        async () => condition(await readHealth(SICK), 'SandboxCreationDegraded')?.status === 'True',
        healthLine,
      );
      show(['get', 'sandboxhealth']);
      const h = await readHealth(SICK);
      for (const p of h?.status?.stuckPods ?? [])
        say(
          `   ${p.namespace}/${p.name}: ${p.cause}${p.reservedFor ? `, sandbox name reserved for ${p.reservedFor.slice(0, 13)}…` : ''}`,
        );
    },
  );

  await step(
    'IO evidence and its culprit, then the remediation: cordon, evict the stuck pods, hold rollouts back',
    async () => {
      await waitFor(
        "IoPressureHigh proven by the agent's readings",
        120,
        async () => {
          const h = await readHealth(SICK);
          if (condition(h, 'IoPressureHigh')?.status !== 'True') return false;
          const reading = h?.status?.ioReading ?? {};
          const io = condition(h, 'IoPressureHigh');
          evidence = {
            // When the pressure was proven (the condition's transition), with the reading the demo saw then; the
            // condition's message says since when the readings had been over.
            time: io?.lastTransitionTime ?? new Date().toISOString(),
            actor: reading.source ?? 'agent',
            object: `sandboxhealth/${SICK}`,
            reason: 'IoOverThresholds',
            message: `${describeReading(reading)}; ${io?.message ?? ''}`,
          };
          return true;
        },
        healthLine,
      );
      await waitFor(
        `${SICK} cordoned by the operator`,
        60,
        async () => {
          const node = await readNode(SICK);
          return node.spec?.unschedulable === true && Boolean(node.metadata?.annotations?.[STAMP.policy]);
        },
        healthLine,
      );
      await nameCulprit();
      // A rollout whose new pod is stuck on the saturated node is held there; it is let go once its pods can no longer
      // land on the node (the node fenced, its stuck pod evicted): a hold reaches only what feeds the saturated disk.
      await waitFor('a rollout held by the operator', 60, async () => {
        const held = (await Promise.all(ROLLOUTS.map(readDeployment))).some(pausedByUs);
        const told = await core().listNamespacedEvent({
          namespace: NAMESPACE,
          fieldSelector: 'reason=RolloutPaused',
        });
        return held || told.items.length > 0;
      });
      show(['get', 'events', '-n', NAMESPACE, '--field-selector', 'reason=RolloutPaused']);
      show([
        'get',
        'deployments',
        '-n',
        NAMESPACE,
        '-o',
        'custom-columns=NAME:.metadata.name,PAUSED:.spec.paused,PAUSED-BY:.metadata.annotations.sandbox\\.remediator\\.io/paused-by,REASON:.metadata.annotations.sandbox\\.remediator\\.io/pause-reason',
      ]);
      // maxEvictionsPerMinute 1: one stuck pod is evicted, the next waits for the minute to pass. Meanwhile, the
      // on-call checklist: what is stuck, the evidence, what was done and what holds the rest back.
      await waitFor(
        'an eviction held back by the rate limit (EvictionRate)',
        90,
        async () =>
          (await readHealth(SICK))?.status?.blocked?.some((b) => b.guard === 'EvictionRate') === true,
        healthLine,
      );
      say(
        `$ sandbox-remediator diagnose ${SICK}     (kubectl sandbox diagnose ${SICK}, once make plugin installed it)`,
      );
      process.stderr.write(diagnose([SICK]));
      if (DIAGNOSE_JSON) writeFileSync(DIAGNOSE_JSON, diagnose([SICK, '-o', 'json']));
      // With limitIo the disk quiets under the limit, and the pods still stuck start where they are (step 8).
      if (!LIMIT_IO) {
        await waitFor(
          `the stuck pods evicted from ${SICK}`,
          120,
          async () => (await podsOn(SICK)).filter(isStuck).length === 0,
          async () => `${(await podsOn(SICK)).filter(isStuck).length} still stuck`,
        );
        await waitFor(
          'the replacements Running on other nodes',
          120,
          async () => (await readDeployment('shop')).status?.availableReplicas === 12,
        );
      }
      show(['get', 'sandboxhealth']);
      show(['get', 'sandboxpolicies']);
      show(['get', 'nodes', '-l', `${DEMO_LABEL}=${NAMESPACE}`]);
      show(['get', 'pods', '-n', NAMESPACE, '-o', 'wide']);
    },
  );

  if (LIMIT_IO)
    await step(
      "The culprit limited in place: the agent writes its pod's blkio/io.max, its load runs on, limited",
      limitCulprit,
    );
  else
    await step(
      'The culprit moved: evicted after the stuck pods, its replacement Running on another node, its IO gone with it',
      moveCulprit,
    );

  await step('The IO recovers: after recoverySeconds and the cooldown everything is undone', async () => {
    if (!LIMIT_IO) {
      run(join(REPO, 'hack', 'cluster', 'incident'), ['stop', '--node', SICK]);
      stopNeighbour(); // gone with its pod already
      mark(
        `node/${SICK}`,
        'IncidentEnded',
        'its culprit gone, the disk is quiet: kubelet creates sandboxes again',
      );
    }
    await waitFor(
      'IoPressureHigh False',
      120,
      async () => condition(await readHealth(SICK), 'IoPressureHigh')?.status === 'False',
      healthLine,
    );
    await waitFor(
      `${SICK} uncordoned`,
      120,
      async () => !(await readNode(SICK)).spec?.unschedulable,
      healthLine,
    );
    await waitFor(
      `${SICK} Healthy`,
      120,
      async () => (await readHealth(SICK))?.status?.state === 'Healthy',
      healthLine,
    );
    await waitFor('the rollouts resumed and complete', 180, async () =>
      (await Promise.all(ROLLOUTS.map(readDeployment))).every(
        (d) => !pausedByUs(d) && !d.spec?.paused && rolledOut(d),
      ),
    );
    show(['get', 'sandboxhealth']);
    show(['get', 'sandboxpolicies']);
    show(['get', 'node', SICK]);
  });

  if (LIMIT_IO)
    await step("The neighbour's load ends: its limit is lifted, the file back as it was", liftedCulprit);

  await step("The timeline, from the cluster's Events and the SandboxHealth status", async () => {
    const events = [
      ...(await core().listNamespacedEvent({ namespace: NAMESPACE })).items,
      ...(
        await core().listNamespacedEvent({
          namespace: 'default',
          fieldSelector: `involvedObject.name=${SICK}`,
        })
      ).items,
      ...(
        await core().listNamespacedEvent({
          namespace: 'default',
          fieldSelector: `involvedObject.name=${POLICY}`,
        })
      ).items,
    ] satisfies CoreV1Event[];
    const health = await readHealth(SICK);
    const timeline = buildTimeline({
      since: new Date(started - 1000),
      events,
      actions: health?.status?.actions ?? [],
      extra: [...actions, ...(evidence ? [evidence] : [])],
    });
    say(formatTimeline(timeline, new Date(started), process.stderr.columns || 160));
    if (TIMELINE_JSON)
      writeFileSync(
        TIMELINE_JSON,
        JSON.stringify({ started: new Date(started).toISOString(), timeline, culprit }, null, 2),
      );
  });

  say();
  say(
    bold(
      `Done in ${clock()}: ${SICK} was ${LIMIT_IO ? 'cordoned, its noisy neighbour limited in place (its stuck pods then started there) and let go once its load ended' : 'cordoned, drained of stuck pods and of its noisy neighbour'}, and restored.`,
    ),
  );
  say(`Explore: export KUBECONFIG=${KUBECONFIG}`);
  const hints: [string, string][] = [
    [`kubectl get sandboxhealth ${SICK} -o yaml`, "the node's full status: readings, actions, conditions"],
    [`kubectl sandbox diagnose ${SICK}`, 'the on-call checklist (make plugin installs the plugin)'],
    [`kubectl describe node ${SICK}`, "the operator's Events on the node"],
    [`kubectl get events -n ${NAMESPACE} --sort-by=.lastTimestamp`, 'evictions and rollout pauses'],
    ['kubectl explain sandboxpolicy.spec --recursive', 'every policy field'],
    [`curl -s 127.0.0.1:${PORT_BASE}/metrics | grep sandbox_`, "the operator's metrics"],
  ];
  const width = Math.max(...hints.map(([c]) => c.length));
  for (const [command, what] of hints) say(`  ${command.padEnd(width)}   ${what}`);
  say('The cluster, the operator and the agent keep running; make cluster-down stops them all.');
}

async function cleanup(): Promise<void> {
  stopRecorded('operator');
  stopRecorded('agent');
  await core()
    .deleteNamespace({ name: NAMESPACE })
    .catch(() => undefined);
  await custom()
    .deleteClusterCustomObject({ group: GROUP, version: VERSION, plural: 'sandboxpolicies', name: POLICY })
    .catch(() => undefined);
  for (const name of NODES)
    if (name.startsWith(PREFIX) && PREFIX !== 'kwok-node-')
      await core()
        .deleteNode({ name })
        .catch(() => undefined);
}

// Every exit stops the neighbour's load and removes its cgroup: an error, the end, SIGINT (Ctrl-C) and SIGTERM (a test's
// timeout); a SIGKILL leaves it to the next run (removeLeftovers). stress-ng ends by itself within LOAD_SECONDS anyway.
process.on('exit', () => {
  stopNeighbour();
});
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
] as const)
  process.once(signal, () => {
    stopNeighbour();
    spawnSync(join(REPO, 'hack', 'cluster', 'incident'), ['stop', '--node', SICK], { stdio: 'ignore' });
    process.exit(code);
  });

try {
  await main();
  if (CLEANUP) await cleanup();
} catch (err) {
  stopNeighbour();
  spawnSync(join(REPO, 'hack', 'cluster', 'incident'), ['stop', '--node', SICK], { stdio: 'ignore' });
  say();
  say(bold(`make demo failed at step ${stepNo}/${STEPS} (${stepTitle}):`));
  say(`  ${err instanceof StepFailed ? err.message : describeError(err)}`);
  say(
    `  The operator's log: ${logFile('operator')}; the agent's: ${logFile('agent')}; the cluster's: ${join(CLUSTER_DIR, 'logs')}/`,
  );
  if (CLEANUP) await cleanup();
  process.exitCode = 1;
} finally {
  stopNeighbour();
}
