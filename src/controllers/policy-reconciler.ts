import { isDeepStrictEqual } from 'node:util';
import type { Actuator, DeploymentChange, NodeChange } from '../actuation/actuator.js';
import {
  MAX_EVICTIONS_PER_MINUTE,
  matchesSelector,
  rolloutStampAnnotations,
  type RolloutStamps,
  type SandboxPolicyStatus,
  sameTaint,
  stampAnnotations,
  validateSandboxPolicySpec,
  type ActionKind,
  type IoReadingStatus,
  type NodeStamps,
  type SandboxHealthStatus,
  type SandboxPolicySpec,
} from '../api/v1alpha1/index.js';
import {
  detectNodeFindings,
  detectStuckPods,
  isIoCause,
  nextStuckAt,
  type DeploymentView,
  type GatedPodView,
  type NodeFindings,
  type NodeView,
  type PodView,
} from '../detection/index.js';
import {
  decideIoPressure,
  judgeReading,
  readingTime,
  staleAfterFor,
  type IoPressureDecision,
} from '../policy/io-pressure.js';
import {
  isEviction,
  isStampDrop,
  undoActions,
  type Action,
  type BlockedAction,
  type Guard,
} from '../policy/actions.js';
import { rateLog, RATE_WINDOW_MS } from '../policy/rate-window.js';
import {
  decideRemediation,
  type NodeFacts,
  type RemediationDecision,
  whyNotTriggered,
} from '../policy/remediation.js';
import type { Logger } from '../observability/log.js';
import type { Clock } from '../runtime/clock.js';
import { TerminalError, type ReconcileResult } from '../runtime/controller.js';
import { apiStatus, describeError, isConflict, isNotFound } from '../kube/errors.js';
import { REQUEST_TIMEOUT_MS } from '../kube/rest.js';
import { Expectations, isAtLeast } from '../runtime/expectations.js';
import { forEachLimit } from '../runtime/limit.js';
import { isMaterialChange } from '../signals/material-change.js';
import type { IoSource } from '../signals/types.js';
import { conditionStatus } from '../status/conditions.js';
import {
  desiredDetectionStatus,
  detectionTransitions,
  EVENT_WINDOW_MS,
  podsOfNewlyKnownCause,
  type EventBudget,
  POD_EVENTS_PER_NODE,
  storedDetectionStatus,
  type DetectionStatus,
} from '../status/health-status.js';
import { invalidPolicyStatus, validPolicyStatus } from '../status/policy-status.js';
import {
  ACTION_WORDS,
  desiredHealthStatus,
  newBlocks,
  sameBlocks,
  remediationTransitions,
  type ActionResult,
  type RemediationStatusInput,
} from '../status/remediation-status.js';
import { ioState, observeNode } from './observe.js';
import { observeRollouts } from './observe-rollouts.js';
import { decideRollouts, deploymentTarget, type RolloutAction } from '../policy/rollouts.js';
import { decideGateReleases, type PacingPolicy, type ReleaseReason } from '../policy/pacing.js';
import { assignNodes, type NodeAssignment, type PolicyCandidate } from './ownership.js';
import type { ClusterCache, PolicyObject, VersionedKind, WorkloadReader } from '../ports/cluster.js';
import type { EventRecorder, StatusWriter, Transition } from '../ports/writes.js';

export interface PolicyReconcilerDeps {
  cache: ClusterCache;
  writer: StatusWriter;
  recorder: EventRecorder;
  clock: Clock;
  logger: Logger;
  /** Safety net: reconcile every policy at least this often. */
  resyncMs?: number;
  /** The IO-pressure source a policy's spec asks for. */
  sources?(policyName: string, spec: SandboxPolicySpec): IoSource;
  onNodeStatus?(policy: string, node: string, status: DetectionStatus): void;
  /** Carry out decisions: the real actuator, and the one used for dry runs (spec.safety.dryRun or --dry-run). */
  actuators: { real: Actuator; dryRun: Actuator };
  /** --dry-run: every policy runs dry. */
  dryRun?: boolean;
  workloads?: WorkloadReader;
  onAction?(kind: ActionKind | RolloutAction['kind'], outcome: 'Succeeded' | 'Failed', dryRun: boolean): void;
  /** Where the operator runs: its own Deployments are never throttled. */
  operatorNamespace?: string;
  /** What the pacing webhook reads: each pacing policy and whether it gates now. */
  pacing?: Map<string, PacingPolicy>;
  /** The policy status computed in a pass (for gauges). */
  onPolicyStatus?(policy: string, status: SandboxPolicyStatus): void;
  /** A gate lifted after the pod waited this long. */
  onGateReleased?(waitSeconds: number, reason: ReleaseReason): void;
  /** Called once for each newly blocked action, with the guard that holds it. */
  onBlocked?(guard: string): void;
  /** How many nodes each pass looked at. */
  onPass?(stats: PassStats): void;
  /** Writes to independent nodes in flight at once (default 8); 1 writes in a fixed order. */
  writeConcurrency?: number;
}

/** Valid policies with their parsed specs; invalid ones are left out of node ownership. */
// Informers replace a view object on every change, so the object identity keys the validation result.
const validations = new WeakMap<PolicyObject, ReturnType<typeof validateSandboxPolicySpec>>();
export function validatePolicy(object: PolicyObject): ReturnType<typeof validateSandboxPolicySpec> {
  let result = validations.get(object);
  if (!result) validations.set(object, (result = validateSandboxPolicySpec(object.spec)));
  return result;
}

export function validPolicies(
  policies: Iterable<PolicyObject>,
): (PolicyCandidate & { object: PolicyObject })[] {
  const valid: (PolicyCandidate & { object: PolicyObject })[] = [];
  for (const object of policies) {
    const result = validatePolicy(object);
    if (result.valid)
      valid.push({ name: object.name, createdAt: object.createdAt, spec: result.spec, object });
  }
  return valid;
}

type ThrottledRollout = NonNullable<SandboxPolicyStatus['throttledRollouts']>[number];

const SETTLE_RETRY_MS = 500;
const FOLLOW_UP_MS = 5_000;

/** The apiserver answered no: nothing was evicted (a 4xx; a 429 is a refusal too). */
function isRefusal(err: unknown): boolean {
  const code = apiStatus(err)?.code;
  return code !== undefined && code >= 400 && code < 500;
}

const EVICTION_IN_FLIGHT_MS = 60_000;
/** Writes (node patches, evictions, SandboxHealths) in flight at once by default: independent nodes side by side. */
const WRITE_CONCURRENCY = 8;
/** How long a pod whose eviction a disruption budget refused goes after the others. */
const EVICTION_REFUSED_MS = 30_000;
/** Evictions one pass carries out; the rest are decided again by the next pass, at once. */
const EVICTIONS_PER_PASS = 8;
/** SandboxHealths a pass writes besides the urgent ones; the rest are written by the next pass, at once. */
const REPORTS_PER_PASS = 64;

/** One node's SandboxHealth as a pass would write it. */
interface PlannedReport {
  observation: NodeObservation;
  input: RemediationStatusInput;
  desired: ReturnType<typeof desiredHealthStatus>;
  /** Only the object is missing: the status stored (none) is what it should be. */
  unchanged: boolean;
  urgent: boolean;
}

/** What the rollout and pacing steps of one pass share. */
interface PassContext {
  policy: PolicyObject;
  spec: SandboxPolicySpec;
  dryRun: boolean;
  actuator: Actuator;
  failures: Failures;
  now: Date;
  observations: readonly NodeObservation[];
}

interface NodeObservation {
  node: NodeView;
  previous: SandboxHealthStatus | undefined;
  exists: boolean;
  findings: NodeFindings;
  io: IoPressureDecision | undefined;
  detection: DetectionStatus;
  ioHeavyPods: PodView[];
  /** The node's resourceVersion when observed: a change decided on this view is made on this version or not at all. */
  version: string | undefined;
  /** When the node's state changes with time alone (a pod crossing the threshold, sustain, recovery, a reading going stale). */
  dueAt: number;
  /** Facts as last computed, while nothing they depend on changed: a quiet node costs nothing to decide on. */
  factsMemo?: { dryRun: boolean; facts: NodeFacts } | undefined;
}

/** What one reconcile could not do; terminal failures are reported and not retried. */
class Failures {
  readonly retriable: unknown[] = [];
  constructor(
    private readonly logger: Logger,
    private readonly policy: string,
  ) {}
  add(what: string, err: unknown): void {
    if (err instanceof TerminalError) {
      this.logger.warn('Gave up on a refused write', { policy: this.policy, what, error: err.message });
      return;
    }
    this.retriable.push(err);
    this.logger.warn('Failed a write; will retry', { policy: this.policy, what, error: describe(err) });
  }
  throwIfAny(): void {
    if (this.retriable.length === 0) return;
    const [first] = this.retriable;
    throw new Error(`${this.retriable.length} write(s) failed, first: ${describe(first)}`, { cause: first });
  }
}

