// Incident injector for the local kwok cluster: makes every pod bound to a node stay Pending with its
// containers waiting in ContainerCreating, and repeats kubelet's Warning FailedCreatePodSandBox Event on
// each such pod while the incident lasts, as kubelet keeps retrying in a real incident.
//
//   incident start --node NODE [--message MSG] [--interval-seconds N] [--max-duration-seconds N]
//   incident stop --node NODE
//   incident status
//
// How: a kwok Stage (weight 10000, so it beats the pod-running Stage) holds the node's pending pods in
// ContainerCreating; a detached, bounded daemon posts the Events, with the message rendered per pod. As kubelet on a
// real node does (make lab, test/fixtures/lab/): a name reservation's first attempt times out ("context deadline
// exceeded") and later ones meet the reserved name; each distinct message is an Event of its own, named
// <pod>.<hex nanoseconds>, whose count grows.
import {
  CoreV1Api,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
  type CoreV1Event,
  type KubeConfig,
  type KubernetesObject,
  type V1Pod,
} from '@kubernetes/client-node';
import { Command, InvalidArgumentError } from 'commander';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadKubeConfig } from '../../src/kube/client.js';
import { describeError, isConflict, isNotFound } from '../../src/kube/errors.js';
import { Informer } from '../../src/kube/informer.js';

const REPO = join(import.meta.dirname, '..', '..');
const CLUSTER_DIR = process.env.CLUSTER_DIR ?? join(REPO, '.cluster');
const FIELD_MANAGER = 'sandbox-remediator-incident';
const INCIDENT_ANNOTATION = 'sandbox.remediator.io/test-incident';
const ENDED_ANNOTATION = 'sandbox.remediator.io/test-incident-ended';

export const DEFAULT_MESSAGE =
  'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to reserve sandbox name "{name}": name "{name}" is reserved for "{id}"';
/**
 * kubelet's first attempt's Event before containerd answers "failed to reserve sandbox name": the attempt that took
 * the name timed out at kubelet's deadline. Seen on the real lab node (test/fixtures/lab/captured.json).
 */
export const DEADLINE_MESSAGE =
  'Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded';

/**
 * The messages of a pod's failed attempts, in order, as kubelet on a real node writes them: for a name reservation,
 * the first attempt times out (DEADLINE_MESSAGE) and every later one meets the reserved name; any other template
 * repeats from the first attempt.
 */
export function attemptMessage(template: string, attempt: number): string {
  return attempt === 1 && template.includes('failed to reserve sandbox name') ? DEADLINE_MESSAGE : template;
}

/**
 * An Event name as kubelet's recorder makes it: the object's name and the hex of the time in nanoseconds, so that
 * each distinct message of a pod gets its own Event.
 */
export function eventName(objectName: string, at: Date): string {
  return `${objectName}.${(BigInt(at.getTime()) * 1_000_000n).toString(16)}`;
}

/** Renders {pod} {namespace} {uid} {name} (the sandbox name, attempt 0) and {id} (a 64-hex sandbox id). */
export function renderMessage(
  template: string,
  pod: { name: string; namespace: string; uid: string },
  id: string,
) {
  const name = `${pod.name}_${pod.namespace}_${pod.uid}_0`;
  const values: Record<string, string> = { pod: pod.name, namespace: pod.namespace, uid: pod.uid, name, id };
  return template.replace(/\{(pod|namespace|uid|name|id)\}/g, (_, key: string) => values[key] ?? '');
}

function kubeConfig(): KubeConfig {
  return loadKubeConfig(process.env.KUBECONFIG ?? join(CLUSTER_DIR, 'kubeconfig'));
}

const stageName = (node: string) => `sr-incident-${node}`;
const pidFile = (node: string) => join(CLUSTER_DIR, 'pids', `incident-${node}.pid`);
const logFile = (node: string) => join(CLUSTER_DIR, 'logs', `incident-${node}.log`);

