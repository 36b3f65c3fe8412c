import type { Actuator } from '../../actuation/actuator.js';
import type { PolicyProblem, SandboxPolicySpec } from '../../api/v1alpha1/index.js';
import type { Logger } from '../../observability/log.js';
import { isNodeAction } from '../../policy/actions.js';
import { decideRemediation } from '../../policy/remediation.js';
import type { ClusterCache, PolicyObject, WorkloadReader } from '../../ports/cluster.js';
import type { StatusWriter } from '../../ports/writes.js';
import type { Clock } from '../../runtime/clock.js';
import type { ReconcileResult } from '../../runtime/controller.js';
import type { Expectations } from '../../runtime/expectations.js';
import type { IoSource } from '../../signals/types.js';
import { invalidPolicyStatus } from '../../status/policy-status.js';
import type { Applier } from '../apply/applier.js';
import type { Evictor } from '../remediation/evictor.js';
import { Failures } from '../failures.js';
import type { IgnoredEvents } from './ignored-events.js';
import type { NodePatchDeps } from '../remediation/node-changes.js';
import { factsOf } from './facts.js';
import { observeNodes } from './observe-nodes.js';
import { Ownership, validatePolicy } from '../node-assignment.js';
import type { Pacer } from '../pacing/pacer.js';
import {
  nextWait,
  remediationBeforeActing,
  setRemediation,
  type Pass,
  type PassHooks,
  type PassStats,
  type Plan,
  type Seen,
} from '../apply/pass.js';
import type { PolicyMemories, PolicyMemory } from '../policy-memory.js';
import type { UnreportedResults } from '../reporting/unreported.js';
import { sameStatus } from '../../status/health-patch.js';
import type { Reporter } from '../reporting/reporter.js';
import { saturatedNodes, saturatedPlacements } from '../rollouts/observe.js';
import type { IoLimiter } from '../iolimits/limiter.js';
import type { IoLimitStamps } from '../iolimits/pod-stamps.js';
import type { RolloutThrottler } from '../rollouts/throttler.js';
import type { MutationCache } from '../reporting/mutation-cache.js';

export interface PolicyReconcilerDeps extends NodePatchDeps {
  cache: ClusterCache;
  writer: StatusWriter;
  clock: Clock;
  logger: Logger;
  /** Carry out decisions: the real actuator, and the one used for dry runs (spec.safety.dryRun or --dry-run). */
  actuators: { real: Actuator; dryRun: Actuator };
  workloads?: WorkloadReader | undefined;
  /** Builds the IO source a policy's spec asks for; the policy's memory keeps it while its settings hold. */
  sources?: ((policyName: string, spec: SandboxPolicySpec) => IoSource) | undefined;
  /** --dry-run: every policy runs dry. */
  dryRun: boolean;
  /** Where the operator runs: its pods are never migrated. */
  operatorNamespace?: string | undefined;
  /** Safety net: reconcile every policy at least this often. */
  resyncMs: number;
  writeConcurrency: number;
  hooks: PassHooks;
  expectations: Expectations;
  mutations: MutationCache;
  memories: PolicyMemories;
  evictor: Evictor;
  throttler: RolloutThrottler;
  pacer: Pacer;
  limiter: IoLimiter;
  stamps: IoLimitStamps;
  reporter: Reporter;
  unreported: UnreportedResults;
  ignoredEvents: IgnoredEvents;
  /** The apply controller: carries out what a pass decides, one apply per policy at a time. */
  applier: Applier;
}

/**
 * Reconciles one SandboxPolicy, level-based, in one pass: observe every owned node that changed (or every one, on a
 * full pass) -> decide, purely, the whole plan (remediation, the evictions within the pass's share, rollouts, gates)
 * -> act (node patches, then side by side: Node conditions, rollouts, and the budget reservation with the evictions
 * and gates it pays for; act.ts) -> report (each SandboxHealth
 * that changed, its Events, and the policy's status, once). Each concern keeps its own state: the policy's memory,
 * the evictor, the throttler, the pacer, the reporter; the expectations and the mutation cache fence our own writes.
 */
export class PolicyReconciler {
  lastPass: PassStats | undefined;
  private readonly ownership = new Ownership();

