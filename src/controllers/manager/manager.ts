import type { Actuator } from '../../actuation/actuator.js';
import { isRolloutKind, type SandboxPolicySpec } from '../../api/v1alpha1/index.js';
import { describeError } from '../../ports/errors.js';
import type { Logger } from '../../observability/log.js';
import type { OperatorMetrics } from '../../observability/metrics.js';
import { pacingFor } from '../../policy/pacing.js';
import { pacedNamespaces } from '../../policy/webhook-arming.js';
import type { RunningCache, WorkloadReader } from '../../ports/cluster.js';
import type { EventRecorder, StatusWriter, Transition } from '../../ports/writes.js';
import { BackgroundQueue } from '../../runtime/background.js';
import { realClock, type Clock } from '../../runtime/clock.js';
import { Controller } from '../../runtime/controller.js';
import type { Fence } from '../../runtime/fence.js';
import { WorkQueue } from '../../runtime/work-queue.js';
import type { IoSource } from '../../signals/types.js';
import { WebhookServing, type WebhookServingOptions } from '../../webhook/serving.js';
import { nodeOf, policiesFor } from './mapper.js';
import { Liveness } from './liveness.js';
import { LEASES_KEY } from '../leases/node-leases.js';
import { SWEEP_KEY } from '../orphans/sweeper.js';
import { MetricsHooks, reconcileHooks } from './metrics-hooks.js';
import { buildControllers, type Controllers } from './wiring.js';

/** The apply queue's longest backoff: a policy decides nothing meanwhile (client-go's is 16 minutes). */
const APPLY_MAX_BACKOFF_MS = 60_000;
/**
 * Applies of different policies at once: they wait on the apiserver, not the CPU. With 1,000 policies made at once
 * (the policy fuzz), 8 took 106 s to write every Valid condition, 64 took 39 s, as decisions unbounded did (40 s).
 */
const APPLY_WORKERS = 64;

/** The adapters the Manager runs the controllers on, built by the composition root (cli/operator.ts). */
export interface ManagerOptions {
  cache: RunningCache;
  /** Every write below goes through `fence`: built guarded by it. */
  writer: StatusWriter;
  recorder: EventRecorder;
  actuators: { real: Actuator; dryRun: Actuator };
  workloads: WorkloadReader;
  sources: (policyName: string, spec: SandboxPolicySpec) => IoSource;
  /** Opened while this replica acts; the adapters refuse every write while it is closed. */
  fence: Fence;
  logger: Logger;
  metrics: OperatorMetrics;
  clock?: Clock;
  workers?: number;
  resyncMs?: number;
  /** --dry-run: every policy runs dry, whatever its spec says. */
  dryRun?: boolean;
  /** The operator's own namespace: its Deployments are never throttled. */
  operatorNamespace?: string;
  /** Serve the pod-start pacing webhook, and register it with the apiserver (`register`) at its URL. */
  webhook?: WebhookServingOptions;
  /** How often where the webhook is armed is looked at again (default 1 s). */
  armingIntervalMs?: number;
  /**
   * Leader election decides when this replica acts: start() only syncs the caches (a warm standby) and lead() starts
   * the controllers. Without it, start() acts as soon as the caches have synced.
   */
  leaderElection?: boolean;
  /** /readyz turns false while an informer has been disconnected longer than this (default 60 s). */
  maxDisconnectedMs?: number;
  /** A reconcile running longer than this makes the operator not alive (/healthz 503; default 10 minutes). */
  wedgedAfterMs?: number;
}

/**
 * Wires and runs the pipeline: informers (read-only cache) -> mapper (policy keys) -> work queues -> the policy
 * reconciler (one key per policy) and the orphan sweeper (one key) -> status and Events. Nothing is reconciled before
 * every cache has synced, nor by a replica that does not act.
 */
