import type { SandboxHealthStatus } from '../../api/v1alpha1/index.js';
import { isNotFound, OutOfTurnError } from '../../ports/errors.js';
import type { Logger } from '../../observability/log.js';
import type { EventRecorder, StatusWriter, Transition } from '../../ports/writes.js';
import { healthPatch } from '../../status/health-patch.js';
import type { Clock } from '../../runtime/clock.js';
import { NotActingError } from '../../runtime/fence.js';
import { Lanes } from '../../runtime/lanes.js';
import { conditionStatus } from '../../status/conditions.js';
import {
  detectionTransitions,
  podsOfNewlyKnownCause,
  podsNewlyExplainedByIo,
  type DetectionStatus,
} from '../../status/health-status.js';
import { applyMergePatch, stored } from '../../status/merge-patch.js';
import {
  desiredHealthStatus,
  remediationTransitions,
  sameBlocks,
  type ActionResult,
  type HealthStatus,
  type RemediationStatusInput,
} from '../../status/remediation-status.js';
import { logWriteFailure } from '../failures.js';
import type { NodeObservation, PolicyMemory } from '../policy-memory.js';
import { ReportsInFlight, type Flight } from './in-flight.js';
import type { UnreportedResults } from './unreported.js';
import type { MutationCache } from './mutation-cache.js';
import { recordEvent } from './events.js';
import { StuckEventBudget } from './stuck-event-budget.js';

interface PlannedReport {
  observation: NodeObservation;
  /** The status it is planned on: the stored one, or what the write in flight it follows leaves there. */
  previous: SandboxHealthStatus | undefined;
  /** The write in flight it follows: sent at once, fenced on that write's reportId, so it cannot apply first. */
  after?: Flight | undefined;
  input: RemediationStatusInput;
  desired: HealthStatus;
  patch: Record<string, unknown>;
  urgent: boolean;
  /** It lists stuck pods with an IO cause for the first time: a decision to evict them waits for it. */
  explains: boolean;
}

export interface ReporterHooks {
  onNodeStatus?(policy: string, node: string, status: DetectionStatus): void;
  /** A report written, and how long its node waited for it from its submission (ms). */
  onReport?(waitedMs: number, urgent: boolean): void;
  /** A report sent beside its node's write in flight, fenced on it: applied after it, or refused for arriving first. */
  onFencedReport?(applied: boolean): void;
}

export interface ReporterDeps {
  writer: StatusWriter;
  recorder: EventRecorder;
  mutations: MutationCache;
  clock: Clock;
  logger: Logger;
  /** What was done on each node until a report holds it, and how many reports of it applied. */
  unreported: UnreportedResults;
  /** SandboxHealth writes in flight at once. */
  writeConcurrency: number;
  hooks?: ReporterHooks | undefined;
  /** The policy should look again, after this long (0: at once): a node was wanted again, or news came. */
  requeue(policy: string, afterMs: number): void;
  /**
   * A write of the policy's failed: its retry is the apply queue's (Applier.reportFailed); `failing` says whether one
   * waits for it, so that no pass is asked for meanwhile.
   */
  failures: { fail(policy: string, error: unknown): void; failing(policy: string): boolean };
}

/**
 * Writes each node's SandboxHealth, in the background, apart from the passes that ask for it: a pass submits a node
 * and goes on, and the report is planned again when its write starts, from what its policy's memory holds of the node
 * (its latest observation, the remediation its last carried-out decision left) and the results no report holds yet
 * (the unreported results, whichever policy did them), so it is never older than what it replaces. Urgent ones (news an SRE or
 * the next decision waits for) before routine ones (counts), writeConcurrency in all (Lanes); then the Events of its
 * transitions. One write in flight per node, and an urgent one beside it, fenced on it (ReportsInFlight, ADR 0026); a
 * node submitted while it may not go is looked at again once its write is back. It owns each node's stuck-pod Event
 * budget.
 */
export class Reporter {
  private readonly stuckEvents: StuckEventBudget;
  /** Whose report each submitted node is, and since when its next write waits (none while none was asked for). */
  private readonly owners = new Map<
    string,
    { policy: string; memory: PolicyMemory; since: number | undefined }
  >();
  /** Since when the news of a node whose report was refused out of turn has waited: its next report's wait. */
  private readonly refusedSince = new Map<string, number>();
  /** Nodes deleted while their write was in flight: its write is not noted among the unreported results. */
  private readonly gone = new Set<string>();
  private readonly flights = new ReportsInFlight();
  private readonly lanes: Lanes<string>;

