// PURE: the one patch that carries out every action decided on a node: spec.unschedulable, the taint list, and the
// stamps that record them. Each node action kind is handled by name; an eviction is not a node change, and a new kind
// fails to compile here until it is given one.
import type { NodeChange } from './actuator.js';
import { sameTaint, stampAnnotations, type NodeStamps, type Taint } from '../api/v1alpha1/index.js';
import type { NodeView } from '../detection/index.js';
import { isStampDrop, type Action, type NodeAction } from '../policy/actions.js';

/** Whether an action leaves its node unschedulable (true), schedulable (false), or does not say (undefined). */
export function unschedulableBy(action: Pick<Action, 'kind' | 'reason'>): boolean | undefined {
  switch (action.kind) {
    case 'Cordon':
      return true;
    case 'Uncordon':
      // Dropping our stamp from a cordon someone else lifted (or made again) leaves the field to them.
      return isStampDrop(action) ? undefined : false;
    case 'Taint':
    case 'Untaint':
    case 'Evict':
    case 'Migrate':
      return undefined;
    default:
      return unknownKind(action.kind);
  }
}

/** A kind no case names: a compile error here (the switches above must name every kind), never a silent no-op. */
function unknownKind(kind: never): never {
  throw new Error(`no node change for action kind ${String(kind)}`);
}

/** The taint list after one action, or undefined when the action leaves it as it is. */
function taintsAfter(taints: readonly Taint[], action: NodeAction): Taint[] | undefined {
  switch (action.kind) {
    case 'Cordon':
    case 'Uncordon':
      return undefined;
    case 'Taint':
      return taints.some((t) => sameTaint(t, action.taint)) ? undefined : [...taints, action.taint];
    case 'Untaint': {
      const kept = taints.filter((t) => !sameTaint(t, action.taint));
      return kept.length === taints.length ? undefined : kept;
    }
    default:
      return unknownKind(action);
  }
}

/** One patch for everything decided on a node, on the version it was decided on (when given). */
export function nodeChange(
  node: NodeView,
  actions: readonly NodeAction[],
  stampsAfter: NodeStamps | undefined,
  resourceVersion: string | undefined,
): NodeChange {
  const change: NodeChange = { node: node.name, annotations: stampAnnotations(stampsAfter, node.uid) };
  if (resourceVersion) change.resourceVersion = resourceVersion;
  let taints: Taint[] | undefined;
  for (const action of actions) {
    const unschedulable = unschedulableBy(action);
    if (unschedulable !== undefined) change.unschedulable = unschedulable;
    taints = taintsAfter(taints ?? node.taints, action) ?? taints;
  }
  if (taints) change.taints = taints;
  return change;
}