export class Manager {
  readonly queue: WorkQueue<string>;
  private readonly sweeps: WorkQueue<string>;
  private readonly leases: WorkQueue<string>;
  private readonly applies: WorkQueue<string>;
  private readonly controllers: Controllers;
  private readonly running: Controller<string>[];
  /** Events waiting to be written, out of the reconciler's way. */
  private readonly events: BackgroundQueue<Transition>;
  private readonly gauges: MetricsHooks;
  private readonly liveness: Liveness;
  private started = false;
  private stopping = false;
  private markSynced!: () => void;
  private readonly synced = new Promise<void>((resolve) => (this.markSynced = resolve));
  private readonly operatorNamespace: string;
  private webhook: WebhookServing | undefined;
  private armingTimer: NodeJS.Timeout | undefined;
  private abortStart: (() => void) | undefined;

  constructor(private readonly options: ManagerOptions) {
    const { cache, logger, metrics } = options;
    const clock = options.clock ?? realClock;
    this.operatorNamespace = options.operatorNamespace ?? 'sandbox-remediator-system';
    this.gauges = new MetricsHooks(metrics);
    this.liveness = new Liveness(logger, options.wedgedAfterMs);
    // A policy's pass looks at every node it owns for its guards: passes take at most about a fifth of the time,
    // however fast changes come, and a change is held back at most 200 ms for the pass that takes it.
    this.queue = new WorkQueue<string>({ clock, spacing: { factor: 4, maxMs: 200 } });
    this.sweeps = new WorkQueue<string>({ clock });
    this.leases = new WorkQueue<string>({ clock });
    // The apply controller's: one apply of a policy at a time, and its failures backed off here alone.
    this.applies = new WorkQueue<string>({ clock, maxDelayMs: APPLY_MAX_BACKOFF_MS });
    this.events = new BackgroundQueue<Transition>({
      concurrency: 4,
      limit: 10_000,
      run: (transition) => options.recorder.record(transition),
      onError: (transition, err) => {
        logger.warn('Failed to record an Event', { reason: transition.reason, error: describeError(err) });
      },
      onDrop: () => {
        metrics.eventsDropped.inc();
      },
    });
    this.controllers = buildControllers({
      cache,
      writer: options.writer,
      // Events are written in the background: the status written before them holds the same transition, and a pass
      // must not wait on a round trip per Event before it looks at new evidence (ADR 0012).
      recorder: {
        record: (transition) => {
          this.events.push(transition);
          return Promise.resolve();
        },
      },
      actuators: options.actuators,
      workloads: options.workloads,
      sources: options.sources,
      clock,
      logger,
      dryRun: options.dryRun,
      operatorNamespace: options.operatorNamespace,
      resyncMs: options.resyncMs,
      hooks: this.gauges.hooks(),
      requeue: (policy, afterMs) => {
        this.queue.addAfter(policy, afterMs);
      },
      scheduleApply: (policy) => {
        this.applies.add(policy);
      },
    });
    const { reconciler, applier, sweeper, leases } = this.controllers;
    this.running = [
      new Controller(
        'sandboxpolicy',
        this.queue,
        (key) => reconciler.reconcile(key),
        reconcileHooks(options, 'policy'),
      ),
      new Controller(
        'apply',
        this.applies,
        (key) => applier.reconcile(key),
        reconcileHooks(options, 'apply'),
      ),
      new Controller('orphans', this.sweeps, () => sweeper.sweep(), reconcileHooks(options, 'sweep')),
      new Controller('node-leases', this.leases, () => leases.reconcile(), reconcileHooks(options, 'leases')),
    ];
    cache.onChange((change) => {
      this.route(change);
    });
  }

