import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

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

/** Parses a kubebuilder-style bind address (":8080", "127.0.0.1:0", "0" to disable). */
export function parseBindAddress(address: string): { host: string; port: number } | undefined {
  if (address === '0' || address === '') return undefined;
  const colon = address.lastIndexOf(':');
  const host = colon > 0 ? address.slice(0, colon) : '0.0.0.0';
  const port = Number(address.slice(colon + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new Error(`invalid bind address ${JSON.stringify(address)}`);
  return { host: host.replace(/^\[|\]$/g, ''), port };
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
      void registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
        (err: unknown) => res.writeHead(500).end(String(err)),
      );
      return;
    }
    res.writeHead(404).end('not found\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(bind.port, bind.host, resolve);
  });
  return { server, port: (server.address() as AddressInfo).port };
}
