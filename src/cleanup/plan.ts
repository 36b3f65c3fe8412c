// PURE: what `sandbox-remediator cleanup` removes and what it leaves, from what the cluster holds. Nothing here decides
// an undo of its own: a node's undo is undoActions + nodeChange, a rollout's release workloadChange, exactly as the
// operator's orphan sweep gives back what a gone policy held. What carries no stamp of ours is left alone, and said.
import type { NodeChange, WorkloadChange } from '../actuation/actuator.js';
import {
  formatTaint,
  isOurNodeLeaseHolder,
  KEY_PREFIX,
  NODE_CONDITION_TYPE,
  PACING_GATE,
  ROLLOUT_STAMP,
  sameTaint,
  type NodeStamps,
} from '../api/v1alpha1/index.js';
import type { GatedPodView, NodeView, WorkloadView } from '../detection/index.js';
import { nodeChange } from '../controllers/node-changes.js';
import { workloadChange } from '../controllers/rollout-changes.js';
import { revertedByOthers, undoActions, type Action } from '../policy/actions.js';
import { rolloutTarget } from '../policy/rollouts.js';

/** An object as listed, with the resourceVersion a change is made on (409 when it changed since). */
export interface Versioned<T> {
  view: T;
  version: string | undefined;
}

/** A Lease in the medik8s node-lease namespace. */
export interface LeaseView {
  namespace: string;
  name: string;
  uid: string;
  version: string | undefined;
  holder: string;
}

export type CleanupStep = { target: string; changes: string[] } & (
  | { kind: 'ReleaseGate'; pod: GatedPodView }
  | { kind: 'ReleaseRollout'; workload: WorkloadView; change: WorkloadChange }
  | { kind: 'ReleaseNode'; node: NodeView; change: NodeChange }
  | { kind: 'RemoveNodeCondition'; node: string }
  | { kind: 'DeleteLease'; lease: LeaseView }
  | { kind: 'DeleteHealth'; name: string }
);

/** Something the cleanup saw and does not touch, with the reason. */
export interface LeftAlone {
  target: string;
  why: string;
}

export interface CleanupPlan {
  /** In the order they are carried out: the reverse of the order the operator acts in. */
  steps: CleanupStep[];
  leftAlone: LeftAlone[];
}

export interface CleanupInput {
  nodes: readonly Versioned<NodeView>[];
  /** Every rollout of every kind: ours are released, owner-held ones reported as left alone. */
  workloads: readonly Versioned<WorkloadView>[];
  gatedPods: readonly GatedPodView[];
  /** The Leases of the medik8s node-lease namespace. */
  leases: readonly LeaseView[];
  healths: readonly { name: string }[];
  keepHealth: boolean;
}

/** The reason an uninstall's undo carries: the node changes are built by the operator's own undo. */
export const UNINSTALL_REASON = 'Uninstalled';
const UNINSTALL_MESSAGE = 'Undone by sandbox-remediator cleanup (uninstall).';

export function planCleanup(input: CleanupInput): CleanupPlan {
  const plan: CleanupPlan = { steps: [], leftAlone: [] };
  const add = (part: { step?: CleanupStep; leftAlone: LeftAlone[] }) => {
    if (part.step) plan.steps.push(part.step);
    plan.leftAlone.push(...part.leftAlone);
  };
  for (const pod of input.gatedPods) plan.steps.push(planGate(pod));
  for (const w of input.workloads) add(planWorkload(w));
  for (const n of input.nodes) add(planNode(n));
  for (const { view } of input.nodes) {
    const step = planNodeCondition(view);
    if (step) plan.steps.push(step);
  }
  for (const lease of input.leases) add(planLease(lease));
  for (const { name } of input.healths) {
    const target = `sandboxhealth/${name}`;
    if (input.keepHealth) plan.leftAlone.push({ target, why: 'kept (--keep-health)' });
    else plan.steps.push({ kind: 'DeleteHealth', target, name, changes: ['deleted'] });
  }
  return plan;
}

/** A pod at our pacing gate: the gate is ours by its name, so it is always lifted (its other gates stay). */
export function planGate(pod: GatedPodView): CleanupStep {
  const by = pod.policy ? ` (set for policy ${pod.policy})` : '';
  return {
    kind: 'ReleaseGate',
    target: `pod/${pod.namespace}/${pod.name}`,
    pod,
    changes: [`scheduling gate ${PACING_GATE} lifted${by}`],
  };
}