/** The Stage that holds the node's pending pods in ContainerCreating. Stable timestamps: it settles. */
function incidentStage(node: string): KubernetesObject & { spec: unknown } {
  return {
    apiVersion: 'kwok.x-k8s.io/v1alpha1',
    kind: 'Stage',
    metadata: { name: stageName(node), labels: { [INCIDENT_ANNOTATION]: 'true' } },
    spec: {
      resourceRef: { apiGroup: 'v1', kind: 'Pod' },
      selector: {
        matchExpressions: [
          { key: '.spec.nodeName', operator: 'In', values: [node] },
          { key: '.metadata.deletionTimestamp', operator: 'DoesNotExist' },
          { key: '.status.phase', operator: 'In', values: ['Pending'] },
        ],
      },
      weight: 10000,
      next: {
        statusTemplate: `{{ $t := .metadata.creationTimestamp }}
{{ $waiting := "ContainerCreating" }}{{ if .spec.initContainers }}{{ $waiting = "PodInitializing" }}{{ end }}
conditions:
  - { type: PodReadyToStartContainers, status: "False", lastTransitionTime: {{ $t | Quote }} }
  - { type: Initialized, status: {{ if .spec.initContainers }}"False"{{ else }}"True"{{ end }}, lastTransitionTime: {{ $t | Quote }} }
  - { type: Ready, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $t | Quote }} }
  - { type: ContainersReady, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $t | Quote }} }
initContainerStatuses:
{{ range .spec.initContainers }}
  - { name: {{ .name | Quote }}, image: {{ .image | Quote }}, imageID: "", ready: false, restartCount: 0, started: false, state: { waiting: { reason: ContainerCreating } } }
{{ end }}
containerStatuses:
{{ range .spec.containers }}
  - { name: {{ .name | Quote }}, image: {{ .image | Quote }}, imageID: "", ready: false, restartCount: 0, started: false, state: { waiting: { reason: {{ $waiting }} } } }
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
{{ end }}
phase: Pending
startTime: {{ $t | Quote }}
`,
      },
    },
  };
}

/**
 * Whether kubelet would be creating this pod's sandbox: every container waiting for it, or none reported yet. A pod
 * the simulator has not given a status yet (kwok lags behind under load) is still one kubelet tries to start.
 */
function isWaitingForSandbox(pod: V1Pod): boolean {
  if (pod.metadata?.deletionTimestamp) return false;
  const statuses = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
  return (
    statuses.length === 0 ||
    statuses.every(
      (s) =>
        s.state?.waiting?.reason === 'ContainerCreating' || s.state?.waiting?.reason === 'PodInitializing',
    )
  );
}

async function pendingPodsOn(core: CoreV1Api, node: string): Promise<V1Pod[]> {
  const list = await core.listPodForAllNamespaces({
    fieldSelector: `spec.nodeName=${node},status.phase=Pending`,
  });
  return list.items;
}

/**
 * The node's pods, kept by a watch as kubelet keeps them: a LIST each turn (every 500 ms, one daemon per node) was a
 * steady load of its own on the apiserver of a large cluster (10 daemons over 30,000 pods: 20 LISTs a second).
 */
async function watchPodsOn(
  kc: KubeConfig,
  node: string,
  stop: AbortSignal,
  deadline: number,
): Promise<Informer<V1Pod> | undefined> {
  const quiet = {
    info: () => undefined,
    warn: (message: string, fields?: Record<string, unknown>) => {
      console.error(message, fields);
    },
  };
  const pods = new Informer<V1Pod>({
    name: `pods-on-${node}`,
    kc,
    apiVersion: 'v1',
    kind: 'Pod',
    path: '/api/v1/pods',
    // Pending ones only, as the LIST was: a pod that starts leaves the cache.
    fieldSelector: `spec.nodeName=${node},status.phase=Pending`,
    transform: (raw) => raw,
    logger: quiet,
  });
  pods.start();
  // Its list retries for as long as the apiserver does not answer: bounded still by a stop and the time limit.
  const given = AbortSignal.any([stop, AbortSignal.timeout(Math.max(0, deadline - Date.now()))]);
  const gaveUp = new Promise<'given'>((resolve) => {
    given.addEventListener('abort', () => {
      resolve('given');
    });
  });
  const first = given.aborted
    ? 'given'
    : await Promise.race([pods.synced.then(() => 'synced' as const), gaveUp]);
  if (first === 'synced') return pods;
  await pods.stop();
  return undefined;
}

