import type { Actuator } from '../../actuation/actuator.js';
import {
  NODE_CONDITION_REASONS,
  NODE_CONDITION_TYPE,
  type NodeConditionValue,
  type NodeStamps,
  type OwnNodeCondition,
  type SandboxPolicySpec,
} from '../../api/v1alpha1/index.js';
import type { NodeView } from '../../detection/index.js';
import type { Logger } from '../../observability/log.js';
import { decideNodeCondition, type NodeConditionDecision } from '../../policy/node-condition.js';
import type { NodeFacts } from '../../policy/node-facts.js';
import type { ClusterCache } from '../../ports/cluster.js';
import type { EventRecorder } from '../../ports/writes.js';
import type { Expectations } from '../../runtime/expectations.js';
import { forEachLimit } from '../../runtime/limit.js';
import type { Failures } from '../failures.js';
import type { NodeObservation } from '../policy-memory.js';

export interface NodeConditionHooks {
  /** Our condition changed status or reason on a node (removals not counted). */
  onNodeCondition?(policy: string, status: string, reason: string): void;
}

export interface NodeConditionDeps {
  cache: Pick<ClusterCache, 'watchesHealthy'>;
  expectations: Expectations;
  recorder: EventRecorder;
  logger: Logger;
  writeConcurrency: number;
  hooks: NodeConditionHooks;
  /**
   * The real actuator, with which a policy in a dry run or paused still takes back a True of ours once the node
   * recovers, so that no health check reboots a healthy node on a verdict nobody keeps; none under --dry-run.
   */
  retractor?: Actuator | undefined;
}

/** What the Node condition reads of one pass of a policy, after its node patches. */
export interface ConditionPass {
  policy: string;
  spec: SandboxPolicySpec;
  now: Date;
  /** The pass's actuator: a dry one sets nothing (only a True of ours is taken back, with the retractor). */
  actuator: Actuator;
  failures: Failures;
  observations: readonly NodeObservation[];
  facts: ReadonlyMap<string, NodeFacts>;
  /** The stamps each node keeps after the pass; absent when the pass decided nothing (a node still settling). */
  stampsAfter: ReadonlyMap<string, NodeStamps | undefined> | undefined;
  /** The nodes whose patch failed: they keep what they had, and so does their condition. */
  failedNodes: ReadonlySet<string>;
  /** What the API holds of the node is uncertain now (a write of ours went out): the next pass looks again. */
  markDirty(node: string): void;
}

/** A decision that takes a True back (to False, or away) rather than setting one. */
const retracts = (decision: NonNullable<NodeConditionDecision>) =>
  'remove' in decision || decision.set.status === 'False';

/**
 * Keeps SandboxCreationDegraded on each node of a policy as decideNodeCondition says, after the pass's node patches:
 * the verdict in the language NodeHealthCheck, MachineHealthCheck and node-problem-detector share. Written only when
 * the pass decided on every node with the caches healthy; in a dry run or while the policy is paused nothing is set,
 * and only a True of ours is taken back (False once recovered, or removed). Each write fenced as our node patches
 * are, and announced by an Event when its status or reason changes.
 */
export class NodeConditions {
  constructor(private readonly deps: NodeConditionDeps) {}

  async write(pass: ConditionPass): Promise<void> {
    const { policy, spec, now, stampsAfter } = pass;
    const standingDown = pass.actuator.dryRun || spec.safety.paused;
    const actuator = standingDown ? this.deps.retractor : pass.actuator;
    if (!actuator || !stampsAfter || !this.deps.cache.watchesHealthy()) return;
    const decided: { node: NodeView; decision: NonNullable<NodeConditionDecision> }[] = [];
    for (const observation of pass.observations) {
      const { node } = observation;
      const facts = pass.facts.get(node.name);
      if (!facts || pass.failedNodes.has(node.name)) continue;
      const decision = decideNodeCondition({
        policy,
        spec,
        facts,
        current: node.ownCondition,
        stampsAfter: stampsAfter.get(node.name),
        evidence: observation.io?.condition.message ?? '',
        now,
      });
      if (decision && (!standingDown || retracts(decision))) decided.push({ node, decision });
    }
    await forEachLimit(decided, this.deps.writeConcurrency, async ({ node, decision }) => {
      const condition = 'set' in decision ? decision.set : null;
      if (await this.put(pass, actuator, node, condition))
        await this.announce(policy, node, condition, `policy ${policy} writes it no more`);
    });
  }

  /** Removes our condition from a node no valid policy owns (the orphan sweep's); false when the write failed. */
  async remove(actuator: Actuator, node: NodeView, failures: Failures, why: string): Promise<boolean> {
    try {
      this.deps.expectations.expect(`Node/${node.name}`, await actuator.setNodeCondition(node.name, null));
    } catch (err) {
      failures.add(`removal of the condition from node/${node.name}`, err);
      return false;
    }
    this.deps.logger.info(`Removed ${NODE_CONDITION_TYPE} from the node`, { node: node.name, why });
    await this.announce(undefined, node, null, why);
    return true;
  }

  private async put(
    pass: Pick<ConditionPass, 'failures' | 'markDirty'>,
    actuator: Actuator,
    node: NodeView,
    condition: NodeConditionValue | null,
  ): Promise<boolean> {
    try {
      this.deps.expectations.expect(
        `Node/${node.name}`,
        await actuator.setNodeCondition(node.name, condition),
      );
      return true;
    } catch (err) {
      pass.failures.add(`${NODE_CONDITION_TYPE} of node/${node.name}`, err);
      return false;
    } finally {
      // Marked once the write is done (and expected): a look taken while it was in flight read the node from before
      // it, and the next pass must look again, behind the expectation, rather than decide on that look.
      pass.markDirty(node.name);
    }
  }

  /** An Event on the node when the status or reason changed, and the metric; a refreshed message is silent. */
  private async announce(
    policy: string | undefined,
    node: NodeView,
    condition: NodeConditionValue | null,
    why: string,
  ): Promise<void> {
    const before: OwnNodeCondition | undefined = node.ownCondition;
    if (condition && before?.status === condition.status && before.reason === condition.reason) return;
    const target = { kind: 'Node' as const, name: node.name, uid: node.uid };
    if (!condition) {
      await this.deps.recorder.record({
        target,
        type: 'Normal',
        reason: 'NodeConditionRemoved',
        message: `Removed ${NODE_CONDITION_TYPE}: ${why}.`,
      });
      return;
    }
    if (policy) this.deps.hooks.onNodeCondition?.(policy, condition.status, condition.reason);
    const exhausted = condition.reason === NODE_CONDITION_REASONS.remediationExhausted;
    const recovered = condition.status === 'False';
    this.deps.logger.info(`Set ${NODE_CONDITION_TYPE}=${condition.status}`, {
      node: node.name,
      policy,
      reason: condition.reason,
    });
    await this.deps.recorder.record({
      target,
      type: recovered ? 'Normal' : 'Warning',
      reason: exhausted ? 'RemediationExhausted' : recovered ? 'NodeConditionCleared' : 'NodeConditionSet',
      message: `${NODE_CONDITION_TYPE}=${condition.status} (${condition.reason}): ${condition.message}`,
    });
  }
}
