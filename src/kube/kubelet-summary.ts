import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { withTimeout } from './client.js';

export const KUBELET_TIMEOUT_MS = 10_000;

/**
 * Fetches a node's kubelet Summary API (stats/summary) through the apiserver's node proxy. A kubelet that does
 * not answer costs at most timeoutMs: the apiserver's own proxy timeout is far longer.
 */
export function kubeletSummaryFetcher(
  kc: KubeConfig,
  timeoutMs = KUBELET_TIMEOUT_MS,
): (nodeName: string) => Promise<unknown> {
  const core = kc.makeApiClient(CoreV1Api);
  return async (name) => {
    const text: unknown = await core.connectGetNodeProxyWithPath(
      { name, path: 'stats/summary' },
      withTimeout(timeoutMs),
    );
    return typeof text === 'string' ? (JSON.parse(text) as unknown) : text;
  };
}
