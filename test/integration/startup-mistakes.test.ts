// Start-up mistakes only a real apiserver shows: credentials it refuses, a user it does not allow, CRDs that are
// not installed (each: the operator waits, not ready, and says why in one warning naming the fix), and a webhook
// port that is taken, which only shows once the caches have synced (the operator exits 2 with one line).
// test/unit/cli/startup-mistakes.test.ts has the mistakes that need no cluster.
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cleanup, createNamespace, eventually, kubeConfig, kubectl } from '../support/cluster.js';
import { applyCrds, OperatorProcess, type LogLine } from '../support/operator-process.js';
import { createToken, writeTokenKubeconfig } from '../support/tokens.js';

const CRDS = ['sandboxpolicies.sandbox.remediator.io', 'sandboxhealths.sandbox.remediator.io'];

/** The operator's warning with this reason, once it has logged one. */
const warningFor = (operator: OperatorProcess, reason: string) =>
  eventually(
    `a warning with reason ${reason}`,
    () => Promise.resolve(operator.logs.find((l) => l.reason === reason)),
    { timeoutMs: 60_000 },
  );

/** Running, not ready, no error and no stack trace: waiting, not failing. */
async function expectWaiting(operator: OperatorProcess): Promise<void> {
  expect(operator.isRunning(), operator.tail()).to.equal(true);
  expect((await operator.get('/readyz')).status).to.equal(503);
  expect((await operator.get('/healthz')).status).to.equal(200);
  expect(operator.logs.filter((l: LogLine) => l.level === 'error' || l.level === 'raw')).to.deep.equal([]);
}

describe('operator start-up mistakes against the apiserver', function () {
  const cleanup = new Cleanup();
  const operators: OperatorProcess[] = [];
  let dir = '';
  let server = '';

  const startOperator = async (args: string[]) => {
    const operator = new OperatorProcess();
    operators.push(operator);
    await operator.start(args, { waitForStarted: false });
    return operator;
  };

  before(async function () {
    this.timeout(120_000);
    await applyCrds();
    dir = mkdtempSync(join(tmpdir(), 'startup-mistakes-it-'));
    server = kubeConfig().getCurrentCluster()!.server;
  });

  afterEach(async function () {
    this.timeout(60_000);
    // Each test checks how its operator exits; this only makes sure none outlives it.
    await Promise.all(operators.splice(0).map((o) => o.stop()));
    await cleanup.run();
  });

  after(async function () {
    this.timeout(120_000);
    // The CRD test deletes them: whatever happened, the tests after this file need them.
    await applyCrds();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('credentials the apiserver refuses (HTTP 401): waits, not ready, naming the server and the user', async function () {
    this.timeout(120_000);
    const kubeconfig = await writeTokenKubeconfig(dir, 'bogus', 'not-a-token-the-apiserver-issued');
    const operator = await startOperator([`--kubeconfig=${kubeconfig}`]);
    const warning = await warningFor(operator, 'Unauthorized');
    expect(warning.level).to.equal('warn');
    expect(warning.message).to.equal(
      `Waiting for ${server} to accept the credentials of kubeconfig user "bogus" (HTTP 401 Unauthorized): fix them, or pass --kubeconfig=<a kubeconfig this cluster accepts>`,
    );
    await expectWaiting(operator);
    expect(await operator.stop(), 'SIGTERM stops it cleanly').to.equal(0);
  });

  it('a user the apiserver knows but RBAC does not allow (HTTP 403): waits, naming the permission and config/rbac', async function () {
    this.timeout(120_000);
    const namespace = await createNamespace(cleanup, 'it-norbac');
    const kubeconfig = await writeTokenKubeconfig(dir, 'norbac', await createToken(namespace, 'default'));
    const operator = await startOperator([`--kubeconfig=${kubeconfig}`]);
    const warning = await warningFor(operator, 'Forbidden');
    expect(warning.message).to.equal(
      `Waiting for permission to list sandboxpolicies.sandbox.remediator.io on ${server} (HTTP 403 Forbidden): bind the operator's ClusterRole (config/rbac) to the user or ServiceAccount it runs as`,
    );
    // The apiserver's own words name the identity it refused.
    expect(String(warning.error)).to.contain(`system:serviceaccount:${namespace}:default`);
    await expectWaiting(operator);
    expect(await operator.stop()).to.equal(0);
  });

  it('CRDs not installed (HTTP 404): waits, naming both and how to install them; starts once they are', async function () {
    this.timeout(240_000);
    const deleted = await kubectl([
      'delete',
      'crd',
      ...CRDS,
      '--ignore-not-found',
      '--wait=true',
      '--timeout=90s',
    ]);
    expect(deleted.code, deleted.stderr).to.equal(0);
    const operator = await startOperator([]);
    const warning = await warningFor(operator, 'CustomResourceDefinitionsMissing');
    expect(warning.message).to.equal(
      `Waiting for the CustomResourceDefinitions ${CRDS.join(', ')}, which ${server} does not serve: install them (kubectl apply -f crds/, or sandbox-remediator crds | kubectl apply -f -), or start the operator once with --install-crds`,
    );
    await expectWaiting(operator);

    // The fix it names, and no restart: the same process becomes ready.
    const pid = operator.pid;
    await applyCrds();
    await eventually('/readyz to pass', async () => (await operator.get('/readyz')).status === 200, {
      timeoutMs: 90_000,
    });
    await operator.waitForLog('Started controller', 30_000);
    expect(operator.pid).to.equal(pid);
    expect(operator.isRunning()).to.equal(true);
    expect(await operator.stop()).to.equal(0);
  });

  it('a webhook port already in use: exits 2 once the caches synced, with one line naming --webhook-bind-address', async function () {
    this.timeout(120_000);
    const holder: Server = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    cleanup.add(() => new Promise((resolve) => holder.close(resolve)));
    const port = (holder.address() as AddressInfo).port;
    const operator = await startOperator([`--webhook-bind-address=127.0.0.1:${port}`]);
    expect(await operator.exited).to.equal(2);
    const errors = operator.logs.filter((l) => l.level === 'error').map((l) => l.message);
    expect(errors).to.deep.equal([
      `Refused to start: the webhook address 127.0.0.1:${port} is already in use (another operator on this machine?); pass --webhook-bind-address=<free port> or "0" to turn it off`,
    ]);
    expect(operator.logs.filter((l) => l.level === 'raw')).to.deep.equal([]);
    expect(operator.logs.some((l) => l.message === 'Started controller')).to.equal(false);
  });
});
