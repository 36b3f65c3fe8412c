// PURE: what `sandbox-remediator cleanup` removes and what it leaves, from what the cluster holds. Nothing here decides
// an undo of its own: a node's undo is undoActions + nodeChange, a rollout's release workloadChange, exactly as the
// operator's orphan sweep gives back what a gone policy held. What carries no stamp of ours is left alone, and said.
import type { NodeChange, WorkloadChange } from '../actuation/actuator.js';
import {
  formatTaint,
  KEY_PREFIX,
  NODE_CONDITION_REASONS,
  NODE_CONDITION_TYPE,
  PACING_GATE,
  ROLLOUT_STAMP,
  sameTaint,
  type AppliedIoLimitStatus,
  type NodeStamps,
  type WantedIoLimitSpec,
} from '../api/v1alpha1/index.js';
import type { GatedPodView, NodeView, WorkloadView } from '../detection/index.js';
import { nodeChange } from '../actuation/node-change.js';
import { workloadChange } from '../actuation/workload-change.js';
import { revertedByOthers, undoActions, type NodeAction } from '../policy/actions.js';
import {
  holderName,
  isOurHolder,
  NODE_LEASE_NAMESPACE,
  nodeLeaseName,
  type NodeLeaseView,
} from '../policy/node-lease.js';
import { rolloutTarget } from '../policy/rollouts.js';

/** An object as listed, with the resourceVersion a change is made on (409 when it changed since). */
export interface Versioned<T> {
  view: T;
  version: string | undefined;
}

/** One change, on the version of its object that it was planned on. */
export type CleanupStep = { target: string; changes: string[] } & (
  | { kind: 'ReleaseGate'; pod: GatedPodView; version: string | undefined }
  | { kind: 'ReleaseRollout'; workload: WorkloadView; change: WorkloadChange }
  | { kind: 'ReleaseNode'; node: NodeView; change: NodeChange }
  | { kind: 'RemoveNodeCondition'; node: string; version: string | undefined }
  | { kind: 'DeleteLease'; lease: NodeLeaseView; version: string | undefined }
  | { kind: 'LiftIoLimits'; name: string; read: readonly WantedIoLimitSpec[]; version: string | undefined }
  /**
   * `awaitLift`: IO limits of ours are, or were until this run, in force on its node: deleted once its agent reports
   * them lifted (`pods` names them by UID); `nodeGone`: its node was not among those listed.
   */
  | {
      kind: 'DeleteHealth';
      name: string;
      version: string | undefined;
      awaitLift: boolean;
      nodeGone: boolean;
      pods: Record<string, string>;
    }
);

/** A SandboxHealth as cleanup reads it: the IO limits the operator wants (spec.ioLimits), and those its agent reports in force. */
export interface HealthLeftover {
  name: string;
  /** spec.nodeName (absent: the object's name). */
  nodeName?: string;
  /** Its spec.ioLimits or its agent's report (status.ioLimits) does not parse: it may hold what files held before. */
  unreadableLimits?: true;
  ioLimits?: readonly WantedIoLimitSpec[];
  applied?: readonly AppliedIoLimitStatus[];
}

/** What planning one object gives: a step when something of ours is on it, and what of it stays, with why. */
export interface ObjectPlan {
  step?: CleanupStep;
  leftAlone: LeftAlone[];
}

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
  gatedPods: readonly Versioned<GatedPodView>[];
  /** The node leases of the medik8s namespace, anyone's. */
  leases: readonly Versioned<NodeLeaseView>[];
  /**
   * Whether `nodes` is every node (the list succeeded). A lease of ours goes only once nothing of ours is left on its
   * node, so with no node list every lease stays: a stamped node would otherwise lose it, and NodeHealthCheck could
   * take the node from under our cordon.
   */
  nodesListed: boolean;
  healths: readonly Versioned<HealthLeftover>[];
  /** The SandboxPolicies: never touched, named so nobody wonders. */
  policies: readonly string[];
  keepHealth: boolean;
}

/** The reason an uninstall's undo carries: the node changes are built by the operator's own undo. */
export const UNINSTALL_REASON = 'Uninstalled';
const UNINSTALL_MESSAGE = 'Undone by sandbox-remediator cleanup (uninstall).';