  constructor(private readonly deps: PolicyReconcilerDeps) {}

  /** Notes what changed for a policy's next pass: one node, or (no node) everything it owns. */
  markDirty(policy: string, node?: string): void {
    this.deps.memories.markDirty(policy, node);
  }

  /** Our write of this object is moot (it was deleted): stop waiting for the watch to show it. */
  forgetWrite(kind: 'Node' | 'SandboxHealth', name: string): void {
    if (kind === 'SandboxHealth') {
      this.deps.mutations.forgetHealth(name);
      this.deps.limiter.forgetNode(name);
    } else this.deps.expectations.forget(`Node/${name}`);
  }

  /** The cache shows a new version of the policy: a status write of ours it includes is observed, and dropped from the mutation cache. */
  policyObserved(name: string): void {
    this.deps.mutations.policyObserved(name, this.deps.cache.observedVersion('SandboxPolicy', name));
  }

  /**
   * A node is gone: its Event budget goes, what no report of it reported (the unreported), when we last evicted off it,
   * its refused change, its IO limits.
   */
  forgetNode(name: string): void {
    this.deps.reporter.forgetNode(name);
    this.deps.refused.forgetNode(name);
    this.deps.evictor.forgetNode(name);
    this.deps.limiter.forgetNode(name);
    this.deps.stamps.forgetNode(name);
  }

  async reconcile(name: string): Promise<ReconcileResult> {
    const { cache, memories } = this.deps;
    const object = cache.policy(name);
    if (!object) {
      const gone = memories.get(name);
      if (gone) {
        this.deps.applier.forgetPolicy(gone.uid);
        this.deps.reporter.forgetPolicy(gone);
      }
      memories.forget(name);
      this.deps.pacer.withdraw(name);
      this.deps.mutations.forgetPolicy(name);
      this.deps.hooks.onPolicyGone?.(name);
      return {};
    }
    // A policy made again under the name starts afresh: nothing of its namesake's is remembered, counted nor paced.
    const namesake = memories.get(name);
    if (namesake?.uid !== object.uid) {
      if (namesake) {
        this.deps.applier.forgetPolicy(namesake.uid);
        this.deps.reporter.forgetPolicy(namesake);
      }
      this.deps.pacer.withdraw(name);
    }
    const memory = memories.of(name, object.uid);
    const validation = validatePolicy(object);
    if (!validation.valid) return this.refuse(object, validation.problems);
    // Asked before the look: a look begun while an apply ran may have read a node (or the policy's status) before that
    // apply's last write came back, even if the apply is done by the time the look is.
    const busyBefore = this.deps.applier.busy(name);
    let pass = this.begin(object, validation.spec, memory);
    let observed = await this.observe(pass);
    // Such a look decides nothing; once its apply is done, a second look does.
    let stale = false;
    if (busyBefore && !this.deps.applier.busy(name)) {
      const current = cache.policy(name);
      if (current?.uid === object.uid && current.generation === object.generation) {
        // The apply's writes are fenced now (the nodes it touched marked dirty, its status in the mutation cache): a
        // second look, at those nodes and the status as they are now, is ground for a decision at once.
        pass = this.begin(current, validation.spec, memory);
        const again = await this.observe(pass);
        observed = {
          full: observed.full || again.full,
          observed: new Set([...observed.observed, ...again.observed]),
          unsettled: again.unsettled,
          source: again.source,
        };
      } else stale = true; // deleted, made again or edited meanwhile: looked at again at once
    }
    // A look a report of ours superseded read the status from before it (what that report reported, its results, gone
    // from the unreported results then): no ground for a decision. Its node is looked at again first.
    const superseded = memory.observations().filter((o) => this.deps.unreported.stale(o));
    const seen = { ...observed, unsettled: observed.unsettled + superseded.length };
    // One apply of a policy at a time: while one waits, runs or backs off, a pass looks and reports, and decides
    // nothing (holdsBack asks the apply for a pass when it is done).
    const plan = stale || this.deps.applier.holdsBack(name) ? undefined : this.decide(pass, seen);
    const reported = this.report(pass, seen, plan);
    if (plan) this.deps.applier.submit({ pass, seen, plan });
    // Set once, at the end: with two workers, another policy's pass may have run in between.
    this.lastPass = {
      full: seen.full,
      observed: seen.observed.size,
      owned: pass.owned.length,
      reported,
      deferred: this.deps.reporter.waiting,
    };
    this.deps.hooks.onPass?.(this.lastPass);
    const next = this.next(pass, seen, plan);
    // Looked at again at once when this pass's own look was superseded; one still waiting for the watch (no look this
    // pass) waits SETTLE_RETRY_MS, as any unsettled node, rather than pass after pass at once.
    return stale || superseded.some((o) => observed.observed.has(o.node.name))
      ? { ...next, requeueAfterMs: 0 }
      : next;
  }

