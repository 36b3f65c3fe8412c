import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { DryRunActuator } from '../actuation/actuator.js';
import { Manager } from '../controllers/manager/manager.js';
import { KubeActuator, KubeWorkloadReader } from '../kube/actuator.js';
import { InformerCache } from '../kube/cluster-cache.js';
import { describeError } from '../kube/errors.js';
import { servesArgoRollouts } from '../kube/discovery.js';
import { kubeletSummaryFetcher } from '../kube/kubelet-summary.js';
import { registerPacingWebhook } from '../kube/webhook-config.js';
import { KubeEventRecorder, KubeStatusWriter } from '../kube/writer.js';
import { Fence } from '../runtime/fence.js';
import { SourceFactory } from '../signals/factory.js';
import { secretReader } from '../kube/secrets.js';
import { KubeLeaseStore, LeaderElector } from '../kube/leader-election.js';
import { bindRefusal, closeServers, untilStopSignal, type Listener } from './process.js';
import { KubeconfigError, loadKubeConfig, serverOf, type KubeConfig } from '../kube/client.js';
import { applyCustomResourceDefinitions, readCustomResourceDefinitions } from '../kube/crds.js';
import { OperatorLifecycle, reportUntilStarted } from '../kube/lifecycle.js';
import { createLogger, type Logger, type LogLevel } from '../observability/logger.js';
import { OperatorMetrics } from '../observability/metrics.js';
import { BindError, serve } from '../observability/server.js';
import { RESOURCE_KINDS, GROUP } from '../api/v1alpha1/index.js';
import { bracketIpv6, splitHostPort, WEBHOOK_PATH } from '../webhook/pacing-webhook.js';

export interface OperatorFlags {
  kubeconfig?: string;
  leaderElect: boolean;
  leaderElectionId: string;
  metricsBindAddress: string;
  healthProbeBindAddress: string;
  dryRun: boolean;
  logLevel: LogLevel;
  workers: number;
  readyMaxDisconnectedSeconds: number;
  watchSilenceSeconds: number;
  installCrds: boolean;
  operatorNamespace: string;
  webhookBindAddress: string;
  webhookUrl?: string;
  webhookCertDir?: string;
  webhookCertLifetimeSeconds: number;
}

/**
 * The CRD files --install-crds applies: crds/ beside the nearest package.json, which is the repository's under
 * tsx and after `make build` (dist/src/cli is one level deeper than src/cli), and /app/crds in the image.
 */
export function crdFiles(): string[] {
  let root = import.meta.dirname;
  while (!existsSync(join(root, 'package.json'))) {
    if (dirname(root) === root) throw new Error(`No package.json above ${import.meta.dirname}`);
    root = dirname(root);
  }
  const files = RESOURCE_KINDS.map((k) => join(root, 'crds', `${k.plural}.${GROUP}.yaml`));
  for (const file of files) if (!existsSync(file)) throw new Error(`CRD file ${file} not found`);
  return files;
}

/** Runs the operator until SIGTERM or SIGINT; resolves with the exit code. */
export async function runOperator(flags: OperatorFlags): Promise<number> {
  const logger = createLogger(flags.logLevel);
  // KUBECONFIG also steers the lifecycle adapter, which loads its own configuration.
  if (flags.kubeconfig) process.env.KUBECONFIG = flags.kubeconfig;
  const metrics = new OperatorMetrics();
  let kc: KubeConfig;
  try {
    kc = loadKubeConfig(flags.kubeconfig, {
      onCall: ({ method, resource, result }) => {
        if (method !== 'GET') metrics.apiWrites.inc({ resource, result: String(result) });
      },
      onHandshake: (lane, resumed) => {
        metrics.apiHandshakes.inc({ lane, resumed: String(resumed) });
      },
      onRetry: (lane, reason) => {
        metrics.apiRetries.inc({ lane, reason });
      },
    });
  } catch (err) {
    if (!(err instanceof KubeconfigError)) throw err;
    return refuse(logger, `Refused to start: ${err.message}; pass --kubeconfig=<path>`);
  }
  logger.info('Starting sandbox-remediator operator', {
    server: serverOf(kc),
    dryRun: flags.dryRun,
    workers: flags.workers,
  });
  const manager = composeManager(kc, flags, logger, metrics, await servesArgoRollouts(kc, logger));
  const elector = flags.leaderElect ? electLeader(kc, flags, logger, manager) : undefined;
  const endpoints = await serveEndpoints(flags, logger, metrics, manager);
  if (typeof endpoints === 'number') return endpoints;
  // Read before anything starts, so a missing or malformed file fails at once.
  const crds = flags.installCrds ? await readCustomResourceDefinitions(crdFiles()) : [];
  const lifecycle = new OperatorLifecycle({
    start: async () => {
      // Established before the caches list them; a failure (no RBAC on CRDs, say) stops the operator.
      if (crds.length > 0) await applyCustomResourceDefinitions(kc, crds, logger);
      await manager.start();
    },
    stop: () => manager.stop(),
    logger,
  });
  return runUntilStopped({ kc, logger, lifecycle, elector, endpoints });
}