const describe = (err: unknown) => (err instanceof Error ? err.message : String(err));

/**
 * Reconciles one SandboxPolicy, level-based, in one pass down and one pass up: observe every owned node from
 * the cache, decide (pure) what to do about all of them, act, then write each SandboxHealth and the policy's
 * status where they changed, with Events only for transitions.
 */
/** What the last pass of a policy saw, so that the next looks again only at the nodes that changed. */
interface PolicyMemory {
  generation: number;
  /** The owned node names, joined: a change of ownership means a full pass. */
  owned: string;
  observations: Map<string, NodeObservation>;
  /** The next full pass: the resync, or the next poll of a polled IO source. */
  fullPassAt: number;
}

/** How much one reconcile looked at: the measure that a pod change costs its node, not the policy's. */
export interface PassStats {
  full: boolean;
  observed: number;
  owned: number;
  /** SandboxHealths written in the pass, and those left for the next one (REPORTS_PER_PASS). */
  reported?: number;
  deferred?: number;
}

export class PolicyReconciler {
  private readonly resyncMs: number;
  private readonly writeConcurrency: number;
  private readonly expectations: Expectations;
  private readonly memory = new Map<string, PolicyMemory>();
  /** Gates lifted by this process that the cache may still show, by pod uid. */
  private readonly releasesInFlight = new Map<string, number>();
  /** Gated pods whose PodStartHeld Event was recorded. */
  private readonly announcedGates = new Set<string>();
  /** When each Deployment was first seen rolling out at its generation, for the queue's order. */
  private readonly rolloutSeen = new Map<string, Date>();
  /** Node changes the apiserver refused for what they are (400/422), by policy and node: not retried as they are. */
  private readonly refused = new Map<
    string,
    { version: string | undefined; generation: number; message: string }
  >();
  /** The ownership the last complete sweep of orphans saw, and when the next is due anyway. */
  private swept: { signature: string | undefined; until: number } = { signature: undefined, until: 0 };
  /** Each policy's status as we last wrote it, while the cache does not show that write yet. */
  private readonly writtenPolicyStatus = new Map<string, { status: SandboxPolicyStatus; version: string }>();
  /** Each node's SandboxHealth status as we last wrote it, while the cache does not show that write yet. */
  private readonly writtenHealth = new Map<string, SandboxHealthStatus>();
  /** Nodes changed since a policy's last pass; 'all' after a change that can touch every node. */
  private readonly dirty = new Map<string, Set<string> | 'all'>();
  lastPass: PassStats | undefined;
  /** Nodes whose routine report the last pass left for later, with since when. */
  private readonly deferredSince = new Map<string, number>();
  /** Pods whose eviction a disruption budget refused, by uid, with until when they go after the others. */
  private readonly evictionsRefused = new Map<string, number>();
  /** Pods evicted by this process that the cache still shows, by uid, with when to stop waiting. */
  private readonly evictionsInFlight = new Map<string, number>();
  /** Stuck-pod Events each node got within EVENT_WINDOW_MS: when, for the pods' own and for the node's listing. */
  private readonly stuckEvents = new Map<string, { pods: number[]; node: number | undefined }>();
  /** The last error of each policy's IO source, so it is logged once per change rather than every poll. */
  private readonly sourceErrors = new Map<string, string>();
  constructor(private readonly deps: PolicyReconcilerDeps) {
    this.resyncMs = deps.resyncMs ?? 5 * 60_000;
    this.writeConcurrency = deps.writeConcurrency ?? WRITE_CONCURRENCY;
    this.expectations = new Expectations(deps.clock);
  }

  /** Whether the cache shows our last write of this object (the read-your-writes fence). */
  private settled(kind: VersionedKind, name: string): boolean {
    return this.expectations.isSettled(`${kind}/${name}`, this.deps.cache.observedVersion(kind, name));
  }

  /**
   * The status the API returned for our last SandboxHealth write, while the cache does not show that write yet;
   * undefined once it does (read the cache). It lives exactly as long as the write's expectation: until the cache
   * shows that version or a newer one, or 30 s. Null, when a write is awaited with nothing to stand in for it (not
   * expected: both are set together), means wait for the watch.
   */
  private healthStandIn(node: string): SandboxHealthStatus | undefined | null {
    if (this.settled('SandboxHealth', node)) {
      this.writtenHealth.delete(node);
      return undefined;
    }
    return this.writtenHealth.get(node) ?? null;
  }

  /** What the API holds of a policy's status after our merge patch of it (only this operator writes it). */
  private rememberPolicyStatus(
    name: string,
    version: string | undefined,
    before: SandboxPolicyStatus | undefined,
    patch: Partial<SandboxPolicyStatus>,
  ): void {
    // No version (the policy is gone, or none came back): nothing to stand in for.
    if (version === undefined) {
      this.writtenPolicyStatus.delete(name);
      return;
    }
    const status = withoutUndefined({ ...(this.writtenPolicyStatus.get(name)?.status ?? before), ...patch });
    this.writtenPolicyStatus.set(name, { status, version });
  }

  /** Drops what was remembered of a deleted policy. */
  private forgetPolicy(name: string): void {
    this.writtenPolicyStatus.delete(name);
    this.deps.pacing?.delete(name);
    this.sourceErrors.delete(name);
    this.memory.delete(name);
    this.dirty.delete(name);
    this.expectations.forget(`SandboxPolicy/${name}`);
    for (const key of this.refused.keys()) if (key.startsWith(`${name}\n`)) this.refused.delete(key);
  }

  /** Our write of this object is moot (it was deleted): stop waiting for the watch to show it. */
  forgetWrite(kind: 'Node' | 'SandboxHealth', name: string): void {
    this.expectations.forget(`${kind}/${name}`);
    if (kind === 'SandboxHealth') this.writtenHealth.delete(name);
  }

  /** A node is gone: its Event budget goes with it. */
  forgetNode(name: string): void {
    this.stuckEvents.delete(name);
  }

  /** Notes what changed for a policy's next pass: one node, or (no node) everything it owns. */
  markDirty(policy: string, node?: string): void {
    const current = this.dirty.get(policy);
    if (current === 'all') return;
    if (node === undefined) {
      this.dirty.set(policy, 'all');
      return;
    }
    if (current) current.add(node);
    else this.dirty.set(policy, new Set([node]));
  }

  /** The owning policy of each node, over all valid policies in the cache. */
  assignment(): NodeAssignment {
    return assignNodes(validPolicies(this.deps.cache.policies()), this.deps.cache.nodes());
  }

