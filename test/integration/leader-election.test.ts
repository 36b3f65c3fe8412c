import { expect } from 'chai';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SaturatedNode } from '../support/saturated-node.js';
import {
  auditEvents,
  credentialIdOf,
  credentialOf,
  resourceOf,
  succeeded,
  type AuditEvent,
} from '../support/audit.js';
import {
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  kubeConfig,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import { forward } from '../support/forwarder.js';
import { freePort } from '../support/monitoring.js';
import { applyCrds, applyRbac, OperatorProcess } from '../support/operator-process.js';
import { FAST_IO } from '../support/proc-root.js';
import { applyPolicy, getHealth } from '../support/resources.js';
import { createToken, writeTokenKubeconfig } from '../support/tokens.js';
import { createSpreadDeployment, readNode } from '../support/workloads.js';

const NAMESPACE = 'sandbox-remediator-system';
const SERVICE_ACCOUNT = 'sandbox-remediator-operator';
const LEASE = 'sandbox-remediator-operator';
const log = (msg: string) => {
  console.error(`      [leader-election] ${msg}`);
};

const leaseHolder = async () =>
  (
    await kubectl([
      'get',
      'lease',
      LEASE,
      '-n',
      NAMESPACE,
      '-o',
      'jsonpath={.spec.holderIdentity}',
      '--ignore-not-found',
    ])
  ).stdout.trim();

describe('leader election: two operator replicas on the real cluster', function () {
  const cleanup = new Cleanup();
  const replicas: OperatorProcess[] = [];
  let dir = '';

  before(async function () {
    this.timeout(120_000);
    await applyCrds();
    await applyRbac();
    const stale = await kubectl(['delete', 'lease', LEASE, '-n', NAMESPACE, '--ignore-not-found']);
    expect(stale.code, stale.stderr).to.equal(0);
    dir = await mkdtemp(join(tmpdir(), 'leader-'));
  });
  afterEach(async function () {
    this.timeout(60_000);
    if (this.currentTest?.state === 'failed')
      for (const replica of replicas) console.error(`--- replica log tail:\n${replica.tail(40)}`);
    for (const replica of replicas.splice(0)) await replica.stop();
    await cleanup.run();
  });
  after(async () => {
    await kubectl(['delete', 'lease', LEASE, '-n', NAMESPACE, '--ignore-not-found']);
    await rm(dir, { recursive: true, force: true });
  });

  /** A replica as the Deployment runs it: the operator's ServiceAccount, its own token, POD_NAME, --leader-elect. */
  async function replica(
    name: string,
    { server }: { server?: string } = {},
  ): Promise<{ operator: OperatorProcess; credential: string }> {
    const token = await createToken(NAMESPACE, SERVICE_ACCOUNT);
    // With a server: the same credentials through another address (a pass-through the test can freeze).
    const kubeconfig = await writeTokenKubeconfig(dir, name, token, server);
    const operator = new OperatorProcess();
    replicas.push(operator);
    await operator.start(
      ['--leader-elect', `--kubeconfig=${kubeconfig}`, `--operator-namespace=${NAMESPACE}`],
      { waitForStarted: false, env: { POD_NAME: name } },
    );
    await operator.waitForLog('Caches synced: standing by until this replica leads', 60_000);
    return { operator, credential: credentialIdOf(token) };
  }

  it('lets exactly one replica act; after kill -9 of the leader the standby acts within 20 s and repeats nothing', async function () {
    this.timeout(300_000);
    const since = new Date();
    const namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 6);
    const [first, second] = [names[0]!, names[1]!];
    const policy = uniqueName('it-leader');
    await applyPolicy(cleanup, policy, {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      detection: { stuckThresholdSeconds: 3 },
      // No sustain: the new leader may act on its first look at a node already under pressure.
      ioPressure: { ...FAST_IO, sustainSeconds: 0 },
      safety: { maxUnhealthyNodes: 2, cooldownSeconds: 5 },
    });

    const a = await replica('operator-a');
    await a.operator.waitForLog('Started controller', 30_000);
    expect(await leaseHolder()).to.match(/^operator-a_/);
    const b = await replica('operator-b');
    const standby = await b.operator.get('/readyz');
    expect(standby.status, 'a warm standby is ready').to.equal(200);
    expect(b.operator.logs.some((l) => l.message === 'Started controller')).to.equal(false);

    await eventually('SandboxHealth for every pool node (written by the leader)', async () =>
      (await Promise.all(names.map(getHealth))).every((h) => h !== undefined),
    );
    // Both nodes hold their new pods stuck; only the first is under IO pressure while operator-a leads.
    const firstIo = new SaturatedNode(first, cleanup);
    const secondIo = new SaturatedNode(second, cleanup);
    await firstIo.start();
    await secondIo.start();
    await createSpreadDeployment(cleanup, namespace, 'web', pool, 12);
    await firstIo.pressure('load');
    await eventually(
      'the first node cordoned by the leader',
      async () => (await readNode(first)).spec?.unschedulable === true,
      { timeoutMs: 60_000 },
    );
    await eventually(
      'the stuck pods of the first node evicted',
      async () => ((await getHealth(first))?.actions?.filter((x) => x.kind === 'Evict').length ?? 0) >= 2,
      { timeoutMs: 60_000 },
    );
    expect((await readNode(second)).spec?.unschedulable, 'no pressure, no cordon').to.not.equal(true);

    a.operator.kill();
    const killedAt = new Date();
    log(`killed operator-a at ${killedAt.toISOString()}`);
    await secondIo.pressure('load');
    await eventually(
      'the second node cordoned by the new leader',
      async () => (await readNode(second)).spec?.unschedulable === true,
      { timeoutMs: 40_000 },
    );
    expect(await leaseHolder()).to.match(/^operator-b_/);
    await eventually(
      `the stuck pods of the second node evicted (${second})`,
      // At least its two: replacements of the first node's pods may land on it before its cordon.
      async () => ((await getHealth(second))?.actions?.filter((x) => x.kind === 'Evict').length ?? 0) >= 2,
      { timeoutMs: 60_000 },
    );
    await new Promise((resolve) => setTimeout(resolve, 2000)); // the last lines reach the audit log

    const events = await auditEvents(since);
    const isWrite = (e: AuditEvent) => !['get', 'list', 'watch'].includes(e.verb);
    const by = (credential: string) =>
      events.filter((e) => credentialOf(e) === credential && isWrite(e) && resourceOf(e) !== 'leases');
    const aWrites = by(a.credential);
    const bWrites = by(b.credential);
    const at = (e: AuditEvent) => new Date(e.requestReceivedTimestamp).getTime();
    log(`audit: operator-a wrote ${aWrites.length} times, operator-b ${bWrites.length} times`);
    expect(aWrites.length, 'the leader wrote').to.be.greaterThan(0);
    expect(bWrites.length, 'the new leader wrote').to.be.greaterThan(0);
    // Exactly one acts at any time: the standby wrote nothing while the leader lived, the leader nothing after.
    expect(bWrites.filter((e) => at(e) < killedAt.getTime()).map(resourceOf)).to.deep.equal([]);

    const cordons = events.filter(
      (e) =>
        resourceOf(e) === 'nodes' &&
        e.verb === 'patch' &&
        succeeded(e) &&
        [a, b].some((r) => credentialOf(e) === r.credential),
    );
    expect(
      cordons.map((e) => [e.objectRef?.name, credentialOf(e) === a.credential ? 'a' : 'b']),
      'each node patched once, by the leader of the moment',
    ).to.deep.equal([
      [first, 'a'],
      [second, 'b'],
    ]);
    const takeoverMs = at(cordons[1]!) - killedAt.getTime();
    log(`the new leader cordoned ${takeoverMs} ms after the kill`);
    expect(takeoverMs).to.be.at.most(20_000);

    const evictions = events.filter(
      (e) =>
        resourceOf(e) === 'pods/eviction' &&
        succeeded(e) &&
        [a, b].some((r) => credentialOf(e) === r.credential),
    );
    const evicted = evictions.map((e) => e.objectRef?.name);
    expect(evicted, 'no pod evicted twice').to.have.length(new Set(evicted).size);
    expect(evicted.length).to.be.at.least(4);
  });

  it('stops a leader cut off from the apiserver: fenced at the renew deadline, exits 1, and the standby takes over', async function () {
    this.timeout(180_000);
    const { names, pool } = await createNodes(cleanup, 2);
    await applyPolicy(cleanup, uniqueName('it-leader-cut'), {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
    });
    const apiserver = new URL(kubeConfig().getCurrentCluster()!.server);
    const port = await freePort();
    const link = await forward(port, apiserver);
    cleanup.add(() => link.close());
    const a = await replica('operator-a', { server: `https://127.0.0.1:${port}` });
    await a.operator.waitForLog('Started controller', 30_000);
    const b = await replica('operator-b');
    await eventually('SandboxHealth for the pool nodes', async () =>
      (await Promise.all(names.map(getHealth))).every((h) => h !== undefined),
    );

    link.freeze(); // a partition: the leader's requests, its renewals among them, go unanswered
    const frozenAt = Date.now();
    const code = await Promise.race([
      a.operator.exited,
      new Promise<'still running'>((resolve) =>
        setTimeout(() => {
          resolve('still running');
        }, 40_000),
      ),
    ]);
    const exitedAfterMs = Date.now() - frozenAt;
    log(`the cut-off leader exited with ${String(code)} after ${exitedAfterMs} ms`);
    expect(code).to.equal(1);
    // The renew deadline (10 s) and at most 5 s to stop, not a hung request's 30 s timeout.
    expect(exitedAfterMs).to.be.at.most(20_000);
    expect(a.operator.logs.map((l) => l.message)).to.include.members([
      'Lost the leader Lease: stopping, so two replicas never act at once',
      'Exiting: this replica lost the leader Lease',
    ]);
    await b.operator.waitForLog('Started controller', 30_000);
    expect(await leaseHolder()).to.match(/^operator-b_/);
  });
});