/**
 * The composition root: every adapter the controllers act through, built here and handed to the Manager, which wires
 * the controllers on them. Every write goes through one fence: the moment leadership is lost (or the process stops),
 * a reconcile still running fails its next write instead of acting beside the new leader.
 */
function composeManager(
  kc: KubeConfig,
  flags: OperatorFlags,
  logger: Logger,
  metrics: OperatorMetrics,
  argoRollouts: boolean,
): Manager {
  const fence = new Fence();
  const cache = new InformerCache({
    kc,
    logger,
    argoRollouts,
    watchSilenceMs: flags.watchSilenceSeconds * 1000,
    onRestart: (informer, reason) => {
      metrics.informerRestarts.inc({ informer, reason });
    },
  });
  const sources = new SourceFactory({
    cache,
    fetchKubeletSummary: kubeletSummaryFetcher(kc),
    readSecret: secretReader(kc, flags.operatorNamespace),
    // Once per transition per node (the source remembers), so a node that stays unreadable is not a log flood.
    onSourceError: (node, err) => {
      logger.warn('Failed to read the kubelet Summary API', { node, error: describeError(err) });
    },
    onSourceRecovered: (node) => {
      logger.info('Reading the kubelet Summary API again', { node });
    },
  });
  const webhook = webhookOptions(flags);
  return new Manager({
    cache,
    writer: fence.guard(new KubeStatusWriter(kc)),
    recorder: fence.guard(new KubeEventRecorder(kc)),
    actuators: { real: fence.guard(new KubeActuator(kc)), dryRun: new DryRunActuator() },
    workloads: new KubeWorkloadReader(kc),
    sources: (_policy, spec) => sources.build(spec),
    fence,
    logger,
    metrics,
    workers: flags.workers,
    dryRun: flags.dryRun,
    operatorNamespace: flags.operatorNamespace,
    leaderElection: flags.leaderElect,
    maxDisconnectedMs: flags.readyMaxDisconnectedSeconds * 1000,
    ...(webhook
      ? {
          webhook: {
            ...webhook,
            register: (url, caPem, armed) => registerPacingWebhook(kc, { url, caPem, armed }),
          },
        }
      : {}),
  });
}

/** Leader election runs beside the caches: a standby syncs them and waits, so a takeover acts at once. */
function electLeader(
  kc: KubeConfig,
  flags: OperatorFlags,
  logger: Logger,
  manager: Manager,
): { elector: LeaderElector; lost: Promise<'lost'> } {
  let loseLeadership: () => void = () => undefined;
  const lost = new Promise<'lost'>(
    (resolve) =>
      (loseLeadership = () => {
        resolve('lost');
      }),
  );
  const elector = new LeaderElector({
    // The pod's name plus a suffix of this process: a restarted container is a new candidate, which waits for the
    // Lease like any standby instead of taking back the one its predecessor held.
    identity: `${process.env.POD_NAME ?? hostname()}_${randomUUID().slice(0, 8)}`,
    store: new KubeLeaseStore(kc, flags.operatorNamespace, flags.leaderElectionId),
    logger,
    onStartedLeading: () => {
      manager.lead().catch((err: unknown) => {
        logger.error('Failed to start acting as the leader', { error: describeError(err) });
        loseLeadership();
      });
    },
    onStoppedLeading: () => {
      manager.fence(); // synchronously: no write of a reconcile still running gets out after this
      loseLeadership();
    },
    onNewLeader: (identity) => {
      logger.info('The leader is now', { leader: identity === '' ? '(none: released)' : identity });
    },
  });
  return { elector, lost };
}

interface Endpoints {
  probes: Awaited<ReturnType<typeof serve>>;
  metricsServer: Awaited<ReturnType<typeof serve>>;
  gauges: NodeJS.Timeout;
}

/** The probes and metrics servers, and the gauges refreshed for them; an exit code when an address is refused. */
async function serveEndpoints(
  flags: OperatorFlags,
  logger: Logger,
  metrics: OperatorMetrics,
  manager: Manager,
): Promise<Endpoints | number> {
  let probes: Awaited<ReturnType<typeof serve>>;
  let metricsServer: Awaited<ReturnType<typeof serve>>;
  let binding: Listener = LISTENERS.probes;
  try {
    probes = await serve(flags.healthProbeBindAddress, {
      probes: { healthy: () => manager.alive(), ready: () => manager.ready() },
    });
    binding = LISTENERS.metrics;
    metricsServer = await serve(flags.metricsBindAddress, { registry: metrics.registry });
  } catch (err) {
    if (!(err instanceof BindError)) throw err;
    await closeServers(probes);
    return refuse(logger, bindRefusal(err, binding));
  }
  const gauges = setInterval(() => {
    manager.refreshGauges();
  }, 5000);
  gauges.unref();
  logger.info('Serving probes and metrics', {
    healthProbePort: probes?.port,
    metricsPort: metricsServer?.port,
  });
  return { probes, metricsServer, gauges };
}

