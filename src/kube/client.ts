import { KubeConfig, type ConfigurationOptions, type RequestContext } from '@kubernetes/client-node';
// client-node's middleware speaks its own minimal Observable; its `of` is not re-exported from the index.
import { of } from '@kubernetes/client-node/dist/gen/rxjsStub.js';

export type { KubeConfig } from '@kubernetes/client-node';

/** The longest any single API request may take (watches excepted: they are long by design). */
export const REQUEST_TIMEOUT_MS = 30_000;

/**
 * A KubeConfig whose every API request carries a timeout. client-node 1.x sets none, so a request to an
 * apiserver that accepted the connection and then went silent would wait forever, and with it a reconcile.
 * Every generated API client calls applySecurityAuthentication once per request: the one place to add it.
 * Watches go through applyToFetchOptions instead, and have their own silence bound (src/kube/informer.ts).
 */
class TimedKubeConfig extends KubeConfig {
  constructor(private readonly requestTimeoutMs: number) {
    super();
  }

  override async applySecurityAuthentication(context: RequestContext): Promise<void> {
    await super.applySecurityAuthentication(context);
    if (!context.getSignal()) context.setSignal(AbortSignal.timeout(this.requestTimeoutMs));
  }
}

/** Loads a kubeconfig: the given file, else $KUBECONFIG, ~/.kube/config, or the in-cluster service account. */
export function loadKubeConfig(path?: string, requestTimeoutMs = REQUEST_TIMEOUT_MS): KubeConfig {
  const kc = new TimedKubeConfig(requestTimeoutMs);
  if (path) kc.loadFromFile(path);
  else kc.loadFromDefault();
  return kc;
}

/** Per-call options giving one request its own, usually shorter, timeout (e.g. a kubelet behind the proxy). */
export function withTimeout(ms: number): ConfigurationOptions {
  return {
    middleware: [
      {
        pre: (context: RequestContext) => {
          context.setSignal(AbortSignal.timeout(ms));
          return of(context);
        },
        post: (response) => of(response),
      },
    ],
    middlewareMergeStrategy: 'append',
  };
}

export function serverOf(kc: KubeConfig): string | undefined {
  return kc.getCurrentCluster()?.server;
}
