// PURE: the steps remediation takes on one node, in the order decideRemediation tries them. Each asks the guards it
// needs and records what it decides, or what held it, in the pass.
import type { ActionKind, NodeStamps, SandboxPolicySpec, Taint } from '../api/v1alpha1/index.js';
import { revertedByOthers as reverted, undoActions, type Eviction } from './actions.js';
import { FENCING_EFFECTS, foreignFencingTaints, isFenced, isSchedulable } from './fences.js';
import {
  FROZEN,
  guardEvictionRate,
  guardEvictionReserve,
  guardOtherFence,
  guardMigration,
  guardMinSchedulable,
  guardNode,
  guardNodeLease,
  guardPod,
  guardRepeatEviction,
  guardRemediationCooldown,
  guardStorm,
  guardUndoCooldown,
  guardUnfenced,
} from './guards.js';
import { inRateWindow } from './rate-window.js';
import { block, nodeTarget, podTarget, type RemediationPass } from './remediation-pass.js';
import type { CandidatePod, Hold, NodeFacts } from './node-facts.js';

function blockNode(pass: RemediationPass, facts: NodeFacts, kind: ActionKind, hold: Hold): void {
  block(pass, kind, facts.name, nodeTarget(facts.name), hold);
}

/** Real stamps seen by a dry run: held exactly as they are. */
export function leaveFrozen(pass: RemediationPass, facts: NodeFacts): void {
  blockNode(pass, facts, facts.stamps?.cordoned ? 'Uncordon' : 'Untaint', FROZEN);
}

/** Whether someone else reverted any of what our stamps record. */
export function isReverted(facts: NodeFacts, stamps: NodeStamps): boolean {
  const gone = reverted(facts, stamps);
  return gone.cordon || gone.taint;
}

/** Someone else reverted what we did: drop our claim rather than fight them or later undo their choice. */
export function letGoOfRevertedStamps(pass: RemediationPass, facts: NodeFacts, stamps: NodeStamps): void {
  const { name } = facts;
  const target = nodeTarget(name);
  const gone = reverted(facts, stamps);
  const next: NodeStamps = { ...stamps, cordoned: stamps.cordoned && !gone.cordon };
  if (gone.taint) delete next.taint;
  if (gone.cordon)
    pass.actions.push({
      kind: 'Uncordon',
      node: name,
      target,
      reason: 'UncordonedByOthers',
      message: 'Someone else made the node schedulable again; dropped our cordon stamp.',
    });
  if (gone.taint && stamps.taint)
    pass.actions.push({
      kind: 'Untaint',
      node: name,
      target,
      taint: stamps.taint,
      reason: 'UntaintedByOthers',
      message: 'Someone else removed our taint; dropped our taint stamp.',
    });
  pass.stampsAfter.set(name, next.cordoned || next.taint ? next : undefined);
}

/** The node recovered: undo what our stamps record, once the cooldown after remediating it is over. */
export function undoOnRecovery(pass: RemediationPass, facts: NodeFacts, stamps: NodeStamps): void {
  if (!pass.input.spec.remediation.undoOnRecovery) return;
  const kind: ActionKind = stamps.cordoned ? 'Uncordon' : 'Untaint';
  const hold =
    guardNode(pass, facts, kind) ??
    guardRemediationCooldown(pass, stamps) ??
    guardOtherFence(pass, facts, stamps);
  if (hold) {
    blockNode(pass, facts, kind, hold);
    return;
  }
  const message = `The node recovered (IO pressure and stuck pods gone); undoing what policy ${stamps.policy} did.`;
  pass.actions.push(...undoActions(facts.name, stamps, 'Recovered', message));
  pass.stampsAfter.set(facts.name, undefined);
}

/** Ours, not recovered: while still saturated, IO-heavy pods keep moving off (a refused one is retried). */
export function keepMigrating(pass: RemediationPass, facts: NodeFacts): void {
  if (!wantsMigration(pass, facts) || facts.ioHeavyPods.length === 0) return;
  const hold = guardNode(pass, facts, 'Migrate') ?? guardNodeLease(pass, facts) ?? guardStorm(pass);
  if (hold) blockNode(pass, facts, 'Migrate', hold);
  else moveWork(pass, facts);
}

/** New changes on a triggered node: cordon/taint, then evictions and migrations. */
export function remediateNode(pass: RemediationPass, facts: NodeFacts): void {
  const hold =
    guardNode(pass, facts, 'Cordon') ??
    guardNodeLease(pass, facts) ??
    guardStorm(pass, 'starting nothing new');
  if (hold) blockNode(pass, facts, firstNewKind(pass, facts), hold);
  else if (fenceNode(pass, facts)) moveWork(pass, facts);
}

