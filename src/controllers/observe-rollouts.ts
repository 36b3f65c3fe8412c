// PURE: the facts decideRollouts reads, from the cached rollouts of every kind and what this pass found on the nodes.
import type { RolloutStamps } from '../api/v1alpha1/index.js';
import { rolloutOf, workloadKey, type PodView, type WorkloadView } from '../detection/index.js';
import { isFrozenByDryRun } from '../policy/actions.js';
import type { RolloutFacts } from '../policy/rollouts.js';

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

export interface ObserveRolloutsInput {
  /** Rollouts of every kind in the policy's scope. */
  workloads: Iterable<WorkloadView>;
  /** Pods stuck from an IO cause, by the saturated node they are stuck on. */
  stuckOnSaturated: ReadonlyMap<string, readonly PodView[]>;
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
    };
    const stamps = w.stamps ?? simulated;
    if (stamps) f.stamps = stamps;
    if (w.handsOffUntil) f.handsOffUntil = w.handsOffUntil;
    if (isFrozenByDryRun(input.dryRun, w.stamps)) f.frozen = true;
    facts.push(f);
  }
  return facts;
}
