import type {
  IoAttribution,
  IoConsumer,
  LabelSelector,
  SandboxPolicySpec,
} from '../../api/v1alpha1/index.js';
import { consumerId, matchesSelector, NO_MIGRATE_LABEL } from '../../api/v1alpha1/index.js';
import type { MeasuredPod, PodView } from '../../detection/index.js';
import { describeError } from '../../ports/errors.js';
import type { Logger } from '../../observability/log.js';
import { decideIoCause, type IoCauseDecision } from '../../policy/io-cause.js';
import type { WorkloadReader } from '../../ports/cluster.js';
import { CULPRIT_SHARE_PERCENT } from '../../signals/io-shares.js';
import type { PolicyMemory } from '../policy-memory.js';

/** The reading the attribution came with: the attributed device's busy time, judged against the policy. */
export interface AttributedReading {
  attribution: IoAttribution | undefined;
  busyPercent: number | undefined;
}

/**
 * Names the pods of a node's attribution (the agent knows their cgroups' UIDs, Prometheus their names), decides the
 * cause, and, with migrateWorkloads.by measuredIo, the culprits that may move (podSelector, when given, restricts
 * them): only those that have been culprits for sustainSeconds, as the pressure itself must be (one look is a
 * second's burst; a checkpoint is no culprit). The running pods are a live read (the cache keeps only Pending ones),
 * made again when the consumers named change, and always before a culprit may move (its labels, no-migrate
 * included, must be as they are now); a pod it cannot find keeps its UID. `dueAt` is when a culprit becomes one long
 * enough.
 */
export async function resolveAttribution(
  deps: { workloads?: WorkloadReader | undefined; logger: Logger },
  request: { policy: string; spec: SandboxPolicySpec; now: Date },
  node: string,
  reading: AttributedReading,
  memory: PolicyMemory,
): Promise<{ attribution?: IoAttribution; cause: IoCauseDecision; culprits: MeasuredPod[]; dueAt?: number }> {
  const { spec, now } = request;
  const migrate = spec.remediation.migrateWorkloads;
  const state = memory.state(node);
  const context = {
    minSharePercent: migrate?.minSharePercent ?? CULPRIT_SHARE_PERCENT,
    busyPercent: reading.busyPercent,
    busyThreshold: spec.ioPressure.thresholds.diskBusyPercent,
    held: new Set(state.culprits?.keys() ?? []),
    // Limited first only where a limit can be set: the policy not paused, the device known as MAJ:MIN (the agent's).
    limitsIo:
      spec.remediation.limitIo !== undefined &&
      !spec.safety.paused &&
      reading.attribution?.deviceNumber !== undefined,
  };
  const { attribution } = reading;
  if (!attribution) {
    delete state.culprits;
    return { cause: decideIoCause(undefined, context), culprits: [] };
  }
  const decide = (pods: ReadonlyMap<string, PodView>) => {
    const consumers = attribution.consumers.map((c): IoConsumer => {
      const pod = c.kind === 'Pod' ? pods.get(consumerId(c)) : undefined;
      return pod ? { ...c, podUid: pod.uid, namespace: pod.namespace, name: pod.name } : c;
    });
    const resolved = { ...attribution, consumers };
    const cause = decideIoCause(resolved, context);
    const stay = migrate?.by === 'measuredIo' ? staying(cause.culprits, pods, node, migrate.podSelector) : '';
    return { resolved, cause: stay ? { ...cause, message: `${cause.message} ${stay}` } : cause };
  };
  let pods = await runningPods(deps, request.policy, node, attribution, memory, false);
  let { resolved, cause } = decide(pods);
  const since = new Map(
    cause.culprits.map((c) => [consumerId(c), state.culprits?.get(consumerId(c)) ?? now.getTime()]),
  );
  state.culprits = since;
  const sustainMs = spec.ioPressure.sustainSeconds * 1000;
  const ripe = (c: IoConsumer) => now.getTime() - (since.get(consumerId(c)) ?? Infinity) >= sustainMs;
  const waiting = [...since.values()].filter((t) => now.getTime() - t < sustainMs);
  const dueAt = waiting.length > 0 ? Math.min(...waiting) + sustainMs : undefined;
  if (migrate?.by !== 'measuredIo' || !cause.culprits.some(ripe))
    return { attribution: resolved, cause, culprits: [], ...(dueAt !== undefined ? { dueAt } : {}) };
  // A culprit may move: read the node's pods again, so that what decides it (its labels) is as it is now.
  pods = await runningPods(deps, request.policy, node, attribution, memory, true);
  ({ resolved, cause } = decide(pods));
  const selector = migrate.podSelector;
  const culprits = cause.culprits.filter(ripe).flatMap((c) => {
    const pod = pods.get(consumerId(c));
    if (!pod || (selector && !matchesSelector(selector, pod.labels))) return [];
    return [{ ...pod, ...(c.sharePercent !== undefined ? { sharePercent: c.sharePercent } : {}) }];
  });
  return { attribution: resolved, cause, culprits, ...(dueAt !== undefined ? { dueAt } : {}) };
}

/**
 * The culprits no migration can take, and why, in words for status (empty when every one may move): a culprit outside
 * migrateWorkloads.podSelector, or one no running pod of the node answers to. The guards (a DaemonSet's pod, one
 * labelled no-migrate, local storage) say their own in status.blocked when the move is tried.
 */
function staying(
  culprits: readonly IoConsumer[],
  pods: ReadonlyMap<string, PodView>,
  node: string,
  selector: LabelSelector | undefined,
): string {
  if (pods.size === 0) return ''; // not read (a failed read is logged): nothing to say of them
  const reasons = culprits.flatMap((c) => {
    const pod = pods.get(consumerId(c));
    if (!pod) return [`${consumerId(c)} (no running pod of ${node} answers to it)`];
    if (selector && !matchesSelector(selector, pod.labels))
      return [`${pod.namespace}/${pod.name} (outside migrateWorkloads.podSelector)`];
    return [];
  });
  return reasons.length > 0 ? `Not moved: ${reasons.join(', ')}.` : '';
}

/** Whether a pod is labelled never to be migrated. */
export const isNoMigrate = (pod: Pick<PodView, 'labels'>): boolean => pod.labels[NO_MIGRATE_LABEL] === 'true';

/** The node's running pods by UID and by namespace/name, read once per set of consumers named (or `fresh`). */
async function runningPods(
  deps: { workloads?: WorkloadReader | undefined; logger: Logger },
  policy: string,
  node: string,
  attribution: IoAttribution,
  memory: PolicyMemory,
  fresh: boolean,
): Promise<ReadonlyMap<string, PodView>> {
  const wanted = attribution.consumers
    .filter((c) => c.kind === 'Pod')
    .map(consumerId)
    .sort();
  if (wanted.length === 0 || !deps.workloads) return new Map();
  const key = wanted.join('\n');
  const state = memory.state(node);
  if (!fresh && state.pods?.key === key) return state.pods.byId;
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