  async reconcile(name: string): Promise<ReconcileResult> {
    const { cache, writer, clock, logger } = this.deps;
    const now = new Date(clock.now());
    let policy = cache.policy(name);
    const assignment = this.assignment();
    const failures = new Failures(logger, name);
    // What no policy owns is swept when ownership changed (a policy or a node's labels), until a sweep got through
    // everything, and at each resync: not on every pass, as it walks every node and SandboxHealth.
    const signature = [...assignment.owner].map(([node, owner]) => `${node}=${owner}`).join('\n');
    if (!policy || signature !== this.swept.signature || now.getTime() >= this.swept.until) {
      // Both, always: one's being incomplete must not keep the other from running.
      const healthsSwept = await this.deleteOrphanHealths(assignment, failures);
      const stampsSwept = await this.releaseOrphanStamps(assignment, failures);
      const complete = healthsSwept && stampsSwept;
      this.swept = complete
        ? { signature, until: now.getTime() + this.resyncMs }
        : { signature: undefined, until: 0 };
    }
    await this.releaseOrphanRollouts(failures, now);
    if (!policy) {
      this.forgetPolicy(name);
      failures.throwIfAny();
      return {};
    }

    const validation = validatePolicy(policy);
    if (!validation.valid) {
      const status = invalidPolicyStatus(
        { generation: policy.generation, previous: policy.status, now },
        validation.problems,
      );
      if (!this.sameStatus(policy.status, status)) {
        logger.info('Refused invalid SandboxPolicy', { policy: name, problems: validation.problems });
        await writer.patchPolicyStatus(name, status);
      }
      // Frozen: the webhook gates nothing for it (its gates are lifted by the orphan sweep).
      this.deps.pacing?.delete(name);
      failures.throwIfAny();
      return {};
    }
    // The eviction log and the action counts are read from the policy's status: never from one older than our last
    // write. Until the cache shows that write, what we wrote stands for it (only this operator writes the status),
    // so a pass never waits for the watch: in an incident the status is written at almost every pass.
    // The stand-in holds until the cache shows that version, not for the fence's TTL only: a watch lagging in a
    // storm must not bring back an older eviction log.
    const standIn = this.writtenPolicyStatus.get(name);
    const cached = cache.observedVersion('SandboxPolicy', name);
    if (standIn && !(cached !== undefined && isAtLeast(cached, standIn.version)))
      policy = { ...policy, status: standIn.status };
    else if (standIn) this.writtenPolicyStatus.delete(name);
    else if (!this.settled('SandboxPolicy', name)) {
      failures.throwIfAny();
      return { requeueAfterMs: SETTLE_RETRY_MS };
    }
    const spec = validation.spec;
    const dryRun = spec.safety.dryRun || this.deps.dryRun === true;
    const owned = [...assignment.owner].filter(([, owner]) => owner === name).map(([node]) => node);

    // Observe: every owned node on a full pass, else only those that changed since the last pass.
    const ownedKey = owned.join('\n');
    const remembered = this.memory.get(name);
    const dirty = this.dirty.get(name);
    this.dirty.delete(name);
    const full =
      !remembered ||
      dirty === 'all' ||
      remembered.generation !== policy.generation ||
      remembered.owned !== ownedKey ||
      now.getTime() >= remembered.fullPassAt;
    const memory: PolicyMemory = full
      ? { generation: policy.generation, owned: ownedKey, observations: new Map(), fullPassAt: Infinity }
      : remembered;
    this.memory.set(name, memory);
    // Besides the changed nodes, those whose state changes with time alone have come due.
    const toObserve = full
      ? owned
      : owned.filter(
          (n) => dirty?.has(n) || (memory.observations.get(n)?.dueAt ?? Infinity) <= now.getTime(),
        );
    const { observations: fresh, unsettledNodes } = await this.observe(name, spec, toObserve, now, full);
    for (const observation of fresh) memory.observations.set(observation.node.name, observation);
    for (const node of unsettledNodes) this.markDirty(name, node);
    const unsettled = unsettledNodes.length;
    const observed = new Set(fresh.map((o) => o.node.name));
    const pass: PassStats = { full, observed: observed.size, owned: owned.length };
    const observations = [...memory.observations.values()];
    const inFlight = new Set(this.evictionsInFlight.keys());
    const factsOf = new Map<string, NodeFacts>(
      observations.map((o) => [o.node.name, this.factsOf(o, dryRun, inFlight)]),
    );
    // Decide, on every owned node or not at all: a node still settling could hide a cordon from the limits.
    const decided =
      unsettled === 0 && observations.length === owned.length
        ? decideRemediation({
            policy: name,
            spec,
            nodes: [...factsOf.values()],
            now,
            recentEvictions: (policy.status?.recentEvictions ?? []).map((t) => new Date(t)),
            cacheReady: cache.watchesHealthy(),
          })
        : undefined;
    // A pass evicts at most EVICTIONS_PER_PASS pods (one round of concurrent writes); the rest are decided again by
    // the next pass, at once. A pass stays short, so new evidence on other nodes is not reported behind a queue of
    // evictions.
    // Pods a disruption budget refused lately go last, so the others get their turn meanwhile.
    const refusedLately = (a: Action) =>
      isEviction(a) && (this.evictionsRefused.get(a.pod.uid) ?? 0) > now.getTime();
    let evictionsLeft = 0;
    const decision = decided && {
      ...decided,
      actions: [
        ...decided.actions.filter((a) => !refusedLately(a)),
        ...decided.actions.filter(refusedLately),
      ].filter((a) => {
        if (!isEviction(a)) return true;
        return evictionsLeft++ < EVICTIONS_PER_PASS;
      }),
    };
    evictionsLeft = Math.max(0, evictionsLeft - EVICTIONS_PER_PASS);
    for (const [uid, until] of this.evictionsRefused)
      if (until <= now.getTime()) this.evictionsRefused.delete(uid);
    // Act.
    const actuator = dryRun ? this.deps.actuators.dryRun : this.deps.actuators.real;
    const keptEvictions = rateLog(policy.status?.recentEvictions, now, [], MAX_EVICTIONS_PER_MINUTE);
    const outcome = decision
      ? await this.act(name, memory.observations, decision, actuator, keptEvictions, policy, failures)
      : {
          results: new Map<string, ActionResult[]>(),
          blocked: new Map<string, BlockedAction[]>(),
          failedNodes: new Set<string>(),
          evictedAt: [],
        };
    // The log keeps each eviction at the moment its answer came (no earlier than the apiserver acted): counted from
    // the pass's start, the next minute's first eviction followed the last one by 59.9 s. Refused ones spent nothing.
    const sentAt = [...outcome.evictedAt].sort((a, b) => a - b).map((t) => new Date(t).toISOString());
    const recentEvictions = [...keptEvictions, ...sentAt].slice(-MAX_EVICTIONS_PER_MINUTE);
    // Rollouts: what feeds the remediated nodes stops, and at most N roll out while the pressure lasts.
    const rollouts = await this.throttleRollouts({
      policy,
      spec,
      dryRun,
      actuator,
      failures,
      now,
      observations,
      remediated: new Set(
        observations
          .filter((o) =>
            decision ? decision.stampsAfter.get(o.node.name) : factsOf.get(o.node.name)?.stamps,
          )
          .map((o) => o.node.name),
      ),
      cacheReady: cache.watchesHealthy() && unsettled === 0,
    });
    const pacing = await this.pacePodStarts({ policy, spec, dryRun, actuator, failures, now, observations });
    // Report: every node whose SandboxHealth changed, most urgent first, written concurrently under a limit; one
    // node's failure does not stop the others. A pass writes at most REPORTS_PER_PASS nodes beyond the urgent ones:
    // in a storm that changes every node, the rest wait for the next pass (at once), and new evidence is not queued
    // behind a thousand count updates.
    let degraded = 0;
    let remediating = 0;
    const blockedByNode = new Map<string, BlockedAction[]>();
    for (const b of [...(decision?.blocked ?? []), ...[...outcome.blocked.values()].flat()]) {
      const list = blockedByNode.get(b.node);
      if (list) list.push(b);
      else blockedByNode.set(b.node, [b]);
    }
    const planned: PlannedReport[] = [];
    for (const observation of observations) {
      const nodeName = observation.node.name;
      if (observation.findings.degraded) degraded++;
      const facts =
        factsOf.get(nodeName) ?? observeNode({ ...observation, dryRun, evictionsInFlight: inFlight });
      // A node whose patch failed keeps the stamps it had: claim nothing that was not written.
      const stamps =
        decision && !outcome.failedNodes.has(nodeName) ? decision.stampsAfter.get(nodeName) : facts.stamps;
      if (stamps) remediating++;
      const results = outcome.results.get(nodeName) ?? [];
      // With no decision this pass (a node still settling), what was blocked stays as it was.
      const blocked = decision
        ? (blockedByNode.get(nodeName) ?? [])
        : (observation.previous?.blocked ?? []).map((b) => ({
            ...b,
            node: nodeName,
            guard: b.guard as Guard,
          }));
      // What we changed on the node (or its pods) comes back through the watch: look again, behind the fence.
      if (results.length > 0 || outcome.blocked.has(nodeName)) this.markDirty(name, nodeName);
      // A node not looked at again, with nothing done and the same blocks, has nothing new to report.
      const throttling = rollouts.throttling.get(nodeName) ?? [];
      const wasThrottling = conditionStatus(observation.previous?.conditions, 'RolloutsThrottled') === 'True';
      if (
        !observed.has(nodeName) &&
        results.length === 0 &&
        sameBlocks(observation.previous, blocked) &&
        wasThrottling === throttling.length > 0
      )
        continue;
      const report = this.planReport(name, observation, {
        results,
        blocked,
        stampsAfter: stamps,
        unschedulable: unschedulableAfter(observation.node, outcome.results.get(nodeName) ?? [], dryRun),
        notTriggered: whyNotTriggered(facts, observation.findings.degraded, spec),
        throttling,
        simulated: dryRun && stamps !== undefined && !observation.node.stamps,
        dryRun,
        now,
      });
      if (report) planned.push(report);
    }
    const urgent = planned.filter((r) => r.urgent);
    // Routine reports longest deferred first: in a long storm every node gets its turn.
    const routine = planned
      .filter((r) => !r.urgent)
      .sort(
        (a, b) =>
          (this.deferredSince.get(a.observation.node.name) ?? Infinity) -
          (this.deferredSince.get(b.observation.node.name) ?? Infinity),
      );
    const toWrite = [...urgent, ...routine.slice(0, REPORTS_PER_PASS)];
    const deferred = routine.slice(REPORTS_PER_PASS);
    const since = new Map(
      deferred.map((r) => [
        r.observation.node.name,
        this.deferredSince.get(r.observation.node.name) ?? now.getTime(),
      ]),
    );
    this.deferredSince.clear();
    for (const [node, at] of since) this.deferredSince.set(node, at);
    for (const report of deferred) this.markDirty(name, report.observation.node.name);
    // Every status first, then the Events of its transitions: an Event never holds up another node's status.
    const written: { node: string; blockedNew: number; transitions: Transition[] }[] = [];
    await forEachLimit(toWrite, this.writeConcurrency, async (report) => {
      try {
        written.push({ node: report.observation.node.name, ...(await this.writeReport(report)) });
      } catch (err) {
        this.markDirty(name, report.observation.node.name); // what the API holds is uncertain now: read it afresh
        failures.add(`status of sandboxhealth/${report.observation.node.name}`, err);
      }
    });
    await forEachLimit(written, this.writeConcurrency, async ({ node, transitions }) => {
      for (const transition of transitions) await this.recordTransition(name, node, transition);
    });
    const blockedNew = written.reduce((n, w) => n + w.blockedNew, 0);
    // Set once, at the end: with two workers, another policy's pass may have run in between.
    this.lastPass = { ...pass, reported: toWrite.length, deferred: deferred.length };
    this.deps.onPass?.(this.lastPass);

    const previousStorm = policy.status?.conditions?.find((c) => c.type === 'StormDetected')?.status;
    const status = validPolicyStatus(
      { generation: policy.generation, previous: policy.status, now },
      {
        matchedNodes: owned.length,
        degradedNodes: degraded,
        remediatingNodes: remediating,
        overlappingNodes: assignment.overlaps.get(name) ?? [],
        paused: spec.safety.paused,
        dryRun,
        storm: decision?.storm,
        actionCount:
          (policy.status?.actionCount ?? 0) +
          [...outcome.results.values()].reduce(
            (n, r) => n + r.filter((x) => x.outcome === 'Succeeded' && !isStampDrop(x.action)).length,
            0,
          ),
        blockedActionCount: (policy.status?.blockedActionCount ?? 0) + blockedNew,
        recentEvictions,
        throttledRollouts: rollouts.listed,
        gatedPods: pacing.gated,
        recentGateReleases: pacing.recentReleases,
      },
    );
    this.deps.onPolicyStatus?.(name, status);
    // Counts over only the settled nodes would be wrong: the policy status waits for the rest. Compared with
    // what the API holds now, which includes the eviction log written before evicting.
    const stored = {
      ...(policy.status ?? {}),
      ...(outcome.reserved ? { recentEvictions: outcome.reserved } : {}),
      ...(pacing.reserved ? { recentGateReleases: pacing.reserved } : {}),
    };
    if (unsettled === 0 && !this.sameStatus(stored, status)) {
      try {
        const version = await writer.patchPolicyStatus(name, status);
        this.expectations.expect(`SandboxPolicy/${name}`, version);
        this.rememberPolicyStatus(name, version, stored, status);
        if (decision?.storm.detected && previousStorm !== 'True') {
          logger.warn('Detected a storm: starting nothing new', { policy: name, ...decision.storm });
          await this.deps.recorder.record({
            target: { kind: 'SandboxPolicy', name, uid: policy.uid },
            type: 'Warning',
            reason: 'StormDetected',
            message: status.conditions?.find((c) => c.type === 'StormDetected')?.message ?? '',
          });
        }
      } catch (err) {
        failures.add(`status of sandboxpolicy/${name}`, err);
      }
    }
    failures.throwIfAny();

    if (full) {
      const pollMs = this.deps.sources?.(name, spec).pollMs;
      memory.fullPassAt = now.getTime() + Math.min(this.resyncMs, pollMs ?? Infinity);
    }
    const waits = [memory.fullPassAt - now.getTime(), ...observations.map((o) => o.dueAt - now.getTime())];
    // Follow-ups: evictions once the cordon is seen, and retries of what the API held back (429) or a guard
    // holds until a known time (cooldown, the eviction window).
    if (decision?.actions.length || outcome.blocked.size > 0) waits.push(FOLLOW_UP_MS);
    if (pacing.nextAt) waits.push(pacing.nextAt.getTime() - now.getTime() + 1);
    for (const b of decision?.blocked ?? [])
      if (b.liftsAt) waits.push(b.liftsAt.getTime() - now.getTime() + 1);
    if (decision?.blocked.some((b) => b.guard === 'CacheNotSynced')) waits.push(FOLLOW_UP_MS);
    // What was left for the next pass, at once: routine reports, and evictions while this pass got some through (a
    // pass whose evictions a disruption budget all refused waits for the follow-up, not a busy loop).
    const evicted = [...outcome.results.values()].some((r) =>
      r.some((x) => isEviction(x.action) && x.outcome === 'Succeeded'),
    );
    if (deferred.length > 0 || (evictionsLeft > 0 && evicted)) waits.push(0);
    const wait = Math.max(0, Math.min(...waits));
    if (unsettled > 0) return { requeueAfterMs: Math.min(wait, SETTLE_RETRY_MS) };
    return { requeueAfterMs: wait };
  }

