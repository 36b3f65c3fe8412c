// PURE: every guard the policy decides before acting (the apiserver's own refusals, DisruptionBudget and RefusedByApi,
// come later): each says what holds an action and why, or undefined when nothing does.
import type { ActionKind, MigrateWorkloads, NodeStamps } from '../api/v1alpha1/index.js';
import { fenceStepOf, isEviction } from './actions.js';
import { foreignFencingTaints, isFenced, NODE_MAINTENANCE_TAINT } from './fences.js';
import {
  heldUntil,
  holderName,
  isHeldByOther,
  leaseHolder,
  NODE_LEASE_NAMESPACE,
  nodeLeaseName,
  type NodeLeaseView,
} from './node-lease.js';
import { inRateWindow, nextFreeAt, reserveShrinksAt } from './rate-window.js';
import type { RemediationPass } from './remediation-pass.js';
import type { CandidatePod, Hold, NodeFacts } from './node-facts.js';

/** What holds every change to a node whose real stamps a dry run sees: a dry run cannot undo what a real run did. */
export const FROZEN: Readonly<Hold> = {
  guard: 'DryRun',
  message: 'a dry run leaves what a real run changed on this node as it is',
};

/** Guards that hold every change the policy would make, to nodes and to rollouts alike. */
export function guardPolicy(
  cacheReady: boolean,
  paused: boolean,
): { guard: 'CacheNotSynced' | 'Paused'; message: string } | undefined {
  if (!cacheReady)
    return { guard: 'CacheNotSynced', message: 'the cache is not synced or a watch is broken' };
  if (paused) return { guard: 'Paused', message: 'spec.safety.paused is true' };
  return undefined;
}

/** Guards that hold every change to the node, new or undo. */
export function guardNode(pass: RemediationPass, facts: NodeFacts, kind: ActionKind): Hold | undefined {
  const held = guardPolicy(pass.input.cacheReady, pass.input.spec.safety.paused);
  if (held) return held;
  if (facts.controlPlane)
    return { guard: 'ControlPlaneNode', message: 'control-plane nodes are never acted on' };
  if (!facts.ready && fenceStepOf(kind) !== 'Down')
    return { guard: 'NodeNotReady', message: 'the node is not Ready: a different failure' };
  return undefined;
}

/** What holds a node whose medik8s lease another holder has, until it expires (or is let go of sooner). */
export function leaseHeldBy(node: string, lease: NodeLeaseView): Hold {
  const until = heldUntil(lease);
  return {
    guard: 'NodeLease',
    message: `${NODE_LEASE_NAMESPACE}/${nodeLeaseName(node)} is held by ${holderName(lease)}${until ? ` until ${until.toISOString()}` : ''}: hands off while another holder has the node`,
    ...(until ? { liftsAt: new Date(until.getTime() + 1) } : {}),
  };
}

/**
 * The medik8s node lease held by another holder (NodeHealthCheck, node-maintenance-operator, ...): nothing new is done
 * to the node until it lets go or the lease expires. Undoing what is ours is not held.
 */
export function guardNodeLease(pass: RemediationPass, facts: NodeFacts): Hold | undefined {
  const { lease } = facts;
  const { policy, now } = pass.input;
  return lease && isHeldByOther(lease, leaseHolder(policy), now) ? leaseHeldBy(facts.name, lease) : undefined;
}

/**
 * What holds an undo while another fence stands on the node, so that a person's or another operator's work is not
 * undone by ours: the medik8s lease held by another (NodeHealthCheck, node-maintenance-operator), a NodeMaintenance
 * (its drain taint), or a fencing taint another manager added after our fence (stamps.taintsBefore; unknown on stamps
 * written before it was kept, and then only the first two are seen). Our cordon and theirs look the same on a Node;
 * uncordoning would end theirs too.
 */
export function guardOtherFence(
  pass: RemediationPass,
  facts: NodeFacts,
  stamps: NodeStamps,
): Hold | undefined {
  return otherFence(facts, stamps, leaseHolder(pass.input.policy), pass.input.now);
}

