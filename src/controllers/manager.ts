import type { KubeConfig } from '../kube/client.js';
import { InformerCache } from '../kube/cluster-cache.js';
import { describeError } from '../kube/errors.js';
import { kubeletSummaryFetcher } from '../kube/kubelet-summary.js';
import type { Server } from 'node:https';
import { DryRunActuator } from '../actuation/actuator.js';
import { registerPacingWebhook } from '../kube/webhook-config.js';
import { pacingFor, type PacingPolicy } from '../policy/pacing.js';
import { generateServingCert, loadServingCert, type ServingCert } from '../webhook/certs.js';
import { serveWebhook } from '../webhook/pacing-webhook.js';
import { KubeActuator, KubeWorkloadReader } from '../kube/actuator.js';
import { KubeEventRecorder, KubeStatusWriter } from '../kube/writer.js';
import { SourceRegistry } from '../signals/factory.js';
import type { Logger } from '../observability/logger.js';
import type { OperatorMetrics } from '../observability/metrics.js';
import { realClock, type Clock } from '../runtime/clock.js';
import { Controller } from '../runtime/controller.js';
import { WorkQueue } from '../runtime/work-queue.js';
import { BackgroundQueue } from '../runtime/background.js';
import type { Transition } from '../ports/writes.js';
import type { DetectionStatus } from '../status/health-status.js';
import { nodeOf, policiesFor } from './mapper.js';
import { PolicyReconciler } from './policy-reconciler.js';

export interface ManagerOptions {
  kc: KubeConfig;
  logger: Logger;
  metrics: OperatorMetrics;
  clock?: Clock;
  workers?: number;
  resyncMs?: number;
  /** --dry-run: every policy runs dry, whatever its spec says. */
  dryRun?: boolean;
  /** The operator's own namespace: its Deployments are never throttled. */
  operatorNamespace?: string;
  /** Serve the pod-start pacing webhook, and register it with the apiserver at this URL. */
  webhook?: { bindAddress: string; url: string; certDir?: string };
  /**
   * Leader election decides when this replica acts: start() only syncs the caches (a warm standby) and
   * lead() starts the controller. Without it, start() acts as soon as the caches have synced.
   */
  leaderElection?: boolean;
  /** /readyz turns false while an informer has been disconnected longer than this (default 60 s). */
  maxDisconnectedMs?: number;
  /** Timeout of one kubelet Summary fetch through the node proxy (default 10 s). */
  kubeletTimeoutMs?: number;
  /** Restart a watch silent for this long (default 150 s). */
  watchSilenceMs?: number;
}

/**
 * Wires the pipeline: informers (read-only cache) -> mapper (policy keys) -> work queue -> policy reconciler
 * -> status and Events. Nothing is reconciled before every cache has synced.
 */
export class Manager {
  readonly cache: InformerCache;
  readonly queue: WorkQueue<string>;
  private readonly controller: Controller<string>;
  /** Events waiting to be written, out of the reconciler's way. */
  private readonly events: BackgroundQueue<Transition>;
  private readonly stuckSeries = new Map<string, Set<string>>();
  private started = false;
  /** This replica acts: it leads, or runs without leader election. */
  private acting = false;
  private stopping = false;
  private markSynced!: () => void;
  private readonly synced = new Promise<void>((resolve) => (this.markSynced = resolve));
  private cert: ServingCert | undefined;
  private readonly operatorNamespace: string;
  /** What the pacing webhook reads; the reconciler keeps it current. */
  private readonly pacing = new Map<string, PacingPolicy>();
  private webhookServer: Server | undefined;
  private abortStart: (() => void) | undefined;

