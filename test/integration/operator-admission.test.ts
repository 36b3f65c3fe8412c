// config/rbac/operator-admission-policy.yaml on the real apiserver: with a token of the operator's ServiceAccount,
// the writes a rollout hold makes go through (made by the operator's own change builder and actuator), and every
// other write to a Deployment, StatefulSet or DaemonSet is refused with a message saying what was refused.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppsV1Api, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { expect } from 'chai';
import type { RolloutKind } from '../../src/api/v1alpha1/index.js';
import { workloadChange } from '../../src/actuation/workload-change.js';
import type { WorkloadView } from '../../src/detection/index.js';
import { KubeActuator } from '../../src/kube/actuator.js';
import { loadKubeConfig } from '../../src/kube/client.js';
import type { RawObject } from '../../src/kube/informer.js';
import { daemonSetView, deploymentView, statefulSetView } from '../../src/kube/workload-views.js';
import { Cleanup, createNamespace, kubectl } from '../support/cluster.js';
import { applyRbac } from '../support/operator-process.js';
import { deniedBy, policyInForce, refusal, typeCheckWarnings } from '../support/admission.js';
import { createToken, writeTokenKubeconfig } from '../support/tokens.js';

const POLICY = 'sandbox-remediator-operator';
const OPERATOR = { namespace: 'sandbox-remediator-system', name: 'sandbox-remediator-operator' };
const VIEWS: Record<Exclude<RolloutKind, 'Rollout'>, (raw: RawObject) => WorkloadView | undefined> = {
  Deployment: deploymentView,
  StatefulSet: statefulSetView,
  DaemonSet: daemonSetView,
};
const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const STAMPS = {
  policy: 'it-admission',
  since: new Date(),
  reason: 'RolloutQueued' as const,
  startedAt: new Date(),
};

const template = (app: string) => ({
  metadata: { labels: { app } },
  spec: { terminationGracePeriodSeconds: 0, containers: [{ name: 'app', image: 'registry.local/app:1' }] },
});