/** guardOtherFence for one node, outside a pass (the orphan sweep's undo): `holder` is our lease holder's name. */
export function otherFence(
  node: Pick<NodeFacts, 'name' | 'taints' | 'lease'>,
  stamps: NodeStamps,
  holder: string,
  now: Date,
): Hold | undefined {
  const { lease } = node;
  if (lease && isHeldByOther(lease, holder, now)) {
    const held = leaseHeldBy(node.name, lease);
    return { ...held, message: `${held.message}; the undo waits` };
  }
  const foreign = foreignFencingTaints(node.taints, stamps.taint?.key);
  if (foreign.includes(NODE_MAINTENANCE_TAINT))
    return {
      guard: 'OtherFence',
      message: `a NodeMaintenance drains the node (taint ${NODE_MAINTENANCE_TAINT}): the undo waits until it ends`,
    };
  const before = stamps.taintsBefore;
  const added = before ? foreign.filter((key) => !before.includes(key)) : [];
  if (added.length > 0)
    return {
      guard: 'OtherFence',
      message: `taint ${added.join(', ')} was added after our fence, by another manager: the undo waits while it stands (kubectl sandbox release hands the node over)`,
    };
  return undefined;
}

/** More nodes unhealthy than maxUnhealthyNodes allows: a storm. */
export function guardStorm({ storm }: RemediationPass, consequence?: string): Hold | undefined {
  if (!storm.detected) return undefined;
  const message = `${storm.unhealthy} unhealthy nodes exceed maxUnhealthyNodes (${storm.limit})`;
  return { guard: 'StormLimit', message: consequence ? `${message}: ${consequence}` : message };
}

/** The node is left alone for cooldownSeconds after it was remediated, or after a remediation was undone. */
function guardCooldown(pass: RemediationPass, what: 'remediated' | 'undone', at: Date): Hold | undefined {
  const { cooldownSeconds } = pass.input.spec.safety;
  const cooldownEnds = at.getTime() + cooldownSeconds * 1000;
  if (pass.input.now.getTime() >= cooldownEnds) return undefined;
  return {
    guard: 'Cooldown',
    message: `${what} at ${at.toISOString()}; cooldownSeconds ${cooldownSeconds} not over`,
    liftsAt: new Date(cooldownEnds),
  };
}

/** An undo waits cooldownSeconds after the remediation it undoes. */
export const guardRemediationCooldown = (pass: RemediationPass, stamps: NodeStamps): Hold | undefined =>
  guardCooldown(pass, 'remediated', stamps.since);

/** After an undo (ours, or someone else's reverting us) the node is left alone for cooldownSeconds. */
export const guardUndoCooldown = (pass: RemediationPass, facts: NodeFacts): Hold | undefined =>
  facts.lastUndoAt ? guardCooldown(pass, 'undone', facts.lastUndoAt) : undefined;

/** Fencing one more schedulable node must leave at least minSchedulableNodes. */
export function guardMinSchedulable(pass: RemediationPass): Hold | undefined {
  const { minSchedulableNodes } = pass.input.spec.safety;
  const left = pass.schedulable - 1;
  if (left >= minSchedulableNodes) return undefined;
  return {
    guard: 'MinSchedulableNodes',
    message: `fencing it would leave ${left} schedulable node(s), fewer than minSchedulableNodes (${minSchedulableNodes})`,
  };
}

/** Pods move off a node only once new pods can no longer land on it. */
export function guardUnfenced(pass: RemediationPass, facts: NodeFacts): Hold | undefined {
  if (isFenced(facts, pass.input.spec)) return undefined;
  return {
    guard: 'NodeStillSchedulable',
    message: 'neither cordon nor a NoSchedule taint is allowed: a replacement could land on this node again',
  };
}

/** Why a pod must not be evicted, or undefined when it may be. */
export function guardPod(pod: CandidatePod): Hold | undefined {
  if (pod.mirror) return { guard: 'MirrorPod', message: 'a static pod: the API cannot move it' };
  if (!pod.controllerKind)
    return { guard: 'NoController', message: 'a bare pod: nothing would recreate it elsewhere' };
  if (pod.controllerKind === 'DaemonSet')
    return { guard: 'DaemonSetPod', message: 'a DaemonSet pod belongs on this node' };
  return undefined;
}

/** Why a pod must not be migrated (moved while running) besides what holds every eviction, or undefined. */
export function guardMigration(pass: RemediationPass, pod: CandidatePod): Hold | undefined {
  if (pod.noMigrate)
    return { guard: 'NoMigrateLabel', message: 'labelled sandbox.remediator.io/no-migrate=true' };
  if (pod.namespace === 'kube-system' || pod.namespace === pass.input.operatorNamespace)
    return { guard: 'ProtectedNamespace', message: `pods of ${pod.namespace} are never migrated` };
  return guardData(pass.input.spec.remediation.migrateWorkloads, pod);
}

