// The real nodes/proxy path for a node of our own: the apiserver only proxies to global-unicast node
// addresses, so the node advertises a documentation address (203.0.113.0/24) and the local apiserver, which
// runs with HTTPS_PROXY pointing at NODE_PROXY_PORT (hack/cluster/up.sh), reaches it through this HTTP CONNECT
// proxy, which leads only those addresses back to a kubelet stand-in serving a Summary on 127.0.0.1.
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { CLUSTER_DIR } from './cluster.js';

export const NODE_ADDRESS = '203.0.113.7';

function nodeProxyPort(): number {
  const env = readFileSync(join(CLUSTER_DIR, 'env'), 'utf8');
  const port = /^NODE_PROXY_PORT=(\d+)$/m.exec(env)?.[1];
  if (!port)
    throw new Error(
      '.cluster/env has no NODE_PROXY_PORT: restart the local cluster (make cluster-down cluster-up)',
    );
  return Number(port);
}

/** A kubelet's Summary API (stats/summary) with the given IO PSI, and the CONNECT proxy that leads to it. */
export class KubeletStandIn {
  kubeletPort = 0;
  requests = 0;
  private kubelet: HttpsServer | undefined;
  private proxy: HttpServer | undefined;
  private readonly sockets = new Set<Socket>();

  constructor(private readonly psi: { some: number; full: number }) {}

  async start(): Promise<void> {
    const pki = join(CLUSTER_DIR, 'pki');
    this.kubelet = createHttpsServer(
      { key: readFileSync(join(pki, 'apiserver.key')), cert: readFileSync(join(pki, 'apiserver.crt')) },
      (req, res) => {
        this.requests++;
        if (req.url !== '/stats/summary') {
          res.writeHead(404).end();
          return;
        }
        res.setHeader('content-type', 'application/json');
        res.end(
          JSON.stringify({
            node: {
              io: {
                time: new Date().toISOString(),
                psi: {
                  some: { avg10: this.psi.some, avg60: this.psi.some, avg300: 1, total: 1 },
                  full: { avg10: this.psi.full, avg60: this.psi.full, avg300: 1, total: 1 },
                },
              },
            },
          }),
        );
      },
    );
    await new Promise<void>((resolve) => this.kubelet?.listen(0, '127.0.0.1', resolve));
    this.kubeletPort = (this.kubelet.address() as AddressInfo).port;

    this.proxy = createHttpServer((_req, res) => res.writeHead(405).end());
    this.proxy.on('connect', (req, client: Socket, head: Buffer) => {
      this.sockets.add(client);
      client.on('close', () => this.sockets.delete(client));
      client.on('error', () => client.destroy());
      const [host, port] = (req.url ?? '').split(':');
      if (host !== NODE_ADDRESS || Number(port) !== this.kubeletPort) {
        client.end('HTTP/1.1 403 Forbidden\r\n\r\n');
        return;
      }
      const upstream = connect(this.kubeletPort, '127.0.0.1', () => {
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        upstream.write(head);
        upstream.pipe(client).pipe(upstream);
      });
      this.sockets.add(upstream);
      upstream.on('close', () => this.sockets.delete(upstream));
      upstream.on('error', () => client.destroy());
    });
    const proxy = this.proxy;
    await new Promise<void>((resolve, reject) => {
      proxy.once('error', reject);
      proxy.listen(nodeProxyPort(), '127.0.0.1', resolve);
    });
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    for (const server of [this.proxy, this.kubelet])
      if (server) await new Promise((resolve) => server.close(resolve));
  }
}
