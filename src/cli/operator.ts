import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Manager } from '../controllers/manager.js';
import { closeServers, untilStopSignal } from './process.js';
import { loadKubeConfig, serverOf } from '../kube/client.js';
import { OperatorLifecycle } from '../kube/lifecycle.js';
import { createLogger, type LogLevel } from '../observability/logger.js';
import { OperatorMetrics } from '../observability/metrics.js';
import { serve } from '../observability/server.js';
import { RESOURCE_KINDS, GROUP } from '../api/v1alpha1/index.js';
import { splitHostPort, WEBHOOK_PATH } from '../webhook/pacing-webhook.js';

export interface OperatorFlags {
  kubeconfig?: string;
  leaderElect: boolean;
  metricsBindAddress: string;
  healthProbeBindAddress: string;
  dryRun: boolean;
  logLevel: LogLevel;
  workers: number;
  installCrds: boolean;
  operatorNamespace: string;
  webhookBindAddress: string;
  webhookUrl?: string;
  webhookCertDir?: string;
}

const REPO_CRDS = join(import.meta.dirname, '..', '..', 'crds');

/** Runs the operator until SIGTERM or SIGINT; resolves with the exit code. */
export async function runOperator(flags: OperatorFlags): Promise<number> {
  const logger = createLogger(flags.logLevel);
  if (flags.leaderElect) {
    logger.error('Refused --leader-elect: leader election is not available in this version; run one replica');
    return 2;
  }
  // KUBECONFIG also steers the lifecycle adapter, which loads its own configuration.
  if (flags.kubeconfig) process.env.KUBECONFIG = flags.kubeconfig;
  const kc = loadKubeConfig();
  logger.info('Starting sandbox-remediator operator', {
    server: serverOf(kc),
    dryRun: flags.dryRun,
    workers: flags.workers,
  });

  const metrics = new OperatorMetrics();
  const webhook = webhookOptions(flags);
  const manager = new Manager({
    kc,
    logger,
    metrics,
    workers: flags.workers,
    dryRun: flags.dryRun,
    operatorNamespace: flags.operatorNamespace,
    ...(webhook ? { webhook } : {}),
  });
  const probes = await serve(flags.healthProbeBindAddress, {
    probes: { healthy: () => true, ready: () => manager.ready() },
  });
  const metricsServer = await serve(flags.metricsBindAddress, { registry: metrics.registry });
  const gauges = setInterval(() => {
    manager.refreshGauges();
  }, 5000);
  gauges.unref();
  logger.info('Serving probes and metrics', {
    healthProbePort: probes?.port,
    metricsPort: metricsServer?.port,
  });

  const crdFiles = flags.installCrds
    ? RESOURCE_KINDS.map((k) => join(REPO_CRDS, `${k.plural}.${GROUP}.yaml`))
    : [];
  for (const file of crdFiles) if (!existsSync(file)) throw new Error(`CRD file ${file} not found`);
  const lifecycle = new OperatorLifecycle({
    crdFiles,
    start: () => manager.start(),
    stop: () => manager.stop(),
    logger,
  });

  const stopped = untilStopSignal();
  await Promise.race([lifecycle.start(), stopped]);
  const signal = await stopped;
  logger.info('Shutting down', { signal });
  clearInterval(gauges);
  await lifecycle.shutdown();
  await closeServers(probes, metricsServer);
  logger.info('Stopped');
  return 0;
}

/** The pacing webhook's settings from the flags; undefined when it is off (--webhook-bind-address 0). */
function webhookOptions(
  flags: OperatorFlags,
): { bindAddress: string; url: string; certDir?: string } | undefined {
  if (flags.webhookBindAddress === '0' || flags.webhookBindAddress === '') return undefined;
  const [host, port] = splitHostPort(flags.webhookBindAddress);
  const url = flags.webhookUrl ?? `https://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}${WEBHOOK_PATH}`;
  return {
    bindAddress: flags.webhookBindAddress,
    url,
    ...(flags.webhookCertDir ? { certDir: flags.webhookCertDir } : {}),
  };
}
