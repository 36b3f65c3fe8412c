import { NodeAgent, type Publisher } from '../agent/agent.js';
import { IoLimitKeeper } from '../agent/io-limit-keeper.js';
import { IoLimitSync } from '../agent/io-limit-sync.js';
import { type AgentFlags, formatAgentHelp, parseAgentArgs } from './agent-options.js';
import { bindRefusal, closeServers, untilStopSignal } from './process.js';
import { createLineLogger } from '../observability/log.js';
import { BindError, serve } from '../observability/server.js';

/** `sandbox-remediator agent <args>`: exits 1 on a bad command line, as commander does, after the help. */
export async function runAgentCli(args: readonly string[]): Promise<number> {
  const line = parseAgentArgs(args);
  if (line.kind === 'help') {
    process.stdout.write(formatAgentHelp(process.stdout.columns));
    return 0;
  }
  if (line.kind === 'error') {
    process.stderr.write(`error: ${line.message}\n\n${formatAgentHelp(process.stderr.columns)}`);
    return 1;
  }
  return runAgent(line.flags);
}

export async function runAgent(flags: AgentFlags): Promise<number> {
  // Not winston, prom-client or client-node: the agent runs on every node (docs/adr/0011-lean-agent.md).
  const logger = createLineLogger(flags.logLevel, 'agent');
  const nodeName = flags.nodeName ?? process.env.NODE_NAME;
  if (!nodeName) {
    logger.error('Refused to start: --node-name (or NODE_NAME) is required');
    return 2;
  }
  let publisher: (Publisher & { close(): void }) | undefined;
  if (flags.publish) {
    const [{ loadApiAccess, KubeconfigError }, { ReadingPublisher }] = await Promise.all([
      import('../kube/rest.js'),
      import('../kube/reading-publisher.js'),
    ]);
    try {
      publisher = new ReadingPublisher(await loadApiAccess(flags.kubeconfig), nodeName);
    } catch (err) {
      if (!(err instanceof KubeconfigError)) throw err;
      logger.error(`Refused to start: ${err.message}; pass --kubeconfig=<path> or --no-publish`);
      return 2;
    }
  }
  // Limits are kept whenever the agent publishes: without --allow-io-limits it sets none, but lifts what it set.
  const ioLimits =
    publisher &&
    new IoLimitKeeper(new IoLimitSync(flags.cgroupRoot, flags.allowIoLimits), flags.allowIoLimits);
  const agent = new NodeAgent({
    nodeName,
    procRoot: flags.procRoot,
    intervalMs: flags.intervalSeconds * 1000,
    heartbeatMs: flags.heartbeatSeconds * 1000,
    pressuredHeartbeatMs: flags.pressuredHeartbeatSeconds * 1000,
    includeLoopDevices: flags.includeLoopDevices,
    logger,
    ...(flags.attribution
      ? {
          attribution: {
            cgroupRoot: flags.cgroupRoot,
            culpritSharePercent: flags.culpritSharePercent,
            victimPsiPercent: flags.victimPsiPercent,
            ...(flags.runtimeCgroup ? { runtimeCgroup: flags.runtimeCgroup } : {}),
          },
        }
      : {}),
    ...(publisher ? { publisher } : {}),
    ...(ioLimits ? { ioLimits } : {}),
  });
  let server: Awaited<ReturnType<typeof serve>>;
  try {
    server = await serve(flags.metricsBindAddress, {
      registry: agent.metrics,
      probes: { healthy: () => true, ready: () => agent.latest !== undefined },
    });
  } catch (err) {
    if (!(err instanceof BindError)) throw err;
    logger.error(
      bindRefusal(err, {
        what: 'metrics',
        flag: '--metrics-bind-address',
        holder: 'another agent on this machine?',
      }),
    );
    publisher?.close();
    return 2;
  }
  logger.info('Started node agent', {
    node: nodeName,
    procRoot: flags.procRoot,
    cgroupRoot: flags.attribution ? flags.cgroupRoot : 'off',
    ioLimits: flags.allowIoLimits ? 'allowed' : 'refused',
    intervalSeconds: flags.intervalSeconds,
    publish: flags.publish,
    metricsPort: server?.port,
  });
  agent.start();
  const signal = await untilStopSignal();
  logger.info('Shutting down', { signal });
  await agent.stop();
  publisher?.close();
  await closeServers(server);
  return 0;
}