  private async observe(
    policyName: string,
    spec: SandboxPolicySpec,
    nodeNames: string[],
    now: Date,
    full: boolean,
  ): Promise<{
    observations: NodeObservation[];
    /** Nodes whose own patch (a cordon) the cache does not show yet: nothing is decided until it does. */
    unsettledNodes: string[];
  }> {
    const { cache, logger } = this.deps;
    const source = this.deps.sources?.(policyName, spec);
    // Polled sources are asked again on full passes (every pollMs); in between, their last answer stands.
    if (source && full) {
      try {
        await source.refresh(nodeNames);
        if (this.sourceErrors.delete(policyName))
          logger.info('Reading IO pressure again', { policy: policyName, source: source.kind });
      } catch (err) {
        // Readings stay unknown (and so act on nothing); the Unknown condition says why in each node's status.
        // Said once per change of error, not on every poll.
        const error = describeError(err);
        if (this.sourceErrors.get(policyName) !== error)
          logger.warn('Failed to read IO pressure', { policy: policyName, source: source.kind, error });
        this.sourceErrors.set(policyName, error);
      }
    }
    const pods = nodeNames.flatMap((node) => cache.pendingPodsOn(node));
    for (const [uid, until] of this.evictionsInFlight) {
      const pod = cache.podByUid(uid);
      if (until <= now.getTime() || !pod || pod.deleting) this.evictionsInFlight.delete(uid);
    }
    const stuck = detectStuckPods(pods, cache.failureEventsByPod(), {
      stuckThresholdSeconds: spec.detection.stuckThresholdSeconds,
      now,
    });
    const findings = detectNodeFindings(stuck, nodeNames, spec.detection.minStuckPods);
    const observations: NodeObservation[] = [];
    const unsettledNodes: string[] = [];
    const threshold = spec.detection.stuckThresholdSeconds;
    for (const [nodeName, nodeFindings] of findings) {
      const node = cache.node(nodeName);
      if (!node) continue;
      // A node patch of ours (a cordon) not back through the watch yet holds every decision, as the old node would
      // be decided on again: nothing about the node is read from the cache until it is.
      if (!this.settled('Node', nodeName)) {
        logger.debug('Waiting for the watch to show our write', {
          policy: policyName,
          node: nodeName,
          kind: 'Node',
        });
        unsettledNodes.push(nodeName);
        continue;
      }
      // Our SandboxHealth write is not back through the watch yet: what we wrote stands for it (only this operator
      // writes the status's detection and remediation), so the node is looked at afresh, new stuck pods included,
      // without waiting for the watch. In an incident the node's status is written at almost every pass: waiting
      // for each echo would put a watch round trip between one stuck pod's report and the next.
      const standIn = this.healthStandIn(nodeName); // what was written, as the API returned it
      if (standIn === null) {
        logger.debug('Waiting for the watch to show our write', {
          policy: policyName,
          node: nodeName,
          kind: 'SandboxHealth',
          cached: cache.observedVersion('SandboxHealth', nodeName),
        });
        unsettledNodes.push(nodeName);
        continue;
      }
      const health = standIn ? undefined : cache.health(nodeName);
      const previous = standIn ?? health?.status; // read before writing: a cache may update in place
      let io: IoPressureDecision | undefined;
      let readingToWrite: IoReadingStatus | undefined;
      let dueAt = nextStuckAt(cache.pendingPodsOn(nodeName), threshold, now)?.getTime() ?? Infinity;
      if (source) {
        const reading = source.read(nodeName);
        const problem = reading ? undefined : source.problem?.(nodeName);
        const io_ = spec.ioPressure;
        // The moment the reading goes stale changes what may be done: look again then, even if nothing else moved.
        const staleAt = reading
          ? readingTime(reading) + staleAfterFor(reading, io_.staleAfterSeconds) * 1000 + 1
          : NaN;
        // Only a moment still ahead: a reading stale already (its agent gone) has nothing more to wait for, and
        // counting it would bring the node due on every pass, with the policy requeued at once, forever.
        if (Number.isFinite(staleAt) && staleAt > now.getTime()) dueAt = Math.min(dueAt, staleAt);
        io = decideIoPressure({
          previousStatus: conditionStatus(previous?.conditions, 'IoPressureHigh'),
          previousTracking: previous?.ioPressure
            ? { observation: previous.ioPressure.observation, since: new Date(previous.ioPressure.since) }
            : undefined,
          judgement: problem
            ? { observation: 'Unknown', details: [problem.message], unknownReason: problem.reason }
            : judgeReading(reading, io_.thresholds, now, io_.staleAfterSeconds),
          now,
          sustainSeconds: io_.sustainSeconds,
          recoverySeconds: io_.recoverySeconds,
        });
        if (io.recheckAfterMs !== undefined) dueAt = Math.min(dueAt, now.getTime() + io.recheckAfterMs);
        if (reading && source.kind !== 'agent') {
          // Polled readings are written when they moved, or before the stored one goes stale: not every poll.
          const stored = previous?.ioReading;
          const ageMs = stored ? now.getTime() - new Date(stored.observedTime).getTime() : Infinity;
          const refresh = isMaterialChange(stored, reading) || ageMs >= (io_.staleAfterSeconds * 1000) / 2;
          readingToWrite = refresh || !stored ? reading : stored;
        }
      }
      const detection = desiredDetectionStatus({
        policyName,
        node,
        findings: nodeFindings,
        minStuckPods: spec.detection.minStuckPods,
        thresholdSeconds: spec.detection.stuckThresholdSeconds,
        previous,
        now,
        ...(io ? { io: { decision: io, ...(readingToWrite ? { readingToWrite } : {}) } } : {}),
      });
      const observation: NodeObservation = {
        node,
        previous,
        exists: standIn !== undefined || health !== undefined,
        findings: nodeFindings,
        io,
        detection,
        ioHeavyPods: [],
        version: cache.observedVersion('Node', nodeName),
        dueAt,
      };
      observations.push(observation);
    }
    await this.readIoHeavyPods(policyName, spec, observations);
    return { observations, unsettledNodes };
  }