  constructor(private readonly deps: ReporterDeps) {
    this.stuckEvents = new StuckEventBudget(deps.clock);
    this.lanes = new Lanes<string>({
      concurrency: deps.writeConcurrency,
      run: (node) => this.run(node),
      settled: (node, wanted, error) => {
        this.settled(node, wanted, error);
      },
      // Urgent news goes out beside the node's write in flight, fenced on it; routine counts wait for it.
      overlaps: (node, urgent) => urgent && this.flights.mayFollow(node),
    });
  }

  /**
   * Asks for the node's report: true when one is on its way (false: nothing to write, or its policy has decided
   * nothing about the node yet; the decision's own submission reports it).
   */
  submit(
    policy: string,
    memory: PolicyMemory,
    node: string,
    options: { urgentOnly?: boolean } = {},
  ): boolean {
    const urgent = this.urgency(policy, memory, node);
    if (urgent === undefined || (options.urgentOnly && !urgent)) return false;
    const owner = this.owners.get(node);
    const refusedSince = this.refusedSince.get(node);
    this.refusedSince.delete(node);
    const since = (owner?.policy === policy ? owner.since : undefined) ?? this.deps.clock.now();
    this.owners.set(node, { policy, memory, since: Math.min(since, refusedSince ?? since) });
    this.lanes.submit(node, urgent);
    return true;
  }

  /**
   * Whether the node's report is urgent; undefined when there is nothing to write (yet). A new SandboxHealth is urgent
   * and always written: it is planned once, when its write starts (a first pass over every node plans each once).
   */
  private urgency(policy: string, memory: PolicyMemory, node: string): boolean | undefined {
    const state = memory.nodes.get(node);
    const observation = state?.observation;
    if (observation && state.remediation && !observation.exists && !this.deps.unreported.stale(observation))
      return true;
    return this.plan(policy, memory, node)?.urgent;
  }

  /** Reports waiting for their turn. */
  get waiting(): number {
    return this.lanes.waiting;
  }

  /** Reports waiting or being written. */
  get pending(): number {
    return this.lanes.size;
  }

  /** Resolves once no report waits or is being written. */
  idle(): Promise<void> {
    return this.lanes.idle();
  }

  /** A node is gone: its Event budget goes with it, and a report still waiting. */
  forgetNode(node: string): void {
    this.stuckEvents.forget(node);
    this.refusedSince.delete(node);
    this.lanes.drop(node);
    this.deps.unreported.forget(node);
    // A write in flight is still applied: it notes nothing among the unreported results, where a node made again under the name may have
    // results of its own by then.
    if (this.lanes.busy(node)) {
      this.gone.add(node);
      this.flights.refuse(node); // nothing follows a write of the node that was
    } else this.owners.delete(node);
  }

  /**
   * A policy is gone, or made again under its name: the reports its memory still waits to write are dropped (one would
   * create its node's SandboxHealth again, or write over its namesake's report). One being written finishes.
   */
  forgetPolicy(memory: PolicyMemory): void {
    for (const [node, owner] of this.owners) {
      if (owner.memory !== memory) continue;
      this.lanes.drop(node);
      if (!this.lanes.busy(node)) this.owners.delete(node);
    }
  }

  /**
   * Drops every report still waiting: this process may no longer write (a lost Lease, a stop), and each would be
   * refused. What they would have said stays in the policies' memory and the unreported; a pass of a new term plans them again.
   */
  dropWaiting(): void {
    this.lanes.clear();
    for (const node of this.owners.keys()) if (!this.lanes.busy(node)) this.owners.delete(node);
  }

  private async run(node: string): Promise<void> {
    const owner = this.owners.get(node);
    if (!owner) return;
    // A node asked for again from now on waits for the next write, not this one.
    const since = owner.since ?? this.deps.clock.now();
    owner.since = undefined;
    const planned = this.plan(owner.policy, owner.memory, node);
    if (!planned) return;
    const applied = await this.write(planned, owner.memory);
    if (!applied) {
      // Refused for going before the write it follows: the node is looked at again once that one is back, and its
      // news has waited since it was first asked for.
      this.refusedSince.set(node, since);
      return;
    }
    const { transitions, superseded } = applied;
    // A pass's look at the node read the status from before this write: look again, at once.
    if (superseded) this.deps.requeue(owner.policy, 0);
    this.deps.hooks?.onReport?.(this.deps.clock.now() - since, planned.urgent);
    for (const transition of transitions) await recordEvent(this.deps, owner.policy, node, transition);
    // Stuck pods a decision may now evict, their Events reported first.
    if (planned.explains && !superseded) this.deps.requeue(owner.policy, 0);
  }

