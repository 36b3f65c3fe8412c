// PURE: what the remediation decides (actions, and actions a guard holds), and the rules about them that more than
// one step reads: which actions evict, which only let go of a claim someone else reverted, and how an undo is built.
import type { ActionKind, NodeStamps, Taint } from '../api/v1alpha1/index.js';

export interface PodRef {
  namespace: string;
  name: string;
  uid: string;
}

export type Guard =
  | 'CacheNotSynced'
  | 'Paused'
  | 'ControlPlaneNode'
  /** Another holder (NodeHealthCheck, node-maintenance-operator, ...) holds the medik8s lease node-<node>. */
  | 'NodeLease'
  | 'NodeNotReady'
  | 'DryRun'
  | 'Cooldown'
  | 'StormLimit'
  | 'MinSchedulableNodes'
  | 'NodeStillSchedulable'
  | 'EvictionRate'
  | 'NoController'
  | 'DaemonSetPod'
  | 'MirrorPod'
  /** Migration only: labelled sandbox.remediator.io/no-migrate=true. */
  | 'NoMigrateLabel'
  /** Migration only: a pod of kube-system or of the operator's own namespace. */
  | 'ProtectedNamespace'
  /** Migration only: its emptyDir, hostPath or ephemeral volume's data would be lost (evictLocalStoragePods). */
  | 'LocalStorage'
  /** Migration only: its PersistentVolume is bound to the node: it could not start anywhere else. */
  | 'NodeBoundVolume'
  /** Migration only: a system-critical priority (evictSystemCriticalPods). */
  | 'SystemCritical'
  /** Migration only: what the pod keeps on the node was not read, so moving it is not verified to lose nothing. */
  | 'PodDataUnknown'
  /** Undo only: another fence stands on the node (a NodeMaintenance, a taint added after ours). */
  | 'OtherFence'
  /** Not decided here: the Eviction API answered 429 for a PodDisruptionBudget. */
  | 'DisruptionBudget'
  /** Not decided here: the apiserver refused the change for what it is (400/422); not retried as it is. */
  | 'RefusedByApi';

interface ActionBase {
  node: string;
  /** node/NAME or pod/NAMESPACE/NAME */
  target: string;
  /** One CamelCase word. */
  reason: string;
  message: string;
}
export type Action =
  | (ActionBase & { kind: 'Cordon' | 'Uncordon' })
  | (ActionBase & { kind: 'Taint' | 'Untaint'; taint: Taint })
  | (ActionBase & { kind: 'Evict' | 'Migrate'; pod: PodRef });

export interface BlockedAction {
  kind: ActionKind;
  node: string;
  target: string;
  guard: Guard;
  message: string;
  /** When the guard lifts with time alone (Cooldown, EvictionRate); absent when only a change can lift it. */
  liftsAt?: Date;
}

/** An action that moves a pod off its node through the Eviction API: a stuck pod, or an IO-heavy one. */
export type Eviction = Extract<Action, { kind: 'Evict' | 'Migrate' }>;
/** An action carried out by patching its node (spec.unschedulable, its taints). */
export type NodeAction = Exclude<Action, Eviction>;

/**
 * Where each kind of action is carried out: on its node (a patch of spec.unschedulable or its taints), or on a pod (the
 * Eviction API). Each kind is named: a new kind fails to compile here until it is given its place, rather than falling
 * to the node patch (or to the evictions) unannounced.
 */
export function placeOf(kind: ActionKind): 'Node' | 'Pod' {
  switch (kind) {
    case 'Cordon':
    case 'Uncordon':
    case 'Taint':
    case 'Untaint':
      return 'Node';
    case 'Evict':
    case 'Migrate':
      return 'Pod';
    default:
      return unnamedKind(kind);
  }
}

function unnamedKind(kind: never): never {
  throw new Error(`no place for action kind ${String(kind)}`);
}