  /** A change the cache saw: which policies look again (and at which node), and whether the sweeper does. */
  private route(change: Parameters<Parameters<RunningCache['onChange']>[0]>[0]): void {
    const { cache, metrics } = this.options;
    const { reconciler } = this.controllers;
    const podByUid = (uid: string) => cache.podByUid(uid);
    const node = nodeOf(change, podByUid);
    if (change.kind === 'SandboxPolicy' && change.type !== 'delete') reconciler.policyObserved(change.key);
    // A deleted object will never show our last write of it: stop waiting for that.
    if (change.type === 'delete' && (change.kind === 'SandboxHealth' || change.kind === 'Node'))
      reconciler.forgetWrite(change.kind, change.key);
    if (change.type === 'delete' && change.kind === 'NodeLease')
      this.controllers.leases.forgetWrite(change.key);
    // A deleted node's stuck-pod series would otherwise stay on /metrics (and in alerts) until a restart.
    if (change.type === 'delete' && change.kind === 'Node') {
      this.gauges.forgetNode(change.key);
      reconciler.forgetNode(change.key);
    }
    for (const policy of policiesFor(change, cache, podByUid)) {
      if (node !== null) reconciler.markDirty(policy, node);
      this.queue.add(policy);
    }
    // What can leave something of ours unowned: a policy, a node's labels, a rollout or a gated pod.
    if (
      change.kind === 'SandboxPolicy' ||
      change.kind === 'Node' ||
      isRolloutKind(change.kind) ||
      change.kind === 'GatedPod'
    )
      this.sweeps.add(SWEEP_KEY);
    // What can change which lease of ours is wanted: our stamps on a node, a policy, a lease.
    if (change.kind === 'SandboxPolicy' || change.kind === 'Node' || change.kind === 'NodeLease')
      this.leases.add(LEASES_KEY);
    metrics.queueDepth.set(this.queue.length);
  }

  /** Starts the caches and waits for them to sync; then acts, unless leader election decides when. */
  async start(): Promise<void> {
    const { logger, cache } = this.options;
    cache.start();
    const progress = setInterval(() => {
      logger.info('Waiting for caches to sync', { synced: cache.sizes() });
    }, 5000);
    // A stop before the caches sync (the apiserver never came up) ends the wait, or the process would hang.
    const stopping = new Promise<'stopped'>(
      (resolve) =>
        (this.abortStart = () => {
          resolve('stopped');
        }),
    );
    try {
      if ((await Promise.race([cache.waitForSync(), stopping])) === 'stopped') return;
    } finally {
      clearInterval(progress);
    }
    this.refreshGauges();
    if (this.options.webhook) await this.serveWebhook(this.options.webhook);
    this.started = true;
    this.markSynced();
    if (this.options.leaderElection) {
      logger.info('Caches synced: standing by until this replica leads');
      return;
    }
    await this.act();
  }

  /** Leadership won: act once the caches have synced (at once when the standby was warm). */
  async lead(): Promise<void> {
    await this.synced;
    if (this.stopping) return;
    await this.act();
  }

  isActing(): boolean {
    return this.options.fence.mayAct();
  }

  private async act(): Promise<void> {
    const { logger, fence, cache } = this.options;
    if (fence.mayAct() || this.stopping) return;
    fence.allow();
    try {
      // Only the acting replica registers the webhook: the apiserver then calls the one that decides.
      await this.webhook?.lead();
    } catch (err) {
      fence.close();
      throw err;
    }
    if (!this.stillActing()) return; // stopped or fenced while registering
    this.options.metrics.leader.set(1);
    const workers = this.options.workers ?? 2;
    const [policies, applies, sweeps, leases] = this.running;
    policies?.start(workers);
    applies?.start(APPLY_WORKERS);
    sweeps?.start(1);
    leases?.start(1);
    for (const policy of cache.policies()) this.queue.add(policy.name);
    this.sweeps.add(SWEEP_KEY);
    this.leases.add(LEASES_KEY);
    logger.info('Started controller', { controller: 'sandboxpolicy', workers });
  }

  private stillActing(): boolean {
    return this.options.fence.mayAct() && !this.stopping;
  }

  /**
   * Stops acting at once, synchronously: every later write of a reconcile still under way is refused. For a lost
   * Lease, before anything else happens.
   */
  fence(): void {
    this.options.fence.close();
    this.controllers.reconciler.stopWriting();
    this.webhook?.unlead();
    this.options.metrics.leader.set(0);
  }

