import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';

/** Fetches a node's kubelet Summary API (stats/summary) through the apiserver's node proxy. */
export function kubeletSummaryFetcher(kc: KubeConfig): (nodeName: string) => Promise<unknown> {
  const core = kc.makeApiClient(CoreV1Api);
  return async (name) => {
    const text: unknown = await core.connectGetNodeProxyWithPath({ name, path: 'stats/summary' });
    return typeof text === 'string' ? (JSON.parse(text) as unknown) : text;
  };
}
