// The apply controller: carries out a policy's decision (its writes, act.ts), then hands each node's remediation and
// what was done on it to the reports, and writes the policy's status. It runs on a work queue of its own keyed by
// policy, so one apply of a policy is in flight at a time, and that queue alone retries: an apply with failed writes
// (or a report of the policy that failed meanwhile) fails, the queue backs the key off, and the retry asks the policy
// reconciler for a new decision on what it sees then. A policy decides nothing while its apply waits, runs, or backs
// off: its passes meanwhile look and report.
import { describeError } from '../../ports/errors.js';
import type { Logger } from '../../observability/log.js';
import type { ClusterCache, PolicyObject } from '../../ports/cluster.js';
import type { EventRecorder, StatusWriter } from '../../ports/writes.js';
import type { ReconcileResult } from '../../runtime/controller.js';
import { sameStatus } from '../../status/health-patch.js';
import type { Evictor } from '../remediation/evictor.js';
import type { MutationCache } from '../reporting/mutation-cache.js';
import type { Reporter } from '../reporting/reporter.js';
import type { UnreportedResults } from '../reporting/unreported.js';
import {
  followUpWait,
  policyStatusOf,
  remediationOf,
  setRemediation,
  type Done,
  type Pass,
  type PassHooks,
  type Plan,
  type Seen,
} from './pass.js';
import { actOnPlan, type ActDeps } from './act.js';

/** What a policy's pass decided, on what it saw: the apply controller's work item. */
export interface Decision {
  pass: Pass;
  seen: Seen;
  plan: Plan;
}

export interface ApplierDeps extends ActDeps {
  cache: Pick<ClusterCache, 'policy'>;
  writer: StatusWriter;
  mutations: MutationCache;
  evictor: Evictor;
  reporter: Reporter;
  /** What was done on each node until a report holds it. */
  unreported: UnreportedResults;
  recorder: EventRecorder;
  logger: Logger;
  hooks: PassHooks;
  /** Adds the policy to the apply queue, at once. */
  schedule(policy: string): void;
  /** Asks the policy reconciler for a pass of the policy after this long (0: at once). */
  requeue(policy: string, afterMs: number): void;
}

/** A policy's apply as the queue sees it: failed writes still to fail an apply with, and whether one backs off now. */
interface Retry {
  failed: unknown[];
  backingOff: boolean;
}

export class Applier {
  /** The decision waiting for its apply, by policy: at most one, as a policy decides nothing while one waits. */
  private readonly waiting = new Map<string, Decision>();
  /** The policies whose apply is running now. */
  private readonly applying = new Set<string>();
  /** The policies whose writes failed: their apply fails with them, then backs off until the queue retries it. */
  private readonly retries = new Map<string, Retry>();
  /**
   * The policies a report of which failed since their last apply: the next apply that succeeds keeps the backoff, as
   * its own reports, answered after it, may fail the same way, and the backoff must grow for as long as they do.
   */
  private readonly reportFailedSince = new Set<string>();
  /** The policies whose pass was held back by a busy apply: a pass is asked for when it is done. */
  private readonly held = new Set<string>();
  /** Every apply running now, for idle(). */
  private readonly inFlight = new Set<Promise<unknown>>();
  /** By policy UID: the actions newly blocked in reports since its status was last written (blockedActionCount). */
  private readonly blockedNew = new Map<string, number>();

  constructor(private readonly deps: ApplierDeps) {}

  /** An action of the policy newly blocked, by this guard: counted in its status once written, and in the metric. */
  blocked(policy: PolicyObject, guard: string): void {
    this.blockedNew.set(policy.uid, (this.blockedNew.get(policy.uid) ?? 0) + 1);
    this.deps.hooks.onBlocked?.(guard);
  }

  /** The policy (this object of it) is gone: its blocks are counted nowhere. */
  forgetPolicy(uid: string): void {
    this.blockedNew.delete(uid);
  }

