import { NodeAgent, type Publisher } from '../agent/agent.js';
import { closeServers, untilStopSignal } from './process.js';
import { createLogger, type LogLevel } from '../observability/logger.js';
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
  const logger = createLogger(flags.logLevel, 'agent');
  const nodeName = flags.nodeName ?? process.env.NODE_NAME;
  if (!nodeName) {
    logger.error('Refused to start: --node-name (or NODE_NAME) is required');
    return 2;
  }
  let publisher: Publisher | undefined;
  if (flags.publish) {
    // client-node is loaded only when the agent writes to the API.
    const [{ loadKubeConfig }, { ReadingPublisher }] = await Promise.all([
      import('../kube/client.js'),
      import('../kube/reading-publisher.js'),
    ]);
    publisher = new ReadingPublisher(loadKubeConfig(flags.kubeconfig), nodeName);
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
    registry: agent.metrics.registry,
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
  await closeServers(server);
  return 0;
}
