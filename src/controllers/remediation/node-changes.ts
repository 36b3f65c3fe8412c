import type { Actuator } from '../../actuation/actuator.js';
import { nodeChange, unschedulableBy } from '../../actuation/node-change.js';
import type { NodeStamps } from '../../api/v1alpha1/index.js';
import type { NodeView } from '../../detection/index.js';
import { isConflict } from '../../ports/errors.js';
import { isNodeAction, type Action, type BlockedAction, type NodeAction } from '../../policy/actions.js';
import type { Hold } from '../../policy/node-facts.js';
import { TerminalError } from '../../runtime/controller.js';
import type { Expectations } from '../../runtime/expectations.js';
import { forEachLimit } from '../../runtime/limit.js';
import type { ActionResult } from '../../status/remediation-status.js';
import type { Failures } from '../failures.js';
import type { NodeLeases } from '../leases/node-leases.js';
import type { NodeObservation } from '../policy-memory.js';
import type { RefusedChanges } from './refused-changes.js';

/** Whether the node is unschedulable after this pass's node actions that changed it (a dry run's changed nothing). */
export function unschedulableAfter(node: NodeView, results: readonly ActionResult[]): boolean {
  let unschedulable = node.unschedulable;
  for (const { action, outcome, simulated } of results)
    if (outcome === 'Succeeded' && !simulated) unschedulable = unschedulableBy(action) ?? unschedulable;
  return unschedulable;
}

/** What node patches share: the read-your-writes fence, the write limit, and the node leases a fence takes first. */
export interface NodePatchDeps {
  expectations: Expectations;
  /** The changes the apiserver refused: not sent again as they were. */
  refused: RefusedChanges;
  writeConcurrency: number;
  /** safety.nodeLease: the lease is taken before a fence goes up, and given back with the undo. */
  leases?: Pick<NodeLeases, 'claim' | 'release'> | undefined;
}

/** Each of a node's actions, held by one hold. */
const blockAll = (actions: readonly Action[], node: string, hold: Hold): BlockedAction[] =>
  actions.map((action) => ({
    kind: action.kind,
    node,
    target: action.target,
    guard: hold.guard,
    message: hold.message,
    ...(hold.liftsAt ? { liftsAt: hold.liftsAt } : {}),
  }));

export interface NodePatchInput {
  policy: string;
  /** The policy object's UID and generation: a refusal holds for the policy as it decided. */
  uid: string;
  generation: number;
  /** The pass's time: a refusal is tried again after REFUSAL_RETRY_MS. */
  now: Date;
  actions: readonly Action[];
  stampsAfter: ReadonlyMap<string, NodeStamps | undefined>;
  actuator: Actuator;
  failures: Failures;
  report(result: ActionResult): void;
  /** What the API holds of the node is uncertain now: read it afresh. */
  markDirty(node: string): void;
}

/**
 * Patches each node once with everything decided for it, independent nodes side by side under the write limit, each
 * on the version it was decided on (a node changed since answers 409, not our undo of it). A change the apiserver
 * refused for what it is is not sent again until someone changes the node or the policy changes, or for
 * REFUSAL_RETRY_MS (what refused it may be fixed meanwhile: an admission policy, a webhook). Returns the nodes whose patch failed
 * (they keep the stamps they had: claim nothing that was not written) and what the refusals block.
 */
export async function patchNodes(
  deps: NodePatchDeps,
  observations: ReadonlyMap<string, NodeObservation>,
  input: NodePatchInput,
): Promise<{ failedNodes: Set<string>; blocked: BlockedAction[] }> {
  const failedNodes = new Set<string>();
  const blocked: BlockedAction[] = [];
  const byNode = new Map<string, NodeAction[]>();
  for (const action of input.actions)
    if (isNodeAction(action)) byNode.set(action.node, [...(byNode.get(action.node) ?? []), action]);
  await forEachLimit([...byNode], deps.writeConcurrency, async ([nodeName, actions]) => {
    const observation = observations.get(nodeName);
    if (!observation) return;
    const refusal = deps.refused.refusal(observation.node, input, input.now);
    if (refusal !== undefined) {
      failedNodes.add(nodeName);
      blocked.push(...blockAll(actions, nodeName, { guard: 'RefusedByApi', message: refusal }));
      return;
    }
    // The lease before the fence: a node another holder took since we decided is left alone.
    const claim = await deps.leases?.claim(input.actuator, input.policy, observation.node, actions);
    if (claim?.hold) {
      failedNodes.add(nodeName);
      input.markDirty(nodeName);
      blocked.push(...blockAll(actions, nodeName, claim.hold));
      return;
    }
    const change = nodeChange(
      observation.node,
      actions,
      input.stampsAfter.get(nodeName),
      observation.version,
    );
    try {
      deps.expectations.expect(`Node/${nodeName}`, await input.actuator.patchNode(change));
      for (const action of actions) input.report({ action, outcome: 'Succeeded' });
      // Nothing of ours left on the node: neither is the lease we took for it.
      if (!input.stampsAfter.get(nodeName)) await deps.leases?.release(input.actuator, nodeName);
    } catch (err) {
      failedNodes.add(nodeName);
      input.markDirty(nodeName);
      if (isConflict(err)) {
        // Changed since we looked: decide again on the fresh node, soon; nothing failed.
        input.failures.add(`patch of node/${nodeName} (changed meanwhile)`, err);
        return;
      }
      if (err instanceof TerminalError) deps.refused.refuse(observation.node, input, err.message, input.now);
      input.failures.add(`patch of node/${nodeName}`, err);
      const detail = err instanceof Error ? err.message : String(err);
      for (const action of actions) input.report({ action, outcome: 'Failed', detail });
    } finally {
      claim?.done();
    }
  });
  return { failedNodes, blocked };
}
