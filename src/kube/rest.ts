// A small HTTPS client for the apiserver, for the node agent: node:https and the credentials of a kubeconfig or of
// the pod's ServiceAccount, nothing else. Loading @kubernetes/client-node takes a process from about 40 to about
// 120 MiB of RSS (docs/adr/0011-lean-agent.md); the agent, on every node, makes one kind of request.
import { readFileSync } from 'node:fs';
import { Agent, request as httpsRequest } from 'node:https';
import { homedir } from 'node:os';
import { delimiter, dirname, isAbsolute, join } from 'node:path';

import { REQUEST_TIMEOUT_MS } from '../ports/errors.js';

export { REQUEST_TIMEOUT_MS };

/** Where the kubelet mounts a pod's ServiceAccount token (projected, rotated) and the cluster's CA. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/**
 * A projected token is replaced by the kubelet well before it expires (at 80 % of its life, at least an hour):
 * reading it again every minute is always in time, and costs one small read a minute.
 */
export const TOKEN_REREAD_MS = 60_000;

/** How to reach and authenticate to one apiserver. */
export interface ApiAccess {
  /** https://host:port, without a trailing slash. */
  server: string;
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  insecureSkipTlsVerify?: boolean;
  tlsServerName?: string;
  token?: string;
  /** Read again at most every TOKEN_REREAD_MS, and after a 401: a projected token rotates. */
  tokenFile?: string;
}

/** A non-2xx answer. `code` and `body` are what ports/errors.ts's apiStatus reads, as from client-node. */
export class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly body: string,
  ) {
    super(`${statusMessage(body) ?? 'no Status in the answer'} (HTTP ${code})`);
    this.name = 'ApiError';
  }
}

/**
 * A kubeconfig that cannot be used as it is, or none at all (`path` undefined): what to change is in the message,
 * which reads after "the kubeconfig <path>". No stack trace is due: the file is the user's, not a fault of ours.
 */
export class KubeconfigError extends Error {
  constructor(
    readonly path: string | undefined,
    readonly problem: string,
    options?: ErrorOptions,
  ) {
    super(path === undefined ? problem : `the kubeconfig ${path} ${problem}`, options);
    this.name = 'KubeconfigError';
  }
}

/** What is wrong with a kubeconfig, worded once for both readers (client-node's, for the operator, and ours). */
export const KUBECONFIG_PROBLEMS = {
  notKubeconfig: 'is empty or not a kubeconfig (no clusters, contexts or users in it)',
  noCurrentContext: 'sets no current-context: set one (kubectl config use-context NAME)',
  noSuchContext: (context: string) =>
    `sets current-context ${JSON.stringify(context)}, but defines no context of that name`,
  noContextNamed: (context: string) =>
    `defines no context ${JSON.stringify(context)} (kubectl config get-contexts lists those it has)`,
  noSuchCluster: (cluster: string | undefined, context: string) =>
    `names cluster ${JSON.stringify(cluster)} in context ${JSON.stringify(context)}, but defines no cluster of that name`,
  unreadable: (path: string, err: unknown) => `names ${path}, which ${describeReadError(err)}`,
};

/** Why a file could not be read, in words: "does not exist", "is a directory, not a file", ... */
export function describeReadError(err: unknown): string {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  if (code === 'ENOENT') return 'does not exist';
  if (code === 'EISDIR') return 'is a directory, not a file';
  if (code === 'EACCES' || code === 'EPERM') return 'cannot be read: permission denied';
  return `cannot be read: ${err instanceof Error ? err.message : String(err)}`;
}

/** The one line a YAML parser's error deserves: its first (the rest draws the place). */
export function firstLine(err: unknown): string {
  return ((err instanceof Error ? err.message : String(err)).split('\n')[0] ?? '').replace(/[\s:]+$/, '');
}

function statusMessage(body: string): string | undefined {
  try {
    const status = JSON.parse(body) as { message?: unknown };
    return typeof status.message === 'string' ? status.message : undefined;
  } catch {
    return undefined;
  }
}