/** The priority from which Kubernetes calls a pod system-critical (scheduling.SystemCriticalPriority). */
export const SYSTEM_CRITICAL_PRIORITY = 2_000_000_000;
const SYSTEM_CRITICAL_CLASSES: ReadonlySet<string> = new Set([
  'system-cluster-critical',
  'system-node-critical',
]);

/**
 * Why moving a running pod would lose its data or strand it, as kubectl drain and the descheduler's default evictor
 * judge it, or undefined. A stuck pod never started: it holds no data, and this guard is not asked of it.
 */
export function guardData(
  migrate: Pick<MigrateWorkloads, 'evictLocalStoragePods' | 'evictSystemCriticalPods'> | undefined,
  pod: Pick<CandidatePod, 'data'>,
): Hold | undefined {
  const { data } = pod;
  if (!data)
    return {
      guard: 'PodDataUnknown',
      message: 'its volumes were not read: moving it is not known to lose nothing',
    };
  if (data.nodeBoundClaims === undefined && data.claims.length > 0)
    return {
      guard: 'PodDataUnknown',
      message: `where its claims ${data.claims.join(', ')} are bound was not read`,
    };
  if (data.nodeBoundClaims && data.nodeBoundClaims.length > 0)
    return {
      guard: 'NodeBoundVolume',
      message: `its PersistentVolumeClaim ${data.nodeBoundClaims.join(', ')} is bound to a volume on this node: it could not start elsewhere`,
    };
  if (data.localVolumes.length > 0 && !migrate?.evictLocalStoragePods)
    return {
      guard: 'LocalStorage',
      message: `its local storage (${data.localVolumes.join(', ')}) would be lost; migrateWorkloads.evictLocalStoragePods allows it`,
    };
  const critical =
    (data.priority ?? 0) >= SYSTEM_CRITICAL_PRIORITY ||
    (data.priorityClassName !== undefined && SYSTEM_CRITICAL_CLASSES.has(data.priorityClassName));
  if (critical && !migrate?.evictSystemCriticalPods)
    return {
      guard: 'SystemCritical',
      message: `a system-critical pod (${data.priorityClassName ?? `priority ${data.priority}`}); migrateWorkloads.evictSystemCriticalPods allows it`,
    };
  return undefined;
}

/**
 * The budget's reserve for first evictions: a node that has had an eviction in the window (or has one planned in this
 * pass) spends the budget only down to it, so a node saturated a moment later does not wait a minute for its first.
 */
export function guardEvictionReserve(pass: RemediationPass, facts: NodeFacts): Hold | undefined {
  const { now } = pass.input;
  const evictedLately =
    (pass.evictionsOn.get(facts.name) ?? 0) > 0 || inRateWindow(facts.lastEvictionAt, now);
  return evictedLately ? guardRepeatEviction(pass) : undefined;
}

/** The reserve for first evictions, as it holds a node's second or later eviction; undefined when above it. */
export function guardRepeatEviction(pass: RemediationPass): Hold | undefined {
  if (pass.evictionBudget > pass.evictionReserve) return undefined;
  const { spec, recentEvictions, now } = pass.input;
  const limit = spec.safety.maxEvictionsPerMinute;
  return {
    guard: 'EvictionRate',
    message: `maxEvictionsPerMinute (${limit}): the last ${pass.evictionReserve} of the minute are kept for nodes with no eviction yet`,
    liftsAt: reserveShrinksAt(limit, recentEvictions, now, pass.evictionBudget),
  };
}

/** maxEvictionsPerMinute, counted over the policy's recent evictions and those this pass plans. */
export function guardEvictionRate(pass: RemediationPass): Hold | undefined {
  if (pass.evictionBudget > 0) return undefined;
  const { spec, recentEvictions, now } = pass.input;
  const limit = spec.safety.maxEvictionsPerMinute;
  return {
    guard: 'EvictionRate',
    message: `maxEvictionsPerMinute (${limit}) reached`,
    // When the window gives one back, counting the evictions this pass has planned.
    liftsAt: nextFreeAt(limit, recentEvictions, now, pass.actions.filter(isEviction).length),
  };
}