function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function stopDaemon(node: string): void {
  let pid: number;
  try {
    pid = Number(readFileSync(pidFile(node), 'utf8').trim());
  } catch {
    return;
  }
  if (pid > 0 && isProcessAlive(pid)) process.kill(pid, 'SIGTERM');
  rmSync(pidFile(node), { force: true });
}

async function start(
  node: string,
  message: string,
  intervalSeconds: number,
  maxDurationSeconds: number,
  events = true,
) {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const objects = KubernetesObjectApi.makeApiClient(kc);
  await core.readNode({ name: node }); // fail fast, with the API's message, on a node that does not exist
  await objects.patch(
    incidentStage(node),
    undefined,
    undefined,
    FIELD_MANAGER,
    true,
    PatchStrategy.ServerSideApply,
  );
  await annotateNode(objects, node, JSON.stringify({ since: new Date().toISOString(), message }));
  stopDaemon(node);
  if (!events) {
    console.log(`incident started on node/${node}: new pods there stay ContainerCreating; no events`);
    return;
  }
  mkdirSync(join(CLUSTER_DIR, 'pids'), { recursive: true });
  mkdirSync(join(CLUSTER_DIR, 'logs'), { recursive: true });
  const logged = existsSync(logFile(node)) ? statSync(logFile(node)).size : 0;
  const out = openSync(logFile(node), 'a');
  const child = spawn(
    process.execPath,
    [
      '--import',
      join(REPO, 'node_modules', 'tsx', 'dist', 'esm', 'index.mjs'),
      import.meta.filename,
      'daemon',
      '--node',
      node,
      '--message',
      message,
      '--interval-seconds',
      String(intervalSeconds),
      '--max-duration-seconds',
      String(maxDurationSeconds),
    ],
    { detached: true, stdio: ['ignore', out, out], cwd: REPO, env: process.env },
  );
  writeFileSync(pidFile(node), String(child.pid));
  child.unref();
  try {
    await daemonStarted(node, child, logged);
  } catch (err) {
    // Nothing left behind: the daemon, the Stage and the node's annotation go (the caller registers no stop).
    child.kill('SIGKILL');
    await stop(node).catch(() => undefined);
    throw err;
  }
  console.log(
    `incident started on node/${node}: new pods there stay ContainerCreating; events every ${intervalSeconds}s (pid ${child.pid}, log ${logFile(node)}, stops by itself after ${maxDurationSeconds}s)`,
  );
}

/**
 * Waits for the daemon to say it started (its cache of the node's pods filled): a caller that goes on at once would
 * share its start-up (tsx compiling, its first LIST) with whatever it measures next. Fails when it exits first.
 */
async function daemonStarted(node: string, child: ChildProcess, from: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const log = readFileSync(logFile(node)).subarray(from).toString();
    if (log.includes(`daemon for node/${node} started (pid ${child.pid})`)) return;
    if (child.exitCode !== null || child.signalCode !== null || Date.now() > deadline)
      throw new Error(`the incident daemon for node/${node} did not start; its log:\n${log.slice(-2000)}`);
    await sleep(100);
  }
}

async function annotateNode(objects: KubernetesObjectApi, node: string, value: string | null) {
  const patch = {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: node, annotations: { [INCIDENT_ANNOTATION]: value } },
  };
  await objects.patch(
    patch as unknown as KubernetesObject,
    undefined,
    undefined,
    FIELD_MANAGER,
    undefined,
    PatchStrategy.MergePatch,
  );
}