interface KubeconfigFile {
  'current-context'?: string;
  contexts?: { name: string; context?: { cluster?: string; user?: string } }[];
  clusters?: {
    name: string;
    cluster?: {
      server?: string;
      'certificate-authority'?: string;
      'certificate-authority-data'?: string;
      'insecure-skip-tls-verify'?: boolean;
      'tls-server-name'?: string;
    };
  }[];
  users?: {
    name: string;
    user?: {
      'client-certificate'?: string;
      'client-certificate-data'?: string;
      'client-key'?: string;
      'client-key-data'?: string;
      token?: string;
      tokenFile?: string;
      exec?: unknown;
      'auth-provider'?: unknown;
      username?: string;
    };
  }[];
}

/** The current context of a parsed kubeconfig; relative file paths are relative to the kubeconfig's folder. */
export function accessFromKubeconfig(config: KubeconfigFile, dir: string): ApiAccess {
  const contextName = config['current-context'];
  if (!contextName) throw new Error(KUBECONFIG_PROBLEMS.noCurrentContext);
  const context = config.contexts?.find((c) => c.name === contextName)?.context;
  if (!context) throw new Error(KUBECONFIG_PROBLEMS.noSuchContext(contextName));
  const cluster = config.clusters?.find((c) => c.name === context.cluster)?.cluster;
  if (!cluster) throw new Error(KUBECONFIG_PROBLEMS.noSuchCluster(context.cluster, contextName));
  if (!cluster.server) throw new Error(`defines cluster ${JSON.stringify(context.cluster)} without a server`);
  const user = config.users?.find((u) => u.name === context.user)?.user ?? {};
  if (user.exec || user['auth-provider'] || user.username) {
    throw new Error(
      `has user ${JSON.stringify(context.user)}, who authenticates by exec, auth-provider or basic auth, which the agent does not run: give it a token, a tokenFile or a client certificate`,
    );
  }
  const file = (path: string) => {
    const absolute = isAbsolute(path) ? path : join(dir, path);
    try {
      return readFileSync(absolute);
    } catch (err) {
      throw new Error(KUBECONFIG_PROBLEMS.unreadable(absolute, err), { cause: err });
    }
  };
  const either = (data: string | undefined, path: string | undefined) =>
    data !== undefined ? Buffer.from(data, 'base64') : path !== undefined ? file(path) : undefined;
  const access: ApiAccess = { server: cluster.server.replace(/\/+$/, '') };
  const ca = either(cluster['certificate-authority-data'], cluster['certificate-authority']);
  const cert = either(user['client-certificate-data'], user['client-certificate']);
  const key = either(user['client-key-data'], user['client-key']);
  if (ca) access.ca = ca;
  if (cert) access.cert = cert;
  if (key) access.key = key;
  if (cluster['insecure-skip-tls-verify']) access.insecureSkipTlsVerify = true;
  if (cluster['tls-server-name']) access.tlsServerName = cluster['tls-server-name'];
  if (user.token) access.token = user.token;
  else if (user.tokenFile)
    access.tokenFile = isAbsolute(user.tokenFile) ? user.tokenFile : join(dir, user.tokenFile);
  return access;
}

/** The pod's own ServiceAccount, as the kubelet mounts it, and the apiserver's in-cluster Service address. */
export function inClusterAccess(env: NodeJS.ProcessEnv = process.env, dir = SERVICE_ACCOUNT_DIR): ApiAccess {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) throw new Error('not in a cluster: KUBERNETES_SERVICE_HOST and _PORT are not set');
  return {
    server: `https://${host.includes(':') ? `[${host}]` : host}:${port}`,
    ca: readFileSync(join(dir, 'ca.crt')),
    tokenFile: join(dir, 'token'),
  };
}

/**
 * The given kubeconfig, else the first file of $KUBECONFIG, ~/.kube/config, or the in-cluster ServiceAccount:
 * client-node's loadFromDefault order (without its merging of several $KUBECONFIG files).
 */
export async function loadApiAccess(path?: string, env: NodeJS.ProcessEnv = process.env): Promise<ApiAccess> {
  const candidates = path
    ? [path]
    : [env.KUBECONFIG?.split(delimiter).find(Boolean), join(env.HOME ?? homedir(), '.kube', 'config')];
  for (const [i, file] of candidates.entries()) {
    if (!file) continue;
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      // Only ~/.kube/config may be absent; a file the user named must be there.
      if (i === candidates.length - 1 && !path && (err as NodeJS.ErrnoException).code === 'ENOENT') break;
      throw new KubeconfigError(file, describeReadError(err), { cause: err });
    }
    const config = await parseKubeconfig(text, file);
    try {
      return accessFromKubeconfig(config, dirname(file));
    } catch (err) {
      throw new KubeconfigError(file, firstLine(err), { cause: err });
    }
  }
  try {
    return inClusterAccess(env);
  } catch (err) {
    throw new KubeconfigError(
      undefined,
      `found no kubeconfig ($KUBECONFIG unset, no ~/.kube/config) and ${firstLine(err)}`,
      { cause: err },
    );
  }
}

