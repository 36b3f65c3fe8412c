import { KubeConfig } from '@kubernetes/client-node';
import { expect } from 'chai';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { reportUntilStarted } from '../../../src/kube/lifecycle.js';

describe('reportUntilStarted', () => {
  let server: Server;
  afterEach(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });

  it('tells each reason at most once per repeat, even when reasons alternate', async () => {
    // An apiserver on 127.0.0.1 that refuses the credentials, then the permission, then the credentials again...
    let asked = 0;
    server = createServer((_req, res) => {
      const code = asked++ % 2 === 0 ? 401 : 403;
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [
        {
          name: 'c',
          server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
          skipTLSVerify: true,
        },
      ],
      users: [{ name: 'u' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    const told: string[] = [];
    const logger = {
      warn: (_message: string, fields?: Record<string, unknown>) => told.push(String(fields?.reason)),
    };
    let start!: () => void;
    const started = new Promise<void>((resolve) => (start = resolve));
    const reporting = reportUntilStarted(kc, logger as never, started, {
      firstAfterMs: 1,
      everyMs: 20,
      repeatMs: 60_000,
    });
    const deadline = Date.now() + 5000;
    while (asked < 12 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(asked, 'questions asked').to.be.at.least(12);
    start();
    await reporting;
    expect(told).to.deep.equal(['Unauthorized', 'Forbidden']);
  });
});