  private settled(node: string, settledWanted: boolean, error: unknown): void {
    const none = this.lanes.flying(node) === 0;
    const gone = this.gone.has(node);
    if (none) this.gone.delete(node);
    // A refused write's news is looked at again, as if asked for meanwhile, once the write it followed is back too.
    const wanted = (none && this.flights.lookAgain(node) && !gone) || settledWanted;
    const owner = this.owners.get(node);
    if (!this.lanes.busy(node)) this.owners.delete(node);
    if (!owner) return;
    const what = `status of sandboxhealth/${node}`;
    // Refused by the fence: this process no longer acts, and has nothing to retry or to warn of.
    if (error instanceof NotActingError) return;
    // A refused one (the apiserver refused it for what it is) would be refused again: it is not retried.
    const retriable =
      error !== undefined && logWriteFailure(this.deps.logger, { policy: owner.policy }, what, error);
    // Looked at afresh: what the API holds is uncertain after a failure, and out of date for a node wanted again.
    if (retriable || wanted) owner.memory.markDirty(node);
    // The apply queue retries it, after its backoff (once per failing round, however many writes failed).
    if (retriable) this.deps.failures.fail(owner.policy, error);
    else if (wanted) this.deps.requeue(owner.policy, 0);
  }

  /**
   * What one node's SandboxHealth should say now, and whether that is urgent (news an SRE or the next decision waits
   * for: an action, a block, a state change, a pod newly stuck for a known cause); undefined when the API already
   * holds it, when nothing has been decided about the node yet, or when a write of ours applied after the node was
   * last looked at (it is looked at again first).
   */
  private plan(policy: string, memory: PolicyMemory, node: string): PlannedReport | undefined {
    const state = memory.nodes.get(node);
    const observation = state?.observation;
    const remediation = state?.remediation;
    if (!observation || !remediation || this.deps.unreported.stale(observation)) return undefined;
    // A write in flight: planned on what it leaves, telling what it does not tell.
    const after = this.flights.latest(node);
    const previous = after ? after.expected : observation.previous;
    const reported = new Set(after?.reported);
    const input: RemediationStatusInput = {
      ...remediation,
      results: this.deps.unreported.results(node).filter((result) => !reported.has(result)),
      detection: observation.detection,
      previous,
      node: observation.node,
      now: new Date(this.deps.clock.now()),
    };
    const desired = desiredHealthStatus(input);
    this.deps.hooks?.onNodeStatus?.(policy, node, desired);
    const patch = healthPatch(previous, desired);
    if (Object.keys(patch).length === 0 && (observation.exists || after)) return undefined;
    const explained = podsNewlyExplainedByIo(previous, desired);
    const urgent =
      !(observation.exists || after) ||
      input.results.length > 0 ||
      !sameBlocks(previous, remediation.blocked) ||
      desired.state !== previous?.state ||
      desired.conditions.some((c) => conditionStatus(previous.conditions, c.type) !== c.status) ||
      podsOfNewlyKnownCause(previous, desired).length > 0 ||
      explained.length > 0;
    // A pass may evict them once this is applied: asked for where one may (a node fenced, ours or another's), and not over
    // a failure waiting for its backoff.
    const explains =
      explained.length > 0 &&
      (input.stampsAfter !== undefined || observation.node.unschedulable) &&
      !this.deps.failures.failing(policy);
    return { observation, previous, after, input, desired, patch, urgent, explains };
  }