describe('config/rbac/operator-admission-policy.yaml: the operator changes only what holds a rollout', function () {
  const cleanup = new Cleanup();
  let dir = '';
  let namespace = '';
  let asOperator: AppsV1Api;
  let actuator: KubeActuator;

  /** The workload as the operator's cache would see it (read as admin: the operator's role has no get). */
  async function viewOf(kind: keyof typeof VIEWS, name: string): Promise<WorkloadView> {
    const got = await kubectl(['get', kind.toLowerCase(), name, '-n', namespace, '-o', 'json']);
    expect(got.code, got.stderr).to.equal(0);
    return VIEWS[kind](JSON.parse(got.stdout) as RawObject)!;
  }
  /** What the policy said (the apiserver's prefix names the object: deployments.apps "web" is forbidden: ...). */
  const refused = async (write: () => Promise<unknown>) =>
    (await refusal(write)).replace(/^\S+ "[^"]+" is forbidden: /, '');
  const denied = (message: string) => deniedBy(POLICY, message);
  const patch = (kind: keyof typeof VIEWS, name: string, body: object) => {
    const request = { namespace, name, body };
    switch (kind) {
      case 'Deployment':
        return asOperator.patchNamespacedDeployment(request, mergePatch);
      case 'StatefulSet':
        return asOperator.patchNamespacedStatefulSet(request, mergePatch);
      case 'DaemonSet':
        return asOperator.patchNamespacedDaemonSet(request, mergePatch);
    }
  };

  before(async function () {
    this.timeout(120_000);
    await applyRbac();
    dir = await mkdtemp(join(tmpdir(), 'operator-admission-'));
    const config = await writeTokenKubeconfig(
      dir,
      'operator',
      await createToken(OPERATOR.namespace, OPERATOR.name),
    );
    asOperator = loadKubeConfig(config).makeApiClient(AppsV1Api);
    actuator = new KubeActuator(loadKubeConfig(config));
    namespace = await createNamespace(cleanup);
    const created = await kubectl(
      ['apply', '-n', namespace, '-f', '-'],
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'List',
        items: [
          {
            apiVersion: 'apps/v1',
            kind: 'Deployment',
            metadata: { name: 'web', annotations: { 'team.example/owner': 'shop' } },
            spec: { replicas: 1, selector: { matchLabels: { app: 'web' } }, template: template('web') },
          },
          {
            apiVersion: 'apps/v1',
            kind: 'StatefulSet',
            metadata: { name: 'db' },
            spec: {
              replicas: 2,
              serviceName: 'db',
              selector: { matchLabels: { app: 'db' } },
              template: template('db'),
            },
          },
          {
            apiVersion: 'apps/v1',
            kind: 'DaemonSet',
            metadata: { name: 'agent' },
            spec: { selector: { matchLabels: { app: 'agent' } }, template: template('agent') },
          },
        ],
      }),
    );
    expect(created.code, created.stderr).to.equal(0);
    // A new value each time: once a probe got through before the policy loaded, the same patch again changes
    // nothing, which the policy rightly lets pass, and the wait would end only at its timeout.
    let probes = 0;
    await policyInForce(POLICY, () =>
      patch('Deployment', 'web', { metadata: { annotations: { 'team.example/probe': String(++probes) } } }),
    );
  });

  after(async function () {
    this.timeout(60_000);
    await cleanup.run();
    await rm(dir, { recursive: true, force: true });
  });

  it('type-checks without warnings', async () => {
    expect(await typeCheckWarnings(POLICY)).to.deep.equal([]);
  });

  for (const kind of ['Deployment', 'StatefulSet', 'DaemonSet'] as const)
    it(`lets the operator hold a ${kind} and give it back exactly, with its stamps`, async () => {
      const name = { Deployment: 'web', StatefulSet: 'db', DaemonSet: 'agent' }[kind];
      const before = await viewOf(kind, name);
      await actuator.patchWorkload(
        workloadChange(before, { kind: 'PauseRollout', stamps: STAMPS }, undefined),
      );
      const held = await viewOf(kind, name);
      expect(held.stamps?.policy, 'stamped').to.equal('it-admission');
      expect(held.paused, 'held').to.equal(true);
      await actuator.patchWorkload(workloadChange(held, { kind: 'ResumeRollout' }, undefined));
      const after = await viewOf(kind, name);
      expect(after.stamps, 'stamps removed').to.equal(undefined);
      expect(after.paused).to.equal(false);
      expect(after.strategy, 'the strategy it had').to.deep.equal(before.strategy);
    });

  it("refuses every other change to a Deployment: image, replicas, labels, someone else's annotation", async () => {
    const refusals = [
      await refused(() =>
        patch('Deployment', 'web', {
          spec: { template: { spec: { containers: [{ name: 'app', image: 'evil.example/miner:1' }] } } },
        }),
      ),
      await refused(() => patch('Deployment', 'web', { spec: { replicas: 0 } })),
      await refused(() => patch('Deployment', 'web', { metadata: { labels: { app: 'other' } } })),
      await refused(() =>
        patch('Deployment', 'web', { metadata: { annotations: { 'team.example/owner': 'someone' } } }),
      ),
      await refused(() => patch('Deployment', 'web', { metadata: { finalizers: ['example.com/hold'] } })),
    ];
    expect(refusals).to.deep.equal([
      denied('the operator may change only spec.paused of a Deployment, not spec.template'),
      denied('the operator may change only spec.paused of a Deployment, not spec.replicas'),
      denied(
        'the operator may change only annotations under sandbox.remediator.io/ in the metadata of a Deployment, not metadata.labels',
      ),
      denied('the operator may change only annotations under sandbox.remediator.io/, not team.example/owner'),
      denied(
        'the operator may change only annotations under sandbox.remediator.io/ in the metadata of a Deployment, not metadata.finalizers',
      ),
    ]);
  });

  it('refuses a StatefulSet any change but its partition, and a DaemonSet any change but its update strategy', async () => {
    const refusals = [
      await refused(() => patch('StatefulSet', 'db', { spec: { replicas: 5 } })),
      await refused(() =>
        patch('StatefulSet', 'db', { spec: { updateStrategy: { type: 'OnDelete', rollingUpdate: null } } }),
      ),
      await refused(() =>
        patch('StatefulSet', 'db', { spec: { template: { spec: { terminationGracePeriodSeconds: 30 } } } }),
      ),
      await refused(() =>
        patch('DaemonSet', 'agent', {
          spec: { template: { spec: { tolerations: [{ operator: 'Exists' }] } } },
        }),
      ),
      await refused(() => patch('DaemonSet', 'agent', { spec: { minReadySeconds: 30 } })),
    ];
    expect(refusals).to.deep.equal([
      denied('the operator may change only spec.updateStrategy of a StatefulSet, not spec.replicas'),
      denied(
        'the operator may change only spec.updateStrategy.rollingUpdate.partition of a StatefulSet, not spec.updateStrategy.type',
      ),
      denied('the operator may change only spec.updateStrategy of a StatefulSet, not spec.template'),
      denied('the operator may change only spec.updateStrategy of a DaemonSet, not spec.template'),
      denied('the operator may change only spec.updateStrategy of a DaemonSet, not spec.minReadySeconds'),
    ]);
  });

  it('refuses the operator creating or deleting any of them (RBAC first, then the policy)', async () => {
    const deleted = await refused(() => asOperator.deleteNamespacedDeployment({ namespace, name: 'web' }));
    expect(deleted).to.contain('cannot delete resource "deployments"');
  });
});