  /**
   * Pauses and resumes Deployments (decideRollouts) and reports it: Events on each Deployment, the paused list for
   * the policy's status, and per node the Deployments paused because their pods were stuck there.
   */
  private async throttleRollouts(
    ctx: PassContext & { remediated: ReadonlySet<string>; cacheReady: boolean },
  ): Promise<{ throttling: Map<string, string[]>; listed: ThrottledRollout[] }> {
    const { cache, recorder, logger } = this.deps;
    const { policy, spec, dryRun, actuator, now } = ctx;
    const throttle = spec.remediation.throttleRollouts;
    const name = policy.name;
    const simulated = new Map<string, RolloutStamps>();
    for (const entry of policy.status?.throttledRollouts ?? [])
      if (entry.dryRun)
        simulated.set(entry.deployment, {
          policy: name,
          since: new Date(entry.since),
          reason: entry.reason,
          startedAt: new Date(entry.since),
        });
    const inScope = (d: DeploymentView) => {
      if (d.namespace === 'kube-system' || d.namespace === this.deps.operatorNamespace) return false;
      const selector = throttle?.namespaceSelector;
      if (!selector) return true;
      const labels = cache.namespaceLabels(d.namespace);
      return labels !== undefined && matchesSelector(selector, labels);
    };
    // Ours are always considered (to be resumed), others only in scope and not held by another policy.
    const candidates = [...cache.deployments()].filter((d) =>
      d.stamps ? d.stamps.policy === name : throttle !== undefined && inScope(d),
    );
    if (candidates.length === 0 && simulated.size === 0) return { throttling: new Map(), listed: [] };
    // Changes are made on the versions decided on: a Deployment changed meanwhile answers 409, not our pause.
    const versions = new Map(
      candidates.map((d) => [
        deploymentTarget(d),
        cache.observedVersion('Deployment', `${d.namespace}/${d.name}`),
      ]),
    );
    const unsettled = candidates.some((d) => !this.settled('Deployment', `${d.namespace}/${d.name}`));
    const stuckOnRemediated = new Map<string, PodView[]>();
    for (const o of ctx.observations) {
      if (!ctx.remediated.has(o.node.name)) continue;
      stuckOnRemediated.set(
        o.node.name,
        o.findings.stuckPods.filter((p) => p.cause !== 'Unknown' && isIoCause(p.cause)).map((p) => p.pod),
      );
    }
    const facts = observeRollouts({
      deployments: candidates,
      stuckOnRemediated,
      simulated,
      dryRun,
      startedAt: (d) => this.rolloutStart(d, now),
    });
    const decision = decideRollouts({
      policy: name,
      throttle,
      deployments: facts,
      pressure: ctx.remediated.size > 0 || ctx.observations.some((o) => o.io?.condition.status === 'True'),
      now,
      cacheReady: ctx.cacheReady && !unsettled,
      paused: spec.safety.paused,
      cooldownSeconds: spec.safety.cooldownSeconds,
    });
    const byTarget = new Map(candidates.map((d) => [deploymentTarget(d), d]));
    const failed = new Set<string>();
    let pauseFailed = false;
    for (const action of decision.actions) {
      const d = byTarget.get(action.target);
      if (!d) continue;
      // A queued rollout goes on into room that this pass's pauses were to make (decideRollouts lists pauses
      // first): with a pause refused (a 409 from the deployment controller's own write, say), it waits for the
      // retry, or the limit would be exceeded, and undone by a pause a second later.
      if (action.kind === 'ResumeRollout' && action.reason === 'QueueAdvanced' && pauseFailed) {
        failed.add(action.target);
        continue;
      }
      const key = `${d.namespace}/${d.name}`;
      const change: DeploymentChange = {
        namespace: d.namespace,
        name: d.name,
        annotations:
          action.kind === 'PauseRollout'
            ? rolloutStampAnnotations(action.stamps)
            : rolloutStampAnnotations(
                undefined,
                action.kind === 'ReleaseRollout' ? action.handsOffUntil : undefined,
              ),
      };
      const version = versions.get(action.target);
      if (version) change.resourceVersion = version;
      if (action.kind === 'PauseRollout') change.paused = true;
      if (action.kind === 'ResumeRollout') change.paused = false;
      const fields = { policy: name, deployment: key, reason: action.reason, dryRun: actuator.dryRun };
      try {
        this.expectations.expect(`Deployment/${key}`, await actuator.patchDeployment(change));
      } catch (err) {
        failed.add(action.target);
        if (action.kind === 'PauseRollout') pauseFailed = true;
        ctx.failures.add(`patch of deployment/${key}`, err);
        continue;
      }
      if (action.kind === 'ReleaseRollout') {
        logger.info('Dropped our stamp: changed by someone else', fields);
      } else {
        logger.info(
          `${action.kind === 'PauseRollout' ? 'Paused' : 'Resumed'} Deployment${actuator.dryRun ? ' (dry run)' : ''}`,
          fields,
        );
        this.deps.onAction?.(action.kind, 'Succeeded', actuator.dryRun);
      }
      await recorder.record({
        target: { kind: 'Deployment', namespace: d.namespace, name: d.name, uid: d.uid },
        type: 'Normal',
        reason:
          action.kind === 'PauseRollout'
            ? 'RolloutPaused'
            : action.kind === 'ResumeRollout'
              ? 'RolloutResumed'
              : 'RemediationReleased',
        message: `${actuator.dryRun && action.kind !== 'ReleaseRollout' ? 'Dry run, nothing changed: ' : ''}${action.message}`,
      });
    }
    // What stands after this pass; a failed pause is not claimed, a failed or deferred resume is still held.
    const stillPaused = decision.pausedAfter.filter((p) => !failed.has(p.target));
    for (const action of decision.actions)
      if (action.kind === 'ResumeRollout' && failed.has(action.target)) {
        const d = byTarget.get(action.target);
        if (d?.stamps) stillPaused.push({ target: action.target, reason: d.stamps.reason, feeds: [] });
      }
    const throttling = new Map<string, string[]>();
    for (const p of stillPaused)
      if (p.reason === 'FeedsSaturatedNode')
        for (const node of p.feeds) throttling.set(node, [...(throttling.get(node) ?? []), p.target]);
    const listed = stillPaused.map((p): ThrottledRollout => {
      const d = byTarget.get(p.target);
      const real = d?.stamps !== undefined;
      const since = d?.stamps?.since ?? simulated.get(p.target.slice('deployment/'.length))?.since ?? now;
      return {
        deployment: p.target.slice('deployment/'.length),
        reason: p.reason,
        ...(p.feeds.length > 0 ? { feeds: p.feeds.slice(0, 20) } : {}),
        since: since.toISOString(),
        dryRun: dryRun && !real,
      };
    });
    return { throttling, listed };
  }

