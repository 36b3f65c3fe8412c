import { NodeAgent, type Publisher } from '../agent/agent.js';
import { closeServers, untilStopSignal } from './process.js';
import { createLineLogger, type LogLevel } from '../observability/log.js';
import { serve } from '../observability/server.js';

export interface AgentFlags {
  nodeName?: string;
  procRoot: string;
  intervalSeconds: number;
  heartbeatSeconds: number;
  pressuredHeartbeatSeconds: number;
  kubeconfig?: string;
  publish: boolean;
  metricsBindAddress: string;
  logLevel: LogLevel;
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
    const [{ loadApiAccess }, { ReadingPublisher }] = await Promise.all([
      import('../kube/rest.js'),
      import('../kube/reading-publisher.js'),
    ]);
    try {
      publisher = new ReadingPublisher(await loadApiAccess(flags.kubeconfig), nodeName);
    } catch (err) {
      logger.error('Refused to start: found no usable kubeconfig or in-cluster ServiceAccount', {
        error: (err as Error).message,
      });
      return 2;
    }
  }
  const agent = new NodeAgent({
    nodeName,
    procRoot: flags.procRoot,
    intervalMs: flags.intervalSeconds * 1000,
    heartbeatMs: flags.heartbeatSeconds * 1000,
    pressuredHeartbeatMs: flags.pressuredHeartbeatSeconds * 1000,
    logger,
    ...(publisher ? { publisher } : {}),
  });
  const server = await serve(flags.metricsBindAddress, {
    registry: agent.metrics,
    probes: { healthy: () => true, ready: () => agent.latest !== undefined },
  });
  logger.info('Started node agent', {
    node: nodeName,
    procRoot: flags.procRoot,
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
