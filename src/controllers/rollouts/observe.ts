// PURE: the facts decideRollouts reads, from the cached rollouts of every kind and what this pass found on the nodes.
import type { NodeStamps, RolloutStamps } from '../../api/v1alpha1/index.js';
import {
  rolloutOf,
  workloadKey,
  type NodeView,
  type PodView,
  type WorkloadView,
} from '../../detection/index.js';
import { mayLandOn, type NodeLike, type Placement, type Toleration } from '../../policy/node-affinity.js';
import { isFrozenByDryRun } from '../../policy/actions.js';
import type { RolloutFacts } from '../../policy/rollouts.js';

/**
 * The nodes whose rollouts are held: IO pressure proven, or under the policy's remediation once this pass is done.
 * Not only those it cordoned: with cordon off, or the storm limits holding cordons back, a hold still happens, as
 * it removes no capacity (ADR 0019).
 */
export function saturatedNodes(
  observations: readonly { node: { name: string }; io?: { condition: { status: string } } | undefined }[],
  remediated: (node: string) => boolean,
): Set<string> {
  return new Set(
    observations
      .filter((o) => o.io?.condition.status === 'True' || remediated(o.node.name))
      .map((o) => o.node.name),
  );
}

/** A saturated node as a pod's placement reads it, fenced as it will be once this pass is done. */
export type SaturatedNode = NodeLike & { unschedulable: boolean };

/**
 * The saturated nodes as placements read them: labels, and the fence this pass leaves (our cordon and taint as the
 * decision's stamps say, anyone else's as the node has them).
 */
export function saturatedPlacements(
  observations: readonly { node: NodeView }[],
  saturated: ReadonlySet<string>,
  stampsAfter: (node: string) => NodeStamps | undefined,
): SaturatedNode[] {
  return observations
    .filter((o) => saturated.has(o.node.name))
    .map(({ node }) => {
      const stamps = stampsAfter(node.name);
      const taints =
        stamps?.taint && !node.taints.some((t) => t.key === stamps.taint?.key)
          ? [...node.taints, stamps.taint]
          : node.taints;
      return {
        name: node.name,
        labels: node.labels,
        taints,
        unschedulable: node.unschedulable || stamps?.cordoned === true,
      };
    });
}

/**
 * The tolerations the DaemonSet controller gives every pod it makes (besides the template's): a cordon, and the
 * node conditions' NoSchedule taints, never keep a DaemonSet's pod off a node.
 */
const DAEMONSET_TOLERATIONS: readonly Toleration[] = [
  'node.kubernetes.io/unschedulable',
  'node.kubernetes.io/not-ready',
  'node.kubernetes.io/unreachable',
  'node.kubernetes.io/disk-pressure',
  'node.kubernetes.io/memory-pressure',
  'node.kubernetes.io/pid-pressure',
  'node.kubernetes.io/network-unavailable',
].map((key) => ({ key, operator: 'Exists' }));

/**
 * The saturated nodes a rollout's new pods could land on: those it has pods stuck on; those it runs pods on that are
 * not fenced against its pods; for a DaemonSet, those its pods cover (it tolerates a cordon). A rollout that reaches
 * none is never held, nor counted against maxConcurrentRollouts.
 */
export function reachedNodes(
  w: Pick<WorkloadView, 'kind' | 'placement'>,
  key: string,
  feeds: ReadonlySet<string>,
  nodes: readonly SaturatedNode[],
  runningOn: (node: string) => ReadonlySet<string> | undefined,
): string[] {
  const placement: Placement =
    w.kind === 'DaemonSet'
      ? { ...w.placement, tolerations: [...(w.placement?.tolerations ?? []), ...DAEMONSET_TOLERATIONS] }
      : (w.placement ?? {});
  const reached = new Set(feeds);
  for (const node of nodes) {
    const runsThere = w.kind === 'DaemonSet' || runningOn(node.name)?.has(key) === true;
    if (runsThere && mayLandOn(placement, node)) reached.add(node.name);
  }
  return [...reached].sort();
}

export interface ObserveRolloutsInput {
  /** Rollouts of every kind in the policy's scope. */
  workloads: Iterable<WorkloadView>;
  /** Pods stuck from an IO cause, by the saturated node they are stuck on. */
  stuckOnSaturated: ReadonlyMap<string, readonly PodView[]>;
  /** The saturated nodes, fenced as this pass leaves them. */
  saturated: readonly SaturatedNode[];
  /** The rollouts running a pod on each saturated node (undefined: not read). */
  runningOn: (node: string) => ReadonlySet<string> | undefined;
  /** In a dry run, the holds it would have made (nothing was written to the workloads), by workloadKey. */
  simulated: ReadonlyMap<string, RolloutStamps>;
  dryRun: boolean;
  /** When the workload's current rollout started, as far as anyone can tell. */
  startedAt(w: WorkloadView): Date;
  now: Date;
}

