import type { Actuator } from '../../actuation/actuator.js';
import type { SandboxPolicySpec } from '../../api/v1alpha1/index.js';
import type { Logger } from '../../observability/log.js';
import type { ClusterCache, WorkloadReader } from '../../ports/cluster.js';
import type { EventRecorder, StatusWriter } from '../../ports/writes.js';
import type { Clock } from '../../runtime/clock.js';
import { Expectations } from '../../runtime/expectations.js';
import type { IoSource } from '../../signals/types.js';
import { Applier } from '../apply/applier.js';
import { ActionLog, type ActionHooks } from '../action-log.js';
import { Evictor } from '../remediation/evictor.js';
import { RefusedChanges } from '../remediation/refused-changes.js';
import { IgnoredEvents, type IgnoredEventHooks } from '../sandboxpolicy/ignored-events.js';
import { NodeConditions, type NodeConditionHooks } from '../nodecondition/node-conditions.js';
import { NodeLeases } from '../leases/node-leases.js';
import { OrphanSweeper } from '../orphans/sweeper.js';
import { Pacer, type PacerHooks } from '../pacing/pacer.js';
import { PolicyMemories } from '../policy-memory.js';
import type { PassHooks } from '../apply/pass.js';
import { PolicyReconciler } from '../sandboxpolicy/reconciler.js';
import { UnreportedResults } from '../reporting/unreported.js';
import { Reporter, type ReporterHooks } from '../reporting/reporter.js';
import { RolloutThrottler } from '../rollouts/throttler.js';
import { IoLimiter, type IoLimiterHooks } from '../iolimits/limiter.js';
import { IoLimitStamps } from '../iolimits/pod-stamps.js';
import { MutationCache } from '../reporting/mutation-cache.js';

/** What the operator's metrics hear of the controllers. */
export type ControllerHooks = PassHooks &
  ActionHooks &
  PacerHooks &
  ReporterHooks &
  NodeConditionHooks &
  IgnoredEventHooks &
  IoLimiterHooks;

/** The adapters the controllers are built on: the cluster (or a test's memory of one), and how to act on it. */
export interface ControllerDeps {
  cache: ClusterCache;
  writer: StatusWriter;
  recorder: EventRecorder;
  /** The real actuator, and the one used for dry runs (spec.safety.dryRun or --dry-run). */
  actuators: { real: Actuator; dryRun: Actuator };
  workloads?: WorkloadReader | undefined;
  /** Builds the IO source a policy's spec asks for. */
  sources?: ((policyName: string, spec: SandboxPolicySpec) => IoSource) | undefined;
  clock: Clock;
  logger: Logger;
  /** --dry-run: every policy runs dry, whatever its spec says. */
  dryRun?: boolean | undefined;
  /** Where the operator runs: its own Deployments are never throttled. */
  operatorNamespace?: string | undefined;
  /** Safety net: reconcile every policy (and sweep for orphans) at least this often (default 5 min). */
  resyncMs?: number | undefined;
  /** Writes to independent nodes in flight at once (default 8); 1 writes in a fixed order. */
  writeConcurrency?: number | undefined;
  hooks?: ControllerHooks | undefined;
  /**
   * Look at a policy again, from the background: after this long (0: at once) once its apply is done or a report is
   * wanted again. The Manager's policy queue; none in tests that reconcile by hand.
   */
  requeue?: ((policy: string, afterMs: number) => void) | undefined;
  /**
   * Adds a policy to the apply queue (the Manager's), whose controller runs Applier.reconcile; tests run it by hand
   * (test/support/reconciler.ts).
   */
  scheduleApply(policy: string): void;
}

export interface Controllers {
  reconciler: PolicyReconciler;
  /** The apply controller: carries out each policy's decisions, on a queue of its own. */
  applier: Applier;
  sweeper: OrphanSweeper;
  /** The medik8s node leases of ours: renewed while we remediate, released when we no longer do. */
  leases: NodeLeases;
  memories: PolicyMemories;
  /** Pod-start pacing: what the pacing webhook reads. */
  pacer: Pacer;
}

/** Writes to independent nodes (node patches, evictions, SandboxHealths) in flight at once by default. */
const WRITE_CONCURRENCY = 8;