  /**
   * Pod-start pacing: publishes whether the webhook gates for this policy now, and lifts the gates of the pods it
   * gated at the set rate (oldest first), all at once when the pressure is gone, and anyway after maxGateSeconds.
   */
  private async pacePodStarts(
    ctx: PassContext,
  ): Promise<{ gated: number; recentReleases: string[]; reserved?: string[]; nextAt?: Date }> {
    const { cache, recorder, logger, writer } = this.deps;
    const { policy, spec, dryRun, now } = ctx;
    const name = policy.name;
    const pace = spec.remediation.throttleRollouts?.pacePodStarts;
    const pressure = pace !== undefined && ctx.observations.some((o) => o.io?.condition.status === 'True');
    if (pace)
      this.deps.pacing?.set(name, {
        name,
        namespaceSelector: pace.namespaceSelector,
        gating: pressure && !dryRun && !spec.safety.paused,
        dryRun: dryRun || spec.safety.paused,
      });
    else this.deps.pacing?.delete(name);
    const kept = rateLog(policy.status?.recentGateReleases, now, [], MAX_EVICTIONS_PER_MINUTE);
    // Ours, and those of a policy that is gone: a gate never outlives the policy that set it.
    for (const [uid, until] of this.releasesInFlight)
      if (until <= now.getTime()) this.releasesInFlight.delete(uid);
    // Ours only: those of a policy that is gone or invalid are lifted by the orphan sweep.
    const allGated = [...cache.gatedPods()];
    const gated = allGated.filter((p) => p.policy === name && !this.releasesInFlight.has(p.uid));
    const present = new Set(allGated.map((p) => p.uid));
    for (const uid of this.announcedGates) if (!present.has(uid)) this.announcedGates.delete(uid);
    for (const pod of gated) {
      if (this.announcedGates.has(pod.uid)) continue;
      this.announcedGates.add(pod.uid);
      await recorder.record({
        target: { kind: 'Pod', namespace: pod.namespace, name: pod.name, uid: pod.uid },
        type: 'Normal',
        reason: 'PodStartHeld',
        message: `Held at the pacing gate: nodes of policy ${name} are under IO pressure; released at most ${pace?.maxPodStartsPerMinute ?? 0} a minute, and within ${pace?.maxGateSeconds ?? 0}s.`,
      });
    }
    if (gated.length === 0) return { gated: 0, recentReleases: kept };
    const decision = decideGateReleases({
      gated,
      pressure: pressure && !dryRun,
      maxPodStartsPerMinute: pace?.maxPodStartsPerMinute ?? 1,
      maxGateSeconds: pace?.maxGateSeconds ?? 0,
      recentReleases: kept.map((t) => new Date(t)),
      now,
    });
    const paced = decision.releases.filter((r) => r.reason === 'Paced').length;
    const recentReleases = rateLog(
      kept,
      now,
      Array.from({ length: paced }, () => now),
      MAX_EVICTIONS_PER_MINUTE,
    );
    let reserved: string[] | undefined;
    let pacedAllowed = true;
    if (paced > 0) {
      // The rate is spent in status first, as evictions are: a crash cannot reset it. Only this field is written,
      // so an eviction log reserved earlier in the pass stays as it is.
      try {
        const version = await writer.patchPolicyStatus(name, { recentGateReleases: recentReleases });
        this.expectations.expect(`SandboxPolicy/${name}`, version);
        this.rememberPolicyStatus(name, version, policy.status, { recentGateReleases: recentReleases });
        reserved = recentReleases;
      } catch (err) {
        ctx.failures.add(`gate release log of sandboxpolicy/${name}`, err);
        pacedAllowed = false; // what spends no budget (pressure gone, waited too long) is still lifted
      }
    }
    // Lifting a gate only gives back: it is done for real even in a dry run, so no pod is ever stranded.
    const lifter = this.deps.actuators.real;
    let released = 0;
    for (const { pod, reason } of decision.releases) {
      if (reason === 'Paced' && !pacedAllowed) continue;
      if (!(await this.liftGate(pod, lifter, ctx.failures))) continue;
      released++;
      this.releasesInFlight.set(pod.uid, now.getTime() + RATE_WINDOW_MS);
      this.announcedGates.delete(pod.uid);
      const waited = (now.getTime() - pod.gatedAt.getTime()) / 1000;
      this.deps.onGateReleased?.(waited, reason);
      logger.info('Released Pod from the pacing gate', {
        policy: name,
        pod: `${pod.namespace}/${pod.name}`,
        reason,
        waitedSeconds: Math.round(waited),
      });
      await recorder.record({
        target: { kind: 'Pod', namespace: pod.namespace, name: pod.name, uid: pod.uid },
        type: reason === 'WaitedTooLong' ? 'Warning' : 'Normal',
        reason: 'PodStartReleased',
        message:
          reason === 'WaitedTooLong'
            ? `Released after ${Math.round(waited)}s at the pacing gate (maxGateSeconds): a gate never strands a pod.`
            : reason === 'PressureGone'
              ? `Released: the IO pressure is gone (held ${Math.round(waited)}s).`
              : `Released in turn (at most ${pace?.maxPodStartsPerMinute ?? 0} a minute; held ${Math.round(waited)}s).`,
      });
    }
    return {
      gated: gated.length - released,
      recentReleases: pacedAllowed ? recentReleases : kept,
      ...(reserved ? { reserved } : {}),
      ...(decision.nextAt ? { nextAt: decision.nextAt } : {}),
    };
  }

  /** When a Deployment's current rollout started: first seen rolling out at this generation (our stamp keeps it). */
  private rolloutStart(d: DeploymentView, now: Date): Date {
    if (d.stamps) return d.stamps.startedAt;
    const key = `${d.uid}/${d.generation}`;
    let seen = this.rolloutSeen.get(key);
    if (!seen) {
      seen = d.rollingOut ? now : d.createdAt;
      this.rolloutSeen.set(key, seen);
      // Bounded: entries of Deployments long done are of no use.
      if (this.rolloutSeen.size > 10_000) this.rolloutSeen.delete(this.rolloutSeen.keys().next().value ?? '');
    }
    return seen;
  }

  /** The node's facts; reused while evictions in flight (which they leave out) are none. */
  private factsOf(observation: NodeObservation, dryRun: boolean, inFlight: ReadonlySet<string>): NodeFacts {
    const memo = observation.factsMemo;
    if (memo?.dryRun === dryRun && inFlight.size === 0) return memo.facts;
    const facts = observeNode({ ...observation, dryRun, evictionsInFlight: inFlight });
    observation.factsMemo = inFlight.size === 0 ? { dryRun, facts } : undefined;
    return facts;
  }

  /** Running pods to migrate: a live read, only for nodes under our remediation with verified pressure. */
  private async readIoHeavyPods(
    policyName: string,
    spec: SandboxPolicySpec,
    observations: NodeObservation[],
  ): Promise<void> {
    const selector = spec.remediation.migrateWorkloads?.podSelector;
    const reader = this.deps.workloads;
    if (!selector || !reader) return;
    for (const observation of observations) {
      if (
        ioState(observation.io) !== 'High' ||
        (!observation.node.stamps && !observation.previous?.remediation)
      )
        continue;
      try {
        observation.ioHeavyPods = await reader.runningPodsOn(observation.node.name, selector);
      } catch (err) {
        this.deps.logger.warn('Failed to list IO-heavy pods', {
          policy: policyName,
          node: observation.node.name,
          error: describe(err),
        });
      }
    }
  }

