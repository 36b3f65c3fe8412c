import { expect } from 'chai';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { GROUP, VERSION, type IoLimitReport, type IoReadingStatus } from '../../src/api/v1alpha1/index.js';
import { loadKubeConfig } from '../../src/kube/client.js';
import { ReadingPublisher } from '../../src/kube/reading-publisher.js';
import { loadApiAccess } from '../../src/kube/rest.js';
import {
  api,
  Cleanup,
  createNodes,
  eventually,
  kubectl,
  podBoundTo,
  uniqueName,
} from '../support/cluster.js';
import { deniedBy, policyInForce, refusal, typeCheckWarnings } from '../support/admission.js';
import { readManifests, REPO_ROOT } from '../support/manifests.js';
import { applyCrds } from '../support/operator-process.js';
import { applyPolicy, getHealth } from '../support/resources.js';
import { createToken, writeTokenKubeconfig } from '../support/tokens.js';

const POLICY_FILE = join(REPO_ROOT, 'config/agent/admission-policy.yaml');
const POLICY = 'sandbox-remediator-agent-own-node';
const SANDBOX_HEALTHS = { group: GROUP, version: VERSION, plural: 'sandboxhealths' };

interface NamespacedManifest {
  kind: string;
  metadata: { name: string; namespace?: string };
  spec?: { matchConditions?: { expression: string }[] };
}
/** The Kubernetes objects in a config folder (its kustomization.yaml is none). */
const manifestsIn = (folder: string) =>
  readManifests(folder)
    .map((m) => m.object as Partial<NamespacedManifest>)
    .filter((o): o is NamespacedManifest => Boolean(o.kind && o.metadata));
const ref = (m: NamespacedManifest) => [
  `${m.kind}/${m.metadata.name}`,
  ...(m.metadata.namespace ? ['-n', m.metadata.namespace] : []),
];

/** The agent's ServiceAccount as config/rbac declares it. */
function agentServiceAccount(): { namespace: string; name: string } {
  const sa = manifestsIn('config/rbac').find(
    (m) => m.kind === 'ServiceAccount' && m.metadata.name === 'sandbox-remediator-agent',
  );
  if (!sa?.metadata.namespace) throw new Error('config/rbac declares no namespaced agent ServiceAccount');
  return { namespace: sa.metadata.namespace, name: sa.metadata.name };
}

const sandboxHealth = (node: string) => ({
  apiVersion: `${GROUP}/${VERSION}`,
  kind: 'SandboxHealth',
  metadata: { name: node },
  spec: { nodeName: node },
});

const reading = (psi: number): IoReadingStatus => ({
  source: 'agent',
  observedTime: new Date().toISOString(),
  psiSomeAvg10Percent: psi,
});

/** The apiserver's words for a denial by this policy: its name, then the validation's message. */
const deniedBecause = (message: string) => deniedBy(POLICY, message);