/**
 * How long a StatefulSet or DaemonSet whose pods are all updated may hold a slot while they become ready: a
 * Deployment's default progressDeadlineSeconds, past which a Deployment holds none either.
 */
export const SETTLE_DEADLINE_MS = 600_000;

/** A hands-off-until further ahead than this is not ours (we write cooldownSeconds ahead, a day at most). */
export const MAX_HANDS_OFF_MS = 86_400_000;

/**
 * A rollout feeds a node when a pod of it, at its current revision where the kind tells one (StatefulSet,
 * DaemonSet, Rollout), is stuck there: an old-revision pod stuck on a saturated node is not the rollout's doing.
 */
export function observeRollouts(input: ObserveRolloutsInput): RolloutFacts[] {
  const stuck = new Map<string, { node: string; revision: string | undefined }[]>();
  for (const [node, pods] of input.stuckOnSaturated)
    for (const pod of pods) {
      const owner = rolloutOf(pod);
      if (!owner) continue;
      const list = stuck.get(owner.key) ?? [];
      list.push({ node, revision: owner.revision });
      stuck.set(owner.key, list);
    }
  const facts: RolloutFacts[] = [];
  for (const w of input.workloads) {
    const key = workloadKey(w);
    const feeds = new Set<string>();
    for (const s of stuck.get(key) ?? [])
      if (w.revision === undefined || s.revision === w.revision) feeds.add(s.node);
    const simulated = input.dryRun && !w.stamps ? input.simulated.get(key) : undefined;
    const startedAt = input.startedAt(w);
    const stalled = w.settling === true && input.now.getTime() - startedAt.getTime() > SETTLE_DEADLINE_MS;
    const f: RolloutFacts = {
      kind: w.kind,
      namespace: w.namespace,
      name: w.name,
      paused: w.paused || simulated !== undefined,
      rollingOut: w.rollingOut && !stalled,
      startedAt,
      feeds: [...feeds].sort(),
      reaches: reachedNodes(w, key, feeds, input.saturated, input.runningOn),
    };
    // A saturated node whose running pods could not be read: whether it runs there is not known (holds stand).
    if (w.kind !== 'DaemonSet' && input.saturated.some((n) => input.runningOn(n.name) === undefined))
      f.reachUnknown = true;
    if (w.stalled) f.stalled = true;
    const stamps = w.stamps ?? simulated;
    if (stamps) f.stamps = stamps;
    // Hands off for a day at most. We write it cooldownSeconds (a day at most) ahead: one further ahead was written by
    // someone else, and is not believed at all (capping it, looked at anew each pass, would never end).
    if (w.handsOffUntil && w.handsOffUntil.getTime() <= input.now.getTime() + MAX_HANDS_OFF_MS)
      f.handsOffUntil = w.handsOffUntil;
    if (isFrozenByDryRun(input.dryRun, w.stamps)) f.frozen = true;
    // A StatefulSet with nothing left to update: its hold would change nothing. (A DaemonSet's still switches it to
    // OnDelete, as before: the pod it would replace next is the node's.)
    if (w.settling && w.kind === 'StatefulSet') f.settling = true;
    facts.push(f);
  }
  return facts;
}

/**
 * A StatefulSet as the hold must see it: its stuck pods at the update revision are updated whatever its status says
 * yet (the controller counts a pod it made a moment later), so updatedReplicas is at least what the lowest of their
 * ordinals implies (it updates from the top down). Without it, a hold on a status one step behind would set the
 * partition above the pod that fed it, and that pod, recreated, would come back at the old revision.
 */
export function withStuckUpdates(w: WorkloadView, stuck: Iterable<PodView>): WorkloadView {
  if (w.kind !== 'StatefulSet' || w.revision === undefined) return w;
  const key = workloadKey(w);
  let lowest = Infinity;
  for (const pod of stuck) {
    const owner = rolloutOf(pod);
    const ordinal = Number(pod.name.slice(w.name.length + 1));
    if (owner?.key === key && owner.revision === w.revision && pod.name.startsWith(`${w.name}-`))
      if (Number.isInteger(ordinal) && ordinal >= 0) lowest = Math.min(lowest, ordinal);
  }
  const replicas = w.replicas ?? 1;
  if (!Number.isFinite(lowest) || lowest >= replicas) return w;
  return { ...w, updatedReplicas: Math.max(w.updatedReplicas ?? 0, replicas - lowest) };
}