async function stop(node: string) {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const objects = KubernetesObjectApi.makeApiClient(kc);
  stopDaemon(node);
  await objects
    .delete({ apiVersion: 'kwok.x-k8s.io/v1alpha1', kind: 'Stage', metadata: { name: stageName(node) } })
    .catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
  await annotateNode(objects, node, null);
  // kwok re-evaluates a pod only when it changes: touch the stuck ones so the pod-running Stage picks them up.
  const stamp = new Date().toISOString();
  let touched = 0;
  for (const pod of await pendingPodsOn(core, node)) {
    if (!pod.metadata?.name || !pod.metadata.namespace) continue;
    // A pod deleted since the list (evicted by the operator, its Deployment scaled down) has nothing to release.
    const released = await objects
      .patch(
        {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: {
            name: pod.metadata.name,
            namespace: pod.metadata.namespace,
            annotations: { [ENDED_ANNOTATION]: stamp },
          },
        },
        undefined,
        undefined,
        FIELD_MANAGER,
        undefined,
        PatchStrategy.MergePatch,
      )
      .then(
        () => true,
        (err: unknown) => {
          if (!isNotFound(err)) throw err;
          return false;
        },
      );
    if (released) touched++;
  }
  console.log(`incident stopped on node/${node}: ${touched} stuck pod(s) released`);
}

async function status() {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const nodes = await core.listNode();
  let any = false;
  for (const node of nodes.items) {
    const raw = node.metadata?.annotations?.[INCIDENT_ANNOTATION];
    if (!raw) continue;
    any = true;
    const name = node.metadata?.name ?? '?';
    const stuck = (await pendingPodsOn(core, name)).filter(isWaitingForSandbox).length;
    console.log(
      `node/${name}: incident since ${(JSON.parse(raw) as { since: string }).since}, ${stuck} pod(s) stuck`,
    );
  }
  if (!any) console.log('no incidents');
}

/**
 * Request options that make a call as the kubelet of `node` makes it: its user and group (impersonated by the
 * admin's kubeconfig), so that config/events/admission-policy.yaml, which lets only a node write its kubelet's
 * sandbox failures, lets these through as it would the real kubelet's.
 */
function asKubeletOf(node: string) {
  return setHeaderOptions(
    'Impersonate-Group',
    'system:nodes',
    setHeaderOptions('Impersonate-User', `system:node:${node}`),
  );
}

/**
 * Creates the Event on its first occurrence (replaced if the name is taken); a repeat is a patch of its count and time,
 * as kubelet's recorder sends it, with no read first, and an Event whose create was lost is created then.
 */
async function postEvent(core: CoreV1Api, event: CoreV1Event, count: number, node: string): Promise<void> {
  const name = event.metadata.name ?? '';
  const namespace = event.metadata.namespace ?? '';
  const asKubelet = asKubeletOf(node);
  const create = () =>
    core.createNamespacedEvent({ namespace, body: event }, asKubelet).catch(async (err: unknown) => {
      if (!isConflict(err)) throw err;
      await core.replaceNamespacedEvent({ name, namespace, body: event }, asKubelet);
    });
  if (count === 1) {
    await create();
    return;
  }
  try {
    await core.patchNamespacedEvent(
      { name, namespace, body: { count, lastTimestamp: event.lastTimestamp } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch, asKubelet),
    );
  } catch (err) {
    if (!isNotFound(err)) throw err;
    await create();
  }
}