  /** No more writes: the reports still waiting are dropped (a decision under way ends at the fence). */
  stopWriting(): void {
    this.deps.reporter.dropWaiting();
  }

  /** Resolves once every apply running is done and every report asked for is written (none waiting is started). */
  async idle(): Promise<void> {
    for (;;) {
      await this.deps.applier.idle();
      await this.deps.reporter.idle();
      if (!this.deps.applier.active && this.deps.reporter.pending === 0) return;
    }
  }

  /** An invalid policy: Valid=False with every problem, and nothing done for it; the webhook gates nothing for it. */
  private async refuse(policy: PolicyObject, problems: PolicyProblem[]): Promise<ReconcileResult> {
    // A decision of its valid self still under way writes the status last: refuse once its apply is done.
    if (this.deps.applier.holdsBack(policy.name)) return {};
    const now = new Date(this.deps.clock.now());
    const status = invalidPolicyStatus(
      { generation: policy.generation, previous: policy.status, now },
      problems,
    );
    this.deps.pacer.withdraw(policy.name);
    if (!sameStatus(policy.status, status)) {
      this.deps.logger.info('Refused invalid SandboxPolicy', { policy: policy.name, problems });
      await this.deps.writer.patchPolicyStatus(policy.name, status);
    }
    return {};
  }

  /** A pass of the policy, on its status as our writes left it (the mutation cache's, until the watch shows them). */
  private begin(object: PolicyObject, spec: SandboxPolicySpec, memory: PolicyMemory): Pass {
    const status = this.deps.mutations.policyStatus(object);
    const policy = status === undefined ? object : { ...object, status };
    const assignment = this.ownership.of(this.deps.cache);
    const dryRun = spec.safety.dryRun || this.deps.dryRun;
    return {
      policy,
      spec,
      memory,
      dryRun,
      actuator: dryRun ? this.deps.actuators.dryRun : this.deps.actuators.real,
      now: new Date(this.deps.clock.now()),
      failures: new Failures(this.deps.logger, { policy: policy.name }),
      owned: this.ownership.ownedBy(this.deps.cache, policy.name),
      overlaps: assignment.overlaps.get(policy.name) ?? [],
    };
  }

  /**
   * Observes every owned node on a full pass, else those that changed, those whose time has come, and those whose
   * last look a report superseded (another policy's, too: one made again under the name, whose reports mark nothing of
   * this one's dirty).
   */
  private async observe(pass: Pass): Promise<Seen> {
    const { policy, spec, memory, now } = pass;
    const { full, dirty } = memory.startPass(policy.generation, pass.owned, now.getTime());
    const due = (node: string) => (memory.nodes.get(node)?.observation?.dueAt ?? Infinity) <= now.getTime();
    const superseded = (node: string) => {
      const observation = memory.nodes.get(node)?.observation;
      return observation !== undefined && this.deps.unreported.stale(observation);
    };
    const nodes = full
      ? pass.owned
      : pass.owned.filter((node) => dirty.has(node) || due(node) || superseded(node));
    const build = this.deps.sources;
    const source = build && memory.sourceFor(spec, (s) => build(policy.name, s));
    const { observations, unsettled } = await observeNodes(
      this.deps,
      { policy: policy.name, spec, nodes, now, source, refresh: full },
      memory,
    );
    for (const observation of observations) {
      const state = memory.state(observation.node.name);
      state.observation = observation;
      // A report of ours applied after its status was read (during the live reads): look again, decide nothing on it.
      if (this.deps.unreported.stale(observation)) memory.markDirty(observation.node.name);
    }
    for (const node of unsettled) memory.markDirty(node);
    return {
      full,
      observed: new Set(observations.map((o) => o.node.name)),
      unsettled: unsettled.length,
      source,
    };
  }

