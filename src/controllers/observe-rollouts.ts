// PURE: the facts decideRollouts reads, from the cached Deployments and what this pass found on the nodes.
import type { RolloutStamps } from '../api/v1alpha1/index.js';
import { deploymentOf, type DeploymentView, type PodView } from '../detection/index.js';
import { isFrozenByDryRun } from '../policy/actions.js';
import type { DeploymentFacts } from '../policy/rollouts.js';

export interface ObserveRolloutsInput {
  /** Deployments in the policy's scope. */
  deployments: Iterable<DeploymentView>;
  /** Pods stuck from an IO cause, by the saturated node they are stuck on. */
  stuckOnSaturated: ReadonlyMap<string, readonly PodView[]>;
  /** In a dry run, the pauses it would have made (nothing was written to the Deployments). */
  simulated: ReadonlyMap<string, RolloutStamps>;
  dryRun: boolean;
  /** When the Deployment's current rollout started, as far as anyone can tell. */
  startedAt(d: DeploymentView): Date;
}

export function observeRollouts(input: ObserveRolloutsInput): DeploymentFacts[] {
  const feeds = new Map<string, Set<string>>();
  for (const [node, pods] of input.stuckOnSaturated) {
    for (const pod of pods) {
      const owner = deploymentOf(pod);
      if (!owner) continue;
      const set = feeds.get(owner) ?? new Set<string>();
      set.add(node);
      feeds.set(owner, set);
    }
  }
  const facts: DeploymentFacts[] = [];
  for (const d of input.deployments) {
    const key = `${d.namespace}/${d.name}`;
    const simulated = input.dryRun && !d.stamps ? input.simulated.get(key) : undefined;
    const f: DeploymentFacts = {
      namespace: d.namespace,
      name: d.name,
      paused: d.paused || simulated !== undefined,
      rollingOut: d.rollingOut,
      startedAt: input.startedAt(d),
      feeds: [...(feeds.get(key) ?? [])].sort(),
    };
    const stamps = d.stamps ?? simulated;
    if (stamps) f.stamps = stamps;
    if (d.handsOffUntil) f.handsOffUntil = d.handsOffUntil;
    if (isFrozenByDryRun(input.dryRun, d.stamps)) f.frozen = true;
    facts.push(f);
  }
  return facts;
}