  constructor(private readonly options: ManagerOptions) {
    const { kc, logger, metrics } = options;
    this.operatorNamespace = options.operatorNamespace ?? 'sandbox-remediator-system';
    const clock = options.clock ?? realClock;
    this.cache = new InformerCache({
      kc,
      logger,
      ...(options.watchSilenceMs !== undefined ? { watchSilenceMs: options.watchSilenceMs } : {}),
      onRestart: (informer, reason) => {
        metrics.informerRestarts.inc({ informer, reason });
      },
    });
    this.queue = new WorkQueue<string>({ clock });
    const sources = new SourceRegistry({
      cache: this.cache,
      fetchKubeletSummary: kubeletSummaryFetcher(kc, options.kubeletTimeoutMs),
      // Once per transition per node (the source remembers), so a node that stays unreadable is not a log flood.
      onSourceError: (node, err) => {
        logger.warn('Failed to read the kubelet Summary API', { node, error: describeError(err) });
      },
      onSourceRecovered: (node) => {
        logger.info('Reading the kubelet Summary API again', { node });
      },
    });
    const recorder = fenced(new KubeEventRecorder(kc), () => this.acting);
    this.events = new BackgroundQueue<Transition>({
      concurrency: 4,
      limit: 10_000,
      run: (transition) => recorder.record(transition),
      onError: (transition, err) => {
        logger.warn('Failed to record an Event', { reason: transition.reason, error: describeError(err) });
      },
      onDrop: () => {
        metrics.eventsDropped.inc();
      },
    });
    const reconciler = new PolicyReconciler({
      sources: (policy, spec) => sources.forPolicy(policy, spec),
      cache: this.cache,
      // Every write goes through a fence: the moment leadership is lost (or the process stops), a reconcile
      // still running fails its next write instead of acting beside the new leader.
      writer: fenced(new KubeStatusWriter(kc), () => this.acting),
      // Events are written in the background: the status written before them holds the same transition, and a
      // pass must not wait on a round trip per Event before it looks at new evidence (ADR 0012).
      recorder: {
        record: (transition) => {
          this.events.push(transition);
          return Promise.resolve();
        },
      },
      actuators: { real: fenced(new KubeActuator(kc), () => this.acting), dryRun: new DryRunActuator() },
      workloads: new KubeWorkloadReader(kc),
      dryRun: options.dryRun === true,
      ...(options.operatorNamespace ? { operatorNamespace: options.operatorNamespace } : {}),
      pacing: this.pacing,
      onPolicyStatus: (policy, status) => {
        metrics.gatedPods.set({ policy }, status.gatedPods ?? 0);
        for (const reason of ['FeedsSaturatedNode', 'RolloutQueued'] as const)
          metrics.throttledRollouts.set(
            { policy, reason },
            (status.throttledRollouts ?? []).filter((r) => r.reason === reason).length,
          );
      },
      onGateReleased: (waitSeconds) => {
        metrics.gateWaitSeconds.observe(waitSeconds);
      },
      onAction: (action, result, dryRun) => {
        metrics.actions.inc({ action, result, dry_run: String(dryRun) });
      },
      onBlocked: (guard) => {
        metrics.actionsBlocked.inc({ guard });
      },
      onPass: ({ full, observed, reported, deferred }) => {
        const pass = full ? 'full' : 'incremental';
        metrics.passes.inc({ pass });
        metrics.nodesObserved.inc({ pass }, observed);
        metrics.healthReports.inc({ outcome: 'written' }, reported ?? 0);
        metrics.healthReports.inc({ outcome: 'deferred' }, deferred ?? 0);
      },
      clock,
      logger,
      ...(options.resyncMs !== undefined ? { resyncMs: options.resyncMs } : {}),
      onNodeStatus: (_policy, node, status) => {
        this.recordStuckMetrics(node, status);
      },
    });
    this.controller = new Controller('sandboxpolicy', this.queue, (key) => reconciler.reconcile(key), {
      onSuccess: (_key, ms) => {
        metrics.reconciles.inc({ result: 'success' });
        metrics.reconcileSeconds.observe(ms / 1000);
      },
      onError: (key, err, retryInMs) => {
        metrics.reconciles.inc({ result: retryInMs === undefined ? 'terminal' : 'error' });
        logger.warn('Failed to reconcile SandboxPolicy', {
          policy: key,
          error: describeError(err),
          ...(retryInMs !== undefined ? { retryInMs: Math.round(retryInMs) } : {}),
        });
      },
    });
    this.cache.onChange((change) => {
      const podByUid = (uid: string) => this.cache.podByUid(uid);
      const node = nodeOf(change, podByUid);
      // A deleted object will never show our last write of it: stop waiting for that.
      if (change.type === 'delete' && (change.kind === 'SandboxHealth' || change.kind === 'Node'))
        reconciler.forgetWrite(change.kind, change.key);
      // A deleted node's stuck-pod series would otherwise stay on /metrics (and in alerts) until a restart.
      if (change.type === 'delete' && change.kind === 'Node') {
        this.forgetStuckMetrics(change.key);
        reconciler.forgetNode(change.key);
      }
      for (const policy of policiesFor(change, this.cache, podByUid)) {
        if (node !== null) reconciler.markDirty(policy, node);
        this.queue.add(policy);
      }
      metrics.queueDepth.set(this.queue.length);
    });
  }