/** Starts, campaigns once the caches are warm, and shuts down on a signal or a lost Lease; the exit code. */
async function runUntilStopped(run: {
  kc: KubeConfig;
  logger: Logger;
  lifecycle: OperatorLifecycle;
  elector: { elector: LeaderElector; lost: Promise<'lost'> } | undefined;
  endpoints: Endpoints;
}): Promise<number> {
  const { kc, logger, lifecycle, elector, endpoints } = run;
  const { probes, metricsServer, gauges } = endpoints;
  const stopped = untilStopSignal();
  const starting = lifecycle.start();
  // The caches retry on their own; this says why, when they take a while, in words that name the fix. Only a report:
  // whatever goes wrong in it must not become an unhandled rejection that ends the process.
  reportUntilStarted(kc, logger, starting).catch((err: unknown) => {
    logger.warn('Stopped reporting why the operator waits', { error: describeError(err) });
  });
  const first = await Promise.race([
    starting.then(
      () => 'synced' as const,
      (err: unknown) => ({ failed: err }),
    ),
    stopped,
  ]);
  // Bounded, as after a lost Lease: a request hung on a silent apiserver must not hold the exit.
  const shutDown = async () => {
    const forced = setTimeout(() => process.exit(1), 5000);
    forced.unref();
    await lifecycle.shutdown();
    await closeServers(probes, metricsServer);
    clearTimeout(forced);
  };
  if (typeof first === 'object') {
    clearInterval(gauges);
    await shutDown();
    if (first.failed instanceof BindError)
      return refuse(logger, bindRefusal(first.failed, LISTENERS.webhook));
    logger.error(`Failed to start: ${describeError(first.failed)}`);
    return 1;
  }
  // Campaign only with warm caches, so a cold replica never takes the Lease ahead of a warm standby.
  if (first === 'synced') elector?.elector.start();
  const ended =
    first === 'synced' ? await Promise.race([stopped, ...(elector ? [elector.lost] : [])]) : first;
  clearInterval(gauges);
  if (ended === 'lost') {
    // Exit rather than stand by again: state acted on as leader must not outlive the leadership. The Deployment
    // restarts the container, which comes back as a standby with fresh caches. Bounded: a reconcile waiting on a hung
    // request must not hold the exit (its writes are fenced already).
    logger.error('Exiting: this replica lost the leader Lease');
    await shutDown();
    return 1;
  }
  logger.info('Shutting down', { signal: ended });
  // Stop acting first, then hand the Lease over, so the next leader never overlaps this one.
  await lifecycle.shutdown();
  await elector?.elector.stop();
  await closeServers(probes, metricsServer);
  logger.info('Stopped');
  return 0;
}

/** The servers the flags place, for the line that refuses an address. */
const LISTENERS = {
  probes: {
    what: 'health probe',
    flag: '--health-probe-bind-address',
    holder: 'another operator on this machine?',
  },
  metrics: { what: 'metrics', flag: '--metrics-bind-address', holder: 'another operator on this machine?' },
  webhook: { what: 'webhook', flag: '--webhook-bind-address', holder: 'another operator on this machine?' },
} satisfies Record<string, Listener>;

/** Logs the one line and gives exit status 2, as for every configuration mistake. */
function refuse(logger: Logger, line: string): number {
  logger.error(line);
  return 2;
}

/** The pacing webhook's settings from the flags; undefined when it is off (--webhook-bind-address 0). */
function webhookOptions(
  flags: OperatorFlags,
): { bindAddress: string; url: string; certDir?: string; certLifetimeMs: number } | undefined {
  if (flags.webhookBindAddress === '0' || flags.webhookBindAddress === '') return undefined;
  const [host, port] = splitHostPort(flags.webhookBindAddress);
  const local = host === '0.0.0.0' ? '127.0.0.1' : host === '[::]' ? '[::1]' : host;
  const url = bracketIpv6(flags.webhookUrl ?? `https://${local}:${port}${WEBHOOK_PATH}`);
  return {
    bindAddress: flags.webhookBindAddress,
    url,
    certLifetimeMs: flags.webhookCertLifetimeSeconds * 1000,
    ...(flags.webhookCertDir ? { certDir: flags.webhookCertDir } : {}),
  };
}
