import type { NodeView } from '../../detection/index.js';

/** A node change the apiserver refused for what it is (400/422): not sent again as it is. */
interface RefusedChange {
  /** The policy object (its UID) whose change it was: one made again under the name starts afresh. */
  policy: string;
  /** What of the node the change was decided on (nodeContent). */
  content: string;
  /** The policy's generation it was decided on. */
  generation: number;
  message: string;
  /** When the apiserver refused it. */
  at: number;
}

/**
 * How long a refused change is not sent again, unless the node or the policy changes first: what refused it (an
 * admission policy, a webhook) may be fixed without either changing, and before, kubelet's status writes, which moved
 * the node's version, had it tried again about as often.
 */
export const REFUSAL_RETRY_MS = 5 * 60_000;

/**
 * What of a node a node patch is decided on and another's write may change: its labels, spec.unschedulable, its
 * taints and our stamps. Not its status: kubelet's heartbeats and our own condition change nothing a patch depends on.
 */
const nodeContent = (node: NodeView): string =>
  JSON.stringify([node.labels, node.unschedulable, node.taints, node.stamps ?? null]);

/** The policy a change was decided for: its object (UID) and the generation of its spec. */
export interface Decider {
  uid: string;
  generation: number;
}

/**
 * The node changes the apiserver refused for what they are, by node (a node is one policy's at a time): node
 * patching owns them, one set for the process. One is not sent again until someone changes the node (its labels,
 * cordon, taints or stamps) or the policy changes, or for REFUSAL_RETRY_MS. At most one per node, dropped once it
 * lapses and with the node.
 */
export class RefusedChanges {
  private readonly nodes = new Map<string, RefusedChange>();

  /** Why a change of the node as it is now, decided by this policy, is not sent; undefined when it may be. */
  refusal(node: NodeView, policy: Decider, now: Date): string | undefined {
    const refused = this.nodes.get(node.name);
    if (!refused) return undefined;
    const holds =
      refused.policy === policy.uid &&
      refused.content === nodeContent(node) &&
      refused.generation === policy.generation &&
      now.getTime() - refused.at < REFUSAL_RETRY_MS;
    if (!holds) this.nodes.delete(node.name);
    return holds ? refused.message : undefined;
  }

  refuse(node: NodeView, policy: Decider, message: string, now: Date): void {
    this.nodes.set(node.name, {
      policy: policy.uid,
      content: nodeContent(node),
      generation: policy.generation,
      message,
      at: now.getTime(),
    });
  }

  forgetNode(node: string): void {
    this.nodes.delete(node);
  }
}