/** The settings every controller reads, with their defaults. */
function settingsOf(deps: ControllerDeps) {
  return {
    hooks: deps.hooks ?? {},
    writeConcurrency: deps.writeConcurrency ?? WRITE_CONCURRENCY,
    resyncMs: deps.resyncMs ?? 5 * 60_000,
    dryRun: deps.dryRun === true,
    requeue: deps.requeue ?? (() => undefined),
  };
}

/**
 * The concerns more than one controller uses, each owning its own state: one set of expectations (the read-your-writes
 * fence, and the removals in flight), the Node condition, the action log, pacing, the medik8s leases, the IO limits
 * and the node changes the apiserver refused.
 */
function sharedConcerns(deps: ControllerDeps) {
  const { cache, recorder, clock, logger } = deps;
  const { hooks, writeConcurrency, dryRun } = settingsOf(deps);
  const expectations = new Expectations(clock);
  const conditions = new NodeConditions({
    cache,
    expectations,
    recorder,
    logger,
    writeConcurrency,
    hooks,
    retractor: dryRun ? undefined : deps.actuators.real,
  });
  const actions = new ActionLog(logger, hooks);
  const pacer = new Pacer({
    cache,
    expectations,
    recorder,
    lifter: deps.actuators.real,
    logger,
    clock,
    hooks,
  });
  const leases = new NodeLeases({
    cache,
    expectations,
    actuator: deps.actuators.real,
    clock,
    logger,
    dryRun,
  });
  const stamps = new IoLimitStamps({ cache, expectations, recorder, clock, hooks });
  const limiter = new IoLimiter({
    cache,
    writer: deps.writer,
    expectations,
    recorder,
    operatorNamespace: deps.operatorNamespace,
    hooks,
    stamps,
  });
  const throttler = new RolloutThrottler({
    cache,
    expectations,
    recorder,
    actions,
    operatorNamespace: deps.operatorNamespace,
  });
  return {
    expectations,
    conditions,
    actions,
    pacer,
    leases,
    limiter,
    stamps,
    throttler,
    refused: new RefusedChanges(),
  };
}

/**
 * Builds the controllers: the policy reconciler (observe, decide, report), the apply controller that carries out its
 * decisions, the orphan sweep and the node leases, each with the concerns it drives.
 */
export function buildControllers(deps: ControllerDeps): Controllers {
  const { cache, writer, recorder, clock, logger } = deps;
  const { hooks, writeConcurrency, resyncMs, dryRun, requeue } = settingsOf(deps);
  const { expectations, conditions, actions, pacer, leases, limiter, stamps, throttler, refused } =
    sharedConcerns(deps);
  const mutations = new MutationCache(cache, expectations);
  const memories = new PolicyMemories();
  const unreported = new UnreportedResults();
  const evictor = new Evictor({ cache, clock, expectations, writeConcurrency });
  // The reporter's failed writes are retried by the apply queue: built before the applier, it calls it only later.
  const reporter: Reporter = new Reporter({
    unreported,
    writer,
    recorder,
    mutations,
    clock,
    logger,
    writeConcurrency,
    hooks,
    requeue,
    failures: {
      fail: (policy, error) => {
        applier.reportFailed(policy, error);
      },
      failing: (policy) => applier.failing(policy),
    },
  });
  const applier: Applier = new Applier({
    cache,
    writer,
    recorder,
    logger,
    writeConcurrency,
    leases,
    refused,
    hooks,
    expectations,
    mutations,
    actions,
    evictor,
    throttler,
    pacer,
    conditions,
    limiter,
    stamps,
    reporter,
    unreported,
    schedule: (policy) => {
      deps.scheduleApply(policy);
    },
    requeue,
  });
  const reconciler = new PolicyReconciler({
    cache,
    writer,
    clock,
    logger,
    actuators: deps.actuators,
    workloads: deps.workloads,
    sources: deps.sources,
    dryRun,
    operatorNamespace: deps.operatorNamespace,
    resyncMs,
    writeConcurrency,
    leases,
    refused,
    hooks,
    expectations,
    mutations,
    memories,
    evictor,
    throttler,
    pacer,
    limiter,
    stamps,
    unreported,
    reporter,
    ignoredEvents: new IgnoredEvents(logger, hooks),
    applier,
  });
  const sweeper = new OrphanSweeper({
    cache,
    writer,
    recorder,
    expectations,
    actuator: deps.actuators.real,
    pacer,
    conditions,
    actions,
    clock,
    logger,
    resyncMs,
    dryRun,
  });
  return { reconciler, applier, sweeper, leases, memories, pacer };
}