/**
 * What a kind of action does to its node's fence: puts it up (a cordon, our taint), takes it down (their undo), or
 * neither (a pod's). Each kind is named, as in `placeOf`.
 */
export function fenceStepOf(kind: ActionKind): 'Up' | 'Down' | undefined {
  switch (kind) {
    case 'Cordon':
    case 'Taint':
      return 'Up';
    case 'Uncordon':
    case 'Untaint':
      return 'Down';
    case 'Evict':
    case 'Migrate':
      return undefined;
    default:
      return unnamedKind(kind);
  }
}

/** Whether an action is carried out by patching its node. */
export const isNodeAction = (action: Action): action is NodeAction => placeOf(action.kind) === 'Node';

/** Whether an action (or a recorded one) evicts a pod. */
export function isEviction<A extends { kind: ActionKind }>(action: A): action is A & Pick<Eviction, 'kind'> {
  return placeOf(action.kind) === 'Pod';
}

/** Whether an action of this kind, with this outcome, moved a pod off its node (a stuck pod, or a migrated one). */
export const evictedPod = (kind: ActionKind, outcome: string): boolean =>
  placeOf(kind) === 'Pod' && outcome === 'Succeeded';

/** Whether an action of this kind, with this outcome, moved an IO-heavy pod off its node (what maxPodsPerNode counts). */
export const migratedPod = (kind: ActionKind, outcome: string): boolean =>
  kind === 'Migrate' && outcome === 'Succeeded';

/** The object an action is about, which its Event names. */
export type Subject =
  { kind: 'Node'; name: string; uid: string } | { kind: 'Pod'; namespace: string; name: string; uid: string };

/** What an action is about, by its kind: its node for a node change, its pod for an eviction. */
export function subjectOf(action: Action, node: { name: string; uid: string }): Subject {
  switch (action.kind) {
    case 'Cordon':
    case 'Uncordon':
    case 'Taint':
    case 'Untaint':
      return { kind: 'Node', name: node.name, uid: node.uid };
    case 'Evict':
    case 'Migrate':
      return { kind: 'Pod', namespace: action.pod.namespace, name: action.pod.name, uid: action.pod.uid };
    default: {
      const unnamed: never = action;
      return unnamedKind((unnamed as { kind: never }).kind);
    }
  }
}

/**
 * Letting go of a stamp after someone else reverted us (UncordonedByOthers, UntaintedByOthers, ResumedByOthers):
 * reported, but not an action of ours; it changes nothing on the object but our annotations.
 */
export const isStampDrop = (action: { reason: string }): boolean => action.reason.endsWith('ByOthers');

/** What of ours someone else reverted: the cordon (the node is schedulable again), or our taint (its key is gone). */
export function revertedByOthers(
  node: { unschedulable: boolean; taints: readonly { key: string }[] },
  stamps: NodeStamps,
): { cordon: boolean; taint: boolean } {
  const ourTaint = stamps.taint;
  return {
    cordon: stamps.cordoned && !node.unschedulable,
    taint: ourTaint !== undefined && !node.taints.some((t) => t.key === ourTaint.key),
  };
}

/** The actions that undo what our stamps on a node record, taint first (the reverse of the order they were made). */
export function undoActions(node: string, stamps: NodeStamps, reason: string, message: string): NodeAction[] {
  const target = `node/${node}`;
  const actions: NodeAction[] = [];
  if (stamps.taint) actions.push({ kind: 'Untaint', node, target, taint: stamps.taint, reason, message });
  if (stamps.cordoned) actions.push({ kind: 'Uncordon', node, target, reason, message });
  return actions;
}

/**
 * A dry run cannot undo what a real run did: real stamps it finds stay exactly as they are (it would report the same
 * undo on every pass, and change nothing).
 */
export const isFrozenByDryRun = (dryRun: boolean, realStamps: object | undefined): boolean =>
  dryRun && realStamps !== undefined;
