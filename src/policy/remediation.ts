// PURE: decides what to do about a policy's nodes. Every safety guard is enforced here and nowhere else; the
// actuators only carry out what this returns.
import {
  resolveIntOrPercent,
  type ActionKind,
  type NodeStamps,
  type SandboxPolicySpec,
  type Taint,
} from '../api/v1alpha1/index.js';
import { isEviction, type Action, type BlockedAction, type Guard, type PodRef } from './actions.js';
import { budgetLeft, nextFreeAt } from './rate-window.js';

export interface CandidatePod extends PodRef {
  /** Kind of the controlling owner; absent for a bare pod. */
  controllerKind?: string;
  mirror?: boolean;
}

/**
 * What IoPressureHigh says, reduced to what acting needs. High: over a threshold for sustainSeconds on verified
 * readings. Low: verified under every threshold (for recoverySeconds if it was high). Rising: over, not yet
 * sustained. Recovering: under, recoverySeconds not yet elapsed. Unknown: no verified reading.
 */
export type IoState = 'High' | 'Rising' | 'Recovering' | 'Low' | 'Unknown';

export interface NodeFacts {
  name: string;
  ready: boolean;
  controlPlane: boolean;
  /** spec.unschedulable as the node has it (in a dry run, as it would have it). */
  unschedulable: boolean;
  taints: readonly Taint[];
  /** Our ownership stamps (in a dry run, the simulated ones); absent: nothing on the node is ours. */
  stamps?: NodeStamps;
  /** SandboxCreationDegraded with failures pointing at IO (NameReserved, DeadlineExceeded). */
  degradedByIo: boolean;
  io: IoState;
  /** Pods stuck creating their sandbox from an IO cause, longest-waiting first, not yet evicted. */
  ioStuckPods: readonly CandidatePod[];
  /** Since when fewer than minStuckPods pods have been stuck (SandboxCreationDegraded False); absent while degraded. */
  quietSince?: Date;
  /** Running pods the policy's migrateWorkloads.podSelector selects, not yet evicted. */
  ioHeavyPods: readonly CandidatePod[];
  /** Pods migrated off this node during the current remediation. */
  migrated: number;
  /** Real stamps seen by a dry run: left exactly as they are (a dry run cannot undo what a real run did). */
  frozen?: boolean;
  /** When the operator last undid a remediation on this node (cooldown). */
  lastUndoAt?: Date;
}

export interface RemediationInput {
  policy: string;
  spec: SandboxPolicySpec;
  /** Every node the policy owns. */
  nodes: readonly NodeFacts[];
  now: Date;
  /** When the policy evicted pods recently (any age; only the last 60 s count). */
  recentEvictions: readonly Date[];
  /** Caches synced and no watch known to be broken. */
  cacheReady: boolean;
}

export interface RemediationDecision {
  actions: Action[];
  blocked: BlockedAction[];
  storm: { detected: boolean; unhealthy: number; limit: number };
  /** Per node, the stamps it carries once the actions are carried out. */
  stampsAfter: Map<string, NodeStamps | undefined>;
}

/** Whether a node's evidence calls for remediation under this policy. */
export function isTriggered(facts: NodeFacts, spec: SandboxPolicySpec): boolean {
  if (!facts.degradedByIo) return false;
  return !spec.remediation.requireIoPressure || facts.io === 'High';
}

/** Why a degraded node does not call for remediation, in words for status; undefined when it does, or is healthy. */
export function whyNotTriggered(
  facts: NodeFacts,
  degraded: boolean,
  spec: SandboxPolicySpec,
): { reason: string; message: string } | undefined {
  if (!degraded || isTriggered(facts, spec)) return undefined;
  if (!facts.degradedByIo)
    return {
      reason: 'NotIoCaused',
      message:
        'Pods are stuck, but their failures do not point at disk IO (network, image, runtime configuration or not yet known): nothing to remediate here.',
    };
  return {
    reason: 'IoPressureNotVerified',
    message: `Pods are stuck from an IO cause, but IO pressure is ${facts.io === 'Unknown' ? 'unknown (no verified reading)' : `not sustained (${facts.io})`}; spec.remediation.requireIoPressure is true.`,
  };
}