export function planCleanup(input: CleanupInput): CleanupPlan {
  const plan: CleanupPlan = { steps: [], leftAlone: [] };
  const add = (part: ObjectPlan) => {
    if (part.step) plan.steps.push(part.step);
    plan.leftAlone.push(...part.leftAlone);
  };
  // The last remedy the operator takes is undone first: the agents lift while the rest is undone.
  for (const health of input.healths) add(planIoLimits(health));
  for (const pod of input.gatedPods) add(planGate(pod));
  for (const w of input.workloads) add(planWorkload(w));
  for (const n of input.nodes) add(planNode(n));
  for (const n of input.nodes) add(planNodeCondition(n));
  for (const lease of input.leases) add(planLease(lease, input.nodesListed));
  const listed = new Set(input.nodes.map((n) => n.view.name));
  for (const health of input.healths) {
    const node = health.view.nodeName ?? health.view.name;
    add(planHealth(health, input.keepHealth, !input.nodesListed || listed.has(node)));
  }
  for (const name of input.policies)
    plan.leftAlone.push({
      target: `sandboxpolicy/${name}`,
      why: "yours, not the operator's: it goes with the CRDs (kubectl delete -f crds/)",
    });
  return plan;
}

/** A pod at our pacing gate: the gate is ours by its name, so it is always lifted (its other gates stay). */
export function planGate({ view: pod, version }: Versioned<GatedPodView>): ObjectPlan {
  const by = pod.policy ? ` (set for policy ${pod.policy})` : '';
  const others = pod.gates.filter((g) => g !== PACING_GATE);
  const target = `pod/${pod.namespace}/${pod.name}`;
  return {
    step: {
      kind: 'ReleaseGate',
      target,
      pod,
      version,
      changes: [`scheduling gate ${PACING_GATE} lifted${by}`],
    },
    leftAlone:
      others.length > 0 ? [{ target, why: `scheduling gates ${others.join(', ')} are not ours` }] : [],
  };
}

