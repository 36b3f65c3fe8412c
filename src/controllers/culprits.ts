import type { IoAttribution, IoConsumer, SandboxPolicySpec } from '../api/v1alpha1/index.js';
import { matchesSelector, NO_MIGRATE_LABEL } from '../api/v1alpha1/index.js';
import type { PodView } from '../detection/index.js';
import { describeError } from '../kube/errors.js';
import type { Logger } from '../observability/log.js';
import { decideIoCause, type IoCauseDecision } from '../policy/io-cause.js';
import type { WorkloadReader } from '../ports/cluster.js';
import type { PolicyMemory } from './policy-memory.js';

/** A running pod as a migration candidate: with its measured share of the device's IO. */
export type MeasuredPod = PodView & { sharePercent?: number };

const DEFAULT_MIN_SHARE_PERCENT = 25;

const idOf = (c: IoConsumer) => c.podUid ?? `${c.namespace ?? ''}/${c.name ?? ''}`;

/**
 * Names the pods of a node's attribution (the agent knows their cgroups' UIDs, Prometheus their names), decides the
 * cause, and, with migrateWorkloads.by measuredIo, the culprits that may move (podSelector, when given, restricts
 * them). The running pods are a live read (the cache keeps only Pending ones), made again only when the consumers
 * named change; a pod it cannot find keeps its UID.
 */
export async function resolveAttribution(
  deps: { workloads?: WorkloadReader | undefined; logger: Logger },
  request: { policy: string; spec: SandboxPolicySpec },
  node: string,
  attribution: IoAttribution | undefined,
  memory: PolicyMemory,
): Promise<{ attribution?: IoAttribution; cause: IoCauseDecision; culprits: MeasuredPod[] }> {
  const migrate = request.spec.remediation.migrateWorkloads;
  const minShare = migrate?.minSharePercent ?? DEFAULT_MIN_SHARE_PERCENT;
  if (!attribution) return { cause: decideIoCause(undefined, minShare), culprits: [] };
  const pods = await runningPods(deps, request.policy, node, attribution, memory);
  const consumers = attribution.consumers.map((c): IoConsumer => {
    const pod = c.kind === 'Pod' ? pods.get(idOf(c)) : undefined;
    return pod ? { ...c, podUid: pod.uid, namespace: pod.namespace, name: pod.name } : c;
  });
  const resolved = { ...attribution, consumers };
  const cause = decideIoCause(resolved, minShare);
  const selector = migrate?.podSelector;
  const culprits =
    migrate?.by === 'measuredIo'
      ? cause.culprits.flatMap((c) => {
          const pod = pods.get(idOf(c));
          if (!pod || (selector && !matchesSelector(selector, pod.labels))) return [];
          return [{ ...pod, ...(c.sharePercent !== undefined ? { sharePercent: c.sharePercent } : {}) }];
        })
      : [];
  return { attribution: resolved, cause, culprits };
}

/** Whether a pod is labelled never to be migrated. */
export const isNoMigrate = (pod: Pick<PodView, 'labels'>): boolean => pod.labels[NO_MIGRATE_LABEL] === 'true';

/** The node's running pods by UID and by namespace/name, read once per set of consumers named. */
async function runningPods(
  deps: { workloads?: WorkloadReader | undefined; logger: Logger },
  policy: string,
  node: string,
  attribution: IoAttribution,
  memory: PolicyMemory,
): Promise<ReadonlyMap<string, PodView>> {
  const wanted = attribution.consumers
    .filter((c) => c.kind === 'Pod')
    .map(idOf)
    .sort();
  if (wanted.length === 0 || !deps.workloads) return new Map();
  const key = wanted.join('\n');
  const state = memory.state(node);
  if (state.pods?.key === key) return state.pods.byId;
  const byId = new Map<string, PodView>();
  try {
    for (const pod of await deps.workloads.runningPodsOn(node, {})) {
      byId.set(pod.uid, pod);
      byId.set(`${pod.namespace}/${pod.name}`, pod);
    }
  } catch (err) {
    deps.logger.warn('Failed to list the pods of a node to name its IO consumers', {
      policy,
      node,
      error: describeError(err),
    });
    return byId; // not remembered: asked again on the next look
  }
  state.pods = { key, byId };
  return byId;
}
