// The shape of one pass of a policy (what it saw, what it decided, what it did), and the pure steps that turn those
// into what it reports and when it looks again.
import type { Actuator } from '../actuation/actuator.js';
import type { SandboxPolicySpec, SandboxPolicyStatus } from '../api/v1alpha1/index.js';
import { isEviction, isStampDrop, type Action, type BlockedAction, type Guard } from '../policy/actions.js';
import type { NodeFacts, RemediationDecision } from '../policy/node-facts.js';
import { whyNotTriggered } from '../policy/remediation.js';
import type { PolicyObject } from '../ports/cluster.js';
import type { ReconcileResult } from '../runtime/controller.js';
import type { IoSource } from '../signals/types.js';
import { validPolicyStatus } from '../status/policy-status.js';
import type { ActionResult } from '../status/remediation-status.js';
import type { EvictionPlan } from './evictor.js';
import type { Failures } from './failures.js';
import { unschedulableAfter } from './node-changes.js';
import type { NodeObservation } from './observe-nodes.js';
import type { PacingOutcome, PacingPlan } from './pacer.js';
import type { PolicyMemory } from './policy-memory.js';
import type { ReportRequest } from './reporter.js';
import type { RolloutOutcome, RolloutPlan } from './rollout-throttler.js';

export const SETTLE_RETRY_MS = 500;
const FOLLOW_UP_MS = 5_000;

/** How much one reconcile looked at: the measure that a pod change costs its node, not the policy's. */
export interface PassStats {
  full: boolean;
  observed: number;
  owned: number;
  /** SandboxHealths written in the pass, and those left for the next one (REPORTS_PER_PASS). */
  reported?: number;
  deferred?: number;
}

/** What every step of one pass of a policy shares. */
export interface Pass {
  policy: PolicyObject;
  spec: SandboxPolicySpec;
  memory: PolicyMemory;
  dryRun: boolean;
  actuator: Actuator;
  now: Date;
  failures: Failures;
  owned: string[];
  overlaps: { node: string; ownedBy: string }[];
}

/** What the pass saw. */
export interface Seen {
  full: boolean;
  observed: ReadonlySet<string>;
  unsettled: number;
  source: IoSource | undefined;
}

/** What the pass decided, whole, before its first write. */
export interface Plan {
  observations: NodeObservation[];
  facts: ReadonlyMap<string, NodeFacts>;
  /** Absent while a node is settling: it could hide a cordon from the limits. */
  remediation: RemediationDecision | undefined;
  /** The node actions, and the evictions within the pass's share (the evictor's). */
  actions: Action[];
  evictions: EvictionPlan;
  rollouts: RolloutPlan | undefined;
  pacing: PacingPlan;
}

/** What the pass did. */
export interface Done {
  results: Map<string, ActionResult[]>;
  /** What the apiserver held back while acting (a refused change, a disruption budget). */
  blocked: BlockedAction[];
  /** Nodes whose patch failed: they keep the stamps they had. */
  failedNodes: ReadonlySet<string>;
  evictedAt: number[];
  /** The budget reservation written before evicting and lifting gates, if one was. */
  reserved: Partial<SandboxPolicyStatus> | undefined;
  rollouts: RolloutOutcome;
  pacing: PacingOutcome;
}

/**
 * What each node's report says, from the plan and what was done: the stamps it carries (a node whose patch failed
 * keeps the ones it had: claim nothing that was not written), its results and blocks, and whether it is unschedulable;
 * and the nodes to look at again (what we changed comes back through the watch, behind the fence).
 */
