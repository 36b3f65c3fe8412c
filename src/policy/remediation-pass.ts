// PURE: the state one remediation pass shares across the policy's nodes: the policy-wide guards and budgets, computed
// once before the first node and spent as nodes claim them, and what the pass has decided so far.
import type { ActionKind, NodeStamps } from '../api/v1alpha1/index.js';
import type { Action, BlockedAction, Eviction, PodRef } from './actions.js';
import type { Hold, RemediationDecision, RemediationInput } from './node-facts.js';

export interface RemediationPass {
  readonly input: RemediationInput;
  /** The nodes whose evidence calls for remediation under the policy. */
  readonly triggered: ReadonlySet<string>;
  readonly storm: RemediationDecision['storm'];
  /** Ready, unfenced nodes, less those this pass fences. */
  schedulable: number;
  /** Evictions maxEvictionsPerMinute still allows, less those this pass plans. */
  evictionBudget: number;
  /**
   * Evictions a node is given before the other nodes have had theirs: the budget shared among the nodes with pods to
   * move (at least one each), so one node's pods cannot spend it all; what is left goes round the nodes after.
   */
  readonly evictionShare: number;
  /**
   * The budget kept for nodes that have had no eviction in the window (firstEvictionReserve): a node with one already
   * spends the budget only down to it.
   */
  readonly evictionReserve: number;
  /** Evictions planned per node this pass, against the share. */
  readonly evictionsOn: Map<string, number>;
  /** Evictions past a node's share, in the order asked: given the budget the shares left, round the nodes. */
  readonly deferred: Eviction[];
  readonly actions: Action[];
  readonly blocked: BlockedAction[];
  readonly stampsAfter: Map<string, NodeStamps | undefined>;
}

export const nodeTarget = (node: string) => `node/${node}`;
export const podTarget = (pod: PodRef) => `pod/${pod.namespace}/${pod.name}`;

/** Records an action a guard holds. */
export function block(
  pass: RemediationPass,
  kind: ActionKind,
  node: string,
  target: string,
  hold: Hold,
): void {
  const { guard, message, liftsAt } = hold;
  pass.blocked.push({ kind, node, target, guard, message, ...(liftsAt ? { liftsAt } : {}) });
}
