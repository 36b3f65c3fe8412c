import { CoreV1Api } from '@kubernetes/client-node';
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadKubeConfig, resourceOfPath } from '../../../src/kube/client.js';
import { kubeletSummaryFetcher } from '../../../src/kube/kubelet-summary.js';

/**
 * An apiserver that accepts the connection and then says nothing, as one behind a dead load balancer or a
 * half-open connection does: only a client-side timeout ends a request to it.
 */
async function silentServer(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `https://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => {
          resolve();
        });
      }),
  };
}

describe('API request timeouts', () => {
  let server: Awaited<ReturnType<typeof silentServer>>;
  let dir: string;
  let kubeconfig: string;

  beforeEach(async () => {
    server = await silentServer();
    dir = mkdtempSync(join(tmpdir(), 'kc-'));
    kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(
      kubeconfig,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'c', cluster: { server: server.url, 'insecure-skip-tls-verify': true } }],
        users: [{ name: 'u', user: { token: 't' } }],
        contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
        'current-context': 'x',
      }),
    );
  });
  afterEach(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('gives every API request of a loaded kubeconfig a timeout', async () => {
    const core = loadKubeConfig(kubeconfig, { requestTimeoutMs: 300 }).makeApiClient(CoreV1Api);
    const started = performance.now();
    const error = await core.listNode().then(
      () => undefined,
      (err: unknown) => err,
    );
    const elapsed = performance.now() - started;
    expect(error, 'a request to a silent apiserver must fail').to.not.equal(undefined);
    expect((error as Error).name).to.equal('AbortError');
    // It waited for the server (no connection error), and gave up (without the timeout it would wait forever).
    expect(elapsed).to.be.within(250, 10_000);
  });

  it('gives a kubelet Summary fetch through the node proxy its own, shorter timeout', async () => {
    const fetch = kubeletSummaryFetcher(loadKubeConfig(kubeconfig, { requestTimeoutMs: 60_000 }), 200);
    const started = performance.now();
    const error = await fetch('node-1').then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error).to.not.equal(undefined);
    expect((error as Error).name).to.equal('AbortError');
    expect(performance.now() - started).to.be.within(150, 10_000); // the 60 s API default would fail this
  });
});

describe('resourceOfPath', () => {
  it('names the resource and subresource of a request URL', () => {
    expect(resourceOfPath('https://h:6443/api/v1/nodes/n1')).to.equal('nodes');
    expect(resourceOfPath('https://h/api/v1/namespaces/ns/pods/p/eviction')).to.equal('pods/eviction');
    expect(resourceOfPath('https://h/api/v1/namespaces/ns/events')).to.equal('events');
    expect(resourceOfPath('https://h/api/v1/namespaces/ns')).to.equal('namespaces');
    expect(
      resourceOfPath('https://h/apis/sandbox.remediator.io/v1alpha1/sandboxhealths/n1/status?x=1'),
    ).to.equal('sandboxhealths/status');
    expect(resourceOfPath('https://h/apis/coordination.k8s.io/v1/namespaces/ns/leases/operator')).to.equal(
      'leases',
    );
    expect(resourceOfPath('https://h/version')).to.equal('other');
  });
});
