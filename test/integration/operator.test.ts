import { expect } from 'chai';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  hack,
  kubectl,
  podOn,
  uniqueName,
} from '../support/cluster.js';
import { useOperator } from '../support/operator-process.js';
import { applyPolicy, condition, getHealth, getPolicyStatus } from '../support/resources.js';

describe('operator against the real cluster', function () {
  const operator = useOperator();
  const cleanup = new Cleanup();

  afterEach(() => cleanup.run());

  it('serves /healthz, /readyz and /metrics', async () => {
    expect((await operator.get('/healthz')).status).to.equal(200);
    expect((await operator.get('/readyz')).status).to.equal(200);
    const metrics = await operator.get('/metrics', operator.metricsPort);
    expect(metrics.text).to.contain('sandbox_remediator_reconcile_total');
    expect(metrics.text).to.contain('sandbox_remediator_cached_objects');
  });

  it('reports stuck NameReserved pods in SandboxHealth, kubectl get and Events, and clears them after the incident', async function () {
    this.timeout(150_000);
    const namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 2);
    const [sick, healthy] = names as [string, string];
    const policy = uniqueName('it-detect');
    await applyPolicy(cleanup, policy, {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      detection: { stuckThresholdSeconds: 30 },
    });
    await eventually(
      'SandboxHealth for both pool nodes',
      async () => (await getHealth(sick)) && (await getHealth(healthy)),
    );

    const started = await hack('incident', [
      'start',
      '--node',
      sick,
      '--interval-seconds',
      '5',
      '--max-duration-seconds',
      '300',
    ]);
    expect(started.code, started.stderr).to.equal(0);
    cleanup.add(() => hack('incident', ['stop', '--node', sick]));
    const { core } = api();
    for (const name of ['a', 'b']) await core.createNamespacedPod({ namespace, body: podOn(name, sick) });

    const status = await eventually(
      'the node to be SandboxCreationDegraded with both pods',
      async () => {
        const s = await getHealth(sick);
        return s?.stuckPodCount === 2 ? s : undefined;
      },
      { timeoutMs: 90_000 },
    );
    expect(status.state).to.equal('Degraded');
    expect(status.ioEvidence).to.equal('IoSuspected');
    expect(status.stuckPods!.map((p) => [p.name, p.cause, p.namespace])).to.have.deep.members([
      ['a', 'NameReserved', namespace],
      ['b', 'NameReserved', namespace],
    ]);
    expect(condition(status.conditions, 'SandboxCreationDegraded')?.status).to.equal('True');
    expect((await getHealth(healthy))?.state).to.equal('Healthy');

    const table = await kubectl(['get', 'sandboxhealth', sick]);
    expect(table.stdout).to.match(new RegExp(`${sick}\\s+Degraded\\s+2`));
    const nodeEvents = await kubectl(['describe', 'node', sick]);
    expect(nodeEvents.stdout).to.contain('SandboxCreationDegraded');
    const podEvents = await kubectl(['describe', 'pod', 'a', '-n', namespace]);
    expect(podEvents.stdout).to.contain('SandboxCreationStuck');
    const policyStatus = await getPolicyStatus(policy);
    expect(policyStatus).to.include({ matchedNodes: 2, degradedNodes: 1 });

    const stopped = await hack('incident', ['stop', '--node', sick]);
    expect(stopped.code, stopped.stderr).to.equal(0);
    const recovered = await eventually('the node to recover', async () => {
      const s = await getHealth(sick);
      return s?.stuckPodCount === 0 ? s : undefined;
    });
    expect(condition(recovered.conditions, 'SandboxCreationDegraded')?.status).to.equal('False');
    expect((await kubectl(['describe', 'node', sick])).stdout).to.contain('SandboxCreationRecovered');
  });

  it('calls a CNI failure Network and does not suspect IO', async function () {
    this.timeout(60_000);
    const namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 1);
    await applyPolicy(cleanup, uniqueName('it-cni'), {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      detection: { stuckThresholdSeconds: 3 },
    });
    const message =
      'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "{id}": plugin type="bridge" failed (add): failed to allocate for range 0: no IP addresses available in range set: 10.244.1.1-10.244.1.254';
    const started = await hack('incident', [
      'start',
      '--node',
      names[0]!,
      '--interval-seconds',
      '2',
      '--message',
      message,
    ]);
    expect(started.code, started.stderr).to.equal(0);
    cleanup.add(() => hack('incident', ['stop', '--node', names[0]!]));
    await api().core.createNamespacedPod({ namespace, body: podOn('cni', names[0]!) });
    const status = await eventually('the CNI pod reported', async () => {
      const s = await getHealth(names[0]!);
      return s?.stuckPods?.[0]?.cause === 'Network' ? s : undefined;
    });
    expect(status.ioEvidence).to.equal('NotIo');
    expect(condition(status.conditions, 'SandboxCreationDegraded')?.message).to.contain(
      'point away from disk IO',
    );
  });

  it('applies policy edits without a restart: threshold, selector, and invalid and back', async function () {
    this.timeout(90_000);
    const namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 2, {});
    const [first, second] = names as [string, string];
    await kubectl(['label', 'node', second, 'tier=second']);
    const policy = uniqueName('it-edit');
    const selectFirst = {
      matchExpressions: [
        { key: 'sandbox.remediator.io/test-pool', operator: 'In', values: [pool] },
        { key: 'tier', operator: 'DoesNotExist' },
      ],
    };
    await applyPolicy(cleanup, policy, {
      nodeSelector: selectFirst,
      detection: { stuckThresholdSeconds: 600 },
    });
    await eventually('the first node only', async () => (await getPolicyStatus(policy))?.matchedNodes === 1);
    expect(await getHealth(first)).to.not.equal(undefined);

    const started = await hack('incident', ['start', '--node', first, '--interval-seconds', '2']);
    expect(started.code, started.stderr).to.equal(0);
    cleanup.add(() => hack('incident', ['stop', '--node', first]));
    await api().core.createNamespacedPod({ namespace, body: podOn('waits', first) });
    await new Promise((r) => setTimeout(r, 3000));
    expect((await getHealth(first))?.stuckPodCount, 'not stuck under a 600 s threshold').to.equal(0);

    await applyPolicy(cleanup, policy, {
      nodeSelector: selectFirst,
      detection: { stuckThresholdSeconds: 2 },
    });
    await eventually(
      'the lowered threshold to take effect',
      async () => (await getHealth(first))?.stuckPodCount === 1,
    );

    await applyPolicy(cleanup, policy, {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      detection: { stuckThresholdSeconds: 2 },
    });
    await eventually(
      'the widened selector to take in the second node',
      async () => (await getPolicyStatus(policy))?.matchedNodes === 2,
    );
    expect(await getHealth(second)).to.not.equal(undefined);

    const invalid = {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      ioPressure: { source: 'prometheus' },
    };
    await applyPolicy(cleanup, policy, invalid);
    const refused = await eventually('Valid=False', async () => {
      const s = await getPolicyStatus(policy);
      return condition(s?.conditions, 'Valid')?.status === 'False' ? s : undefined;
    });
    expect(refused.problems).to.deep.equal([
      { field: 'spec.ioPressure.prometheus', message: 'is required when source is prometheus' },
    ]);
    const valid = await kubectl(['get', 'sandboxpolicy', policy]);
    expect(valid.stdout).to.match(new RegExp(`${policy}\\s+False`));

    await applyPolicy(cleanup, policy, {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
    });
    await eventually(
      'Valid=True again',
      async () => condition((await getPolicyStatus(policy))?.conditions, 'Valid')?.status === 'True',
    );
    expect(operator.isRunning()).to.equal(true);
  });

  it('removes the SandboxHealth of a deleted node', async function () {
    this.timeout(90_000);
    const { pool, names } = await createNodes(cleanup, 1);
    await applyPolicy(cleanup, uniqueName('it-delete'), {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
    });
    await eventually('its SandboxHealth', async () => getHealth(names[0]!));
    await api().core.deleteNode({ name: names[0]! });
    await eventually('its SandboxHealth to be gone', async () => (await getHealth(names[0]!)) === undefined, {
      timeoutMs: 60_000,
    });
  });
  // The apiserver gone and back: test/integration/faults.test.ts (kill -9 of kube-apiserver and of etcd during a
  // remediation, with convergence measured).
});
