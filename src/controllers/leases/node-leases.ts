import type { Actuator } from '../../actuation/actuator.js';
import { NODE_CONDITION_REASONS, type NodeStamps } from '../../api/v1alpha1/index.js';
import type { NodeView } from '../../detection/index.js';
import { describeError, isConflict } from '../../ports/errors.js';
import type { Logger } from '../../observability/log.js';
import { fenceStepOf, isFrozenByDryRun, isStampDrop, type Action } from '../../policy/actions.js';
import { leaseHeldBy } from '../../policy/guards.js';
import {
  decideLease,
  isHeldByOther,
  isOurHolder,
  leaseFields,
  type LeaseFields,
  leaseHolder,
  NODE_LEASE_NAMESPACE,
  nodeLeaseName,
  type LeaseStep,
  type LeaseWant,
  type NodeLeaseView,
} from '../../policy/node-lease.js';
import type { Hold } from '../../policy/node-facts.js';
import type { ClusterCache } from '../../ports/cluster.js';
import type { Clock } from '../../runtime/clock.js';
import type { ReconcileResult } from '../../runtime/controller.js';
import { SETTLE_RETRY_MS, type Expectations } from '../../runtime/expectations.js';
import { validatePolicy } from '../node-assignment.js';

/** The lease controller's one key: one worker at a time walks every lease of ours. */
export const LEASES_KEY = 'node-leases';
/** Looked at again this soon while a write of ours is not back through the watch, or after a conflict. */
const UNHEALTHY_RETRY_MS = 5_000;
/** Our deletions of leases, by uid, counted gone until the watch shows it. */
const REMOVALS = 'NodeLease';

export interface NodeLeasesDeps {
  cache: ClusterCache;
  expectations: Expectations;
  /** The real actuator: what it renews and releases are real leases (a dry run never takes one). */
  actuator: Actuator;
  clock: Clock;
  logger: Logger;
  /** --dry-run: the operator changes nothing, so it takes, renews and releases no lease either. */
  dryRun: boolean;
}

/** The node's condition of ours says RemediationExhausted: the next rung's turn. */
const isEscalated = (node: NodeView) =>
  node.ownCondition?.status === 'True' &&
  node.ownCondition.reason === NODE_CONDITION_REASONS.remediationExhausted;
const leaseKey = (node: string) => `NodeLease/${node}`;
const leaseRef = (node: string) => `${NODE_LEASE_NAMESPACE}/${nodeLeaseName(node)}`;
/** A node action that puts a fence of ours up: the moment a policy with safety.nodeLease takes the lease. */
const isNewFence = (a: Action) => fenceStepOf(a.kind) === 'Up' && !isStampDrop(a);

/**
 * The medik8s node leases of ours (ADR 0022). A policy with safety.nodeLease takes node-<node> as
 * sandbox-remediator-<policy> just before its fence goes up (claim, from the node patch), and this controller keeps
 * every lease of ours level-based from the cache: renewed while the node carries that policy's stamps, deleted when it
 * no longer does (undone, reverted by someone else, the policy gone or no longer asking for leases, the node gone),
 * or once the node's condition says RemediationExhausted: escalation hands the node, and so its lease, to the next rung.
 * It never takes over a lease another holder holds unless it has expired, and never touches one not ours.
 */
export class NodeLeases {
  /** Nodes whose lease was just taken for a fence whose patch is under way: not released from under it. */
  private readonly fencing = new Set<string>();
  /** The last refusal logged per node, so that a lasting one (forbidden, no namespace) is logged once. */
  private readonly refusals = new Map<string, string>();

  constructor(private readonly deps: NodeLeasesDeps) {}

  /** What a policy wants of the leases of its nodes (from the cache's spec: one reading of safety.nodeLease). */
  private wantOf(node: NodeView): LeaseWant {
    const { cache, expectations } = this.deps;
    const stamps: NodeStamps | undefined = node.stamps;
    if (this.fencing.has(node.name)) return { kind: 'Keep' };
    if (!expectations.isSettled(`Node/${node.name}`, cache.observedVersion('Node', node.name)))
      return { kind: 'Keep' };
    if (!stamps) return { kind: 'None' };
    const policy = cache.policy(stamps.policy);
    if (!policy) return { kind: 'None' }; // gone: the sweeper undoes its stamps, and its lease goes now
    const validation = validatePolicy(policy);
    // An invalid policy's changes stay frozen, and so does its lease: renewed, neither taken nor given back.
    if (!validation.valid || isFrozenByDryRun(validation.spec.safety.dryRun, stamps)) return { kind: 'Keep' };
    // Escalated: the node is handed to NodeHealthCheck and the like, which take the lease before they act.
    if (isEscalated(node)) return { kind: 'None' };
    return validation.spec.safety.nodeLease
      ? { kind: 'Hold', holder: leaseHolder(stamps.policy) }
      : { kind: 'None' };
  }

  /** Whether the policy (valid, as the cache has it) takes node leases. */
  private takesLeases(policyName: string): boolean {
    const policy = this.deps.cache.policy(policyName);
    const validation = policy && validatePolicy(policy);
    return validation?.valid === true && validation.spec.safety.nodeLease;
  }