  private async act(
    policyName: string,
    observations: ReadonlyMap<string, NodeObservation>,
    decision: RemediationDecision,
    actuator: Actuator,
    keptEvictions: readonly string[],
    policy: PolicyObject,
    failures: Failures,
  ): Promise<{
    results: Map<string, ActionResult[]>;
    blocked: Map<string, BlockedAction[]>;
    /** Nodes whose patch failed: they keep the stamps they had. */
    failedNodes: Set<string>;
    /** When each eviction that spent budget was sent (clock ms). */
    evictedAt: number[];
    /** The eviction log written before evicting, if one was. */
    reserved?: string[];
  }> {
    const { logger } = this.deps;
    const failedNodes = new Set<string>();
    const results = new Map<string, ActionResult[]>();
    const blocked = new Map<string, BlockedAction[]>();
    const push = <T>(map: Map<string, T[]>, node: string, value: T) => {
      const list = map.get(node);
      if (list) list.push(value);
      else map.set(node, [value]);
    };
    const report = (result: ActionResult) => {
      push(results, result.action.node, result);
      const { action } = result;
      const fields = {
        policy: policyName,
        node: action.node,
        target: action.target,
        reason: action.reason,
        dryRun: actuator.dryRun,
        ...(result.detail ? { error: result.detail } : {}),
      };
      if (isStampDrop(action)) {
        // Not an action of ours: someone else reverted us, and we only let go of the claim.
        logger.info('Dropped our stamp: changed by someone else', fields);
        return;
      }
      if (result.outcome === 'Succeeded')
        logger.info(`${ACTION_WORDS[action.kind].done}${actuator.dryRun ? ' (dry run)' : ''}`, fields);
      else logger.warn(`Failed to ${action.kind.toLowerCase()}`, fields);
      this.deps.onAction?.(action.kind, result.outcome, actuator.dryRun);
    };

    const evictedAt: number[] = [];
    const nodeActions = new Map<string, Action[]>();
    for (const action of decision.actions) if (!isEviction(action)) push(nodeActions, action.node, action);
    // Independent nodes are patched side by side, under a limit; so are the evictions after them.
    await forEachLimit([...nodeActions], this.writeConcurrency, async ([nodeName, actions]) => {
      const observation = observations.get(nodeName);
      if (!observation) return;
      // The change is made on the version it was decided on: a node changed since answers 409, not our undo of it.
      const change = nodeChange(
        observation.node,
        actions,
        decision.stampsAfter.get(nodeName),
        observation.version,
      );
      const refusedKey = `${policyName}\n${nodeName}`;
      const refused = this.refused.get(refusedKey);
      if (refused && refused.version === observation.version && refused.generation === policy.generation) {
        failedNodes.add(nodeName);
        for (const action of actions)
          push(blocked, nodeName, {
            kind: action.kind,
            node: nodeName,
            target: action.target,
            guard: 'RefusedByApi',
            message: refused.message,
          });
        return;
      }
      try {
        const version = await actuator.patchNode(change);
        this.expectations.expect(`Node/${nodeName}`, version);
        for (const action of actions) report({ action, outcome: 'Succeeded' });
      } catch (err) {
        failedNodes.add(nodeName);
        this.markDirty(policyName, nodeName);
        if (isConflict(err)) {
          // Changed since we looked: decide again on the fresh node, soon; nothing failed.
          failures.add(`patch of node/${nodeName} (changed meanwhile)`, err);
          return;
        }
        if (err instanceof TerminalError)
          this.refused.set(refusedKey, {
            version: observation.version,
            generation: policy.generation,
            message: err.message,
          });
        failures.add(`patch of node/${nodeName}`, err);
        for (const action of actions) report({ action, outcome: 'Failed', detail: describe(err) });
      }
    });
    // The eviction budget is spent in status before any eviction, so a crash right after cannot reset it. Each is
    // stamped with the latest moment it can be carried out (its request times out then): a crash leaves the window
    // counted from then, never from before the apiserver could have acted on it.
    const evictions = decision.actions.filter(isEviction);
    let evictionsAllowed = true;
    let reserved: string[] | undefined;
    if (evictions.length > 0) {
      const deadline = new Date(this.deps.clock.now() + REQUEST_TIMEOUT_MS).toISOString();
      const recentEvictions = [...keptEvictions, ...evictions.map(() => deadline)].slice(
        -MAX_EVICTIONS_PER_MINUTE,
      );
      try {
        // Only this field: a merge patch leaves the rest of the status as it is.
        const version = await this.deps.writer.patchPolicyStatus(policyName, { recentEvictions });
        this.expectations.expect(`SandboxPolicy/${policyName}`, version);
        this.rememberPolicyStatus(policyName, version, policy.status, { recentEvictions });
        reserved = recentEvictions;
      } catch (err) {
        failures.add(`eviction log of sandboxpolicy/${policyName}`, err);
        evictionsAllowed = false; // unrecorded budget: evict nothing
      }
    }
    await forEachLimit(evictions, this.writeConcurrency, async (action) => {
      if (!evictionsAllowed || failedNodes.has(action.node)) return;
      try {
        const outcome = await actuator.evict(action.pod);
        if (outcome.result === 'Blocked') {
          this.evictionsRefused.set(action.pod.uid, this.deps.clock.now() + EVICTION_REFUSED_MS);
          push(blocked, action.node, {
            kind: action.kind,
            node: action.node,
            target: action.target,
            guard: 'DisruptionBudget',
            message: outcome.message,
          });
          return;
        }
        if (outcome.result === 'Gone') return; // already gone: nothing was evicted, no budget spent
        if (!actuator.dryRun)
          this.evictionsInFlight.set(action.pod.uid, this.deps.clock.now() + EVICTION_IN_FLIGHT_MS);
        // The answer came after the apiserver acted: a moment no earlier than the eviction, as the window needs.
        evictedAt.push(this.deps.clock.now());
        report({ action, outcome: 'Succeeded' });
      } catch (err) {
        failures.add(`eviction of ${action.target}`, err);
        report({ action, outcome: 'Failed', detail: describe(err) });
        // No answer (a timeout, a reset, a 5xx) may still have evicted it: it spends budget. A refusal did not.
        if (!isRefusal(err)) evictedAt.push(this.deps.clock.now());
      }
    });
    return { results, blocked, failedNodes, evictedAt, ...(reserved ? { reserved } : {}) };
  }

  /**
   * What one node's SandboxHealth should say now, and whether that is urgent (news an SRE or the next decision
   * waits for: an action, a block, a state change, a pod newly stuck for a known cause); undefined when the API
   * already holds it.
   */
  private planReport(
    policyName: string,
    observation: NodeObservation,
    remediation: Omit<RemediationStatusInput, 'detection' | 'previous' | 'node'>,
  ): PlannedReport | undefined {
    const { node, previous } = observation;
    const input: RemediationStatusInput = {
      ...remediation,
      detection: observation.detection,
      previous,
      node,
    };
    const desired = desiredHealthStatus(input);
    this.deps.onNodeStatus?.(policyName, node.name, desired);
    const unchanged =
      isDeepStrictEqual(storedDetectionStatus(previous, desired), withoutUndefined(desired)) &&
      !(previous?.remediation && !desired.remediation);
    if (unchanged && observation.exists) return undefined;
    const urgent =
      !observation.exists ||
      remediation.results.length > 0 ||
      !sameBlocks(previous, remediation.blocked) ||
      desired.state !== previous?.state ||
      desired.conditions.some((c) => conditionStatus(previous.conditions, c.type) !== c.status) ||
      podsOfNewlyKnownCause(previous, desired).length > 0;
    return { observation, input, desired, unchanged, urgent };
  }

  /** Writes one node's SandboxHealth as planned; returns how many blocks are new and the transitions to record. */
  private async writeReport(
    report: PlannedReport,
  ): Promise<{ blockedNew: number; transitions: Transition[] }> {
    const { writer } = this.deps;
    const { observation, input, desired } = report;
    const { node, previous } = observation;
    if (!observation.exists) await writer.createHealth(node);
    if (report.unchanged) {
      observation.exists = true;
      return { blockedNew: 0, transitions: [] };
    }
    const patch: Parameters<StatusWriter['patchHealthStatus']>[1] = { ...desired };
    if (previous?.remediation && !desired.remediation) patch.remediation = null;
    let written: Awaited<ReturnType<StatusWriter['patchHealthStatus']>>;
    try {
      written = await writer.patchHealthStatus(node.name, patch);
    } catch (err) {
      if (!isNotFound(err)) throw err;
      // Gone behind our back, and the cache does not show it yet (or never will: a delete the watch missed). Create
      // it again and write the whole status, at once, rather than patch a phantom on every retry.
      this.forgetWrite('SandboxHealth', node.name);
      await writer.createHealth(node);
      written = await writer.patchHealthStatus(node.name, { ...desired });
    }
    // What the API holds now, as it answered (its merge of our patch, nested fields included): the next pass need
    // not read the node again to know it, and stands on it until the watch shows it. An answer that cannot be read
    // stands in for nothing: the node waits for the watch.
    observation.exists = true;
    observation.previous =
      written.status ?? withoutUndefined({ ...previous, ...desired, remediation: desired.remediation });
    this.expectations.expect(`SandboxHealth/${node.name}`, written.version);
    if (written.version !== undefined && written.status) this.writtenHealth.set(node.name, written.status);
    else this.writtenHealth.delete(node.name);
    observation.factsMemo = undefined;
    const fresh = newBlocks(previous, desired.blocked ?? []);
    for (const b of fresh) this.deps.onBlocked?.(b.guard);
    const stuck = detectionTransitions(node, previous, desired, this.eventBudget(node.name));
    this.spendEventBudget(node.name, stuck);
    return {
      blockedNew: fresh.length,
      transitions: [...stuck, ...remediationTransitions(input, desired)],
    };
  }

  /** What is left of a node's stuck-pod Events in the current window. */
  private eventBudget(node: string): EventBudget {
    const log = this.stuckEvents.get(node);
    if (!log) return { pods: POD_EVENTS_PER_NODE, node: true };
    const since = this.deps.clock.now() - EVENT_WINDOW_MS;
    log.pods = log.pods.filter((at) => at > since);
    if (log.node !== undefined && log.node <= since) log.node = undefined;
    if (log.pods.length === 0 && log.node === undefined) this.stuckEvents.delete(node);
    return { pods: POD_EVENTS_PER_NODE - log.pods.length, node: log.node === undefined };
  }

  private spendEventBudget(node: string, transitions: readonly Transition[]): void {
    const now = this.deps.clock.now();
    for (const t of transitions) {
      if (t.reason !== 'SandboxCreationStuck') continue;
      const log = this.stuckEvents.get(node) ?? { pods: [], node: undefined };
      if (t.target.kind === 'Pod') log.pods.push(now);
      else log.node = now;
      this.stuckEvents.set(node, log);
    }
  }