describe('config/agent/admission-policy.yaml: the agent writes only its own node reading', function () {
  const cleanup = new Cleanup();
  const agent = agentServiceAccount();
  let dir = '';
  let nodeA = '';
  let nodeB = '';
  /** A kubeconfig with a token bound to an agent pod on node A, as the kubelet would mount it. */
  let boundConfig = '';
  /** A kubeconfig with a plain token of the same ServiceAccount, bound to nothing. */
  let unboundConfig = '';
  const asAgent = (args: string[]) => kubectl([...args, `--kubeconfig=${boundConfig}`]);
  /** The agent's own client (it may not even read, so no kubectl patch, which reads first). */
  const agentApi = () => loadKubeConfig(boundConfig).makeApiClient(CustomObjectsApi);
  const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
  const patchAsAgent = (name: string, body: object, { status = false } = {}) => {
    const request = { ...SANDBOX_HEALTHS, name, body };
    return status
      ? agentApi().patchClusterCustomObjectStatus(request, mergePatch)
      : agentApi().patchClusterCustomObject(request, mergePatch);
  };
  /** The agent's own publisher, as `sandbox-remediator agent --kubeconfig` builds it. */
  const publisherFor = (node: string, config = boundConfig) => ({
    publish: async (r: IoReadingStatus) => new ReadingPublisher(await loadApiAccess(config), node).publish(r),
    publishLimits: async (r: IoLimitReport) =>
      new ReadingPublisher(await loadApiAccess(config), node).publishLimits(r),
  });

  /** Applies manifests, deleting in after() only the objects that did not exist before. */
  async function applyKeepingTrack(manifests: NamespacedManifest[], args: string[]) {
    for (const m of manifests) {
      if ((await kubectl(['get', ...ref(m)])).code !== 0)
        cleanup.add(() => kubectl(['delete', ...ref(m), '--ignore-not-found']));
    }
    const applied = await kubectl(['apply', ...args]);
    expect(applied.code, applied.stderr).to.equal(0);
  }

  before(async function () {
    this.timeout(120_000);
    // A policy that names another ServiceAccount than config/rbac would guard nothing.
    const [policy] = manifestsIn('config/agent').filter((m) => m.kind === 'ValidatingAdmissionPolicy');
    expect(
      policy?.spec?.matchConditions?.map((c) => c.expression).join(' '),
      'the policy matches the ServiceAccount of config/rbac',
    ).to.contain(`'system:serviceaccount:${agent.namespace}:${agent.name}'`);
    dir = await mkdtemp(join(tmpdir(), 'agent-admission-'));
    await applyCrds();
    // config/rbac holds namespaced objects in both namespaces (the operator's Lease Role, the ServiceAccounts).
    for (const namespace of [agent.namespace, 'sandbox-remediator-system']) {
      if ((await kubectl(['get', 'namespace', namespace])).code === 0) continue;
      const ns = await kubectl(['create', 'namespace', namespace]);
      expect(ns.code, ns.stderr).to.equal(0);
      cleanup.add(() => kubectl(['delete', 'namespace', namespace, '--ignore-not-found']));
    }
    await applyKeepingTrack(manifestsIn('config/rbac'), ['-k', join(REPO_ROOT, 'config/rbac')]);
    await applyKeepingTrack(
      manifestsIn('config/agent').filter((m) => m.kind.startsWith('ValidatingAdmissionPolicy')),
      ['-f', POLICY_FILE],
    );

    const nodes = await createNodes(cleanup, 2);
    [nodeA = '', nodeB = ''] = nodes.names;
    // Operators that other tests run on this cluster delete, within milliseconds, every SandboxHealth no valid
    // policy owns, but leave alone one whose status names an invalid policy (frozen until it is fixed): hold
    // ours with such a policy (a prometheus source without its settings), selecting only our nodes.
    const holder = uniqueName('it-agent-hold');
    await applyPolicy(cleanup, holder, {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': nodes.pool } },
      ioPressure: { source: 'prometheus' },
    });
    for (const node of [nodeA, nodeB]) {
      cleanup.add(() => kubectl(['delete', 'sandboxhealth', node, '--ignore-not-found']));
      // The operator's part of the status, which the agent must leave alone.
      const status = {
        status: {
          policy: holder,
          state: 'Healthy',
          conditions: [
            {
              type: 'IoPressureHigh',
              status: 'False',
              reason: 'ReadingsUnder',
              message: '',
              lastTransitionTime: new Date().toISOString(),
            },
          ],
        },
      };
      await eventually(`SandboxHealth ${node} held`, async () => {
        await kubectl(['create', '-f', '-'], JSON.stringify(sandboxHealth(node)));
        const patch = ['--subresource=status', '--type=merge', '-p', JSON.stringify(status)];
        if ((await kubectl(['patch', 'sandboxhealth', node, ...patch])).code !== 0) return false;
        // A deletion decided on an older view may still land: it must have stayed.
        await sleep(500);
        return (await getHealth(node))?.policy === holder;
      });
    }

    const { core } = api();
    const pod = podBoundTo(uniqueName('agent'), nodeA);
    pod.spec!.serviceAccountName = agent.name;
    const podName = pod.metadata!.name!;
    await core.createNamespacedPod({ namespace: agent.namespace, body: pod });
    // Deleting the pod revokes the token bound to it, so this runs after the tests that use it.
    cleanup.add(() =>
      core.deleteNamespacedPod({ name: podName, namespace: agent.namespace, gracePeriodSeconds: 0 }),
    );
    boundConfig = await writeTokenKubeconfig(
      dir,
      'agent-bound',
      await createToken(agent.namespace, agent.name, { boundToPod: podName }),
    );
    unboundConfig = await writeTokenKubeconfig(
      dir,
      'agent-unbound',
      await createToken(agent.namespace, agent.name),
    );

    await policyInForce(POLICY, () => publisherFor(nodeB).publish(reading(1)));
  });

  after(async function () {
    this.timeout(60_000);
    await cleanup.run();
    await rm(dir, { recursive: true, force: true });
  });

  it('type-checks without warnings', async () => {
    expect(await typeCheckWarnings(POLICY)).to.deep.equal([]);
  });

  it("has a pod-bound token name the pod's node, and a plain one name none", async () => {
    const whoami = async (config: string) => {
      const result = await kubectl(['auth', 'whoami', '-o', 'json', `--kubeconfig=${config}`]);
      expect(result.code, result.stderr).to.equal(0);
      return (
        JSON.parse(result.stdout) as {
          status: { userInfo: { username: string; extra?: Record<string, string[]> } };
        }
      ).status.userInfo;
    };
    const bound = await whoami(boundConfig);
    expect(bound.username).to.equal(`system:serviceaccount:${agent.namespace}:${agent.name}`);
    expect(bound.extra?.['authentication.kubernetes.io/node-name']).to.deep.equal([nodeA]);
    expect((await whoami(unboundConfig)).extra).to.not.have.property(
      'authentication.kubernetes.io/node-name',
    );
  });

  it("lets the agent publish its own node's reading", async () => {
    expect(await publisherFor(nodeA).publish(reading(12.5))).to.deep.equal({ wanted: [], report: undefined });
    const health = await getHealth(nodeA);
    expect(health?.ioReading?.psiSomeAvg10Percent).to.equal(12.5);
    // The operator's fields survive the agent's write.
    expect(health?.state).to.equal('Healthy');
    expect(health?.conditions?.map((c) => c.type)).to.deep.equal(['IoPressureHigh']);
  });

  it('lets the agent report the IO limits it applied, which its next reading leaves in place', async () => {
    const report: IoLimitReport = {
      allowed: true,
      observedTime: new Date().toISOString(),
      applied: [
        {
          podUid: '11111111-2222-4333-8444-555555555555',
          device: '254:0',
          cgroupVersion: 'v1',
          cgroup: 'kubepods/burstable/pod11111111-2222-4333-8444-555555555555',
          wanted: { wbps: 1_048_576 },
          written: { wbps: 1_048_576 },
          before: {},
        },
      ],
      results: [
        { podUid: '11111111-2222-4333-8444-555555555555', result: 'Set', message: '254:0 wbps=1048576' },
      ],
    };
    const answer = await publisherFor(nodeA).publishLimits(report);
    expect(answer).to.deep.equal({ wanted: [], report });
    // The reading is applied under another field manager: its apply does not drop the report.
    expect(await publisherFor(nodeA).publish(reading(3))).to.deep.equal({ wanted: [], report });
    const health = await getHealth(nodeA);
    expect(health?.ioLimits).to.deep.equal(report);
    expect(health?.ioReading?.psiSomeAvg10Percent).to.equal(3);
    expect(health?.state).to.equal('Healthy');
  });

  it("refuses the agent another node's reading", async () => {
    const before = await getHealth(nodeB);
    const message = await refusal(() => publisherFor(nodeB).publish(reading(99)));
    expect(message).to.contain(
      deniedBecause(`the agent on node ${nodeA} may write only SandboxHealth ${nodeA}, not ${nodeB}`),
    );
    expect((await getHealth(nodeB))?.ioReading).to.deep.equal(before?.ioReading);
  });

  it('refuses the agent any other status field of its own node', async () => {
    const conditions = {
      status: {
        conditions: [
          {
            type: 'IoPressureHigh',
            status: 'True',
            reason: 'ThresholdSustained',
            message: 'forged',
            lastTransitionTime: new Date().toISOString(),
          },
        ],
      },
    };
    expect(await refusal(() => patchAsAgent(nodeA, conditions, { status: true }))).to.contain(
      deniedBecause('the agent may write only status.ioReading and status.ioLimits, not status.conditions'),
    );
    // The reading and a forged state in one write: all or nothing.
    const both = { status: { ioReading: reading(1), state: 'Remediating' } };
    expect(await refusal(() => patchAsAgent(nodeA, both, { status: true }))).to.contain(
      deniedBecause('the agent may write only status.ioReading and status.ioLimits, not status.state'),
    );
    expect((await getHealth(nodeA))?.state).to.equal('Healthy');
  });

  it('gets no metadata through the status subresource: the apiserver keeps only the status', async () => {
    const body = {
      metadata: { labels: { 'sandbox.remediator.io/exclude': 'true' } },
      status: { ioReading: reading(2) },
    };
    await patchAsAgent(nodeA, body, { status: true });
    const health = await kubectl(['get', 'sandboxhealth', nodeA, '-o', 'jsonpath={.metadata.labels}']);
    expect(health.stdout).to.equal('');
    expect((await getHealth(nodeA))?.ioReading?.psiSomeAvg10Percent).to.equal(2);
  });

  it('refuses a token bound to no pod, even for a reading', async () => {
    for (const node of [nodeA, nodeB]) {
      const message = await refusal(() => publisherFor(node, unboundConfig).publish(reading(1)));
      expect(message).to.contain(deniedBecause("the agent's token names no node"));
    }
  });

  describe('even where RBAC would allow more', function () {
    // RBAC gives the agent only sandboxhealths/status; grant it the whole object here to show that the
    // policy alone keeps it to status.ioReading of its own node.
    const wider = uniqueName('it-agent-wider');
    const local = new Cleanup();
    before(async function () {
      this.timeout(60_000);
      const role = await kubectl([
        'create',
        'clusterrole',
        wider,
        '--verb=create,update,patch,delete',
        '--resource=sandboxhealths.sandbox.remediator.io',
      ]);
      expect(role.code, role.stderr).to.equal(0);
      local.add(() => kubectl(['delete', 'clusterrole', wider, '--ignore-not-found']));
      const binding = await kubectl([
        'create',
        'clusterrolebinding',
        wider,
        `--clusterrole=${wider}`,
        `--serviceaccount=${agent.namespace}:${agent.name}`,
      ]);
      expect(binding.code, binding.stderr).to.equal(0);
      local.add(() => kubectl(['delete', 'clusterrolebinding', wider, '--ignore-not-found']));
      await eventually('the wider role in force', async () => {
        const can = await asAgent(['auth', 'can-i', 'delete', 'sandboxhealths.sandbox.remediator.io']);
        return can.stdout.trim() === 'yes';
      });
    });
    after(() => local.run());

    it('refuses its metadata and spec', async () => {
      const labels = { metadata: { labels: { 'sandbox.remediator.io/exclude': 'true' } } };
      expect(await refusal(() => patchAsAgent(nodeA, labels))).to.contain(
        deniedBecause('the agent may write only status.ioReading and status.ioLimits, not metadata.labels'),
      );
      // An owner that does not exist would have the garbage collector delete the object.
      const owner = {
        apiVersion: 'v1',
        kind: 'Node',
        name: nodeA,
        uid: '00000000-0000-0000-0000-000000000000',
      };
      const owned = { metadata: { ownerReferences: [owner], annotations: { a: 'b' } } };
      // Every changed field is named, in map order, which is none.
      expect(await refusal(() => patchAsAgent(nodeA, owned)))
        .to.contain(
          deniedBecause('the agent may write only status.ioReading and status.ioLimits, not metadata.'),
        )
        .and.to.contain('metadata.annotations')
        .and.to.contain('metadata.ownerReferences');
      // The CRD's rule (name equals spec.nodeName, its only field) refuses any spec change before admission;
      // the policy compares spec too, should the schema ever allow one.
      expect(await refusal(() => patchAsAgent(nodeA, { spec: { nodeName: nodeB } }), 422)).to.contain(
        'metadata.name must equal spec.nodeName',
      );
      const health = await kubectl(['get', 'sandboxhealth', nodeA, '-o', 'jsonpath={.metadata}']);
      expect(JSON.parse(health.stdout)).to.not.have.any.keys('labels', 'annotations', 'ownerReferences');
    });

    it('refuses it the IO limits wanted of its node (spec.ioLimits): the operator alone sets them', async () => {
      const wanted = {
        spec: {
          ioLimits: [
            {
              podUid: '66666666-7777-4888-9999-000000000000',
              pod: 'shop/db-0',
              device: '254:0',
              limit: { wbps: 65_536 },
              policy: 'forged',
              since: new Date().toISOString(),
            },
          ],
        },
      };
      // Refused by this policy and by config/rbac's for spec.ioLimits: the apiserver may name either.
      expect(await refusal(() => patchAsAgent(nodeA, wanted))).to.match(
        /the agent may write only status\.ioReading and status\.ioLimits, not spec|only the operator may add or change IO limits/,
      );
      const health = await kubectl(['get', 'sandboxhealth', nodeA, '-o', 'jsonpath={.spec.ioLimits}']);
      expect(health.stdout).to.equal('');
    });

    it('refuses to create or delete a SandboxHealth, even its own', async () => {
      expect(
        await refusal(() => agentApi().deleteClusterCustomObject({ ...SANDBOX_HEALTHS, name: nodeA })),
      ).to.contain(deniedBecause('the agent may not delete SandboxHealth objects; the operator does'));
      // Admission comes before the store's AlreadyExists: a 409 here would mean the policy let it through.
      expect(
        await refusal(() =>
          agentApi().createClusterCustomObject({ ...SANDBOX_HEALTHS, body: sandboxHealth(nodeA) }),
        ),
      ).to.contain(deniedBecause('the agent may not create SandboxHealth objects; the operator does'));
      expect(await getHealth(nodeA)).to.not.equal(undefined);
    });
  });

  it('leaves every other user alone', async () => {
    // The admin (as the operator would) writes what the agent may not: another field, any node.
    for (const args of [
      ['label', 'sandboxhealth', nodeB, 'sandbox.remediator.io/test=admin'],
      [
        'patch',
        'sandboxhealth',
        nodeB,
        '--subresource=status',
        '--type=merge',
        '-p',
        JSON.stringify({ status: { state: 'Degraded', ioReading: reading(3) } }),
      ],
    ]) {
      const result = await kubectl(args);
      expect(result.code, result.stderr).to.equal(0);
    }
    expect((await getHealth(nodeB))?.state).to.equal('Degraded');
  });
});