  /**
   * Before a node patch of the policy's: when it puts a fence up and the policy takes node leases, takes (or renews)
   * the lease first, through the pass's actuator (a dry run takes none). What holds the fence when the lease cannot
   * be had (another holder has it, or the write failed); undefined when the patch may go ahead. Call done() after.
   */
  async claim(
    actuator: Actuator,
    policy: string,
    node: NodeView,
    actions: readonly Action[],
  ): Promise<{ hold?: Hold; done(): void }> {
    const done = () => this.fencing.delete(node.name);
    if (!actions.some(isNewFence) || !this.takesLeases(policy) || isEscalated(node)) return { done };
    const { cache, clock } = this.deps;
    const now = new Date(clock.now());
    const lease = cache.nodeLease(node.name);
    const holder = leaseHolder(policy);
    if (lease && isHeldByOther(lease, holder, now)) return { hold: leaseHeldBy(node.name, lease), done };
    const step = decideLease(lease, { kind: 'Hold', holder }, now);
    if (step.kind !== 'Take' && step.kind !== 'Renew') return { done };
    const fields = leaseFields(lease, holder, now);
    this.fencing.add(node.name);
    try {
      await this.write(actuator, node, lease, fields);
      return { done };
    } catch (err) {
      done();
      const message = `could not take ${leaseRef(node.name)} before fencing (safety.nodeLease): ${describeError(err)}`;
      this.logOnce(node.name, message, { policy, node: node.name });
      return { hold: { guard: 'NodeLease', message }, done };
    }
  }

  /** The node's lease is gone: our last write of it will never show. */
  forgetWrite(node: string): void {
    this.deps.expectations.forget(leaseKey(node));
  }

  /** After a node patch that left nothing of ours on the node: our lease goes too (the controller retries). */
  async release(actuator: Actuator, node: string): Promise<void> {
    const lease = this.deps.cache.nodeLease(node);
    if (!lease || !isOurHolder(lease.holder)) return;
    try {
      await this.remove(actuator, lease);
    } catch (err) {
      this.deps.logger.debug('Left the node lease to the next sweep', { node, error: describeError(err) });
    }
  }

  /** The controller: every node with our stamps or our lease, its lease as wanted; next at the first renewal due. */
  async reconcile(): Promise<ReconcileResult> {
    const { cache, clock, logger, actuator, expectations } = this.deps;
    if (this.deps.dryRun) return {};
    if (!cache.watchesHealthy()) return { requeueAfterMs: UNHEALTHY_RETRY_MS };
    const now = new Date(clock.now());
    const removed = expectations.pendingRemovals(REMOVALS, (uid) => !this.leaseWithUid(uid));
    const names = new Set<string>();
    for (const lease of cache.nodeLeases()) if (isOurHolder(lease.holder)) names.add(lease.node);
    for (const node of cache.nodes()) if (node.stamps) names.add(node.name);
    const waits: number[] = [];
    for (const name of names) {
      const lease = cache.nodeLease(name);
      if (
        (lease && removed.has(lease.uid)) ||
        !expectations.isSettled(leaseKey(name), cache.observedVersion('NodeLease', name))
      ) {
        waits.push(SETTLE_RETRY_MS);
        continue;
      }
      const node = cache.node(name);
      const want = node ? this.wantOf(node) : { kind: 'None' as const };
      const step: LeaseStep = decideLease(lease, want, now);
      try {
        if (step.kind === 'Release' && lease) await this.remove(actuator, lease);
        else if ((step.kind === 'Take' || step.kind === 'Renew') && node) {
          // A renewal keeps its holder (a frozen policy's lease stays that policy's); a take is the wanted holder's.
          const holder = want.kind === 'Hold' ? want.holder : (lease?.holder ?? '');
          if (step.kind === 'Take' || step.takeover)
            logger.info('Took the node lease', {
              node: name,
              lease: leaseRef(name),
              holder,
              previous: lease?.holder,
            });
          await this.write(actuator, node, lease, leaseFields(lease, holder, now));
        } else if (step.kind === 'Wait' && step.recheckAt)
          waits.push(step.recheckAt.getTime() - now.getTime());
      } catch (err) {
        if (!isConflict(err)) this.logOnce(name, describeError(err), { node: name, lease: leaseRef(name) });
        waits.push(isConflict(err) ? SETTLE_RETRY_MS : UNHEALTHY_RETRY_MS);
      }
    }
    return waits.length > 0 ? { requeueAfterMs: Math.max(0, Math.min(...waits)) } : {};
  }

  private leaseWithUid(uid: string): boolean {
    for (const lease of this.deps.cache.nodeLeases()) if (lease.uid === uid) return true;
    return false;
  }

  private async write(
    actuator: Actuator,
    node: NodeView,
    lease: NodeLeaseView | undefined,
    fields: LeaseFields,
  ): Promise<void> {
    const { cache, expectations } = this.deps;
    const version = await actuator.writeNodeLease({
      node: node.name,
      nodeUid: node.uid,
      ...fields,
      resourceVersion: lease ? cache.observedVersion('NodeLease', node.name) : undefined,
    });
    expectations.expect(leaseKey(node.name), version);
    this.refusals.delete(node.name);
  }

  private async remove(actuator: Actuator, lease: NodeLeaseView): Promise<void> {
    const { cache, expectations, logger } = this.deps;
    await actuator.releaseNodeLease({
      node: lease.node,
      uid: lease.uid,
      resourceVersion: cache.observedVersion('NodeLease', lease.node),
    });
    if (actuator.dryRun) return;
    expectations.expectRemoval(REMOVALS, lease.uid, 30_000);
    logger.info('Released the node lease', {
      node: lease.node,
      lease: leaseRef(lease.node),
      holder: lease.holder,
    });
  }

  private logOnce(node: string, error: string, fields: Record<string, string>): void {
    if (this.refusals.get(node) === error) return;
    this.refusals.set(node, error);
    this.deps.logger.warn('Failed to write the node lease', { ...fields, error });
  }
}
