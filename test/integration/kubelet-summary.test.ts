import { expect } from 'chai';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, Cleanup, eventually, kubectl, uniqueName } from '../support/cluster.js';
import { KubeletStandIn, NODE_ADDRESS } from '../support/kubelet-proxy.js';
import { REPO_ROOT } from '../support/manifests.js';
import { applyCrds, applyRbac, OperatorProcess } from '../support/operator-process.js';
import { applyPolicy, condition, getHealth } from '../support/resources.js';
import { createToken, writeTokenKubeconfig } from '../support/tokens.js';

const NAMESPACE = 'sandbox-remediator-system';
const NO_PROXY_ROLE = 'it-operator-without-node-proxy';

/** A node of our own (not kwok's, which would advertise 127.0.0.1) whose kubelet is the stand-in. */
async function nodeWithKubelet(
  cleanup: Cleanup,
  kubeletPort: number,
): Promise<{ pool: string; name: string }> {
  const { core } = api();
  const pool = uniqueName('pool');
  const name = `${pool}-n0`;
  await core.createNode({
    body: {
      metadata: {
        name,
        labels: { 'kubernetes.io/hostname': name, 'sandbox.remediator.io/test-pool': pool },
      },
    },
  });
  cleanup.add(() => core.deleteNode({ name }).catch(() => undefined), 'last');
  const status = {
    status: {
      addresses: [{ type: 'InternalIP', address: NODE_ADDRESS }],
      daemonEndpoints: { kubeletEndpoint: { Port: kubeletPort } },
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'KubeletReady',
          message: 'stand-in',
          lastHeartbeatTime: new Date().toISOString(),
          lastTransitionTime: new Date().toISOString(),
        },
      ],
    },
  };
  const patched = await kubectl([
    'patch',
    'node',
    name,
    '--subresource=status',
    '--type=merge',
    '-p',
    JSON.stringify(status),
  ]);
  expect(patched.code, patched.stderr).to.equal(0);
  return { pool, name };
}

describe('the kubeletSummary source through the apiserver node proxy, as the operator', function () {
  const cleanup = new Cleanup();
  const kubelet = new KubeletStandIn({ some: 61.5, full: 22 });
  const operator = new OperatorProcess();
  let dir = '';

  before(async function () {
    this.timeout(120_000);
    await applyCrds();
    await applyRbac();
    // The opt-in nodes/proxy grant for the operator's ServiceAccount, and a second ServiceAccount with the
    // operator's role alone.
    const optIn = await kubectl(['apply', '-k', join(REPO_ROOT, 'config/kubelet-summary')]);
    expect(optIn.code, optIn.stderr).to.equal(0);
    const manifests = [
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: NO_PROXY_ROLE, namespace: NAMESPACE } },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name: NO_PROXY_ROLE },
        roleRef: {
          apiGroup: 'rbac.authorization.k8s.io',
          kind: 'ClusterRole',
          name: 'sandbox-remediator-operator',
        },
        subjects: [{ kind: 'ServiceAccount', name: NO_PROXY_ROLE, namespace: NAMESPACE }],
      },
    ];
    const applied = await kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({ apiVersion: 'v1', kind: 'List', items: manifests }),
    );
    expect(applied.code, applied.stderr).to.equal(0);
    dir = await mkdtemp(join(tmpdir(), 'summary-'));
    await kubelet.start();
  });
  afterEach(async function () {
    this.timeout(60_000);
    await operator.stop();
    await cleanup.run();
  });
  after(async () => {
    await kubelet.stop();
    await kubectl(['delete', 'clusterrolebinding', NO_PROXY_ROLE, '--ignore-not-found']);
    await kubectl(['delete', '-k', join(REPO_ROOT, 'config/kubelet-summary'), '--ignore-not-found']);
    await kubectl(['delete', 'serviceaccount', NO_PROXY_ROLE, '-n', NAMESPACE, '--ignore-not-found']);
    await rm(dir, { recursive: true, force: true });
  });

  async function startAs(serviceAccount: string): Promise<void> {
    const kubeconfig = await writeTokenKubeconfig(
      dir,
      serviceAccount,
      await createToken(NAMESPACE, serviceAccount),
    );
    await operator.start([`--kubeconfig=${kubeconfig}`, `--operator-namespace=${NAMESPACE}`]);
  }

  it('reads a node Summary with the opt-in RBAC (config/kubelet-summary: get nodes/proxy) and reports it in SandboxHealth', async function () {
    this.timeout(120_000);
    const { pool, name } = await nodeWithKubelet(cleanup, kubelet.kubeletPort);
    await applyPolicy(cleanup, uniqueName('it-summary'), {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      ioPressure: { source: 'kubeletSummary' },
    });
    await startAs('sandbox-remediator-operator');
    const health = await eventually(
      'the Summary reading in SandboxHealth',
      async () => {
        const h = await getHealth(name);
        return h?.ioReading?.source === 'kubeletSummary' ? h : undefined;
      },
      { timeoutMs: 60_000 },
    );
    expect(health.ioReading).to.include({ psiSomeAvg10Percent: 61.5, psiFullAvg10Percent: 22 });
    expect(kubelet.requests, 'the apiserver reached the kubelet stand-in').to.be.greaterThan(0);
  });

  it('says why with the operator role alone, which has no nodes/proxy: reason SourceForbidden, and one warning, not one per poll', async function () {
    this.timeout(120_000);
    const { pool, name } = await nodeWithKubelet(cleanup, kubelet.kubeletPort);
    await applyPolicy(cleanup, uniqueName('it-summary-forbidden'), {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      ioPressure: { source: 'kubeletSummary' },
    });
    await startAs(NO_PROXY_ROLE);
    const io = await eventually(
      'IoPressureHigh Unknown with reason SourceForbidden',
      async () => {
        const c = condition((await getHealth(name))?.conditions, 'IoPressureHigh');
        return c?.reason === 'SourceForbidden' ? c : undefined;
      },
      { timeoutMs: 60_000 },
    );
    expect(io.status).to.equal('Unknown');
    expect(io.message).to.match(/nodes\/proxy/);
    // Two more polls (every 10 s) later, the warning is still the one.
    await new Promise((resolve) => setTimeout(resolve, 21_000));
    const warnings = operator.logs.filter(
      (l) => l.message === 'Failed to read the kubelet Summary API' && l.node === name,
    );
    expect(warnings.map((w) => w.level)).to.deep.equal(['warn']);
    expect(String(warnings[0]?.error)).to.match(/forbidden/i);
  });
});