/** What is held: the fence, or (on a node already fenced) the evictions that would follow it. */
function firstNewKind({ input: { spec } }: RemediationPass, facts: NodeFacts): ActionKind {
  if (isFenced(facts, spec)) return 'Evict';
  if (spec.remediation.cordon) return 'Cordon';
  return spec.remediation.taint ? 'Taint' : 'Evict';
}

/**
 * Cordons and taints the node as the spec asks, after the cooldown that follows an undo and within
 * minSchedulableNodes. Whether its work may move in this pass: not while the fence is held or only just placed.
 */
function fenceNode(pass: RemediationPass, facts: NodeFacts): boolean {
  const { spec } = pass.input;
  const { taint } = spec.remediation;
  const needCordon = spec.remediation.cordon && !facts.unschedulable;
  // A taint we already hold stays as stamped, even if the spec's changed since: undo removes exactly that one.
  const needTaint =
    taint !== undefined &&
    !facts.stamps?.taint &&
    !facts.taints.some((t) => t.key === taint.key && t.effect === taint.effect);
  if (!needCordon && !needTaint) return true;
  const cooling = guardUndoCooldown(pass, facts);
  if (cooling) {
    blockNode(pass, facts, firstNewKind(pass, facts), cooling);
    return false;
  }
  const fencesNow = needCordon || (needTaint && FENCING_EFFECTS.has(taint.effect));
  const takesCapacity = fencesNow && isSchedulable(facts, spec);
  const tooFew = takesCapacity ? guardMinSchedulable(pass) : undefined;
  if (tooFew) {
    blockNode(pass, facts, needCordon ? 'Cordon' : 'Taint', tooFew);
    return false;
  }
  if (takesCapacity) pass.schedulable--;
  placeFence(pass, facts, { cordon: needCordon, taint: needTaint ? taint : undefined });
  // Evictions wait until the fence is seen in the cache, so replacements cannot land here again.
  return !fencesNow;
}

/** Cordons and taints the node as asked, stamping what it does (on top of stamps it already carries). */
function placeFence(
  pass: RemediationPass,
  facts: NodeFacts,
  fence: { cordon: boolean; taint: SandboxPolicySpec['remediation']['taint'] },
): void {
  const { policy, spec, now } = pass.input;
  const { name } = facts;
  const target = nodeTarget(name);
  const reason = `Sandbox creation stuck from IO${spec.remediation.requireIoPressure ? ' under verified IO pressure' : ''} (${facts.ioStuckPods.length} pod(s)).`;
  let stamps = facts.stamps ?? {
    policy,
    since: now,
    reason,
    cordoned: false,
    // What fenced it before us, so that a fence another manager adds later holds our undo (guardOtherFence).
    taintsBefore: foreignFencingTaints(facts.taints, fence.taint?.key),
  };
  if (fence.cordon) {
    stamps = { ...stamps, cordoned: true };
    pass.actions.push({
      kind: 'Cordon',
      node: name,
      target,
      reason: 'SandboxCreationStuckOnIo',
      message: reason,
    });
  }
  if (fence.taint) {
    const added: Taint = { key: fence.taint.key, value: fence.taint.value, effect: fence.taint.effect };
    stamps = { ...stamps, taint: added };
    pass.actions.push({
      kind: 'Taint',
      node: name,
      target,
      taint: added,
      reason: 'SandboxCreationStuckOnIo',
      message: reason,
    });
  }
  pass.stampsAfter.set(name, stamps);
}

/** Evicts stuck pods and migrates IO-heavy ones, once new pods can no longer land on the node. */
function moveWork(pass: RemediationPass, facts: NodeFacts): void {
  const { remediation } = pass.input.spec;
  const unfenced = guardUnfenced(pass, facts);
  if (unfenced) {
    if (remediation.evictStuckPods && facts.ioStuckPods.length > 0) blockNode(pass, facts, 'Evict', unfenced);
    return;
  }
  if (remediation.evictStuckPods) evictStuckPods(pass, facts);
  migrateIoHeavyPods(pass, facts);
}

/** Evicts the stuck pods the node's report lists with their IO cause; the others wait for it (a pass or so). */
function evictStuckPods(pass: RemediationPass, facts: NodeFacts): void {
  const { name } = facts;
  for (const pod of facts.ioStuckPods)
    if (!pod.unlisted)
      evictPod(pass, facts, pod, {
        kind: 'Evict',
        node: name,
        reason: 'SandboxCreationStuckOnIo',
        message: `Stuck creating its sandbox on ${name}: a replacement gets a new sandbox name on another node.`,
      });
}

/**
 * Whether IO-heavy pods are to move off a node that is IO-saturated now. Not when its own runtime does the IO (image
 * pulls, unpacking): moving pods would only add more of it; fewer rollouts at once and paced starts are the remedy.
 */
