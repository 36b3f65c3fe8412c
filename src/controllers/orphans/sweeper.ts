import type { Actuator } from '../../actuation/actuator.js';
import type { Logger } from '../../observability/log.js';
import { EXCLUDE_LABEL, formatTaint, type NodeStamps } from '../../api/v1alpha1/index.js';
import { workloadKey, type NodeView } from '../../detection/index.js';
import { isFrozenByDryRun, undoActions } from '../../policy/actions.js';
import { otherFence } from '../../policy/guards.js';
import { leaseHolder } from '../../policy/node-lease.js';
import { BoundedMap } from '../../runtime/bounded-map.js';
import { rolloutTarget } from '../../policy/rollouts.js';
import type { ClusterCache } from '../../ports/cluster.js';
import type { EventRecorder, StatusWriter } from '../../ports/writes.js';
import type { Clock } from '../../runtime/clock.js';
import type { ReconcileResult } from '../../runtime/controller.js';
import { SETTLE_RETRY_MS, type Expectations } from '../../runtime/expectations.js';
import { ACTION_WORDS, ROLLOUT_WORDS } from '../../status/remediation-status.js';
import type { ActionLog } from '../action-log.js';
import { Failures } from '../failures.js';
import { nodeChange } from '../../actuation/node-change.js';
import type { NodeConditions } from '../nodecondition/node-conditions.js';
import { assignmentOf, isFrozenPolicy, type NodeAssignment } from '../node-assignment.js';
import type { Pacer } from '../pacing/pacer.js';
import { workloadChange } from '../../actuation/workload-change.js';

/** The sweeper's one key: its own queue hands it to one worker at a time, so two sweeps never interleave. */
/** How far a sweep of one kind got: all done, something left for later (frozen, refused), or a write not back yet. */
type SweepResult = 'complete' | 'incomplete' | 'unsettled';

export const SWEEP_KEY = 'orphans';
/** Looked at again this soon when a write of ours is not back through the watch, or a watch is broken. */
const UNHEALTHY_RETRY_MS = 5_000;

export interface SweeperDeps {
  cache: ClusterCache;
  writer: StatusWriter;
  recorder: EventRecorder;
  expectations: Expectations;
  /** The real actuator: what the sweep undoes are real changes. */
  actuator: Actuator;
  pacer: Pacer;
  conditions: NodeConditions;
  actions: ActionLog;
  clock: Clock;
  logger: Logger;
  resyncMs: number;
  /** --dry-run: the operator changes nothing, so what a real run stamped stays as it is. */
  dryRun: boolean;
}

/**
 * Undoes what the operator did where no valid policy owns it any more (the policy was deleted, or the node was opted
 * out or relabelled): nothing would ever judge their recovery, and the stamps say exactly what to revert. What a policy
 * that still exists but is invalid did stays frozen, as its SandboxHealths do; its gates are lifted anyway (a gate never
 * strands a pod). Read from the stamps, so it works after any restart. Every node and SandboxHealth is walked only when
 * ownership changed (a policy, a node's labels), until a sweep got through everything, and at each resync.
 */
export class OrphanSweeper {
  private swept: { signature: string | undefined; until: number } = { signature: undefined, until: 0 };
  /** Undos waiting for another fence, logged once each (the sweep comes back every minute or so). */
  private readonly waiting = new OnceLog((node, why) => {
    this.deps.logger.info('Undo of a Node waits for another fence', { node, why });
  });

  constructor(private readonly deps: SweeperDeps) {}

  async sweep(): Promise<ReconcileResult> {
    const { cache, clock, logger } = this.deps;
    const failures = new Failures(logger, { controller: SWEEP_KEY });
    if (!cache.watchesHealthy()) return { requeueAfterMs: UNHEALTHY_RETRY_MS };
    const now = clock.now();
    const assignment = assignmentOf(cache);
    const signature = [...assignment.owner].map(([node, owner]) => `${node}=${owner}`).join('\n');
    let settled = true;
    if (signature !== this.swept.signature || now >= this.swept.until) {
      // Both, always: one's being incomplete must not keep the other from running.
      const healths = await this.deleteOrphanHealths(assignment, failures);
      const stamps = await this.releaseOrphanStamps(assignment, failures);
      const conditions = await this.removeOrphanConditions(assignment, failures);
      settled = stamps !== 'unsettled' && conditions !== 'unsettled';
      this.swept =
        healths && conditions === 'complete' && stamps === 'complete'
          ? { signature, until: now + this.deps.resyncMs }
          : { signature: undefined, until: 0 };
    }
    settled = (await this.releaseOrphanRollouts(failures)) && settled;
    await this.deps.pacer.releaseOrphans(failures);
    failures.throwIfAny();
    if (!settled) return { requeueAfterMs: SETTLE_RETRY_MS };
    // Incomplete (a frozen policy's, a refused write): any change that can leave something unowned sweeps again, and
    // the resync anyway.
    const next = this.swept.signature === undefined ? now + this.deps.resyncMs : this.swept.until;
    return { requeueAfterMs: Math.max(0, next - now) };
  }