export function reportRequests(
  pass: Pass,
  seen: Seen,
  plan: Plan,
  done: Done,
): { requests: ReportRequest[]; touched: string[]; degraded: number; remediating: number } {
  const { spec, dryRun, now } = pass;
  const blockedByNode = new Map<string, BlockedAction[]>();
  for (const b of [...(plan.remediation?.blocked ?? []), ...done.blocked])
    blockedByNode.set(b.node, [...(blockedByNode.get(b.node) ?? []), b]);
  const heldBack = new Set(done.blocked.map((b) => b.node));
  const requests: ReportRequest[] = [];
  const touched: string[] = [];
  let degraded = 0;
  let remediating = 0;
  for (const observation of plan.observations) {
    const name = observation.node.name;
    const facts = plan.facts.get(name);
    if (observation.findings.degraded) degraded++;
    const stamps =
      plan.remediation && !done.failedNodes.has(name)
        ? plan.remediation.stampsAfter.get(name)
        : facts?.stamps;
    if (stamps) remediating++;
    const results = done.results.get(name) ?? [];
    if (results.length > 0 || heldBack.has(name)) touched.push(name);
    requests.push({
      observation,
      observed: seen.observed.has(name),
      remediation: {
        results,
        // With no decision this pass (a node still settling), what was blocked stays as it was.
        blocked: plan.remediation
          ? (blockedByNode.get(name) ?? [])
          : (observation.previous?.blocked ?? []).map((b) => ({ ...b, node: name, guard: b.guard as Guard })),
        stampsAfter: stamps,
        unschedulable: unschedulableAfter(observation.node, results),
        notTriggered: facts && whyNotTriggered(facts, observation.findings.degraded, spec),
        throttling: done.rollouts.throttling.get(name) ?? [],
        simulated: dryRun && stamps !== undefined && !observation.node.stamps,
        dryRun,
        now,
      },
    });
  }
  return { requests, touched, degraded, remediating };
}

/** The policy's status after the pass. */
export function policyStatusOf(
  pass: Pass,
  plan: Plan,
  done: Done,
  counts: { degraded: number; remediating: number; blockedNew: number; recentEvictions: string[] },
): SandboxPolicyStatus {
  const { policy, spec, dryRun, now } = pass;
  const previous = policy.status;
  const succeeded = [...done.results.values()].flat().filter((r) => r.outcome === 'Succeeded');
  return validPolicyStatus(
    { generation: policy.generation, previous, now },
    {
      matchedNodes: pass.owned.length,
      degradedNodes: counts.degraded,
      remediatingNodes: counts.remediating,
      overlappingNodes: pass.overlaps,
      paused: spec.safety.paused,
      dryRun,
      storm: plan.remediation?.storm,
      actionCount: (previous?.actionCount ?? 0) + succeeded.filter((r) => !isStampDrop(r.action)).length,
      blockedActionCount: (previous?.blockedActionCount ?? 0) + counts.blockedNew,
      recentEvictions: counts.recentEvictions,
      throttledRollouts: done.rollouts.listed,
      gatedPods: done.pacing.gated,
      recentGateReleases: done.pacing.recentReleases,
    },
  );
}

/** When to look again: the first moment something can change with time alone, or at once for work left over. */
export function nextWait(pass: Pass, seen: Seen, plan: Plan, done: Done, deferred: number): ReconcileResult {
  const at = pass.now.getTime();
  const waits = [pass.memory.fullPassAt - at, ...plan.observations.map((o) => o.dueAt - at)];
  // Follow-ups: evictions once the cordon is seen, and retries of what the API held back (429) or a guard holds until
  // a known time (cooldown, the eviction window).
  if (plan.actions.length > 0 || done.blocked.length > 0) waits.push(FOLLOW_UP_MS);
  if (done.pacing.nextAt) waits.push(done.pacing.nextAt.getTime() - at + 1);
  for (const b of plan.remediation?.blocked ?? []) if (b.liftsAt) waits.push(b.liftsAt.getTime() - at + 1);
  if (plan.remediation?.blocked.some((b) => b.guard === 'CacheNotSynced')) waits.push(FOLLOW_UP_MS);
  // What was left for the next pass, at once: routine reports, and evictions while this pass got some through (a pass
  // whose evictions a disruption budget all refused waits for the follow-up, not a busy loop).
  const evicted = [...done.results.values()].some((r) =>
    r.some((x) => isEviction(x.action) && x.outcome === 'Succeeded'),
  );
  if (deferred > 0 || (plan.evictions.left > 0 && evicted)) waits.push(0);
  const wait = Math.max(0, Math.min(...waits));
  return { requeueAfterMs: seen.unsettled > 0 ? Math.min(wait, SETTLE_RETRY_MS) : wait };
}