/** Whether a node we remediated has verifiably recovered, so what we did may be undone. */
export function hasRecovered(facts: NodeFacts, spec: SandboxPolicySpec, now: Date): boolean {
  if (facts.degradedByIo || facts.ioStuckPods.length > 0 || !facts.quietSince) return false;
  const quietMs = now.getTime() - facts.quietSince.getTime();
  if (!spec.remediation.requireIoPressure) {
    // No IO source required: the stuck pods alone judge recovery, but known pressure still holds it.
    return quietMs >= spec.ioPressure.recoverySeconds * 1000 && facts.io !== 'High' && facts.io !== 'Rising';
  }
  return facts.io === 'Low'; // Low after High already took recoverySeconds of verified readings
}

const nodeTarget = (node: string) => `node/${node}`;
const podTarget = (pod: PodRef) => `pod/${pod.namespace}/${pod.name}`;

/** Why a pod must not be evicted, or undefined when it may be. */
function podGuard(pod: CandidatePod): { guard: Guard; message: string } | undefined {
  if (pod.mirror) return { guard: 'MirrorPod', message: 'a static pod: the API cannot move it' };
  if (!pod.controllerKind)
    return { guard: 'NoController', message: 'a bare pod: nothing would recreate it elsewhere' };
  if (pod.controllerKind === 'DaemonSet')
    return { guard: 'DaemonSetPod', message: 'a DaemonSet pod belongs on this node' };
  return undefined;
}

const fencingEffects = new Set(['NoSchedule', 'NoExecute']);
/** The node carries a taint with this key that keeps new pods off (the effect on the node, not the spec's). */
const hasFencingTaint = (facts: NodeFacts, key: string) =>
  facts.taints.some((t) => t.key === key && fencingEffects.has(t.effect));

/**
 * Decides the actions for one policy's nodes. Order per node: cordon and taint; evict stuck pods once the node
 * is seen fenced (so replacements land elsewhere); migrate IO-heavy pods; undo in reverse after recovery.
 */