  /** SandboxHealths of nodes no valid policy owns, unless their policy still exists but is invalid (frozen). */
  private async deleteOrphanHealths(assignment: NodeAssignment, failures: Failures): Promise<boolean> {
    const { cache, writer, logger } = this.deps;
    let complete = true;
    for (const health of cache.healths()) {
      if (assignment.owner.has(health.name)) continue;
      const recorded = health.status?.policy;
      if (isFrozenPolicy(cache, recorded)) {
        complete = false; // looked at again once the policy is fixed or gone
        continue;
      }
      logger.info('Deleted SandboxHealth of an unowned Node', { node: health.name, policy: recorded });
      try {
        await writer.deleteHealth(health.name);
      } catch (err) {
        failures.add(`deletion of sandboxhealth/${health.name}`, err);
        complete = false;
      }
    }
    return complete;
  }

  /**
   * Removes our Node condition where no valid policy owns the node, unless the policy that reported it (its
   * SandboxHealth's, or its stamps') still exists but is invalid: frozen, as its SandboxHealths are.
   */
  private async removeOrphanConditions(assignment: NodeAssignment, failures: Failures): Promise<SweepResult> {
    const { cache, actuator, expectations } = this.deps;
    if (this.deps.dryRun) return 'complete';
    let result: SweepResult = 'complete';
    for (const node of cache.nodes()) {
      if (!node.ownCondition || assignment.owner.has(node.name)) continue;
      const reporter = cache.health(node.name)?.status?.policy ?? node.stamps?.policy;
      if (isFrozenPolicy(cache, reporter)) {
        if (result === 'complete') result = 'incomplete';
        continue;
      }
      // A write of ours (a pass's, or this sweep's last removal) not back through the watch yet: looked at again soon.
      if (!expectations.isSettled(`Node/${node.name}`, cache.observedVersion('Node', node.name))) {
        result = 'unsettled';
        continue;
      }
      const why = reporter
        ? `no valid SandboxPolicy owns the node any more (policy ${reporter} ${cache.policy(reporter) ? 'no longer selects it' : 'is gone'})`
        : 'no valid SandboxPolicy owns the node';
      if (!(await this.deps.conditions.remove(actuator, node, failures, why)) && result === 'complete')
        result = 'incomplete';
    }
    return result;
  }

  /** Undoes our stamps on nodes no valid policy owns; 'unsettled' while a node's last patch is not back yet. */
  private async releaseOrphanStamps(assignment: NodeAssignment, failures: Failures): Promise<SweepResult> {
    const { cache, expectations, actuator, recorder } = this.deps;
    let result: SweepResult = 'complete';
    for (const node of cache.nodes()) {
      const stamps = node.stamps;
      if (!stamps || assignment.owner.has(node.name) || isFrozenByDryRun(this.deps.dryRun, stamps)) continue;
      const stamping = cache.policy(stamps.policy);
      if (isFrozenPolicy(cache, stamps.policy)) {
        if (result === 'complete') result = 'incomplete';
        continue;
      }
      const version = cache.observedVersion('Node', node.name);
      if (!expectations.isSettled(`Node/${node.name}`, version)) {
        result = 'unsettled';
        continue;
      }
      if (node.labels[EXCLUDE_LABEL] === 'true') {
        if (!(await this.releaseExcluded(node, stamps, version, failures)) && result === 'complete')
          result = 'incomplete';
        continue;
      }
      // Another fence on the node (a NodeMaintenance, another holder's lease, a taint added after ours): its undo
      // would end theirs too; it waits, as the undo on recovery does.
      const lease = cache.nodeLease(node.name);
      const waits = otherFence(
        { ...node, ...(lease ? { lease } : {}) },
        stamps,
        leaseHolder(stamps.policy),
        new Date(this.deps.clock.now()),
      );
      if (waits) {
        this.waiting.note(node.name, waits.message);
        if (result === 'complete') result = 'incomplete';
        continue;
      }
      const message = `No valid SandboxPolicy owns the node any more (${stamping ? `policy ${stamps.policy} no longer selects it` : `policy ${stamps.policy} is gone`}); undoing what it did.`;
      const actions = undoActions(node.name, stamps, 'PolicyGone', message);
      try {
        expectations.expect(
          `Node/${node.name}`,
          await actuator.patchNode(nodeChange(node, actions, undefined, version)),
        );
      } catch (err) {
        failures.add(`release of node/${node.name}`, err);
        if (result === 'complete') result = 'incomplete';
        continue;
      }
      for (const action of actions) {
        this.deps.actions.record(stamps.policy, { action, outcome: 'Succeeded' }, actuator.dryRun);
        await recorder.record({
          target: { kind: 'Node', name: node.name, uid: node.uid },
          type: 'Normal',
          reason: ACTION_WORDS[action.kind].event,
          message,
        });
      }
    }
    return result;
  }

