// The medik8s node lease on the real cluster, with the operator run as its ServiceAccount under config/rbac (and
// config/node-lease where a policy takes leases): a lease another holder holds keeps the cordon off its node, named in
// status, an Event and a metric, until it expires; with safety.nodeLease the operator holds the lease while it
// remediates and deletes it on undo, and never takes an unexpired lease of another (its admission policy refuses it
// too). The operator starts before medik8s-leases exists, as where no medik8s operator runs.
import { CoordinationV1Api, V1MicroTime, type V1Lease } from '@kubernetes/client-node';
import { expect } from 'chai';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isNotFound } from '../../src/kube/errors.js';
import { deniedBy, refusal, typeCheckWarnings } from '../support/admission.js';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  kubectl,
  podOn,
  uniqueName,
} from '../support/cluster.js';
import { REPO_ROOT } from '../support/manifests.js';
import { useOperator } from '../support/operator-process.js';
import { FAST_IO } from '../support/proc-root.js';
import { applyPolicy, getHealth } from '../support/resources.js';
import { SaturatedNode } from '../support/saturated-node.js';
import { createToken, writeTokenKubeconfig } from '../support/tokens.js';
import { eventsWithReasonAtLeast, readNode } from '../support/workloads.js';
import { loadKubeConfig } from '../../src/kube/client.js';