  private spentBlocked(uid: string, counted: number): void {
    const left = (this.blockedNew.get(uid) ?? 0) - counted;
    if (left > 0) this.blockedNew.set(uid, left);
    else this.blockedNew.delete(uid);
  }

  /** Whether the policy's apply waits, runs or backs off. */
  busy(policy: string): boolean {
    return this.waiting.has(policy) || this.applying.has(policy) || this.retries.has(policy);
  }

  /**
   * Whether a pass of the policy must decide nothing now, its apply busy; if so, that pass is asked for again once the
   * apply is done. A policy deleted and made again under its name waits for its namesake's.
   */
  holdsBack(policy: string): boolean {
    const busy = this.busy(policy);
    if (busy) this.held.add(policy);
    return busy;
  }

  /** Whether an apply runs now. */
  get active(): boolean {
    return this.inFlight.size > 0;
  }

  /** Whether the policy's writes failed and wait for the queue's retry: nothing new is asked of it meanwhile. */
  failing(policy: string): boolean {
    return this.retries.has(policy);
  }

  /** Hands a decision to the apply queue. */
  submit(decision: Decision): void {
    const policy = decision.pass.policy.name;
    this.waiting.set(policy, decision);
    this.deps.schedule(policy);
  }

  /**
   * A write of the policy failed outside its apply (a report): the policy's apply fails with it, so the queue backs it
   * off once per failing round, not once per failing write.
   */
  fail(policy: string, error: unknown): void {
    const retry = this.retries.get(policy);
    if (retry) {
      if (!retry.backingOff) retry.failed.push(error);
      return;
    }
    this.retries.set(policy, { failed: [error], backingOff: false });
    if (!this.applying.has(policy) && !this.waiting.has(policy)) this.deps.schedule(policy);
  }

  /** A report of the policy failed: fail() with it, and the next apply that succeeds keeps the backoff. */
  reportFailed(policy: string, error: unknown): void {
    this.reportFailedSince.add(policy);
    this.fail(policy, error);
  }

  /** The apply controller's reconcile: the policy's waiting decision carried out, or its retry after the backoff. */
  async reconcile(policy: string): Promise<ReconcileResult> {
    let decision = this.waiting.get(policy);
    this.waiting.delete(policy);
    const current = this.deps.cache.policy(policy);
    if (decision && !sameGeneration(decision, current)) {
      // Deleted, made again, edited (paused, a dry run) while it waited for a worker: it is not carried out, and the
      // policy as it is now decides again.
      decision = undefined;
      this.held.add(policy);
    }
    const retry = this.retries.get(policy);
    if (!decision && retry?.backingOff) {
      // The backoff is over: the retry is a new decision, on what the policy's pass sees now. Until that apply is
      // back, the backoff stands, so that it grows for as long as writes keep failing; a policy gone forgets it.
      this.retries.delete(policy);
      this.held.delete(policy);
      if (!current) {
        this.reportFailedSince.delete(policy);
        return {};
      }
      this.deps.requeue(policy, 0);
      return { keepBackoff: true };
    }
    this.applying.add(policy);
    let wait: number | undefined;
    const apply = decision ? this.apply(decision) : Promise.resolve(undefined);
    this.inFlight.add(apply);
    try {
      wait = await apply;
    } finally {
      this.inFlight.delete(apply);
      this.applying.delete(policy);
    }
    // Deleted or made again while its decision was carried out: the pass that forgot it may have run meanwhile, and
    // the apply published its pacing, counted its blocks and wrote its status after. A pass of the policy as it is now,
    // at once, forgets them; the blocks counted for that object go here.
    const uid = decision?.pass.policy.uid;
    if (uid !== undefined && this.deps.cache.policy(policy)?.uid !== uid) {
      this.blockedNew.delete(uid);
      this.deps.requeue(policy, 0);
    }
    const failed = this.retries.get(policy);
    if (failed && !failed.backingOff) {
      failed.backingOff = true;
      const [first] = failed.failed.splice(0);
      throw new Error(`a write of sandboxpolicy/${policy} failed: ${describeError(first)}`, { cause: first });
    }
    if (this.held.delete(policy)) {
      if (current) this.deps.requeue(policy, 0);
    } else if (wait !== undefined) this.deps.requeue(policy, wait);
    // Deleted meanwhile, the policy keeps nothing here; else the backoff is forgotten unless a report failed since the
    // last apply (this apply's reports are answered after it: a round forgets it only once one passes without).
    const kept = this.reportFailedSince.delete(policy) && current !== undefined;
    return kept ? { keepBackoff: true } : {};
  }

