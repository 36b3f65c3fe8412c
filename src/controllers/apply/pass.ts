// The shape of one pass of a policy (what it saw, what it decided, what it did), and the pure steps that turn those
// into what it reports and when it looks again.
import type { IoLimitPlan } from '../iolimits/limiter.js';
import type { StampChange } from '../../policy/io-limit-stamp.js';
import type { Actuator } from '../../actuation/actuator.js';
import {
  sameTaint,
  type NodeStamps,
  type SandboxPolicySpec,
  type SandboxPolicyStatus,
} from '../../api/v1alpha1/index.js';
import {
  evictedPod,
  isStampDrop,
  type Action,
  type BlockedAction,
  type Guard,
} from '../../policy/actions.js';
import type { NodeFacts, RemediationDecision } from '../../policy/node-facts.js';
import { whyNotTriggered } from '../../policy/remediation.js';
import type { PolicyObject } from '../../ports/cluster.js';
import type { ReconcileResult } from '../../runtime/controller.js';
import { SETTLE_RETRY_MS } from '../../runtime/expectations.js';
import type { IoSource } from '../../signals/types.js';
import { validPolicyStatus } from '../../status/policy-status.js';
import { blockKey, type ActionResult } from '../../status/remediation-status.js';
import type { EvictionPlan } from '../remediation/evictor.js';
import type { Failures } from '../failures.js';
import { unschedulableAfter } from '../remediation/node-changes.js';
import type { PacingOutcome, PacingPlan } from '../pacing/pacer.js';
import type { NodeObservation, PolicyMemory, RemediationParts } from '../policy-memory.js';
import type { RolloutOutcome, RolloutPlan } from '../rollouts/throttler.js';

const FOLLOW_UP_MS = 5_000;

/** What the manager hears of each pass: blocked actions, the policy's status, and how much it looked at. */
export interface PassHooks {
  /** Called once for each newly blocked action, with the guard that holds it. */
  onBlocked?(guard: string): void;
  /** The policy status computed in a pass (for gauges). */
  onPolicyStatus?(policy: string, status: SandboxPolicyStatus): void;
  /** How many nodes each pass looked at. */
  onPass?(stats: PassStats): void;
  /** The policy is gone: what was told of it (its gauges) goes too. */
  onPolicyGone?(policy: string): void;
}

/** How much one reconcile looked at: the measure that a pod change costs its node, not the policy's. */
export interface PassStats {
  full: boolean;
  observed: number;
  owned: number;
  /** SandboxHealths the pass asked for, and those waiting for their turn (the Reporter's). */
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
  owned: readonly string[];
  overlaps: { node: string; ownedBy: string }[];
}