async function parseKubeconfig(text: string, file: string): Promise<KubeconfigFile> {
  // Kubeconfigs written by tools are often JSON, which is YAML; the YAML parser is loaded only when needed.
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    const { parse } = await import('yaml');
    try {
      parsed = parse(text);
    } catch (err) {
      throw new KubeconfigError(file, `is not valid YAML: ${firstLine(err)}`, { cause: err });
    }
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new KubeconfigError(file, KUBECONFIG_PROBLEMS.notKubeconfig);
  return parsed;
}

export interface ApiResponse {
  status: number;
  body: string;
}

export interface ApiRequest {
  method: 'GET' | 'PATCH' | 'POST' | 'PUT' | 'DELETE';
  /** The path and query, e.g. /apis/g/v/things/x/status?fieldManager=m. */
  path: string;
  contentType?: string;
  body?: string;
}

/**
 * Sends one request at a time to one apiserver. Every request has a timeout (REQUEST_TIMEOUT_MS: an apiserver
 * that accepted the connection and went silent must not hold a caller forever) and resolves only on a 2xx; any
 * other status rejects with an ApiError.
 */
export class ApiClient {
  private readonly agent: Agent;
  private token: string | undefined;
  private tokenReadAt = -Infinity;

  constructor(
    private readonly access: ApiAccess,
    private readonly options: { requestTimeoutMs?: number; now?: () => number } = {},
  ) {
    // One connection per request, as client-node makes them; the agent writes at most every few seconds. The
    // Agent keeps the TLS context and session, so a request after the first resumes rather than renegotiates.
    this.agent = new Agent({
      keepAlive: false,
      maxSockets: 1,
      ...(access.ca ? { ca: access.ca } : {}),
      ...(access.cert ? { cert: access.cert } : {}),
      ...(access.key ? { key: access.key } : {}),
      ...(access.tlsServerName ? { servername: access.tlsServerName } : {}),
      rejectUnauthorized: !access.insecureSkipTlsVerify,
    });
  }

  /** The bearer token, read again from its file once TOKEN_REREAD_MS has passed. */
  private bearer(): string | undefined {
    if (this.access.token !== undefined) return this.access.token;
    if (this.access.tokenFile === undefined) return undefined;
    const now = (this.options.now ?? performance.now.bind(performance))();
    if (this.token === undefined || now - this.tokenReadAt >= TOKEN_REREAD_MS) {
      this.token = readFileSync(this.access.tokenFile, 'utf8').trim();
      this.tokenReadAt = now;
    }
    return this.token;
  }

  async send(req: ApiRequest): Promise<ApiResponse> {
    // Appended, not resolved: a server behind a path prefix (a proxy's /k8s/clusters/c) keeps it.
    const url = new URL(this.access.server.replace(/\/+$/, '') + req.path);
    const token = this.bearer();
    const headers: Record<string, string> = { accept: 'application/json' };
    if (token) headers.authorization = `Bearer ${token}`;
    if (req.contentType) headers['content-type'] = req.contentType;
    if (req.body !== undefined) headers['content-length'] = String(Buffer.byteLength(req.body));
    const response = await new Promise<ApiResponse>((resolve, reject) => {
      const outgoing = httpsRequest(
        url,
        {
          method: req.method,
          headers,
          agent: this.agent,
          signal: AbortSignal.timeout(this.options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS),
        },
        (incoming) => {
          const chunks: Buffer[] = [];
          incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
          incoming.on('error', reject);
          incoming.on('end', () => {
            resolve({ status: incoming.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') });
          });
        },
      );
      outgoing.on('error', reject);
      outgoing.end(req.body);
    });
    // A rotated token the apiserver no longer takes: the next request reads the file again.
    if (response.status === 401) this.tokenReadAt = -Infinity;
    if (response.status < 200 || response.status > 299) throw new ApiError(response.status, response.body);
    return response;
  }

  close(): void {
    this.agent.destroy();
  }
}