  /** The whole plan, from what was seen and what each concern holds; pure but for reading their state. */
  private decide(pass: Pass, seen: Seen): Plan {
    const { policy, spec, memory, dryRun, now } = pass;
    const { cache, evictor } = this.deps;
    const observations = memory.observations();
    const inFlight = evictor.inFlight();
    const facts = new Map(
      observations.map((o) => [o.node.name, factsOf(this.deps, memory, o, dryRun, inFlight)]),
    );
    // Decided on every owned node or not at all: a node still settling could hide a cordon from the limits.
    const remediation =
      seen.unsettled === 0 && observations.length === pass.owned.length
        ? decideRemediation({
            policy: policy.name,
            spec,
            nodes: [...facts.values()],
            now,
            recentEvictions: (policy.status?.recentEvictions ?? []).map((t) => new Date(t)),
            cacheReady: cache.watchesHealthy(),
            operatorNamespace: this.deps.operatorNamespace,
          })
        : undefined;
    const evictions = evictor.plan(remediation?.actions ?? []);
    const stampsAfter = (node: string) =>
      remediation ? remediation.stampsAfter.get(node) : facts.get(node)?.stamps;
    const saturated = saturatedNodes(observations, (node) => stampsAfter(node) !== undefined);
    // IO limits: each node's culprits limited in place while its disk is saturated, and lifted after.
    const limits = this.deps.limiter.plan({
      policy,
      spec,
      dryRun,
      now,
      observations,
      facts,
      looked: seen,
      memory,
    });
    return {
      observations,
      facts,
      remediation,
      actions: [...(remediation?.actions.filter(isNodeAction) ?? []), ...evictions.evictions],
      evictions,
      // Rollouts: what feeds a saturated node stops, and at most N roll out while the pressure lasts.
      rollouts: this.deps.throttler.plan({
        policy,
        spec,
        dryRun,
        now,
        observations,
        saturated,
        stampsAfter,
        cacheReady: cache.watchesHealthy() && seen.unsettled === 0,
      }),
      limits,
      // Each limited pod stamped, before the list that asks for its limit is written.
      stamps: this.deps.stamps.plan({ dryRun, owned: pass.owned, looked: seen, limits }),
      pacing: this.deps.pacer.plan({
        policy: policy.name,
        spec,
        status: policy.status,
        dryRun,
        saturated: saturatedPlacements(
          observations,
          new Set(observations.filter((o) => o.io?.condition.status === 'True').map((o) => o.node.name)),
          stampsAfter,
        ),
        now,
      }),
    };
  }

  /**
   * Asks for the report of each node the pass looked at, and of each node whose blocks the decision changed without
   * acting on it (written in the background; a node acted on keeps what it said until the actions are back); returns
   * how many are on their way.
   */
  private report(pass: Pass, seen: Seen, plan: Plan | undefined): number {
    const { policy, memory } = pass;
    const nodes = new Set(seen.observed);
    for (const [node, parts] of plan ? remediationBeforeActing(pass, seen, plan) : [])
      if (
        setRemediation(memory, node, parts, (guard) => {
          this.deps.applier.blocked(policy, guard);
        })
      )
        nodes.add(node);
    // A node acted on is reported once its actions are back; meanwhile only urgent news of it goes.
    const acted = new Set(plan?.actions.map((a) => a.node));
    let submitted = 0;
    for (const node of nodes)
      if (this.deps.reporter.submit(policy.name, memory, node, { urgentOnly: acted.has(node) })) submitted++;
    return submitted;
  }

  /** When to look again (the next full pass is due at the resync, or the next poll of a polled source). */
  private next(pass: Pass, seen: Seen, plan: Plan | undefined): ReconcileResult {
    const at = pass.now.getTime();
    if (seen.full)
      pass.memory.fullPassAt = at + Math.min(this.deps.resyncMs, seen.source?.pollMs ?? Infinity);
    return nextWait(pass, seen, plan);
  }
}
