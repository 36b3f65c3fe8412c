// An HTTPS front for a test's Prometheus on 127.0.0.1 that wants a bearer token, as kube-rbac-proxy or an
// ingress in front of a real one would: a certificate of a CA of its own, 401 without the token.
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { generateServingCert } from '../../src/webhook/certs.js';

export class AuthProxy {
  readonly ca: string;
  readonly token = `t-${Math.random().toString(36).slice(2)}`;
  url = '';
  /** Requests answered, by status. */
  readonly answered = new Map<number, number>();
  private readonly server: Server;

  constructor(upstream: string) {
    const cert = generateServingCert('127.0.0.1');
    this.ca = cert.caPem;
    this.server = createServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
      const answer = (status: number, body: string) => {
        this.answered.set(status, (this.answered.get(status) ?? 0) + 1);
        res.writeHead(status, { 'content-type': 'application/json' }).end(body);
      };
      if (req.headers.authorization !== `Bearer ${this.token}`) {
        answer(401, '{"status":"error","error":"unauthorized"}');
        return;
      }
      fetch(new URL(req.url ?? '/', upstream), { signal: AbortSignal.timeout(10_000) })
        .then(async (r) => {
          answer(r.status, await r.text());
        })
        .catch((err: unknown) => {
          answer(502, JSON.stringify({ status: 'error', error: String(err) }));
        });
    });
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}