/** Posts and repeats the Warning events. Bounded: exits after maxDurationSeconds or on SIGTERM. */
async function daemon(node: string, template: string, intervalSeconds: number, maxDurationSeconds: number) {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const deadline = Date.now() + maxDurationSeconds * 1000;
  // Per pod: the holder's id, the attempts so far, and an Event per distinct message (name, count, first time).
  const seen = new Map<
    string,
    {
      id: string;
      attempts: number;
      next: number;
      events: Map<string, { name: string; count: number; first: Date }>;
    }
  >();
  const stop = new AbortController();
  process.on('SIGTERM', () => {
    stop.abort();
  });
  process.on('SIGINT', () => {
    stop.abort();
  });
  const cached = await watchPodsOn(kc, node, stop.signal, deadline);
  // `incident start` waits for this line, with this pid (daemonStarted): keep the two in step.
  if (cached) console.log(`${new Date().toISOString()} daemon for node/${node} started (pid ${process.pid})`);
  while (cached && !stop.signal.aborted && Date.now() < deadline) {
    try {
      const now = Date.now();
      const pods = [...cached.values()].filter(isWaitingForSandbox); // Pending ones only: the field selector
      const live = new Set<string>();
      for (const pod of pods) {
        const { uid, name, namespace } = pod.metadata ?? {};
        if (!uid || !name || !namespace) continue;
        live.add(uid);
        let entry = seen.get(uid);
        if (!entry) {
          entry = { id: randomBytes(32).toString('hex'), attempts: 0, next: now, events: new Map() };
          seen.set(uid, entry);
        }
        if (now < entry.next) continue;
        entry.attempts++;
        entry.next = now + intervalSeconds * 1000;
        const message = renderMessage(
          attemptMessage(template, entry.attempts),
          { name, namespace, uid },
          entry.id,
        );
        let record = entry.events.get(message);
        if (!record) {
          record = { name: eventName(name, new Date()), count: 0, first: new Date() };
          entry.events.set(message, record);
        }
        record.count++;
        const event: CoreV1Event = {
          metadata: { name: record.name, namespace },
          involvedObject: { apiVersion: 'v1', kind: 'Pod', name, namespace, uid },
          type: 'Warning',
          reason: 'FailedCreatePodSandBox',
          message,
          source: { component: 'kubelet', host: node },
          reportingComponent: 'kubelet',
          reportingInstance: node,
          count: record.count,
          firstTimestamp: record.first,
          lastTimestamp: new Date(),
        };
        try {
          await postEvent(core, event, record.count, node);
        } catch (err) {
          // One pod's failed post holds back none of the others; its next attempt posts again.
          console.error(`${new Date().toISOString()} ${name}: ${describeError(err)}`);
        }
      }
      for (const uid of seen.keys()) if (!live.has(uid)) seen.delete(uid);
    } catch (err) {
      console.error(`${new Date().toISOString()} ${describeError(err)}`);
    }
    await sleep(500);
  }
  await cached?.stop();
  console.log(
    `${new Date().toISOString()} daemon for node/${node} ${stop.signal.aborted ? 'stopped' : 'reached its time limit'}`,
  );
  // A watch still waiting for its answer would keep the process alive past its bound.
  process.exit(0);
}

const positiveInt = (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('must be a positive integer');
  return n;
};

const program = new Command('incident')
  .description('Simulate the sandbox-creation incident on a kwok node')
  .showHelpAfterError();
program
  .command('start')
  .description(
    'New pods bound to NODE stay ContainerCreating, with repeated Warning FailedCreatePodSandBox events',
  )
  .requiredOption('--node <node>', 'the kwok node')
  .option(
    '--message <msg>',
    'event message; {pod} {namespace} {uid} {name} {id} are filled in per pod',
    DEFAULT_MESSAGE,
  )
  .option('--interval-seconds <n>', 'seconds between repeated events per pod', positiveInt, 10)
  .option('--max-duration-seconds <n>', 'the event daemon stops by itself after this long', positiveInt, 3600)
  .option('--no-events', 'hold the pods only: post no Event (a test posts its own)')
  .action(
    async (o: {
      node: string;
      message: string;
      intervalSeconds: number;
      maxDurationSeconds: number;
      events: boolean;
    }) => start(o.node, o.message, o.intervalSeconds, o.maxDurationSeconds, o.events),
  );
program
  .command('stop')
  .description('End the incident: stuck pods on NODE become Running')
  .requiredOption('--node <node>', 'the kwok node')
  .action(async (o: { node: string }) => stop(o.node));
program.command('status').description('List nodes with an incident and their stuck pods').action(status);
program
  .command('daemon', { hidden: true })
  .requiredOption('--node <node>')
  .requiredOption('--message <msg>')
  .requiredOption('--interval-seconds <n>', '', positiveInt)
  .requiredOption('--max-duration-seconds <n>', '', positiveInt)
  .action(async (o: { node: string; message: string; intervalSeconds: number; maxDurationSeconds: number }) =>
    daemon(o.node, o.message, o.intervalSeconds, o.maxDurationSeconds),
  );

if (process.argv[1] === import.meta.filename) {
  await program.parseAsync(process.argv).catch((err: unknown) => {
    console.error(`incident: ${describeError(err)}`);
    process.exit(1);
  });
}
