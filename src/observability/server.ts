import { createServer, type Server } from 'node:http';
import type { AddressInfo, Server as NetServer } from 'node:net';

/** What /metrics serves: a prom-client Registry, or the agent's own metrics (src/agent/metrics.ts). */
export interface MetricsSource {
  metrics(): Promise<string>;
  readonly contentType: string;
}

export interface ProbeChecks {
  /** Liveness: the process is not wedged. */
  healthy(): boolean;
  /** Readiness: caches synced and the controller running. */
  ready(): boolean;
}

/** Why a bind address cannot be listened on; each is fixed by passing another address. */
export type BindProblem = 'in-use' | 'denied' | 'not-local' | 'invalid';

const BIND_PROBLEMS: Record<BindProblem, string> = {
  'in-use': 'is already in use',
  denied: 'needs privileges this process lacks (a port below 1024?)',
  'not-local': 'is not an address of this machine',
  invalid: 'is not host:port or :port',
};

/** A listen refused for a reason the user fixes with a flag, not a fault of the program: no stack trace. */
export class BindError extends Error {
  constructor(
    readonly address: string,
    readonly problem: BindProblem,
    options?: ErrorOptions,
  ) {
    super(`${address} ${BIND_PROBLEMS[problem]}`, options);
    this.name = 'BindError';
  }
}

const PROBLEM_OF_CODE: Record<string, BindProblem> = {
  EADDRINUSE: 'in-use',
  EACCES: 'denied',
  EADDRNOTAVAIL: 'not-local',
  ENOTFOUND: 'not-local',
};

/** Parses a kubebuilder-style bind address (":8080", "127.0.0.1:0", "0" to disable). */
export function parseBindAddress(address: string): { host: string; port: number } | undefined {
  if (address === '0' || address === '') return undefined;
  const colon = address.lastIndexOf(':');
  const host = colon > 0 ? address.slice(0, colon) : '0.0.0.0';
  const portText = address.slice(colon + 1);
  const port = Number(portText);
  if (portText === '' || !Number.isInteger(port) || port < 0 || port > 65535)
    throw new BindError(address, 'invalid');
  return { host: host.replace(/^\[|\]$/g, ''), port };
}

/**
 * Listens on a bind address ("0" is not one: the caller turns the server off instead); resolves with the port.
 * The mistakes a user makes (a port another process holds, a privileged port, an address of another machine)
 * reject with a BindError, which the CLIs turn into one line naming the flag.
 */
export async function listen(server: NetServer, address: string): Promise<number> {
  const bind = parseBindAddress(address);
  if (!bind) throw new BindError(address, 'invalid');
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      const problem = PROBLEM_OF_CODE[err.code ?? ''];
      reject(problem ? new BindError(address, problem, { cause: err }) : err);
    });
    server.listen(bind.port, bind.host, resolve);
  });
  return (server.address() as AddressInfo).port;
}

/** Serves /healthz, /readyz and/or /metrics; returns the bound address. */
export async function serve(
  address: string,
  routes: { probes?: ProbeChecks; registry?: MetricsSource },
): Promise<{ server: Server; port: number } | undefined> {
  const bind = parseBindAddress(address);
  if (!bind) return undefined;
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const probe = (ok: boolean) => {
      res.writeHead(ok ? 200 : 503, { 'content-type': 'text/plain' }).end(ok ? 'ok\n' : 'not ready\n');
    };
    if (routes.probes && (path === '/healthz' || path === '/livez')) {
      probe(routes.probes.healthy());
      return;
    }
    if (routes.probes && path === '/readyz') {
      probe(routes.probes.ready());
      return;
    }
    if (routes.registry && path === '/metrics') {
      const registry = routes.registry;
      // A source that throws at once (a /proc it cannot read) answers 500, as one that rejects: never an exit.
      void Promise.resolve()
        .then(() => registry.metrics())
        .then(
          (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
          (err: unknown) => res.writeHead(500).end(String(err)),
        );
      return;
    }
    res.writeHead(404).end('not found\n');
  });
  return { server, port: await listen(server, address) };
}