const NAMESPACE = 'medik8s-leases';
const NHC = 'NodeHealthCheck-it';
const leases = () => api().kc.makeApiClient(CoordinationV1Api);
const micro = (offsetMs = 0) => new V1MicroTime(new Date(Date.now() + offsetMs).toISOString());
const leaseOf = async (node: string): Promise<V1Lease | undefined> => {
  try {
    return await leases().readNamespacedLease({ name: `node-${node}`, namespace: NAMESPACE });
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
};
/** A lease as NodeHealthCheck takes it: held by NHC for `seconds` from now. */
const takeAsNhc = (node: string, seconds: number) =>
  leases().createNamespacedLease({
    namespace: NAMESPACE,
    body: {
      metadata: { name: `node-${node}`, namespace: NAMESPACE },
      spec: { holderIdentity: NHC, leaseDurationSeconds: seconds, acquireTime: micro(), renewTime: micro() },
    },
  });

const spec = (nodeSelector: unknown, safety: Record<string, unknown> = {}) => ({
  nodeSelector,
  detection: { stuckThresholdSeconds: 3 },
  ioPressure: FAST_IO,
  remediation: { evictStuckPods: false },
  safety: { maxUnhealthyNodes: 1, cooldownSeconds: 3, ...safety },
});

/** Three nodes of a pool, one saturated with a pod stuck on it; the policy over the pool. */
async function incident(cleanup: Cleanup, safety: Record<string, unknown> = {}) {
  const namespace = await createNamespace(cleanup);
  const { pool, names } = await createNodes(cleanup, 3);
  const node = names[0]!;
  const policy = uniqueName('it-lease');
  await applyPolicy(
    cleanup,
    policy,
    spec({ matchLabels: { 'sandbox.remediator.io/test-pool': pool } }, safety),
  );
  const sick = new SaturatedNode(node, cleanup);
  await sick.start();
  await api().core.createNamespacedPod({ namespace, body: podOn('stuck', node) });
  return { node, policy, sick };
}

describe('the medik8s node lease on the real cluster', function () {
  // Before the operator starts: no medik8s-leases, as where no medik8s operator ever ran.
  before(async function () {
    this.timeout(120_000);
    await kubectl(['delete', 'namespace', NAMESPACE, '--ignore-not-found', '--wait=true', '--timeout=90s']);
  });
  const operator = useOperator([], { serviceAccount: 'node-lease' });
  const cleanup = new Cleanup();
  afterEach(() => cleanup.run());
  after(async function () {
    this.timeout(60_000);
    await kubectl(['delete', '-k', join(REPO_ROOT, 'config/node-lease'), '--ignore-not-found']);
    await kubectl(['delete', 'namespace', NAMESPACE, '--ignore-not-found', '--wait=false']);
  });

  it('caches the leases of a namespace that does not exist yet, without an error', async function () {
    this.timeout(60_000);
    const synced = operator.logs.find((l) => l.message === 'Synced informer' && l.informer === 'node-leases');
    expect(synced, 'the node-leases informer synced').to.include({ objects: 0 });
    // It watches on: the namespace made later, its leases are seen (the next test depends on it).
    const made = await kubectl(['create', 'namespace', NAMESPACE]);
    expect(made.code, made.stderr).to.equal(0);
    const applied = await kubectl(['apply', '-k', join(REPO_ROOT, 'config/node-lease')]);
    expect(applied.code, applied.stderr).to.equal(0);
    expect(
      operator.logs.filter((l) => l.level === 'warn' && JSON.stringify(l).includes('node-leases')),
      'no warning about the lease informer',
    ).to.deep.equal([]);
  });

  it("holds the cordon of a node another holder's lease covers, names the holder, and cordons once it expires", async function () {
    this.timeout(120_000);
    const { node, sick } = await incident(cleanup);
    await takeAsNhc(node, 20);
    cleanup.add(() => leases().deleteNamespacedLease({ name: `node-${node}`, namespace: NAMESPACE }));
    const heldAt = Date.now();
    await sick.pressure('load');

    const blocked = await eventually(
      'the cordon held by NodeLease in status',
      async () => (await getHealth(node))?.blocked?.find((b) => b.guard === 'NodeLease'),
      { timeoutMs: 40_000 },
    );
    expect(blocked).to.include({ kind: 'Cordon', target: `node/${node}` });
    expect(blocked.message).to.match(
      new RegExp(`^medik8s-leases/node-${node} is held by ${NHC} until \\S+Z:`),
    );
    expect((await readNode(node)).spec?.unschedulable ?? false, 'not cordoned while held').to.equal(false);
    const events = await eventsWithReasonAtLeast(1, 'RemediationBlocked', 'default', node);
    expect(events.map((e) => e.message).join('\n')).to.include(`held by ${NHC}`);
    const metrics = await operator.get('/metrics', operator.metricsPort);
    expect(metrics.text).to.match(/sandbox_remediator_actions_blocked_total\{guard="NodeLease"\} [1-9]/);

    const cordoned = await eventually(
      'cordoned once the lease expired',
      async () => ((await readNode(node)).spec?.unschedulable === true ? Date.now() : undefined),
      { timeoutMs: 40_000 },
    );
    expect(cordoned - heldAt, 'not before the 20 s lease expired').to.be.at.least(20_000);
    const lease = await leaseOf(node);
    expect(lease?.spec?.holderIdentity, 'without safety.nodeLease, nothing taken').to.equal(NHC);
  });

  it('with safety.nodeLease holds the lease while remediating, never takes an unexpired one of another, and releases it on undo', async function () {
    this.timeout(150_000);
    const { node, policy, sick } = await incident(cleanup, { nodeLease: true });
    const created = await takeAsNhc(node, 15);
    cleanup.add(() =>
      leases()
        .deleteNamespacedLease({ name: `node-${node}`, namespace: NAMESPACE })
        .catch(() => undefined),
    );
    await sick.pressure('load');
    await eventually('the cordon held by NodeLease', async () =>
      (await getHealth(node))?.blocked?.some((b) => b.guard === 'NodeLease'),
    );
    const whileHeld = await leaseOf(node);
    expect(whileHeld?.metadata?.resourceVersion, "NHC's lease untouched while held").to.equal(
      created.metadata?.resourceVersion,
    );
    expect((await readNode(node)).spec?.unschedulable ?? false).to.equal(false);

    // Its own token cannot take it either: the admission policy refuses a takeover before expiry.
    const dir = await mkdtemp(join(tmpdir(), 'lease-token-'));
    cleanup.add(() => rm(dir, { recursive: true, force: true }));
    const token = await createToken('sandbox-remediator-system', 'sandbox-remediator-operator');
    const asOperator = loadKubeConfig(await writeTokenKubeconfig(dir, 'lease', token)).makeApiClient(
      CoordinationV1Api,
    );
    const message = await refusal(() =>
      asOperator.replaceNamespacedLease({
        name: `node-${node}`,
        namespace: NAMESPACE,
        body: {
          metadata: {
            name: `node-${node}`,
            namespace: NAMESPACE,
            resourceVersion: whileHeld!.metadata!.resourceVersion!,
          },
          spec: {
            holderIdentity: `sandbox-remediator-${policy}`,
            leaseDurationSeconds: 120,
            acquireTime: micro(),
            renewTime: micro(),
          },
        },
      }),
    );
    expect(await typeCheckWarnings('sandbox-remediator-operator-node-lease')).to.deep.equal([]);
    expect(message).to.include(
      deniedBy(
        'sandbox-remediator-operator-node-lease',
        `the operator may not take over node-${node} from ${NHC} before it expires`,
      ),
    );

    const taken = await eventually(
      'the lease taken over once expired, and the node cordoned',
      async () => {
        const lease = await leaseOf(node);
        const cordoned = (await readNode(node)).spec?.unschedulable === true;
        return cordoned && lease?.spec?.holderIdentity === `sandbox-remediator-${policy}` ? lease : undefined;
      },
      { timeoutMs: 40_000 },
    );
    const nodeUid = (await readNode(node)).metadata?.uid;
    expect(taken.spec).to.include({ leaseDurationSeconds: 120, leaseTransitions: 1 });
    expect(taken.metadata?.ownerReferences).to.deep.equal([
      { apiVersion: 'v1', kind: 'Node', name: node, uid: nodeUid },
    ]);
    expect(new Date(taken.spec!.renewTime!).getTime()).to.be.closeTo(Date.now(), 30_000);

    await sick.end();
    await eventually(
      'uncordoned on recovery, and the lease released',
      async () => (await readNode(node)).spec?.unschedulable !== true && (await leaseOf(node)) === undefined,
      { timeoutMs: 60_000 },
    );
    // Logged once the write's answer is back, which may be after the apiserver shows it.
    await eventually('the release logged', () =>
      Promise.resolve(operator.logs.some((l) => l.message === 'Released the node lease' && l.node === node)),
    );
  });
});