/** What our stamps on a node record, undone as the operator undoes it; what others did stays. */
export function planNode({ view: node, version }: Versioned<NodeView>): ObjectPlan {
  const target = `node/${node.name}`;
  const stamps = node.stamps;
  if (!stamps) return { leftAlone: unstampedNode(node) };
  const leftAlone: LeftAlone[] = [];
  const gone = revertedByOthers(node, stamps);
  // Someone else reverted part of it: only our claim goes (a stamp drop changes nothing but our annotations).
  const actions: NodeAction[] = undoActions(node.name, stamps, UNINSTALL_REASON, UNINSTALL_MESSAGE).map(
    (a) => {
      if (a.kind === 'Uncordon' && gone.cordon) return { ...a, reason: 'UncordonedByOthers' };
      if (a.kind === 'Untaint' && gone.taint) return { ...a, reason: 'UntaintedByOthers' };
      return a;
    },
  );
  const changes = nodeChanges(node, stamps, gone, leftAlone);
  if (!stamps.cordoned && node.unschedulable)
    leftAlone.push({ target, why: 'left cordoned: our stamps record no cordon (someone else cordoned it)' });
  return {
    step: {
      kind: 'ReleaseNode',
      target,
      node,
      change: nodeChange(node, actions, undefined, version),
      changes,
    },
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

/** Our condition type on a node: nobody else writes it, so it is removed wherever it is, as the orphan sweep does. */
const OUR_REASONS: ReadonlySet<string> = new Set(Object.values(NODE_CONDITION_REASONS));

export function planNodeCondition({ view: node, version }: Versioned<NodeView>): ObjectPlan {
  const condition = node.ownCondition;
  if (!condition) return { leftAlone: [] };
  // The type alone could be another writer's: ours carries one of our reasons.
  if (!OUR_REASONS.has(condition.reason))
    return {
      leftAlone: [
        {
          target: `node/${node.name}`,
          why: `condition ${NODE_CONDITION_TYPE} with reason ${condition.reason || '(none)'}: not one the operator writes`,
        },
      ],
    };
  const reason = ` (${condition.reason})`;
  return {
    step: {
      kind: 'RemoveNodeCondition',
      target: `node/${node.name}`,
      node: node.name,
      version,
      changes: [`condition ${NODE_CONDITION_TYPE}=${condition.status}${reason} removed`],
    },
    leftAlone: [],
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
export function planWorkload({ view: w, version }: Versioned<WorkloadView>): ObjectPlan {
  const target = rolloutTarget(w);
  if (!w.stamps) {
    const leftAlone = w.paused
      ? [{ target, why: `held by its owner (${OWNER_HOLDS[w.kind]}), not by us` }]
      : [];
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
  if (w.handsOffUntil) change.annotations[ROLLOUT_STAMP.handsOffUntil] = null;
  // The record of what our hold replaced is gone or mangled: the operator lets such a hold go (it can no longer tell
  // it stands), and so does the cleanup; the strategy stays as it is rather than be guessed at.
  const lostRecord = !change.spec && !w.held && (w.kind === 'StatefulSet' || w.kind === 'DaemonSet');
  const changes = [
    change.spec
      ? releasedWords(w)
      : lostRecord
        ? 'spec.updateStrategy not changed'
        : 'already released by its owner',
    `stamps of policy ${w.stamps.policy} removed`,
  ];
  const leftAlone = lostRecord
    ? [
        {
          target,
          why: `spec.updateStrategy stays as it is: the record of what our hold replaced (${ROLLOUT_STAMP.heldStrategy}) is missing or unreadable; check it by hand`,
        },
      ]
    : [];
  return { step: { kind: 'ReleaseRollout', target, workload: w, change, changes }, leftAlone };
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

/** A medik8s node lease is ours when its holder is (some policy's); another's is never touched, expired or not. */
export function planLease(
  { view: lease, version }: Versioned<NodeLeaseView>,
  nodesListed = true,
): ObjectPlan {
  const target = `lease/${NODE_LEASE_NAMESPACE}/${nodeLeaseName(lease.node)}`;
  if (!isOurHolder(lease.holder))
    return { leftAlone: [{ target, why: `held by ${holderName(lease)}, not by us` }] };
  if (!nodesListed)
    return {
      leftAlone: [
        { target, why: 'ours, kept: the nodes could not be listed, so its node may still carry our fence' },
      ],
    };
  return {
    step: { kind: 'DeleteLease', target, lease, version, changes: [`deleted (holder ${holderName(lease)})`] },
    leftAlone: [],
  };
}

/**
 * The IO limits the operator wants on a node's pods (limitIo) are no longer wanted: the node's agent lifts each,
 * putting back what its files held. A list that does not parse is none of ours to rewrite (not read here).
 */
export function planIoLimits({ view: health, version }: Versioned<HealthLeftover>): ObjectPlan {
  const read = health.ioLimits ?? [];
  if (read.length === 0) return { leftAlone: [] };
  const pods = [...new Set(read.map((l) => l.pod))].join(', ');
  return {
    step: {
      kind: 'LiftIoLimits',
      target: `sandboxhealth/${health.name}`,
      name: health.name,
      read,
      version,
      changes: [
        `${read.length} IO limit(s) no longer wanted (${pods}): its node's agent lifts them, putting back what the files held`,
      ],
    },
    leftAlone: [],
  };
}

/**
 * Every SandboxHealth is the operator's report: deleted, unless kept. One whose node has IO limits of ours in force
 * holds what their files held before (the agent's report): it goes only once the agent reports them lifted, unless its
 * node is gone (and the pods' cgroups with it).
 */
export function planHealth(
  { view: health, version }: Versioned<HealthLeftover>,
  keep: boolean,
  nodeIsThere = true,
): ObjectPlan {
  const { name } = health;
  const target = `sandboxhealth/${name}`;
  if (keep) return { leftAlone: [{ target, why: 'kept (--keep-health)' }] };
  if (health.unreadableLimits)
    return {
      leftAlone: [
        {
          target,
          why: `kept: its IO limits (spec.ioLimits or status.ioLimits) do not parse, and may hold what the files held before; read them (kubectl get sandboxhealth ${name} -o yaml) before you delete it`,
        },
      ],
    };
  const limited = (health.ioLimits?.length ?? 0) > 0 || (health.applied?.length ?? 0) > 0;
  const awaitLift = limited && nodeIsThere;
  const pods = Object.fromEntries((health.ioLimits ?? []).map((l) => [l.podUid, l.pod]));
  return {
    step: {
      kind: 'DeleteHealth',
      target,
      name,
      version,
      awaitLift,
      nodeGone: !nodeIsThere,
      pods,
      changes: ['deleted'],
    },
    leftAlone: [],
  };
}
