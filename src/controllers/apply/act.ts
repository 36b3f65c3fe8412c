// A pass's writes, from its plan: the node patches, then four strands side by side (the Node conditions, the
// rollouts, the budget reservation with the evictions and gate lifts it pays for, and the IO limits with their pods'
// stamps), none waiting on another's slowest write.
import type { SandboxPolicyStatus } from '../../api/v1alpha1/index.js';
import type { StatusWriter } from '../../ports/writes.js';
import { allSettledOrFirstError } from '../../runtime/limit.js';
import type { ActionResult } from '../../status/remediation-status.js';
import type { ActionLog } from '../action-log.js';
import type { Evictor } from '../remediation/evictor.js';
import type { IoLimiter } from '../iolimits/limiter.js';
import { unstampedHeldBack, type IoLimitStamps } from '../iolimits/pod-stamps.js';
import type { NodeConditions } from '../nodecondition/node-conditions.js';
import { patchNodes, type NodePatchDeps } from '../remediation/node-changes.js';
import type { Pacer } from '../pacing/pacer.js';
import type { StampChange } from '../../policy/io-limit-stamp.js';
import type { Done, Pass, Plan } from './pass.js';
import type { RolloutThrottler } from '../rollouts/throttler.js';
import type { MutationCache } from '../reporting/mutation-cache.js';

export interface ActDeps extends NodePatchDeps {
  writer: StatusWriter;
  mutations: MutationCache;
  actions: ActionLog;
  evictor: Evictor;
  throttler: RolloutThrottler;
  pacer: Pacer;
  conditions: NodeConditions;
  limiter: IoLimiter;
  stamps: IoLimitStamps;
}

type Report = (result: ActionResult) => void;

/**
 * Carries out the plan. The node patches come first: what follows acts on the nodes as patched, and leaves out those
 * whose patch failed. Then the strands run at once. The order that matters holds within a strand: the reservation is
 * written before anything it pays for is spent. Every strand settles before the pass goes on, even when one throws,
 * so no write of this pass is still in flight when the policy's next pass begins.
 */
export async function actOnPlan(deps: ActDeps, pass: Pass, plan: Plan): Promise<Done> {
  const { policy, memory, actuator, failures, now } = pass;
  const results = new Map<string, ActionResult[]>();
  const report: Report = (result) => {
    // Marked either way: a report of another policy (one made again under the name, dry or not) may tell it.
    const done: ActionResult = { ...result, simulated: actuator.dryRun };
    results.set(result.action.node, [...(results.get(result.action.node) ?? []), done]);
    deps.actions.record(policy.name, done, actuator.dryRun);
  };
  const markDirty = (node: string) => {
    memory.markDirty(node);
  };
  const nodes = plan.remediation
    ? await patchNodes(deps, new Map(plan.observations.map((o) => [o.node.name, o])), {
        policy: policy.name,
        uid: policy.uid,
        generation: policy.generation,
        now,
        actions: plan.actions,
        stampsAfter: plan.remediation.stampsAfter,
        actuator,
        failures,
        report,
        markDirty,
      })
    : { failedNodes: new Set<string>(), blocked: [] };
  const [, rollouts, spent] = await allSettledOrFirstError([
    deps.conditions.write({
      policy: policy.name,
      spec: pass.spec,
      now,
      actuator,
      failures,
      observations: plan.observations,
      facts: plan.facts,
      stampsAfter: plan.remediation?.stampsAfter,
      failedNodes: nodes.failedNodes,
      markDirty,
    }),
    deps.throttler.act(policy.name, plan.rollouts, actuator, failures, now),
    spendBudgets(deps, pass, plan, nodes.failedNodes, report),
    stampAndLimit(deps, pass, plan, markDirty),
  ]);
  return {
    results,
    blocked: [...nodes.blocked, ...spent.evicted.blocked],
    failedNodes: nodes.failedNodes,
    evictedAt: spent.evicted.evictedAt,
    reserved: spent.reserved || undefined,
    rollouts,
    pacing: spent.pacing,
  };
}

/**
 * Node by node, as the limiter writes them: the node's pods stamped, then its list, which is what the agent acts on. A
 * pod whose stamps could not be put on keeps its entry as read until the retry: no limit is asked for unstamped.
 */
async function stampAndLimit(deps: ActDeps, pass: Pass, plan: Plan, markDirty: (node: string) => void) {
  const { actuator, failures, now } = pass;
  const limits = plan.limits;
  const stamps = new Map<string, StampChange[]>();
  for (const change of plan.stamps) stamps.set(change.node, [...(stamps.get(change.node) ?? []), change]);
  const lists = new Map(limits?.nodes.map((n) => [n.node, n]));
  for (const node of new Set([...stamps.keys(), ...lists.keys()])) {
    const unstamped = await deps.stamps.act(stamps.get(node) ?? [], actuator, failures, pass.policy.name);
    const list = lists.get(node);
    if (limits && list)
      await deps.limiter.act(
        { ...limits, nodes: [unstampedHeldBack(list, unstamped)] },
        failures,
        now,
        markDirty,
      );
  }
}

/** The reservation, then the evictions (on nodes whose patch held) and the gate lifts it paid for, side by side. */
async function spendBudgets(
  deps: ActDeps,
  pass: Pass,
  plan: Plan,
  failedNodes: ReadonlySet<string>,
  report: Report,
) {
  const { actuator, failures, now } = pass;
  const reserved = await reserve(deps, pass, plan);
  const [evicted, pacing] = await allSettledOrFirstError([
    reserved !== false
      ? deps.evictor.evict(
          plan.evictions.evictions.filter((e) => !failedNodes.has(e.node)),
          actuator,
          failures,
          report,
        )
      : Promise.resolve({ blocked: [], evictedAt: [] }),
    deps.pacer.act(plan.pacing, reserved !== false, failures, now),
  ]);
  return { reserved, evicted, pacing };
}

/**
 * Spends the pass's eviction and paced-gate budget in the policy's status before any is used, so a crash right
 * after cannot reset a rate. Only these fields: a merge patch leaves the rest of the status as it is. False when the
 * write failed (evict nothing, lift no paced gate); undefined when nothing was to be spent.
 */
async function reserve(
  deps: ActDeps,
  pass: Pass,
  plan: Plan,
): Promise<Partial<SandboxPolicyStatus> | false | undefined> {
  const { policy, now } = pass;
  const recentEvictions = deps.evictor.reservation(policy.status, plan.evictions.evictions.length, now);
  const recentGateReleases = deps.pacer.reservation(plan.pacing, now);
  if (!recentEvictions && !recentGateReleases) return undefined;
  const reservation: Partial<SandboxPolicyStatus> = {
    ...(recentEvictions ? { recentEvictions } : {}),
    ...(recentGateReleases ? { recentGateReleases } : {}),
  };
  try {
    const version = await deps.writer.patchPolicyStatus(policy.name, reservation);
    deps.mutations.wrotePolicyStatus(policy, version, policy.status, reservation);
    return reservation;
  } catch (err) {
    pass.failures.add(`budget reservation of sandboxpolicy/${policy.name}`, err);
    return false;
  }
}