/** What the pass saw. */
export interface Seen {
  full: boolean;
  observed: ReadonlySet<string>;
  /** Nodes not to decide on yet: our Node write not back, or a look a SandboxHealth write of ours superseded. */
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
  /** The IO limits of the nodes that have or want some (limitIo). */
  limits: IoLimitPlan | undefined;
  /** The stamps of the pods those limits are about. */
  stamps: StampChange[];
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

/** What a carried-out decision leaves for each node's reports, and the policy's counts. */
export interface Remediation {
  /** By node: the remediation its reports say now, and what was done on it. */
  nodes: Map<string, { parts: RemediationParts; results: ActionResult[] }>;
  /** The nodes to look at again: what we changed comes back through the watch, behind the fence. */
  touched: string[];
  degraded: number;
  remediating: number;
}

/**
 * What the reports of the nodes a decision changes nothing on say at once, before it is carried out: its blocks, and
 * why nothing started. Nodes with actions keep what they had until the actions are back (claim nothing not written);
 * with no decision (a node still settling), every node does.
 */
export function remediationBeforeActing(pass: Pass, seen: Seen, plan: Plan): Map<string, RemediationParts> {
  const parts = new Map<string, RemediationParts>();
  if (!plan.remediation) return parts;
  const acted = new Set(plan.actions.map((a) => a.node));
  const blocked = blockedByNode(plan.remediation.blocked);
  for (const observation of plan.observations) {
    const name = observation.node.name;
    if (acted.has(name)) continue;
    const old = pass.memory.nodes.get(name)?.remediation;
    const stamps = plan.remediation.stampsAfter.get(name);
    if (unchanged(old, seen, name, { blocked: blocked.get(name), stamps })) continue;
    parts.set(
      name,
      partsOf(pass, plan, observation, {
        blocked: blocked.get(name) ?? [],
        stamps,
        unschedulable: observation.node.unschedulable,
        throttling: old?.throttling ?? [],
      }),
    );
  }
  return parts;
}

/**
 * What each node's reports say after the plan was carried out: the stamps it carries (a node whose patch failed keeps
 * the ones it had: claim nothing that was not written), its results and blocks, whether it is unschedulable, and the
 * rollouts held for it. With no decision (a node still settling), what the node's reports said stays, but for the
 * rollouts.
 */
export function remediationOf(pass: Pass, seen: Seen, plan: Plan, done: Done): Remediation {
  const blocked = blockedByNode([...(plan.remediation?.blocked ?? []), ...done.blocked]);
  const heldBack = new Set(done.blocked.map((b) => b.node));
  const remediation: Remediation = { nodes: new Map(), touched: [], degraded: 0, remediating: 0 };
  for (const observation of plan.observations) {
    const name = observation.node.name;
    const old = pass.memory.nodes.get(name)?.remediation;
    if (observation.findings.degraded) remediation.degraded++;
    const results = done.results.get(name) ?? [];
    if (results.length > 0 || heldBack.has(name)) remediation.touched.push(name);
    const throttling = done.rollouts.throttling.get(name) ?? [];
    let parts: RemediationParts;
    const stamps =
      plan.remediation && !done.failedNodes.has(name)
        ? plan.remediation.stampsAfter.get(name)
        : plan.facts.get(name)?.stamps;
    if (
      old &&
      results.length === 0 &&
      throttling.length === 0 &&
      old.throttling.length === 0 &&
      !done.failedNodes.has(name) &&
      plan.remediation &&
      unchanged(old, seen, name, { blocked: blocked.get(name), stamps })
    ) {
      // A quiet node nothing was decided or done on, not looked at: what its reports say stands.
      if (old.stampsAfter) remediation.remediating++;
      continue;
    }
    if (!plan.remediation && old) parts = { ...old, throttling };
    else {
      parts = partsOf(pass, plan, observation, {
        blocked: plan.remediation
          ? (blocked.get(name) ?? [])
          : (observation.previous?.blocked ?? []).map((b) => ({ ...b, node: name, guard: b.guard as Guard })),
        stamps,
        unschedulable: unschedulableAfter(observation.node, results),
        throttling,
      });
    }
    if (parts.stampsAfter) remediation.remediating++;
    remediation.nodes.set(name, { results, parts });
  }
  return remediation;
}

/**
 * Sets what a node's reports say of its remediation; returns whether it changed. Each block is told once (`blocked`),
 * when it is first decided (the policy's blockedActionCount, the metric), against the blocks the node's status held
 * when this process first looked: a restart counts no standing block again.
 */
export function setRemediation(
  memory: PolicyMemory,
  node: string,
  parts: RemediationParts,
  blocked: (guard: string) => void,
): boolean {
  const state = memory.state(node);
  const counted = state.countedBlocks ?? new Set((state.observation?.previous?.blocked ?? []).map(blockKey));
  for (const b of parts.blocked) if (!counted.has(blockKey(b))) blocked(b.guard);
  state.countedBlocks = new Set(parts.blocked.map(blockKey));
  const changed = !sameRemediation(state.remediation, parts);
  state.remediation = parts;
  // A dry run's facts read the stamps it left (simulatedStamps): made again on the new ones. Dropped here, where the
  // parts change, rather than compared by identity in the memo: kept by identity, they were made again 8 % more often
  // in the reconcile-cost bench (one pod's change at 1,000 nodes).
  if (changed) delete state.facts;
  return changed;
}

/** Whether two remediations say the same in a report; field by field, as a pass compares every node's. */
function sameRemediation(a: RemediationParts | undefined, b: RemediationParts): boolean {
  if (!a) return false;
  const sameList = <T>(x: readonly T[], y: readonly T[], same: (p: T, q: T) => boolean) =>
    x.length === y.length && x.every((item, i) => same(item, y[i] as T));
  return (
    a.unschedulable === b.unschedulable &&
    a.simulated === b.simulated &&
    a.dryRun === b.dryRun &&
    a.notTriggered?.reason === b.notTriggered?.reason &&
    a.notTriggered?.message === b.notTriggered?.message &&
    sameStamps(a.stampsAfter, b.stampsAfter) &&
    sameList(a.throttling, b.throttling, (x, y) => x === y) &&
    sameList(
      a.blocked,
      b.blocked,
      (x, y) =>
        blockKey(x) === blockKey(y) &&
        x.message === y.message &&
        x.liftsAt?.getTime() === y.liftsAt?.getTime(),
    )
  );
}

function sameStamps(a: NodeStamps | undefined, b: NodeStamps | undefined): boolean {
  if (!a || !b) return a === b;
  return (
    a.policy === b.policy &&
    a.since.getTime() === b.since.getTime() &&
    a.reason === b.reason &&
    a.cordoned === b.cordoned &&
    (a.taint && b.taint ? sameTaint(a.taint, b.taint) : a.taint === b.taint) &&
    (a.taintsBefore ?? []).join('\n') === (b.taintsBefore ?? []).join('\n')
  );
}

/**
 * Whether what a node's reports say of its remediation stands as it is, without working it out again: the pass did not
 * look at the node, and holds no block on it where none stood, with the stamps as they were.
 */
function unchanged(
  old: RemediationParts | undefined,
  seen: Seen,
  node: string,
  now: { blocked: readonly BlockedAction[] | undefined; stamps: NodeStamps | undefined },
): boolean {
  return (
    old !== undefined &&
    !seen.observed.has(node) &&
    now.blocked === undefined &&
    old.blocked.length === 0 &&
    sameStamps(old.stampsAfter, now.stamps)
  );
}

function blockedByNode(blocks: readonly BlockedAction[]): Map<string, BlockedAction[]> {
  const byNode = new Map<string, BlockedAction[]>();
  for (const b of blocks) byNode.set(b.node, [...(byNode.get(b.node) ?? []), b]);
  return byNode;
}

function partsOf(
  pass: Pass,
  plan: Plan,
  observation: NodeObservation,
  now: {
    blocked: readonly BlockedAction[];
    stamps: NodeStamps | undefined;
    unschedulable: boolean;
    throttling: readonly string[];
  },
): RemediationParts {
  const { spec, dryRun } = pass;
  const facts = plan.facts.get(observation.node.name);
  return {
    blocked: now.blocked,
    stampsAfter: now.stamps,
    unschedulable: now.unschedulable,
    notTriggered: facts && whyNotTriggered(facts, observation.findings.degraded, spec),
    throttling: now.throttling,
    simulated: dryRun && now.stamps !== undefined && !observation.node.stamps,
    dryRun,
  };
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

/** When to look again: the first moment something can change with time alone, or soon while a node settles. */
export function nextWait(pass: Pass, seen: Seen, plan: Plan | undefined): ReconcileResult {
  const at = pass.now.getTime();
  const waits = [pass.memory.fullPassAt - at];
  // A node due but not looked at was still settling: SETTLE_RETRY_MS looks again, not a pass at once each time.
  for (const [node, { observation }] of pass.memory.nodes)
    if (observation && (observation.dueAt > at || seen.observed.has(node)))
      waits.push(observation.dueAt - at);
  // Retries of what a guard holds until a known time (cooldown, the eviction window).
  for (const b of plan?.remediation?.blocked ?? []) if (b.liftsAt) waits.push(b.liftsAt.getTime() - at + 1);
  if (plan?.remediation?.blocked.some((b) => b.guard === 'CacheNotSynced')) waits.push(FOLLOW_UP_MS);
  const wait = Math.max(0, Math.min(...waits));
  return { requeueAfterMs: seen.unsettled > 0 ? Math.min(wait, SETTLE_RETRY_MS) : wait };
}

/**
 * When to look again once a decision was carried out: at once for work left over (evictions while some got through,
 * a pass held back meanwhile), after FOLLOW_UP_MS to retry what the API held back (429) or to follow up on what was
 * done (evictions once the cordon is seen), when a paced gate may be lifted; undefined: nothing to follow up.
 */
export function followUpWait(pass: Pass, plan: Plan, done: Done): number | undefined {
  const at = pass.now.getTime();
  const waits: number[] = [];
  // A node change the apiserver refused for what it is is not sent again for REFUSAL_RETRY_MS unless someone changes
  // the node or the policy (the watch brings either): following it up sooner would decide it again for nothing.
  const refused = new Set(done.blocked.filter((b) => b.guard === 'RefusedByApi').map((b) => b.node));
  const acted = plan.actions.some((a) => !refused.has(a.node));
  if (acted || done.blocked.some((b) => b.guard !== 'RefusedByApi')) waits.push(FOLLOW_UP_MS);
  if (done.pacing.nextAt) waits.push(done.pacing.nextAt.getTime() - at + 1);
  // A pass whose evictions a disruption budget all refused waits for the follow-up, not a busy loop.
  const evicted = [...done.results.values()].some((r) => r.some((x) => evictedPod(x.action.kind, x.outcome)));
  if (plan.evictions.left > 0 && evicted) waits.push(0);
  return waits.length > 0 ? Math.max(0, Math.min(...waits)) : undefined;
}
