import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { KubeConfig } from '@kubernetes/client-node';
import { Cleanup, createNodes, eventually, kubeConfig, uniqueName } from '../support/cluster.js';
import { forward, type Forwarder } from '../support/forwarder.js';
import { applyCrds, OperatorProcess } from '../support/operator-process.js';
import { applyPolicy, getHealth } from '../support/resources.js';

/** A loopback port nothing listens on, so connecting to it is refused the way a stopped apiserver refuses. */
async function unusedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

describe('operator startup', function () {
  const operator = new OperatorProcess();
  const cleanup = new Cleanup();
  let dir = '';
  let kubeconfig = '';
  let apiserver: URL;
  let port = 0;
  let spawned = false;
  let forwarder: Forwarder | undefined;

  before(async function () {
    this.timeout(120_000);
    await applyCrds();
    port = await unusedPort();
    // The admin kubeconfig, pointed at a port where the apiserver is not (yet): its certificate names 127.0.0.1.
    const real = kubeConfig();
    apiserver = new URL(real.getCurrentCluster()!.server);
    dir = mkdtempSync(join(tmpdir(), 'startup-test-'));
    kubeconfig = join(dir, 'kubeconfig');
    const down = new KubeConfig();
    down.loadFromOptions({
      clusters: real.clusters.map((c) =>
        c.name === real.getCurrentCluster()?.name ? { ...c, server: `https://127.0.0.1:${port}` } : c,
      ),
      users: real.users,
      contexts: real.contexts,
      currentContext: real.getCurrentContext(),
    });
    writeFileSync(kubeconfig, down.exportConfig(), { mode: 0o600 });
  });

  afterEach(() => cleanup.run());

  after(async function () {
    this.timeout(60_000);
    try {
      const code = await operator.stop();
      if (spawned && code !== 0)
        throw new Error(`operator exited with ${code} on SIGTERM:\n${operator.tail()}`);
    } finally {
      await forwarder?.close();
      if (dir) rmSync(dir, { recursive: true, force: true });
    }
  });

  it('starts while the apiserver is down and works once it is up', async function () {
    this.timeout(180_000);
    spawned = true;
    await operator.start([`--kubeconfig=${kubeconfig}`], { waitForStarted: false });
    expect((await operator.get('/healthz')).status).to.equal(200);
    expect((await operator.get('/readyz')).status).to.equal(503);
    await sleep(5000);
    expect(
      operator.logs.some((l) => l.message === 'Restarting informer after an error'),
      'its first lists failed',
    ).to.equal(true);
    expect((await operator.get('/readyz')).status).to.equal(503);

    forwarder = await forward(port, apiserver);
    await eventually('/readyz to pass', async () => (await operator.get('/readyz')).status === 200, {
      timeoutMs: 60_000,
    });
    await eventually('the controller to start', () =>
      Promise.resolve(operator.logs.some((l) => l.message === 'Started controller')),
    );

    const { pool, names } = await createNodes(cleanup, 1);
    await applyPolicy(cleanup, uniqueName('it-startup'), {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
    });
    await eventually('its SandboxHealth', async () => getHealth(names[0]!));
    expect(operator.isRunning()).to.equal(true);
  });

  it('restarts watches that go silent, and is not ready while it cannot reach the apiserver', async function () {
    this.timeout(180_000);
    // Its own pass-through, so it can be frozen without touching the first test's operator.
    const silentPort = await unusedPort();
    const silentKubeconfig = join(dir, 'silent-kubeconfig');
    writeFileSync(
      silentKubeconfig,
      readFileSync(kubeconfig, 'utf8').replace(`127.0.0.1:${port}`, `127.0.0.1:${silentPort}`),
      { mode: 0o600 },
    );
    const link = await forward(silentPort, apiserver);
    const silent = new OperatorProcess();
    try {
      await silent.start([
        `--kubeconfig=${silentKubeconfig}`,
        '--watch-silence-seconds=3',
        '--ready-max-disconnected-seconds=5',
      ]);
      expect((await silent.get('/readyz')).status).to.equal(200);

      link.freeze();
      const frozenAt = silent.logs.length;
      await silent.waitForLog('Restarting a silent watch', 30_000, frozenAt);
      await eventually('/readyz to fail', async () => (await silent.get('/readyz')).status === 503, {
        timeoutMs: 30_000,
      });
      expect((await silent.get('/healthz')).status, 'alive, only not ready').to.equal(200);
      const metrics = await silent.get('/metrics', silent.metricsPort);
      expect(metrics.text).to.match(
        /sandbox_remediator_informer_restarts_total\{[^}]*reason="silent"[^}]*\} [1-9]/,
      );

      link.thaw();
      await eventually('/readyz to pass again', async () => (await silent.get('/readyz')).status === 200, {
        timeoutMs: 60_000,
      });
      expect(silent.isRunning()).to.equal(true);
    } finally {
      await silent.stop();
      await link.close();
    }
  });
});