function wantsMigration(pass: RemediationPass, facts: NodeFacts): boolean {
  return (
    pass.input.spec.remediation.migrateWorkloads !== undefined &&
    facts.io === 'High' &&
    facts.ioCause !== 'Runtime'
  );
}

/**
 * Moves IO-heavy pods off a node that is IO-saturated now, up to maxPodsPerNode over the whole remediation: those the
 * policy selects by label, or (by measuredIo) those measured as doing the device's IO, biggest share first.
 */
function migrateIoHeavyPods(pass: RemediationPass, facts: NodeFacts): void {
  const migrate = pass.input.spec.remediation.migrateWorkloads;
  if (!migrate || !wantsMigration(pass, facts)) return;
  const { name } = facts;
  let room = Math.max(0, migrate.maxPodsPerNode - facts.migrated);
  // A pod a guard holds (a DaemonSet's, one labelled no-migrate) takes no place: the next culprit gets it.
  for (const pod of facts.ioHeavyPods) {
    if (room === 0) break;
    const held = evictPod(pass, facts, pod, {
      kind: 'Migrate',
      node: name,
      reason: migrate.by === 'measuredIo' ? 'MeasuredIoCulprit' : 'IoHeavyWorkload',
      message:
        pod.sharePercent === undefined
          ? `IO-heavy pod moved off ${name}, which is IO-saturated.`
          : `Moved off ${name}, which is IO-saturated: it did ${Math.round(pod.sharePercent)}% of the device's IO.`,
    });
    if (!held) room--;
    else if (held.guard === 'EvictionRate') break; // the rest would be held alike: one block says it
  }
}

/**
 * Evicts one pod through the Eviction API, unless the pod's kind or the policy's eviction rate holds it; what held
 * it, if anything did.
 */
function evictPod(
  pass: RemediationPass,
  facts: NodeFacts,
  pod: CandidatePod,
  eviction: Pick<Eviction, 'kind' | 'node' | 'reason' | 'message'>,
): Hold | undefined {
  const { kind, node, reason, message } = eviction;
  const target = podTarget(pod);
  const hold =
    guardPod(pod) ??
    (kind === 'Migrate' ? guardMigration(pass, pod) : undefined) ??
    guardEvictionRate(pass) ??
    guardEvictionReserve(pass, facts);
  if (hold) {
    block(pass, kind, node, target, hold);
    return hold;
  }
  const { namespace, name, uid } = pod;
  const action: Eviction = { kind, node, target, pod: { namespace, name, uid }, reason, message };
  const planned = pass.evictionsOn.get(node) ?? 0;
  // A node with an eviction in the window already waits for the first evictions of the others (a tie of stuck pods
  // decided by name must not hand it the last of the budget); spendDeferred gives it what they leave.
  if (planned >= pass.evictionShare || inRateWindow(facts.lastEvictionAt, pass.input.now)) {
    pass.deferred.push(action);
    return undefined;
  }
  pass.evictionsOn.set(node, planned + 1);
  pass.evictionBudget--;
  pass.actions.push(action);
  return undefined;
}

/**
 * After every node has had its share: the budget left above the reserve for first evictions goes round the nodes,
 * one eviction each in the order they were decided, as long as it lasts; what it cannot pay for is held by the rate
 * (an eviction of stuck pods each, a migration once per node, as migrateIoHeavyPods reports it).
 */
export function spendDeferred(pass: RemediationPass): void {
  // Each node's evictions in the order decided, and how many of them are paid for: linear in the pods deferred.
  const queues = new Map<string, { evictions: Eviction[]; paid: number }>();
  for (const e of pass.deferred) {
    const queue = queues.get(e.node);
    if (queue) queue.evictions.push(e);
    else queues.set(e.node, { evictions: [e], paid: 0 });
  }
  // Every deferred eviction is a node's second or later: the reserve is not theirs.
  const spendable = () => pass.evictionBudget > pass.evictionReserve;
  while (spendable() && queues.size > 0)
    for (const [node, queue] of queues) {
      if (!spendable()) break;
      const next = queue.evictions[queue.paid++];
      if (next) {
        pass.evictionBudget--;
        pass.actions.push(next);
      }
      if (queue.paid >= queue.evictions.length) queues.delete(node);
    }
  const migrationHeld = new Set<string>();
  for (const queue of queues.values())
    for (const e of queue.evictions.slice(queue.paid)) {
      if (e.kind === 'Migrate' && migrationHeld.has(e.node)) continue;
      if (e.kind === 'Migrate') migrationHeld.add(e.node);
      const hold = guardEvictionRate(pass) ?? guardRepeatEviction(pass);
      if (hold) block(pass, e.kind, e.node, e.target, hold);
    }
}