/** What our stamps on a node record, undone as the operator undoes it; what others did stays. */
export function planNode({ view: node, version }: Versioned<NodeView>): {
  step?: CleanupStep;
  leftAlone: LeftAlone[];
} {
  const target = `node/${node.name}`;
  const stamps = node.stamps;
  if (!stamps) return { leftAlone: unstampedNode(node) };
  const leftAlone: LeftAlone[] = [];
  const gone = revertedByOthers(node, stamps);
  // Someone else reverted part of it: only our claim goes (a stamp drop changes nothing but our annotations).
  const actions: Action[] = undoActions(node.name, stamps, UNINSTALL_REASON, UNINSTALL_MESSAGE).map((a) => {
    if (a.kind === 'Uncordon' && gone.cordon) return { ...a, reason: 'UncordonedByOthers' };
    if (a.kind === 'Untaint' && gone.taint) return { ...a, reason: 'UntaintedByOthers' };
    return a;
  });
  const changes = nodeChanges(node, stamps, gone, leftAlone);
  if (!stamps.cordoned && node.unschedulable)
    leftAlone.push({ target, why: 'left cordoned: our stamps record no cordon (someone else cordoned it)' });
  return {
    step: { kind: 'ReleaseNode', target, node, change: nodeChange(node, actions, undefined, version), changes },
    leftAlone,
  };
}

/** The words for what releasing a stamped node changes, and what of it is left as it is. */
function nodeChanges(
  node: NodeView,
  stamps: NodeStamps,
  gone: { cordon: boolean; taint: boolean },
  leftAlone: LeftAlone[],
): string[] {
  const changes: string[] = [];
  const ours = stamps.taint;
  if (ours) {
    const text = formatTaint(ours);
    if (gone.taint) changes.push(`taint ${text} already removed by someone else`);
    else if (node.taints.some((t) => sameTaint(t, ours))) changes.push(`taint ${text} removed`);
    else
      leftAlone.push({
        target: `node/${node.name}`,
        why: `taint ${ours.key} differs from the ${text} our stamps record: not ours as it stands`,
      });
  }
  if (stamps.cordoned) changes.push(gone.cordon ? 'already uncordoned by someone else' : 'uncordoned');
  changes.push(`stamps of policy ${stamps.policy} removed`);
  return changes;
}

/** A node without our stamps: nothing on it is ours; a cordon or a taint of our key is named, and left. */
function unstampedNode(node: NodeView): LeftAlone[] {
  const target = `node/${node.name}`;
  const left: LeftAlone[] = [];
  if (node.unschedulable) left.push({ target, why: 'cordoned, with no stamp of ours' });
  for (const t of node.taints)
    if (t.key.startsWith(KEY_PREFIX))
      left.push({
        target,
        why: `taint ${formatTaint(t)} has our key but no stamp of ours records it (remove it by hand if you know it is ours)`,
      });
  return left;
}

/** Our condition type on a node: nobody else writes it, so it is removed wherever it is. */
export function planNodeCondition(node: NodeView): CleanupStep | undefined {
  const condition = node.conditions.find((c) => c.type === NODE_CONDITION_TYPE);
  if (!condition) return undefined;
  return {
    kind: 'RemoveNodeCondition',
    target: `node/${node.name}`,
    node: node.name,
    changes: [`condition ${NODE_CONDITION_TYPE}=${condition.status} removed`],
  };
}

/** How an owner holds a rollout we did not stamp, in words. */
const OWNER_HOLDS: Record<WorkloadView['kind'], string> = {
  Deployment: 'spec.paused',
  StatefulSet: 'OnDelete, or a partition at its replicas',
  DaemonSet: 'OnDelete',
  Rollout: 'spec.paused, or a pause condition',
};