  /**
   * Writes one node's SandboxHealth as planned; returns the transitions to record, and whether a pass looked at the
   * node while it was in flight (that look is stale now); undefined when it followed a write in flight and the API
   * refused it for going first.
   */
  private async write(
    report: PlannedReport,
    memory: PolicyMemory,
  ): Promise<{ transitions: Transition[]; superseded: boolean } | undefined> {
    const { observation, input, desired, previous, after } = report;
    const { node } = observation;
    // In flight from here, before any wait: a report asked for meanwhile follows it.
    const expected = applyMergePatch(previous, report.patch) as SandboxHealthStatus;
    const flight = this.flights.fly(node.name, expected, input.results);
    let written: Awaited<ReturnType<StatusWriter['patchHealthStatus']>> | undefined;
    let failure: Error | undefined;
    try {
      if (!observation.exists && !after) await this.deps.writer.createHealth(node);
      if (Object.keys(report.patch).length > 0) written = await this.send(report, flight);
    } catch (err) {
      failure = err instanceof Error ? err : new Error(`a write failed: ${String(err)}`);
      // Failed with no word on whether the API applied it (a timeout, a reset): a write that followed it and is applied
      // proves it did. Wait for that one's outcome, which marks it.
      const follower =
        failure instanceof OutOfTurnError ? undefined : this.flights.follower(node.name, flight);
      if (follower) await follower.outcome;
    }
    const back = this.flights.back(node.name, flight, failure === undefined && written !== undefined);
    if (failure !== undefined && !back.applied) {
      if (!(failure instanceof OutOfTurnError)) throw failure;
      this.flights.refuse(node.name);
      this.deps.hooks?.onFencedReport?.(false);
      return undefined;
    }
    if (!back.applied) {
      memory.reported(node.name, observation, { exists: true }); // created, with nothing to write
      return { transitions: [], superseded: false };
    }
    if (after && written) this.deps.hooks?.onFencedReport?.(true);
    const reported = [...input.results, ...back.proven.flatMap((f) => f.reported)];
    let superseded = false;
    if (back.latest && written)
      superseded = this.recordApplied(memory, observation, written, flight, reported);
    // Answered after a later write that holds it, or failed as the API answered it and yet applied (a later write that
    // followed it did): its results are reported, its Events too, and nothing else of it is kept.
    else if (!this.gone.has(node.name)) this.deps.unreported.reportedBy(node.name, reported);
    const stuck = detectionTransitions(node, previous, desired, this.stuckEvents.left(node.name));
    this.stuckEvents.spend(node.name, stuck);
    return { transitions: [...stuck, ...remediationTransitions(input, desired)], superseded };
  }

  /**
   * The node's latest write applied: what the API holds now, as it answered (its merge of our patch, nested fields
   * included), so that the next pass need not read the node again to know it, and caches it until the watch shows
   * it (an answer that cannot be read is not cached: the node waits for the watch). Returns whether a pass
   * looked at the node while it was in flight (that look is stale now).
   */
  private recordApplied(
    memory: PolicyMemory,
    observation: NodeObservation,
    written: Awaited<ReturnType<StatusWriter['patchHealthStatus']>>,
    flight: Flight,
    reported: readonly ActionResult[],
  ): boolean {
    const name = observation.node.name;
    this.deps.mutations.wroteHealth(name, written.version, written.status);
    // Its results are reported now, in the same turn as the status that holds them (others may have come meanwhile; and
    // those of the writes it followed, which its applying proves applied): the facts count each once. The look it was
    // planned from holds what applied; a look taken while it was in flight read the status from before it (stale, by
    // the unreported results' count): look again.
    if (!this.gone.has(name)) this.deps.unreported.appliedWith(name, reported);
    const superseded = memory.reported(name, observation, {
      exists: true,
      previous: written.status ?? flight.expected,
      reportsApplied: this.deps.unreported.applied(name),
    });
    if (superseded) memory.markDirty(name);
    return superseded;
  }

  /**
   * Sends the report: a merge patch; or, following a write in flight, its keys whole, only if the status still bears
   * that write's reportId (the apiserver refuses it otherwise: OutOfTurnError).
   */
  private async send(
    report: PlannedReport,
    flight: Flight,
  ): Promise<Awaited<ReturnType<StatusWriter['patchHealthStatus']>>> {
    const { writer, mutations } = this.deps;
    const { observation, desired, after } = report;
    const name = observation.node.name;
    if (after) {
      const whole: Record<string, unknown> = { reportId: flight.id };
      for (const key of Object.keys(report.patch) as (keyof HealthStatus)[])
        whole[key] = desired[key] === undefined ? null : stored(desired[key]);
      return writer.patchHealthStatus(name, whole, after.id);
    }
    try {
      return await writer.patchHealthStatus(name, { ...report.patch, reportId: flight.id });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      // Gone behind our back, and the cache does not show it yet (or never will: a delete the watch missed). Create it
      // again and write the whole status, at once, rather than patch a phantom on every retry. Under a new reportId:
      // a write that followed this one was planned on the phantom.
      mutations.forgetHealth(name);
      await writer.createHealth(observation.node);
      this.flights.rename(flight, stored(desired));
      return writer.patchHealthStatus(name, flight.expected);
    }
  }
}