  /** Serves the pacing webhook; the certificate is the user's, or made now and renewed (ADR 0009). */
  private async serveWebhook(options: WebhookServingOptions): Promise<void> {
    const { logger, metrics, cache, fence } = this.options;
    const webhook = new WebhookServing(options, {
      // A standby gates nothing: only the leader decides, on the policies it reconciles.
      decide: (namespace, placement) =>
        fence.mayAct()
          ? pacingFor(
              namespace,
              cache.namespaceLabels(namespace),
              // A policy that gates comes before one that only counts (dry run, paused) for the same namespace.
              this.controllers.pacer
                .publications()
                .sort((a, b) => Number(b.gating) - Number(a.gating) || a.name.localeCompare(b.name)),
              this.operatorNamespace,
              placement,
            )
          : undefined,
      onDecision: ({ gated, dryRun }) => {
        if (gated) metrics.podsGated.inc({ dry_run: String(dryRun) });
      },
      logger,
      metrics,
    });
    const { port, origin } = await webhook.start();
    this.webhook = webhook;
    logger.info('Serving the pacing webhook', { port, url: options.url, certificate: origin });
    this.keepArming(webhook);
  }

  /** The webhook armed where pacing could gate now, and nowhere else, looked at each second (a standby writes none). */
  private keepArming(webhook: WebhookServing): void {
    const { cache, fence } = this.options;
    let busy = false;
    this.armingTimer = setInterval(() => {
      if (busy || !fence.mayAct()) return;
      busy = true;
      const namespaces = pacedNamespaces(
        this.controllers.pacer.publications(),
        cache.namespaces(),
        this.operatorNamespace,
      );
      void webhook.arm(namespaces).finally(() => (busy = false));
    }, this.options.armingIntervalMs ?? 1_000);
    this.armingTimer.unref();
  }

  /** Alive unless a reconcile is wedged (liveness.ts): /healthz. */
  alive(): boolean {
    return this.liveness.check(this.running);
  }

  /** Synced, and no informer disconnected for longer than maxDisconnectedMs. */
  ready(): boolean {
    const { cache } = this.options;
    const ready =
      this.started &&
      cache.isSynced() &&
      cache.longestDisconnectedMs() <= (this.options.maxDisconnectedMs ?? 60_000);
    this.options.metrics.ready.set(ready ? 1 : 0);
    return ready;
  }

  refreshGauges(): void {
    const { cache, metrics } = this.options;
    for (const [informer, size] of Object.entries(cache.sizes()))
      metrics.cachedObjects.set({ informer }, size);
    metrics.queueDepth.set(this.queue.length);
    metrics.leader.set(this.isActing() ? 1 : 0);
    this.ready();
    this.refreshStateGauges();
  }

  /**
   * What is held back now and which policies are in a storm, from the cached SandboxHealths and policies (a standby
   * reports the same): gauges for alerts that last as long as the state does, unlike the counters.
   */
  private refreshStateGauges(): void {
    const { cache } = this.options;
    const { blockedActions, stormDetected } = this.options.metrics;
    const blocked = new Map<string, { policy: string; guard: string; count: number }>();
    for (const health of cache.healths()) {
      const policy = health.status?.policy;
      if (!policy) continue;
      for (const { guard } of health.status?.blocked ?? []) {
        const key = `${policy}\n${guard}`;
        const entry = blocked.get(key) ?? { policy, guard, count: 0 };
        entry.count++;
        blocked.set(key, entry);
      }
    }
    blockedActions.reset();
    for (const { policy, guard, count } of blocked.values()) blockedActions.set({ policy, guard }, count);
    stormDetected.reset();
    for (const policy of cache.policies()) {
      const storm = policy.status?.conditions?.find((c) => c.type === 'StormDetected');
      stormDetected.set({ policy: policy.name }, storm?.status === 'True' ? 1 : 0);
    }
  }

  async stop(): Promise<void> {
    // What was decided is reported, briefly: Events still waiting get 2 s before the fence refuses them.
    await this.events.drain(2_000);
    this.stopping = true;
    // No pod creation is to wait on a webhook that is gone: disarmed while this replica still leads (2 s at most).
    clearInterval(this.armingTimer);
    await this.webhook?.disarm(2_000);
    this.fence();
    this.started = false;
    this.abortStart?.();
    await Promise.all(this.running.map((c) => c.stop()));
    // Decisions and reports still under way end at the fence: wait for them before the cache goes.
    await this.controllers.reconciler.idle();
    await this.options.cache.stop();
    await this.webhook?.stop();
  }
}
