import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { MAX_RESPONSE_BYTES } from '../runtime/bounded-read.js';
import { withTimeout } from './client.js';
import { pooledHttp } from './pooled-http.js';

export const KUBELET_TIMEOUT_MS = 10_000;

/**
 * Fetches a node's kubelet Summary API (stats/summary) through the apiserver's node proxy. A kubelet that does
 * not answer costs at most timeoutMs, body included: the apiserver's own proxy timeout is far longer. An answer
 * over maxBytes is refused, and the rest of it never read.
 */
export function kubeletSummaryFetcher(
  kc: KubeConfig,
  timeoutMs = KUBELET_TIMEOUT_MS,
  maxBytes = MAX_RESPONSE_BYTES,
): (nodeName: string) => Promise<unknown> {
  const core = kc.makeApiClient(CoreV1Api);
  const options = {
    ...withTimeout(timeoutMs),
    httpApi: pooledHttp({ maxBytes, what: 'the kubelet Summary' }),
  };
  return async (name) => {
    const text: unknown = await core.connectGetNodeProxyWithPath({ name, path: 'stats/summary' }, options);
    return typeof text === 'string' ? (JSON.parse(text) as unknown) : text;
  };
}
