import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { Agent as HttpsAgent } from 'node:https';
import {
  createConfiguration,
  KubeConfig,
  ServerConfiguration,
  type ConfigurationOptions,
  type HttpLibrary,
  type RequestContext,
  type ResponseContext,
} from '@kubernetes/client-node';
// client-node's HTTP layer speaks its own minimal Observable; `of` and `from` are not re-exported from the index.
import { from, of } from '@kubernetes/client-node/dist/gen/rxjsStub.js';

export type { KubeConfig } from '@kubernetes/client-node';

import {
  describeReadError,
  firstLine,
  KUBECONFIG_PROBLEMS,
  KubeconfigError,
  REQUEST_TIMEOUT_MS,
  SERVICE_ACCOUNT_DIR,
} from './rest.js';

import { ConnectionPool, PooledAgent, type Lane } from './connection-pool.js';
import { pooledHttp, type RetryReason } from './pooled-http.js';

export { KubeconfigError, REQUEST_TIMEOUT_MS };
export type { Lane, RetryReason };

/** One answered (or failed) API request: what was asked of which resource, and the HTTP status. */
export interface ApiCall {
  method: string;
  /** "nodes", "pods/eviction", "sandboxhealths/status", ... */
  resource: string;
  /** The HTTP status, or "error" when no answer came (timeout, connection refused). */
  result: number | 'error';
}

export interface KubeConfigOptions {
  requestTimeoutMs?: number;
  /** Told of every API request made through clients of this KubeConfig (not watches): for metrics. */
  onCall?(call: ApiCall): void;
  /** Use this context of the kubeconfig instead of its current-context (kubectl's --context). */
  context?: string;
  /** How long an idle connection to the apiserver is kept (connection-pool.ts's IDLE_EXPIRY_MS by default). */
  idleExpiryMs?: number;
  /** Told of every TLS handshake on a new connection to the apiserver: for metrics. */
  onHandshake?(lane: Lane, resumed: boolean): void;
  /** Told of every request sent again after a reused connection failed it: for metrics. */
  onRetry?(lane: Lane, reason: RetryReason): void;
}

/**
 * A KubeConfig whose every API request carries a timeout, is reported, and goes out on a kept-alive connection.
 * client-node 1.x sets no timeout, so a request to an apiserver that accepted the connection and then went
 * silent would wait forever, and with it a reconcile; and it builds a new https.Agent, so a new TLS connection,
 * for every request. Every generated client calls applySecurityAuthentication once per request, and watches call
 * applyToHTTPSOptions: the places to swap the throwaway agent for the pool's. Watches have their own silence
 * bound (informer.ts) instead of a timeout.
 */
class InstrumentedKubeConfig extends KubeConfig {
  readonly pool: ConnectionPool;

  constructor(private readonly options: KubeConfigOptions) {
    super();
    this.pool = new ConnectionPool({
      ...(options.idleExpiryMs !== undefined ? { idleMs: options.idleExpiryMs } : {}),
      onHandshake: (lane, resumed) => this.options.onHandshake?.(lane, resumed),
    });
  }

  override async applySecurityAuthentication(context: RequestContext): Promise<void> {
    await super.applySecurityAuthentication(context);
    const pooled = this.pooled('requests', context.getAgent(), context.getHeaders().Authorization);
    if (pooled) context.setAgent(pooled);
    if (!context.getSignal())
      context.setSignal(AbortSignal.timeout(this.options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS));
  }

  override async applyToHTTPSOptions(opts: Parameters<KubeConfig['applyToHTTPSOptions']>[0]): Promise<void> {
    await super.applyToHTTPSOptions(opts);
    const authorization = (opts.headers as Record<string, unknown> | undefined)?.Authorization;
    const pooled = this.pooled(
      'watches',
      opts.agent,
      typeof authorization === 'string' ? authorization : undefined,
    );
    if (pooled) opts.agent = pooled;
  }

  /** The pool's agent for what client-node built, unless that is not a plain https.Agent (a proxy's, http's). */
  private pooled(lane: Lane, built: unknown, authorization: string | undefined): PooledAgent | undefined {
    if (!(built instanceof HttpsAgent) || built.constructor !== HttpsAgent) return undefined;
    return this.pool.agent(lane, built.options, authorization);
  }

  /** client-node's own makeApiClient, with an HTTP library that keeps connections and reports each call. */
  override makeApiClient<T>(apiClientType: new (config: ReturnType<typeof createConfiguration>) => T): T {
    const cluster = this.getCurrentCluster();
    if (!cluster) throw new Error('No active cluster!');
    const http = pooledHttp({ onRetry: (lane, reason) => this.options.onRetry?.(lane, reason) });
    return new apiClientType(
      createConfiguration({
        baseServer: new ServerConfiguration(cluster.server, {}),
        authMethods: { default: this },
        httpApi: reportingHttp(http, (call) => this.options.onCall?.(call)),
      }),
    );
  }
}

function reportingHttp(inner: HttpLibrary, onCall: (call: ApiCall) => void): HttpLibrary {
  return {
    send(request) {
      const report = (result: ApiCall['result']) => {
        try {
          onCall({ method: request.getHttpMethod(), resource: resourceOfPath(request.getUrl()), result });
        } catch {
          // A metrics hook must never fail the request it observes.
        }
      };
      return from(
        inner
          .send(request)
          .toPromise()
          .then(
            (response: ResponseContext) => {
              report(response.httpStatusCode);
              return response;
            },
            (err: unknown) => {
              report('error');
              throw err;
            },
          ),
      );
    },
  };
}