export function decideRemediation(input: RemediationInput): RemediationDecision {
  const { spec, now, policy } = input;
  const { remediation, safety } = spec;
  const actions: Action[] = [];
  const blocked: BlockedAction[] = [];
  const stampsAfter = new Map<string, NodeStamps | undefined>();
  const block = (
    kind: ActionKind,
    node: string,
    target: string,
    guard: Guard,
    message: string,
    liftsAt?: Date,
  ) => blocked.push({ kind, node, target, guard, message, ...(liftsAt ? { liftsAt } : {}) });

  const triggered = new Set(input.nodes.filter((n) => isTriggered(n, spec)).map((n) => n.name));
  const ours = input.nodes.filter((n) => n.stamps !== undefined);
  const unhealthy = new Set([...triggered, ...ours.map((n) => n.name)]).size;
  const limit = resolveIntOrPercent(safety.maxUnhealthyNodes, input.nodes.length);
  const storm = { detected: unhealthy > limit, unhealthy, limit };
  const specTaintKey = remediation.taint?.key;
  /** Fenced: cordoned, or a taint with the spec's key or the key our stamps record keeps new pods off. */
  const isFencedAtAll = (n: NodeFacts) =>
    n.unschedulable ||
    (specTaintKey !== undefined && hasFencingTaint(n, specTaintKey)) ||
    (n.stamps?.taint !== undefined && hasFencingTaint(n, n.stamps.taint.key));
  const isSchedulable = (n: NodeFacts) => n.ready && !isFencedAtAll(n);
  let schedulable = input.nodes.filter(isSchedulable).length;
  let evictionBudget = budgetLeft(safety.maxEvictionsPerMinute, input.recentEvictions, now);

  // The most degraded nodes first, so limits go to the worst; names break ties deterministically.
  const ordered = [...input.nodes].sort(
    (a, b) => b.ioStuckPods.length - a.ioStuckPods.length || a.name.localeCompare(b.name),
  );
  for (const facts of ordered) {
    const { name } = facts;
    const target = nodeTarget(name);
    stampsAfter.set(name, facts.stamps);
    const isOurs = facts.stamps !== undefined;
    const wants = triggered.has(name);
    if (!wants && !isOurs) continue;
    if (facts.frozen) {
      block(
        facts.stamps?.cordoned ? 'Uncordon' : 'Untaint',
        name,
        target,
        'DryRun',
        'a dry run leaves what a real run changed on this node as it is',
      );
      continue;
    }

    // Guards that hold every change to the node, new or undo.
    const held = (kind: ActionKind): { guard: Guard; message: string } | undefined => {
      if (!input.cacheReady)
        return { guard: 'CacheNotSynced', message: 'the cache is not synced or a watch is broken' };
      if (safety.paused) return { guard: 'Paused', message: 'spec.safety.paused is true' };
      if (facts.controlPlane)
        return { guard: 'ControlPlaneNode', message: 'control-plane nodes are never acted on' };
      if (!facts.ready && kind !== 'Uncordon' && kind !== 'Untaint')
        return { guard: 'NodeNotReady', message: 'the node is not Ready: a different failure' };
      return undefined;
    };

    if (facts.stamps) {
      const stamps = facts.stamps;
      const ourTaint = stamps.taint;
      // Someone else reverted what we did: drop our claim rather than fight them or later undo their choice.
      const cordonGone = stamps.cordoned && !facts.unschedulable;
      const taintGone = ourTaint !== undefined && !facts.taints.some((t) => t.key === ourTaint.key);
      if (cordonGone || taintGone) {
        const next: NodeStamps = { ...stamps, cordoned: stamps.cordoned && !cordonGone };
        if (taintGone) delete next.taint;
        if (cordonGone)
          actions.push({
            kind: 'Uncordon',
            node: name,
            target,
            reason: 'UncordonedByOthers',
            message: 'Someone else made the node schedulable again; dropped our cordon stamp.',
          });
        if (taintGone)
          actions.push({
            kind: 'Untaint',
            node: name,
            target,
            taint: ourTaint,
            reason: 'UntaintedByOthers',
            message: 'Someone else removed our taint; dropped our taint stamp.',
          });
        stampsAfter.set(name, next.cordoned || next.taint ? next : undefined);
        continue;
      }
      if (!wants && hasRecovered(facts, spec, now)) {
        if (!remediation.undoOnRecovery) continue;
        const kind: ActionKind = stamps.cordoned ? 'Uncordon' : 'Untaint';
        const reason = held(kind);
        if (reason) {
          block(kind, name, target, reason.guard, reason.message);
          continue;
        }
        const cooldownEnds = stamps.since.getTime() + safety.cooldownSeconds * 1000;
        if (now.getTime() < cooldownEnds) {
          block(
            kind,
            name,
            target,
            'Cooldown',
            `remediated at ${stamps.since.toISOString()}; cooldownSeconds ${safety.cooldownSeconds} not over`,
            new Date(cooldownEnds),
          );
          continue;
        }
        const message = `The node recovered (IO pressure and stuck pods gone); undoing what policy ${stamps.policy} did.`;
        if (stamps.taint)
          actions.push({
            kind: 'Untaint',
            node: name,
            target,
            taint: stamps.taint,
            reason: 'Recovered',
            message,
          });
        if (stamps.cordoned)
          actions.push({ kind: 'Uncordon', node: name, target, reason: 'Recovered', message });
        stampsAfter.set(name, undefined);
        continue;
      }
    }
    const taint = remediation.taint;
    /** Evicts stuck pods and migrates IO-heavy ones, once new pods can no longer land on the node. */
    const moveWork = (): void => {
      if (!isFencedAtAll(facts)) {
        if (remediation.evictStuckPods && facts.ioStuckPods.length > 0)
          block(
            'Evict',
            name,
            target,
            'NodeStillSchedulable',
            'neither cordon nor a NoSchedule taint is allowed: a replacement could land on this node again',
          );
        return;
      }
      const evict = (kind: 'Evict' | 'Migrate', pod: CandidatePod, why: string, message: string) => {
        const guard = podGuard(pod);
        if (guard) return block(kind, name, podTarget(pod), guard.guard, guard.message);
        if (evictionBudget <= 0)
          return block(
            kind,
            name,
            podTarget(pod),
            'EvictionRate',
            `maxEvictionsPerMinute (${safety.maxEvictionsPerMinute}) reached`,
            // When the window gives one back, counting the evictions planned above.
            nextFreeAt(
              safety.maxEvictionsPerMinute,
              input.recentEvictions,
              now,
              actions.filter(isEviction).length,
            ),
          );
        evictionBudget--;
        const { namespace, name: podName, uid } = pod;
        actions.push({
          kind,
          node: name,
          target: podTarget(pod),
          pod: { namespace, name: podName, uid },
          reason: why,
          message,
        });
      };
      if (remediation.evictStuckPods) {
        for (const pod of facts.ioStuckPods)
          evict(
            'Evict',
            pod,
            'SandboxCreationStuckOnIo',
            `Stuck creating its sandbox on ${name}: a replacement gets a new sandbox name on another node.`,
          );
      }
      const migrate = remediation.migrateWorkloads;
      if (migrate && facts.io === 'High') {
        const room = Math.max(0, migrate.maxPodsPerNode - facts.migrated);
        for (const pod of facts.ioHeavyPods.slice(0, room))
          evict('Migrate', pod, 'IoHeavyWorkload', `IO-heavy pod moved off ${name}, which is IO-saturated.`);
      }
    };
    if (!wants) {
      // Ours, not recovered: while still saturated, IO-heavy pods keep moving off (a refused one is retried).
      if (remediation.migrateWorkloads && facts.io === 'High' && facts.ioHeavyPods.length > 0) {
        const reason =
          held('Migrate') ??
          (storm.detected
            ? {
                guard: 'StormLimit' as const,
                message: `${unhealthy} unhealthy nodes exceed maxUnhealthyNodes (${limit})`,
              }
            : undefined);
        if (reason) block('Migrate', name, target, reason.guard, reason.message);
        else moveWork();
      }
      continue;
    }

    // New changes: cordon/taint, then evictions and migrations.
    const newHeld = held('Cordon');
    // What is held: the fence, or (on a node already fenced) the evictions that would follow it.
    const firstKind: ActionKind = isFencedAtAll(facts)
      ? 'Evict'
      : remediation.cordon
        ? 'Cordon'
        : remediation.taint
          ? 'Taint'
          : 'Evict';
    if (newHeld) {
      block(firstKind, name, target, newHeld.guard, newHeld.message);
      continue;
    }
    if (storm.detected) {
      block(
        firstKind,
        name,
        target,
        'StormLimit',
        `${unhealthy} unhealthy nodes exceed maxUnhealthyNodes (${limit}): starting nothing new`,
      );
      continue;
    }
    let stamps = facts.stamps;
    const reason = `Sandbox creation stuck from IO${remediation.requireIoPressure ? ' under verified IO pressure' : ''} (${facts.ioStuckPods.length} pod(s)).`;
    const needCordon = remediation.cordon && !facts.unschedulable;
    // A taint we already hold stays as stamped, even if the spec's changed since: undo removes exactly that one.
    const needTaint =
      taint !== undefined &&
      !stamps?.taint &&
      !facts.taints.some((t) => t.key === taint.key && t.effect === taint.effect);
    if (needCordon || needTaint) {
      // After an undo (ours, or someone else's reverting us) the node is left alone for cooldownSeconds.
      if (facts.lastUndoAt && now.getTime() < facts.lastUndoAt.getTime() + safety.cooldownSeconds * 1000) {
        block(
          firstKind,
          name,
          target,
          'Cooldown',
          `undone at ${facts.lastUndoAt.toISOString()}; cooldownSeconds ${safety.cooldownSeconds} not over`,
          new Date(facts.lastUndoAt.getTime() + safety.cooldownSeconds * 1000),
        );
        continue;
      }
      const fencesNow = needCordon || (needTaint && fencingEffects.has(taint.effect));
      const takesCapacity = fencesNow && isSchedulable(facts);
      if (takesCapacity && schedulable - 1 < safety.minSchedulableNodes) {
        block(
          needCordon ? 'Cordon' : 'Taint',
          name,
          target,
          'MinSchedulableNodes',
          `fencing it would leave ${schedulable - 1} schedulable node(s), fewer than minSchedulableNodes (${safety.minSchedulableNodes})`,
        );
        continue;
      }
      if (takesCapacity) schedulable--;
      stamps = stamps ?? { policy, since: now, reason, cordoned: false };
      if (needCordon) {
        stamps = { ...stamps, cordoned: true };
        actions.push({
          kind: 'Cordon',
          node: name,
          target,
          reason: 'SandboxCreationStuckOnIo',
          message: reason,
        });
      }
      if (needTaint) {
        const added: Taint = { key: taint.key, value: taint.value, effect: taint.effect };
        stamps = { ...stamps, taint: added };
        actions.push({
          kind: 'Taint',
          node: name,
          target,
          taint: added,
          reason: 'SandboxCreationStuckOnIo',
          message: reason,
        });
      }
      stampsAfter.set(name, stamps);
      // Evictions wait until the fence is seen in the cache, so replacements cannot land here again.
      if (fencesNow) continue;
    }
    moveWork();
  }
  return { actions, blocked, storm, stampsAfter };
}
