// Workloads and readings for remediation tests on the real cluster: Deployments spread over a kwok pool, and
// small readers for nodes, pods and Events.
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { STAMP } from '../../src/api/v1alpha1/index.js';
import { api, eventually, hack, kubectl, type Cleanup } from './cluster.js';

/**
 * A Deployment of `replicas` pods spread evenly (maxSkew 1) over the pool's nodes, or, with `pinTo`, bound to
 * one node past the scheduler (even a cordoned one).
 */
export async function createSpreadDeployment(
  cleanup: Cleanup,
  namespace: string,
  name: string,
  pool: string,
  replicas: number,
  {
    labels = {},
    pinTo,
    finalizers,
  }: {
    labels?: Record<string, string>;
    pinTo?: string;
    /** On every pod (the ReplicaSet copies them): an evicted pod then lingers in Terminating. */
    finalizers?: string[];
  } = {},
): Promise<void> {
  const { apps } = api();
  const match = { app: name };
  await apps.createNamespacedDeployment({
    namespace,
    body: {
      metadata: { name },
      spec: {
        replicas,
        selector: { matchLabels: match },
        template: {
          metadata: { labels: { ...match, ...labels }, ...(finalizers ? { finalizers } : {}) },
          spec: {
            nodeSelector: { 'sandbox.remediator.io/test-pool': pool },
            ...(pinTo ? { nodeName: pinTo } : {}),
            topologySpreadConstraints: pinTo
              ? []
              : [
                  {
                    maxSkew: 1,
                    topologyKey: 'kubernetes.io/hostname',
                    whenUnsatisfiable: 'DoNotSchedule',
                    // A cordoned node (tainted unschedulable) is no spread domain, as for any node drain.
                    nodeTaintsPolicy: 'Honor',
                    labelSelector: { matchLabels: match },
                  },
                ],
            terminationGracePeriodSeconds: 0,
            containers: [{ name: 'app', image: 'registry.local/app:1' }],
          },
        },
      },
    },
  });
  cleanup.add(() => apps.deleteNamespacedDeployment({ name, namespace }).catch(() => undefined));
}

export async function podsOf(namespace: string, app: string): Promise<V1Pod[]> {
  const list = await api().core.listNamespacedPod({ namespace, labelSelector: `app=${app}` });
  return list.items.filter((p) => !p.metadata?.deletionTimestamp);
}

export const isRunning = (pod: V1Pod) => pod.status?.phase === 'Running';

export async function readNode(name: string): Promise<V1Node> {
  return api().core.readNode({ name });
}

/** Our stamps on a node, as raw annotations (empty when none). */
export function stampsOf(node: V1Node): Record<string, string> {
  const stampKeys = new Set<string>(Object.values(STAMP));
  return Object.fromEntries(
    Object.entries(node.metadata?.annotations ?? {}).filter(([key]) => stampKeys.has(key)),
  );
}

/** Events with this reason, in a namespace ('default' holds Node and SandboxPolicy Events). */
export async function eventsWithReason(
  reason: string,
  namespace: string,
  involvedName?: string,
): Promise<{ message: string; firstTimestamp?: string; involvedObject: { kind: string; name: string } }[]> {
  const selector = [`reason=${reason}`, ...(involvedName ? [`involvedObject.name=${involvedName}`] : [])];
  const result = await kubectl([
    'get',
    'events',
    '-n',
    namespace,
    '--field-selector',
    selector.join(','),
    '-o',
    'json',
  ]);
  if (result.code !== 0) throw new Error(result.stderr);
  return (
    JSON.parse(result.stdout) as {
      items: { message: string; firstTimestamp?: string; involvedObject: { kind: string; name: string } }[];
    }
  ).items;
}

/**
 * Events with this reason once there are at least `count` of them (15 s at most), for an exact count after: the
 * operator records Events in the background, after the change they tell of is visible.
 */
export async function eventsWithReasonAtLeast(
  count: number,
  reason: string,
  namespace: string,
  involvedName?: string,
): Promise<Awaited<ReturnType<typeof eventsWithReason>>> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const events = await eventsWithReason(reason, namespace, involvedName);
    if (events.length >= count || Date.now() > deadline) return events;
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Waits until the Deployment has `count` Running pods and returns them. */
export async function waitForRunning(namespace: string, app: string, count: number, timeoutMs = 90_000) {
  return eventually(
    `${count} Running pods of ${app}`,
    async () => {
      const pods = (await podsOf(namespace, app)).filter(isRunning);
      return pods.length === count ? pods : undefined;
    },
    { timeoutMs, intervalMs: 500 },
  );
}

/**
 * Starts the incident injector on a node (new pods there stay in ContainerCreating with FailedCreatePodSandBox
 * Events every 2 s, for at most 300 s) and registers its stop with cleanup. Extra arguments, e.g. --message, go
 * to `hack/cluster/incident start`.
 */
export async function startIncident(cleanup: Cleanup, node: string, extraArgs: string[] = []): Promise<void> {
  const started = await hack('incident', [
    'start',
    '--node',
    node,
    '--interval-seconds',
    '2',
    '--max-duration-seconds',
    '300',
    ...extraArgs,
  ]);
  if (started.code !== 0) throw new Error(`incident start on ${node} failed: ${started.stderr}`);
  cleanup.add(() => hack('incident', ['stop', '--node', node]));
}