/**
 * The resource a request URL names, with its subresource: /api/v1/namespaces/ns/pods/p/eviction is
 * "pods/eviction", /apis/sandbox.remediator.io/v1alpha1/sandboxhealths/n1/status "sandboxhealths/status".
 */
export function resourceOfPath(url: string): string {
  const parts = new URL(url, 'https://x').pathname.split('/').filter(Boolean);
  const rest = parts[0] === 'api' ? parts.slice(2) : parts[0] === 'apis' ? parts.slice(3) : [];
  const scoped = rest[0] === 'namespaces' && rest.length > 2 ? rest.slice(2) : rest;
  const [resource, , subresource] = scoped;
  if (!resource) return 'other';
  return subresource ? `${resource}/${subresource}` : resource;
}

/**
 * The kubeconfig files client-node's loadFromDefault reads: the given one, else those of $KUBECONFIG, else
 * ~/.kube/config if there is one; none means the in-cluster ServiceAccount.
 */
function kubeconfigFiles(path: string | undefined): string[] {
  if (path) return [path];
  const listed = (process.env.KUBECONFIG ?? '').split(delimiter).filter(Boolean);
  if (listed.length > 0) return listed;
  const home = join(process.env.HOME ?? homedir(), '.kube', 'config');
  return existsSync(home) ? [home] : [];
}

/**
 * Loads a kubeconfig: the given file, else $KUBECONFIG, ~/.kube/config, or the in-cluster service account. A
 * file that cannot be used, or no configuration at all, throws a KubeconfigError saying what is wrong with
 * which file; client-node would throw a TypeError for an empty file, or fall back to http://localhost:8080.
 */
export function loadKubeConfig(path?: string, options: KubeConfigOptions = {}): KubeConfig {
  const kc = new InstrumentedKubeConfig(options);
  const files = kubeconfigFiles(path);
  if (files.length === 0 && !existsSync(join(SERVICE_ACCOUNT_DIR, 'token')))
    throw new KubeconfigError(
      undefined,
      'found no kubeconfig ($KUBECONFIG unset, no ~/.kube/config) and not in a cluster (no ServiceAccount token)',
    );
  const file = files.length === 1 ? files[0] : undefined;
  try {
    if (path) kc.loadFromFile(path);
    else kc.loadFromDefault();
  } catch (err) {
    const failed = (err as { path?: unknown }).path;
    const where = typeof failed === 'string' ? failed : (file ?? files.join(delimiter));
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('E'))
      throw new KubeconfigError(where, describeReadError(err), { cause: err });
    if ((err as Error).name === 'YAMLException')
      throw new KubeconfigError(where, `is not valid YAML: ${firstLine(err)}`, { cause: err });
    // client-node reads an empty file (or a lone scalar) as undefined, then fails on undefined.clusters.
    if (err instanceof TypeError)
      throw new KubeconfigError(where, KUBECONFIG_PROBLEMS.notKubeconfig, { cause: err });
    throw new KubeconfigError(where, `is not a valid kubeconfig: ${firstLine(err)}`, { cause: err });
  }
  const where = files.length > 0 ? (file ?? files.join(delimiter)) : undefined;
  if (options.context !== undefined) {
    if (!kc.getContextObject(options.context))
      throw new KubeconfigError(where, KUBECONFIG_PROBLEMS.noContextNamed(options.context));
    kc.setCurrentContext(options.context);
  }
  if (where !== undefined) checkCurrentContext(kc, where);
  return kc;
}

/** What client-node only finds out at the first request ("No active cluster!", a missing CA file), said now. */
function checkCurrentContext(kc: KubeConfig, where: string): void {
  const name = kc.getCurrentContext();
  if (!name) throw new KubeconfigError(where, KUBECONFIG_PROBLEMS.noCurrentContext);
  const context = kc.getContextObject(name);
  if (!context) throw new KubeconfigError(where, KUBECONFIG_PROBLEMS.noSuchContext(name));
  const cluster = kc.getCluster(context.cluster);
  if (!cluster) throw new KubeconfigError(where, KUBECONFIG_PROBLEMS.noSuchCluster(context.cluster, name));
  const user = kc.getCurrentUser();
  for (const referenced of [cluster.caFile, user?.certFile, user?.keyFile]) {
    if (referenced && !existsSync(referenced))
      throw new KubeconfigError(where, KUBECONFIG_PROBLEMS.unreadable(referenced, { code: 'ENOENT' }));
  }
}

/**
 * Per-call options giving one request its own, usually shorter, timeout (e.g. a kubelet behind the proxy), and
 * optionally its own lane of connections (the leader Lease's, so no burst of writes queues a renewal).
 */
export function withTimeout(ms: number, lane?: Lane): ConfigurationOptions {
  return {
    middleware: [
      {
        pre: (context: RequestContext) => {
          context.setSignal(AbortSignal.timeout(ms));
          const agent = context.getAgent();
          if (lane && agent instanceof PooledAgent) context.setAgent(agent.inLane(lane));
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