  /** Records one transition of a node's status as an Event; the ones an SRE follows are logged too. */
  private async recordTransition(policyName: string, node: string, transition: Transition): Promise<void> {
    if (
      transition.reason === 'SandboxCreationStuck' ||
      transition.reason === 'SandboxCreationDegraded' ||
      transition.reason.endsWith('Recovered') ||
      transition.reason === 'IoPressureHigh'
    ) {
      this.deps.logger.info(
        transition.reason === 'SandboxCreationStuck' ? 'Detected stuck Pod' : 'Changed Node state',
        {
          policy: policyName,
          node,
          ...(transition.target.kind === 'Pod'
            ? { pod: `${transition.target.namespace}/${transition.target.name}` }
            : {}),
          reason: transition.reason,
          message: transition.message,
        },
      );
    }
    try {
      await this.deps.recorder.record(transition);
    } catch (err) {
      // The status holds what happened; a lost Event is logged, not retried (the transition will not repeat).
      this.deps.logger.warn('Failed to record an Event', {
        policy: policyName,
        node,
        reason: transition.reason,
        error: describe(err),
      });
    }
  }

  /**
   * Undoes what we did on nodes no valid policy owns any more (the policy was deleted, or the node was opted out
   * or relabelled): nothing would ever judge their recovery, and the stamps say exactly what to revert. A node
   * whose stamping policy still exists but is invalid is frozen, as its SandboxHealth is.
   */
  /** Returns whether every orphan was released (or none was found). */
  private async releaseOrphanStamps(assignment: NodeAssignment, failures: Failures): Promise<boolean> {
    const { cache, logger, recorder } = this.deps;
    // A dry-run operator changes nothing, and reporting the same release on every pass would only be noise.
    if (this.deps.dryRun) return true;
    if (!cache.watchesHealthy()) return false;
    const actuator = this.deps.actuators.real;
    let complete = true;
    for (const node of cache.nodes()) {
      const stamps = node.stamps;
      if (!stamps || assignment.owner.has(node.name)) continue;
      const stamping = cache.policy(stamps.policy);
      // Frozen while its policy is invalid: looked at again on every pass, until the policy is fixed or gone.
      if (stamping && !validatePolicy(stamping).valid) {
        complete = false;
        continue;
      }
      if (!this.settled('Node', node.name)) {
        complete = false;
        continue;
      }
      const message = `No valid SandboxPolicy owns the node any more (${stamping ? `policy ${stamps.policy} no longer selects it` : `policy ${stamps.policy} is gone`}); undoing what it did.`;
      const actions = undoActions(node.name, stamps, 'PolicyGone', message);
      try {
        const version = await actuator.patchNode(
          nodeChange(node, actions, undefined, cache.observedVersion('Node', node.name)),
        );
        this.expectations.expect(`Node/${node.name}`, version);
      } catch (err) {
        failures.add(`release of node/${node.name}`, err);
        complete = false;
        continue;
      }
      for (const action of actions) {
        logger.info(ACTION_WORDS[action.kind].done, {
          node: node.name,
          policy: stamps.policy,
          reason: 'PolicyGone',
        });
        this.deps.onAction?.(action.kind, 'Succeeded', false);
        await recorder.record({
          target: { kind: 'Node', name: node.name, uid: node.uid },
          type: 'Normal',
          reason: action.kind === 'Uncordon' ? 'Uncordoned' : 'Untainted',
          message,
        });
      }
    }
    return complete;
  }

  /**
   * What a policy that is gone (or invalid) left behind on Deployments and pods: its pauses are resumed (a gone
   * policy's only: an invalid one's stay frozen, as its nodes do), and its pacing gates are lifted either way — a
   * gate never strands a pod. Read from the stamps, so it works after any restart.
   */
  private async releaseOrphanRollouts(failures: Failures, now: Date): Promise<void> {
    const { cache, recorder, logger } = this.deps;
    if (!cache.watchesHealthy()) return;
    const isGone = (policy: string | undefined) => !policy || !cache.policy(policy);
    const isFrozen = (policy: string | undefined) => {
      const object = policy ? cache.policy(policy) : undefined;
      return object !== undefined && !validatePolicy(object).valid;
    };
    const actuator = this.deps.actuators.real;
    if (!this.deps.dryRun) {
      for (const d of cache.deployments()) {
        if (!d.stamps || !isGone(d.stamps.policy)) continue;
        const key = `${d.namespace}/${d.name}`;
        if (!this.settled('Deployment', key)) continue;
        const change: DeploymentChange = {
          namespace: d.namespace,
          name: d.name,
          annotations: rolloutStampAnnotations(undefined),
          ...(d.paused ? { paused: false } : {}),
        };
        const version = cache.observedVersion('Deployment', key);
        if (version) change.resourceVersion = version;
        try {
          this.expectations.expect(`Deployment/${key}`, await actuator.patchDeployment(change));
        } catch (err) {
          failures.add(`release of deployment/${key}`, err);
          continue;
        }
        logger.info('Resumed Deployment', { deployment: key, policy: d.stamps.policy, reason: 'PolicyGone' });
        await recorder.record({
          target: { kind: 'Deployment', namespace: d.namespace, name: d.name, uid: d.uid },
          type: 'Normal',
          reason: 'RolloutResumed',
          message: `Resumed: policy ${d.stamps.policy}, which paused it, is gone.`,
        });
      }
    }
    for (const pod of cache.gatedPods()) {
      if (!isGone(pod.policy) && !isFrozen(pod.policy)) continue;
      if (this.releasesInFlight.has(pod.uid)) continue;
      const released = await this.liftGate(pod, actuator, failures);
      if (!released) continue;
      this.releasesInFlight.set(pod.uid, now.getTime() + RATE_WINDOW_MS);
      await recorder.record({
        target: { kind: 'Pod', namespace: pod.namespace, name: pod.name, uid: pod.uid },
        type: 'Normal',
        reason: 'PodStartReleased',
        message: `Released: policy ${pod.policy ?? '(none)'}, which gated it, is gone or invalid.`,
      });
    }
  }

  /** Lifts our gate; true when it was lifted (false: the pod is gone or changed meanwhile, looked at again later). */
  private async liftGate(pod: GatedPodView, actuator: Actuator, failures: Failures): Promise<boolean> {
    try {
      return await actuator.releaseGate({
        namespace: pod.namespace,
        name: pod.name,
        uid: pod.uid,
        gates: pod.gates,
      });
    } catch (err) {
      failures.add(`release of pod/${pod.namespace}/${pod.name}`, err);
      return false;
    }
  }

  /** SandboxHealths of nodes no valid policy owns, unless their policy still exists but is invalid (frozen). */
  private async deleteOrphanHealths(assignment: NodeAssignment, failures: Failures): Promise<boolean> {
    const { cache, writer, logger } = this.deps;
    let complete = true;
    for (const health of cache.healths()) {
      if (assignment.owner.has(health.name)) continue;
      const recorded = health.status?.policy;
      const recordedPolicy = recorded ? cache.policy(recorded) : undefined;
      if (recordedPolicy && !validatePolicy(recordedPolicy).valid) {
        complete = false; // frozen: looked at again on every pass
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

  private sameStatus(a: unknown, b: unknown): boolean {
    return isDeepStrictEqual(withoutUndefined(a), withoutUndefined(b));
  }
}

/** Whether the node is unschedulable after this pass's node actions (a dry run changes nothing). */
function unschedulableAfter(node: NodeView, results: readonly ActionResult[], dryRun: boolean): boolean {
  let unschedulable = node.unschedulable;
  if (dryRun) return unschedulable;
  for (const { action, outcome } of results) {
    if (outcome !== 'Succeeded') continue;
    if (action.kind === 'Cordon') unschedulable = true;
    if (action.kind === 'Uncordon' && !isStampDrop(action)) unschedulable = false;
  }
  return unschedulable;
}

/** One patch for everything decided on a node: spec changes, taint list, and the stamps that record them. */
export function nodeChange(
  node: NodeView,
  actions: readonly Action[],
  stampsAfter: NodeStamps | undefined,
  resourceVersion: string | undefined,
): NodeChange {
  const change: NodeChange = { node: node.name, annotations: stampAnnotations(stampsAfter) };
  if (resourceVersion) change.resourceVersion = resourceVersion;
  let taints = [...node.taints];
  let taintsChanged = false;
  for (const action of actions) {
    if (action.kind === 'Cordon') change.unschedulable = true;
    if (action.kind === 'Uncordon' && !isStampDrop(action)) change.unschedulable = false;
    if (action.kind === 'Taint' && !taints.some((t) => sameTaint(t, action.taint))) {
      taints.push(action.taint);
      taintsChanged = true;
    }
    if (action.kind === 'Untaint') {
      const before = taints.length;
      taints = taints.filter((t) => !sameTaint(t, action.taint));
      taintsChanged ||= taints.length !== before;
    }
  }
  if (taintsChanged) change.taints = taints;
  return change;
}

/** JSON round trip: what the apiserver would store (no undefined fields). */
function withoutUndefined<T>(value: T): T {
  return value === undefined ? value : (JSON.parse(JSON.stringify(value)) as T);
}