/** A rollout we hold is given back exactly as its stamps record; one its owner holds is left alone. */
export function planWorkload({ view: w, version }: Versioned<WorkloadView>): {
  step?: CleanupStep;
  leftAlone: LeftAlone[];
} {
  const target = rolloutTarget(w);
  if (!w.stamps) {
    const leftAlone = w.paused ? [{ target, why: `held by its owner (${OWNER_HOLDS[w.kind]}), not by us` }] : [];
    if (!w.handsOffUntil) return { leftAlone };
    // The mark the operator leaves on one its owner resumed: no claim, but ours all the same.
    const change: WorkloadChange = {
      kind: w.kind,
      namespace: w.namespace,
      name: w.name,
      annotations: { [ROLLOUT_STAMP.handsOffUntil]: null },
      ...(version ? { resourceVersion: version } : {}),
    };
    return {
      step: { kind: 'ReleaseRollout', target, workload: w, change, changes: ['hands-off mark removed'] },
      leftAlone,
    };
  }
  const change = workloadChange(w, { kind: 'ResumeRollout' }, version);
  if (w.paused && !change.spec)
    // Held, but the record of what the hold replaced is gone or mangled: releasing would guess. Left held, stamps kept.
    return {
      leftAlone: [
        {
          target,
          why: `held by policy ${w.stamps.policy}, but its ${ROLLOUT_STAMP.heldStrategy} annotation is missing or unreadable: set spec.updateStrategy back by hand, then remove our annotations`,
        },
      ],
    };
  if (w.handsOffUntil) change.annotations[ROLLOUT_STAMP.handsOffUntil] = null;
  const changes = [
    change.spec ? releasedWords(w) : 'already released by its owner',
    `stamps of policy ${w.stamps.policy} removed`,
  ];
  return { step: { kind: 'ReleaseRollout', target, workload: w, change, changes }, leftAlone: [] };
}

function releasedWords(w: WorkloadView): string {
  switch (w.kind) {
    case 'Deployment':
    case 'Rollout':
      return 'spec.paused reset';
    case 'StatefulSet': {
      const partition = w.held?.strategy.rollingUpdate?.partition;
      return `partition ${typeof partition === 'number' ? `${partition} ` : ''}put back as it was`;
    }
    case 'DaemonSet':
      return `updateStrategy ${w.held?.strategy.type ?? '(default)'} put back as it was`;
  }
}

/** A medik8s node lease is ours when its holder says so; another's is never touched. */
function planLease(lease: LeaseView): { step?: CleanupStep; leftAlone: LeftAlone[] } {
  const target = `lease/${lease.namespace}/${lease.name}`;
  if (!isOurNodeLeaseHolder(lease.holder))
    return { leftAlone: [{ target, why: `held by ${lease.holder || '(nobody)'}, not by us` }] };
  return { step: { kind: 'DeleteLease', target, lease, changes: [`deleted (holder ${lease.holder})`] }, leftAlone: [] };
}

/** The part of the operator's leader Lease that says whether it leads. */
export interface LeaderRecord {
  holderIdentity: string;
  leaseDurationSeconds: number;
  renewTime?: string;
  acquireTime?: string;
}

export type LeaderState =
  | { held: false; why: string }
  | { held: true; holder: string; renewedSecondsAgo?: number };

/** Allowed for a clock here behind the operator's: a Lease renewed this little past its duration still counts as held. */
export const LEADER_CLOCK_SKEW_MS = 10_000;

/**
 * Whether an operator leads now: its Lease has a holder, renewed within leaseDurationSeconds (plus the skew
 * allowance) by this clock. A holder with no time recorded counts as held: nothing says it stopped.
 */
export function leaderState(record: LeaderRecord | undefined, now: Date): LeaderState {
  if (!record) return { held: false, why: 'no Lease' };
  if (record.holderIdentity === '') return { held: false, why: 'released' };
  const renewed = new Date(record.renewTime ?? record.acquireTime ?? '');
  if (Number.isNaN(renewed.getTime())) return { held: true, holder: record.holderIdentity };
  const ago = now.getTime() - renewed.getTime();
  if (ago > record.leaseDurationSeconds * 1000 + LEADER_CLOCK_SKEW_MS)
    return { held: false, why: `expired: last renewed ${Math.round(ago / 1000)} s ago by ${record.holderIdentity}` };
  return { held: true, holder: record.holderIdentity, renewedSecondsAgo: Math.max(0, Math.round(ago / 1000)) };
}