  /**
   * A node labelled sandbox.remediator.io/exclude=true is handed over, not undone: our stamps are dropped and its
   * cordon and taint stay as they are (whoever set the label may be about to work on it), as `release` does by hand.
   */
  private async releaseExcluded(
    node: NodeView,
    stamps: NodeStamps,
    version: string | undefined,
    failures: Failures,
  ): Promise<boolean> {
    const { expectations, actuator, recorder, logger } = this.deps;
    try {
      expectations.expect(
        `Node/${node.name}`,
        await actuator.patchNode(nodeChange(node, [], undefined, version)),
      );
    } catch (err) {
      failures.add(`release of node/${node.name}`, err);
      return false;
    }
    const message = `Released: the node is labelled ${EXCLUDE_LABEL}=true. The claim of policy ${stamps.policy} is dropped and the node left as it is (${[stamps.cordoned && node.unschedulable ? 'cordoned' : '', stamps.taint ? `tainted ${formatTaint(stamps.taint)}` : ''].filter(Boolean).join(', ') || 'unfenced'}): the operator will not undo it.`;
    logger.info('Released Node', { node: node.name, policy: stamps.policy, reason: 'Excluded' });
    await recorder.record({
      target: { kind: 'Node', name: node.name, uid: node.uid },
      type: 'Normal',
      reason: 'RemediationReleased',
      message,
    });
    return true;
  }

  /**
   * Releases the rollouts a gone policy held, of every kind, as the stamps on them say (an invalid policy's stay
   * frozen); false while one is unsettled.
   */
  private async releaseOrphanRollouts(failures: Failures): Promise<boolean> {
    const { cache, expectations, actuator, recorder } = this.deps;
    let settled = true;
    for (const d of cache.workloads()) {
      if (!d.stamps || cache.policy(d.stamps.policy) || isFrozenByDryRun(this.deps.dryRun, d.stamps))
        continue;
      const key = workloadKey(d);
      const version = cache.observedVersion(d.kind, `${d.namespace}/${d.name}`);
      if (!expectations.isSettled(key, version)) {
        settled = false;
        continue;
      }
      const action = {
        kind: 'ResumeRollout' as const,
        target: rolloutTarget(d),
        reason: 'PolicyGone',
        message: `Resumed: policy ${d.stamps.policy}, which paused it, is gone.`,
      };
      try {
        expectations.expect(key, await actuator.patchWorkload(workloadChange(d, action, version)));
      } catch (err) {
        failures.add(`release of ${action.target}`, err);
        continue;
      }
      // Logged, not counted as an action: giving back what a gone policy held, as before (ADR 0016).
      this.deps.logger.info(ROLLOUT_WORDS.ResumeRollout.done, {
        rollout: action.target,
        policy: d.stamps.policy,
        reason: 'PolicyGone',
      });
      await recorder.record({
        target: { kind: d.kind, namespace: d.namespace, name: d.name, uid: d.uid },
        type: 'Normal',
        reason: ROLLOUT_WORDS.ResumeRollout.event,
        message: action.message,
      });
    }
    return settled;
  }
}

/** Says each (key, message) once while it stays the same; bounded. */
class OnceLog {
  private readonly said = new BoundedMap<string, string>(1_000);
  constructor(private readonly say: (key: string, message: string) => void) {}
  note(key: string, message: string): void {
    if (this.said.get(key) === message) return;
    this.said.set(key, message);
    this.say(key, message);
  }
}