  /** Resolves once no apply runs. */
  async idle(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  /** Carries the decision out; when to look at the policy again to follow it up. */
  private async apply({ pass, seen, plan }: Decision): Promise<number | undefined> {
    const { policy, memory, failures } = pass;
    let wait: number | undefined;
    try {
      const done = await actOnPlan(this.deps, pass, plan);
      const remediation = remediationOf(pass, seen, plan, done);
      for (const [node, { parts, results }] of remediation.nodes) {
        const changed = setRemediation(memory, node, parts, (guard) => {
          this.blocked(policy, guard);
        });
        // The node's facts count what was done on it, reported or not: adding to them makes them anew.
        if (results.length > 0) this.deps.unreported.add(node, results);
        if (changed || results.length > 0) this.deps.reporter.submit(policy.name, memory, node);
      }
      // What we changed on the node (or its pods) comes back through the watch: look again, behind the fence.
      for (const node of remediation.touched) memory.markDirty(node);
      await this.writePolicyStatus(pass, seen, plan, done, remediation);
      wait = followUpWait(pass, plan, done);
    } catch (err) {
      failures.add(`applying a decision of sandboxpolicy/${policy.name}`, err);
    }
    for (const error of failures.retriable) this.fail(policy.name, error);
    return wait;
  }

  private async writePolicyStatus(
    pass: Pass,
    seen: Seen,
    plan: Plan,
    done: Done,
    counts: { degraded: number; remediating: number },
  ): Promise<void> {
    const { policy, now, failures } = pass;
    const previous = policy.status;
    const recentEvictions = this.deps.evictor.log(previous, done.evictedAt, now);
    const blockedNew = this.blockedNew.get(policy.uid) ?? 0;
    const status = policyStatusOf(pass, plan, done, { ...counts, blockedNew, recentEvictions });
    this.deps.hooks.onPolicyStatus?.(policy.name, status);
    // Counts over only the settled nodes would be wrong: the policy status waits for the rest. Compared with what the
    // API holds now, which includes the reservation written before evicting.
    const stored = { ...(previous ?? {}), ...(done.reserved ?? {}) };
    if (seen.unsettled > 0 || sameStatus(stored, status)) return;
    try {
      const version = await this.deps.writer.patchPolicyStatus(policy.name, status);
      this.spentBlocked(policy.uid, blockedNew);
      this.deps.mutations.wrotePolicyStatus(policy, version, stored, status);
      const storm = plan.remediation?.storm;
      if (
        storm?.detected &&
        previous?.conditions?.find((c) => c.type === 'StormDetected')?.status !== 'True'
      ) {
        this.deps.logger.warn('Detected a storm: starting nothing new', { policy: policy.name, ...storm });
        await this.deps.recorder.record({
          target: { kind: 'SandboxPolicy', name: policy.name, uid: policy.uid },
          type: 'Warning',
          reason: 'StormDetected',
          message: status.conditions?.find((c) => c.type === 'StormDetected')?.message ?? '',
        });
      }
    } catch (err) {
      failures.add(`status of sandboxpolicy/${policy.name}`, err);
    }
  }
}

/** Whether the policy is still the one, at the generation, that the decision was made for. */
const sameGeneration = (decision: Decision, current: { uid: string; generation: number } | undefined) =>
  current?.uid === decision.pass.policy.uid && current.generation === decision.pass.policy.generation;