  private recordStuckMetrics(node: string, status: DetectionStatus): void {
    const { stuckPods } = this.options.metrics;
    const previous = this.stuckSeries.get(node) ?? new Set<string>();
    const current = new Set<string>(status.causes.map((c) => c.cause));
    for (const cause of previous) if (!current.has(cause)) stuckPods.remove({ node, cause });
    for (const { cause, count } of status.causes) stuckPods.set({ node, cause }, count);
    this.stuckSeries.set(node, current);
  }

  /** Starts the caches and waits for them to sync; then acts, unless leader election decides when. */
  private forgetStuckMetrics(node: string): void {
    for (const cause of this.stuckSeries.get(node) ?? [])
      this.options.metrics.stuckPods.remove({ node, cause });
    this.stuckSeries.delete(node);
  }

  async start(): Promise<void> {
    const { logger } = this.options;
    this.cache.start();
    const progress = setInterval(() => {
      logger.info('Waiting for caches to sync', { synced: this.cache.sizes() });
    }, 5000);
    // A stop before the caches sync (the apiserver never came up) ends the wait, or the process would hang.
    const stopping = new Promise<'stopped'>(
      (resolve) =>
        (this.abortStart = () => {
          resolve('stopped');
        }),
    );
    try {
      if ((await Promise.race([this.cache.waitForSync(), stopping])) === 'stopped') return;
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
    return this.acting;
  }

  private async act(): Promise<void> {
    const { logger, webhook } = this.options;
    if (this.acting || this.stopping) return;
    this.acting = true;
    try {
      // Only the acting replica registers the webhook: the apiserver then calls the one that decides.
      if (webhook && this.cert) await this.registerWebhook(webhook, this.cert);
    } catch (err) {
      this.acting = false;
      throw err;
    }
    if (!this.stillActing()) return; // stopped or fenced while registering
    this.options.metrics.leader.set(1);
    this.controller.start(this.options.workers ?? 2);
    for (const policy of this.cache.policies()) this.queue.add(policy.name);
    logger.info('Started controller', { controller: 'sandboxpolicy', workers: this.options.workers ?? 2 });
  }

  private stillActing(): boolean {
    return this.acting && !this.stopping;
  }

  /**
   * Stops acting at once, synchronously: every later write of a reconcile still under way is refused. For a
   * lost Lease, before anything else happens.
   */
  fence(): void {
    this.acting = false;
    this.options.metrics.leader.set(0);
  }

  /** Serves the pacing webhook; the certificate is the user's, or made now (ADR 0009). */
  private async serveWebhook(webhook: NonNullable<ManagerOptions['webhook']>): Promise<void> {
    const { logger, metrics } = this.options;
    const cert = webhook.certDir
      ? loadServingCert(webhook.certDir)
      : generateServingCert(new URL(webhook.url).hostname);
    this.cert = cert;
    const { server, port } = await serveWebhook(webhook.bindAddress, cert, {
      // A standby gates nothing: only the leader decides, on the policies it reconciles.
      decide: (namespace) =>
        this.acting
          ? pacingFor(
              namespace,
              this.cache.namespaceLabels(namespace),
              // A policy that gates comes before one that only counts (dry run, paused) for the same namespace.
              [...this.pacing.values()].sort(
                (a, b) => Number(b.gating) - Number(a.gating) || a.name.localeCompare(b.name),
              ),
              this.operatorNamespace,
            )
          : undefined,
      onDecision: ({ gated, dryRun }) => {
        if (gated) metrics.podsGated.inc({ dry_run: String(dryRun) });
      },
      logger,
    });
    this.webhookServer = server;
    logger.info('Serving the pacing webhook', { port, url: webhook.url, certificate: cert.origin });
  }

  private async registerWebhook(
    webhook: NonNullable<ManagerOptions['webhook']>,
    cert: ServingCert,
  ): Promise<void> {
    await registerPacingWebhook(this.options.kc, {
      url: webhook.url,
      caPem: cert.caPem,
      operatorNamespace: this.operatorNamespace,
    });
    this.options.logger.info('Registered the pacing webhook', { url: webhook.url });
  }

  /** Synced, and no informer disconnected for longer than maxDisconnectedMs. */
  ready(): boolean {
    const ready =
      this.started &&
      this.cache.isSynced() &&
      this.cache.longestDisconnectedMs() <= (this.options.maxDisconnectedMs ?? 60_000);
    this.options.metrics.ready.set(ready ? 1 : 0);
    return ready;
  }

  refreshGauges(): void {
    for (const [informer, size] of Object.entries(this.cache.sizes()))
      this.options.metrics.cachedObjects.set({ informer }, size);
    this.options.metrics.queueDepth.set(this.queue.length);
    this.options.metrics.leader.set(this.acting ? 1 : 0);
    this.ready();
    this.refreshStateGauges();
  }

  /**
   * What is held back now and which policies are in a storm, from the cached SandboxHealths and policies (a
   * standby reports the same): gauges for alerts that last as long as the state does, unlike the counters.
   */
  private refreshStateGauges(): void {
    const { blockedActions, stormDetected } = this.options.metrics;
    const blocked = new Map<string, { policy: string; guard: string; count: number }>();
    for (const health of this.cache.healths()) {
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
    for (const policy of this.cache.policies()) {
      const storm = policy.status?.conditions?.find((c) => c.type === 'StormDetected');
      stormDetected.set({ policy: policy.name }, storm?.status === 'True' ? 1 : 0);
    }
  }

  async stop(): Promise<void> {
    // What was decided is told, briefly: Events still waiting get 2 s before the fence refuses them.
    await this.events.drain(2_000);
    this.stopping = true;
    this.fence();
    this.started = false;
    this.abortStart?.();
    await this.controller.stop();
    await this.cache.stop();
    const server = this.webhookServer;
    if (server)
      await new Promise<void>((resolve) =>
        server.close(() => {
          resolve();
        }),
      );
  }
}

/** Thrown by a fenced write: this replica no longer acts. */
export class NotActingError extends Error {
  constructor(method: string) {
    super(`refused ${method}: this replica is not the leader (any more)`);
    this.name = 'NotActingError';
  }
}

/** The same object, whose every (async) method first checks that this replica may still act. */
export function fenced<T extends object>(target: T, mayAct: () => boolean): T {
  return new Proxy(target, {
    get(object, property, receiver) {
      const value: unknown = Reflect.get(object, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        if (!mayAct()) return Promise.reject(new NotActingError(String(property)));
        return (value as (...a: unknown[]) => unknown).apply(object, args);
      };
    },
  });
}
