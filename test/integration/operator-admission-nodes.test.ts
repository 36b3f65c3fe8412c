// config/rbac/operator-admission-policy.yaml on Nodes and Pods, on the real apiserver: with a token of the operator's
// ServiceAccount, the writes remediation makes go through (made by the operator's own change builder and actuator:
// cordon and taint with stamps and back, lifting its gate, an Eviction), and every other write is refused with a
// message saying what was refused; what its role does not grant (Secrets, ConfigMaps, deleting pods, creating a
// webhook configuration) is refused before the policy is asked.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  AdmissionregistrationV1Api,
  CoreV1Api,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { expect } from 'chai';
import {
  NODE_CONDITION_REASONS,
  NODE_CONDITION_TYPE,
  PACING_GATE,
  STAMP,
  toApiTime,
  type NodeStamps,
} from '../../src/api/v1alpha1/index.js';
import { nodeChange } from '../../src/actuation/node-change.js';
import { KubeActuator } from '../../src/kube/actuator.js';
import { loadKubeConfig } from '../../src/kube/client.js';
import type { RawObject } from '../../src/kube/informer.js';
import { isConflict } from '../../src/kube/errors.js';
import { nodeView } from '../../src/kube/views.js';
import { registerPacingWebhook } from '../../src/kube/webhook-config.js';
import { generateServingCert } from '../../src/webhook/certs.js';
import type { NodeAction } from '../../src/policy/actions.js';
import { deniedBy, policyInForce, refusal, typeCheckWarnings } from '../support/admission.js';
import {
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  kubeConfig,
  kubectl,
} from '../support/cluster.js';
import { REPO_ROOT } from '../support/manifests.js';
import { applyRbac, applyWebhookConfig, deleteWebhookConfig } from '../support/operator-process.js';
import { createToken, writeTokenKubeconfig } from '../support/tokens.js';

const POLICY = 'sandbox-remediator-operator';
const NODE_STATUS_POLICY = 'sandbox-remediator-operator-node-status';
const OPERATOR = { namespace: 'sandbox-remediator-system', name: 'sandbox-remediator-operator' };
const OUR_TAINT = { key: 'sandbox.remediator.io/io-pressure', value: 'true', effect: 'NoSchedule' };
const FOREIGN_TAINT = { key: 'dedicated', value: 'db', effect: 'NoSchedule' };
const OTHER_GATE = 'example.com/approval';
const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);

describe('config/rbac/operator-admission-policy.yaml on Nodes and Pods: cordon, our taint, our gate, evictions', function () {
  const cleanup = new Cleanup();
  const admin = () => kubeConfig().makeApiClient(CoreV1Api);
  let dir = '';
  let namespace = '';
  let node = '';
  let asOperator: CoreV1Api;
  let operatorConfig = '';
  let actuator: KubeActuator;

  const refused = async (write: () => Promise<unknown>) =>
    (await refusal(write)).replace(/^\S+ "[^"]+" is forbidden: /, '');
  const denied = (message: string) => deniedBy(POLICY, message);
  const patchNode = (body: object) => asOperator.patchNode({ name: node, body }, mergePatch);
  /** The node as the operator's cache holds it: JSON as the apiserver sent it (the client's read makes Dates). */
  const rawNode = async () => {
    const got = await kubectl(['get', 'node', node, '-o', 'json']);
    expect(got.code, got.stderr).to.equal(0);
    return JSON.parse(got.stdout) as RawObject & { metadata: { resourceVersion: string } };
  };
  const viewOfNode = async () => nodeView(await rawNode())!;
  /** As the operator patches: on the node as it is now, with its resourceVersion (a conflict: read it again). */
  const patchFresh = (actions: NodeAction[], stamps: NodeStamps | undefined) =>
    eventually('the node patched', async () => {
      const raw = await rawNode();
      const change = nodeChange(nodeView(raw)!, actions, stamps, raw.metadata.resourceVersion);
      try {
        return (await actuator.patchNode(change)) !== undefined;
      } catch (err) {
        if (isConflict(err)) return false;
        throw err;
      }
    });
  const action = (kind: 'Cordon' | 'Uncordon' | 'Taint' | 'Untaint'): NodeAction => {
    const base = { node, target: `node/${node}`, reason: 'IoSaturated', message: 'test' };
    return kind === 'Cordon' || kind === 'Uncordon' ? { ...base, kind } : { ...base, kind, taint: OUR_TAINT };
  };

  before(async function () {
    this.timeout(120_000);
    await applyRbac();
    dir = await mkdtemp(join(tmpdir(), 'operator-admission-nodes-'));
    operatorConfig = await writeTokenKubeconfig(
      dir,
      'operator',
      await createToken(OPERATOR.namespace, OPERATOR.name),
    );
    asOperator = loadKubeConfig(operatorConfig).makeApiClient(CoreV1Api);
    actuator = new KubeActuator(loadKubeConfig(operatorConfig));
    namespace = await createNamespace(cleanup);
    [node = ''] = (await createNodes(cleanup, 1)).names;
    // Someone else's taint, which the operator must leave as it is.
    const { spec } = await admin().readNode({ name: node });
    await admin().patchNode(
      { name: node, body: { spec: { taints: [...(spec?.taints ?? []), FOREIGN_TAINT] } } },
      mergePatch,
    );
    let probes = 0; // a new value each time: a repeated probe that got through changes nothing
    await policyInForce(POLICY, () =>
      patchNode({ metadata: { labels: { 'team.example/probe': String(++probes) } } }),
    );
  });

  after(async function () {
    this.timeout(60_000);
    await cleanup.run();
    await rm(dir, { recursive: true, force: true });
  });

  it('lets the operator cordon and taint a node with its stamps, and give both back exactly', async () => {
    const stamps: NodeStamps = {
      policy: 'it-admission',
      since: new Date(),
      reason: 'IoSaturated',
      cordoned: true,
      taint: OUR_TAINT,
    };
    await patchFresh([action('Cordon'), action('Taint')], stamps);
    const held = await admin().readNode({ name: node });
    expect(held.spec?.unschedulable, 'cordoned').to.equal(true);
    expect(held.spec?.taints).to.deep.include(OUR_TAINT);
    expect(held.metadata?.annotations?.[STAMP.policy], 'stamped').to.equal('it-admission');

    await patchFresh([action('Untaint'), action('Uncordon')], undefined);
    const after = await viewOfNode();
    expect(after.unschedulable, 'uncordoned').to.equal(false);
    expect(after.stamps, 'stamps removed').to.equal(undefined);
    // The node lifecycle controller's own taints (unschedulable, not-ready) come and go in its time; someone else's
    // stays, and ours is gone.
    expect(after.taints, 'the foreign taint kept').to.deep.include(FOREIGN_TAINT);
    expect(
      after.taints.filter((t) => t.key.startsWith('sandbox.remediator.io/')),
      'ours removed',
    ).to.deep.equal([]);
  });

  it('refuses a node label, a foreign taint, a NoExecute taint, removing a taint not its own, another spec field', async () => {
    // Each refused patch carries the whole list: taken once the node lifecycle controller is done with the previous
    // test's cordon, so that its own taints do not change under the patches.
    const taints = await eventually('no taint of the node lifecycle controller', async () => {
      const now = (await viewOfNode()).taints;
      return now.some((t) => t.key.startsWith('node.kubernetes.io/')) ? undefined : now;
    });
    const refusals = [
      await refused(() =>
        patchNode({ metadata: { labels: { 'node-role.kubernetes.io/control-plane': '' } } }),
      ),
      await refused(() =>
        patchNode({ spec: { taints: [...taints, { key: 'example.com/drain', effect: 'NoSchedule' }] } }),
      ),
      await refused(() =>
        patchNode({ spec: { taints: [...taints, { ...OUR_TAINT, effect: 'NoExecute' }] } }),
      ),
      await refused(() => patchNode({ spec: { taints: taints.filter((t) => t.key !== FOREIGN_TAINT.key) } })),
      await refused(() => patchNode({ spec: { providerID: 'kwok://elsewhere' } })),
      await refused(() => patchNode({ metadata: { annotations: { 'team.example/owner': 'someone' } } })),
    ];
    expect(refusals).to.deep.equal([
      denied(
        'the operator may change only annotations under sandbox.remediator.io/ in the metadata of a Node, not metadata.labels',
      ),
      denied(
        'the operator may add or remove only taints under sandbox.remediator.io/, not example.com/drain:NoSchedule',
      ),
      denied(
        'the operator may add only NoSchedule or PreferNoSchedule taints, not sandbox.remediator.io/io-pressure:NoExecute',
      ),
      denied(
        'the operator may add or remove only taints under sandbox.remediator.io/, not dedicated:NoSchedule',
      ),
      denied(
        'the operator may change only spec.unschedulable and spec.taints of a Node, not spec.providerID',
      ),
      denied('the operator may change only annotations under sandbox.remediator.io/, not team.example/owner'),
    ]);
  });

  it('lets the operator lift its own scheduling gate and write its annotations on a pod, and nothing else', async () => {
    const created = await admin().createNamespacedPod({
      namespace,
      body: {
        metadata: { name: 'gated', labels: { app: 'gated' } },
        spec: {
          schedulingGates: [{ name: PACING_GATE }, { name: OTHER_GATE }],
          containers: [{ name: 'app', image: 'registry.local/app:1' }],
        },
      },
    });
    const patchPod = (body: object, strategy = mergePatch) =>
      asOperator.patchNamespacedPod({ namespace, name: 'gated', body }, strategy);
    const refusals = [
      await refused(() => patchPod({ metadata: { labels: { app: 'other' } } })),
      await refused(() =>
        patchPod([{ op: 'add', path: '/spec/tolerations/-', value: { operator: 'Exists' } }], jsonPatch),
      ),
      await refused(() =>
        patchPod(
          [{ op: 'replace', path: '/spec/containers/0/image', value: 'evil.example/miner:1' }],
          jsonPatch,
        ),
      ),
      await refused(() => patchPod({ metadata: { annotations: { 'team.example/owner': 'someone' } } })),
      await refused(() =>
        patchPod(
          [{ op: 'replace', path: '/spec/schedulingGates', value: [{ name: PACING_GATE }] }],
          jsonPatch,
        ),
      ),
    ];
    expect(refusals).to.deep.equal([
      denied(
        'the operator may change only annotations under sandbox.remediator.io/ in the metadata of a Pod, not metadata.labels',
      ),
      denied('the operator may change only spec.schedulingGates of a Pod, not spec.tolerations'),
      denied('the operator may change only spec.schedulingGates of a Pod, not spec.containers'),
      denied('the operator may change only annotations under sandbox.remediator.io/, not team.example/owner'),
      denied('the operator may only remove its own scheduling gate (sandbox.remediator.io/paced) from a Pod'),
    ]);

    await patchPod({ metadata: { annotations: { 'sandbox.remediator.io/note': 'ours' } } });
    const lifted = await actuator.releaseGate({
      namespace,
      name: 'gated',
      uid: created.metadata!.uid!,
      gates: [PACING_GATE, OTHER_GATE],
    });
    expect(lifted, 'lifted').to.equal(true);
    const pod = await admin().readNamespacedPod({ namespace, name: 'gated' });
    expect(pod.spec?.schedulingGates).to.deep.equal([{ name: OTHER_GATE }]);
    expect(pod.metadata?.annotations?.['sandbox.remediator.io/note']).to.equal('ours');
  });

  it('lets the operator evict a pod through the Eviction API, and never delete one', async () => {
    const created = await admin().createNamespacedPod({
      namespace,
      body: {
        metadata: { name: 'evicted' },
        spec: { nodeName: node, containers: [{ name: 'app', image: 'registry.local/app:1' }] },
      },
    });
    const deleted = await refused(() => asOperator.deleteNamespacedPod({ namespace, name: 'evicted' }));
    expect(deleted).to.contain('cannot delete resource "pods"');
    const outcome = await actuator.evict({ namespace, name: 'evicted', uid: created.metadata!.uid! });
    expect(outcome.result).to.equal('Evicted');
    await eventually('the evicted pod deleted', async () => {
      const pod = await admin()
        .readNamespacedPod({ namespace, name: 'evicted' })
        .catch(() => undefined);
      return pod === undefined || pod.metadata?.deletionTimestamp !== undefined;
    });
  });

  it('reads no Secret or ConfigMap, and creates no webhook configuration, not even of its own name', async () => {
    const reads = [
      await refused(() => asOperator.listSecretForAllNamespaces()),
      await refused(() => asOperator.readNamespacedSecret({ namespace: 'kube-system', name: 'any' })),
      await refused(() => asOperator.listConfigMapForAllNamespaces()),
      await refused(() =>
        asOperator.readNamespacedConfigMap({ namespace: 'kube-system', name: 'kube-root-ca.crt' }),
      ),
    ];
    expect(reads.map((r) => /cannot (\w+) resource "(\w+)"/.exec(r)?.slice(1).join(' '))).to.deep.equal([
      'list secrets',
      'get secrets',
      'list configmaps',
      'get configmaps',
    ]);
    const webhooks = loadKubeConfig(operatorConfig).makeApiClient(AdmissionregistrationV1Api);
    for (const name of ['sandbox-remediator-pacing', 'intercept-everything']) {
      const created = await refused(() =>
        webhooks.createMutatingWebhookConfiguration({ body: { metadata: { name }, webhooks: [] } }),
      );
      expect(created, name).to.contain('cannot create resource "mutatingwebhookconfigurations"');
    }
    const nodes = await refused(() => asOperator.createNode({ body: { metadata: { name: 'it-evil' } } }));
    expect(nodes).to.contain('cannot create resource "nodes"');
  });

  it("fills in only the address, CA and arming of the shipped webhook configuration, keeps the admin's conditions, and reports it missing", async () => {
    const operatorKc = loadKubeConfig(operatorConfig);
    await deleteWebhookConfig();
    const ca = generateServingCert('127.0.0.1').caPem;
    const url = 'https://127.0.0.1:9/mutate-pods';
    const armed = "request.namespace in ['team-a', 'team-b']";
    expect(await registerPacingWebhook(operatorKc, { url, caPem: ca, armed })).to.deep.equal({
      registered: false,
      why: 'the MutatingWebhookConfiguration sandbox-remediator-pacing is not installed (kubectl apply -k config/webhook)',
    });
    await applyWebhookConfig();
    cleanup.add(() => deleteWebhookConfig());
    let probes = 0; // as above: a new value each time
    const webhooks = operatorKc.makeApiClient(AdmissionregistrationV1Api);
    const patchHook = (body: object[]) =>
      webhooks.patchMutatingWebhookConfiguration({ name: 'sandbox-remediator-pacing', body }, jsonPatch);
    await policyInForce('sandbox-remediator-operator-webhook', () =>
      patchHook([{ op: 'add', path: '/webhooks/0/timeoutSeconds', value: (++probes % 9) + 1 }]),
    );
    await kubectl(['apply', '-k', join(REPO_ROOT, 'config/webhook')]); // the probes' timeoutSeconds undone
    const admins = { name: 'team.example/not-batch', expression: '!has(object.metadata.labels) || true' };
    const added = await kubectl([
      'patch',
      'mutatingwebhookconfiguration',
      'sandbox-remediator-pacing',
      '--type=json',
      `-p=${JSON.stringify([{ op: 'add', path: '/webhooks/0/matchConditions/-', value: admins }])}`,
    ]);
    expect(added.code, added.stderr).to.equal(0);

    expect(await registerPacingWebhook(operatorKc, { url, caPem: ca, armed })).to.deep.equal({
      registered: true,
      changed: true,
    });
    expect(
      await registerPacingWebhook(operatorKc, { url, caPem: ca, armed }),
      'unchanged: no write',
    ).to.deep.equal({
      registered: true,
      changed: false,
    });
    const hook = (
      await kubeConfig().makeApiClient(AdmissionregistrationV1Api).readMutatingWebhookConfiguration({
        name: 'sandbox-remediator-pacing',
      })
    ).webhooks![0]!;
    expect(hook.clientConfig).to.deep.equal({ url, caBundle: Buffer.from(ca).toString('base64') });
    expect(hook.failurePolicy, 'as shipped').to.equal('Ignore');
    expect(hook.matchConditions, "ours armed, the admin's kept").to.deep.equal([
      { name: 'sandbox.remediator.io/armed', expression: armed },
      admins,
    ]);

    const denyHook = (message: string) => deniedBy('sandbox-remediator-operator-webhook', message);
    expect(await typeCheckWarnings('sandbox-remediator-operator-webhook')).to.deep.equal([]);
    const refusals = [
      await refused(() =>
        patchHook([
          {
            op: 'replace',
            path: '/webhooks/0/clientConfig/url',
            value: 'https://evil.example:443/mutate-pods',
          },
        ]),
      ),
      await refused(() =>
        patchHook([{ op: 'replace', path: '/webhooks/0/rules/0/resources', value: ['secrets'] }]),
      ),
      await refused(() => patchHook([{ op: 'replace', path: '/webhooks/0/failurePolicy', value: 'Fail' }])),
      await refused(() => patchHook([{ op: 'remove', path: '/webhooks/0/namespaceSelector' }])),
      await refused(() =>
        patchHook([{ op: 'add', path: '/metadata/labels/team.example~1owner', value: 'someone' }]),
      ),
      await refused(() =>
        patchHook([
          {
            op: 'replace',
            path: '/webhooks/0/matchConditions/0/expression',
            value: "object.kind == 'Secret'",
          },
        ]),
      ),
      await refused(() => patchHook([{ op: 'remove', path: '/webhooks/0/matchConditions/1' }])),
    ];
    expect(refusals).to.deep.equal([
      denyHook(
        'the operator may register only https://<a loopback or private address, or a Service name>:<port>/mutate-pods, not https://evil.example:443/mutate-pods',
      ),
      denyHook(
        'the operator may change only clientConfig.url, clientConfig.caBundle and its matchCondition of its webhook, not webhooks[0].rules',
      ),
      denyHook(
        'the operator may change only clientConfig.url, clientConfig.caBundle and its matchCondition of its webhook, not webhooks[0].failurePolicy',
      ),
      denyHook(
        'the operator may change only clientConfig.url, clientConfig.caBundle and its matchCondition of its webhook, not webhooks[0].namespaceSelector',
      ),
      denyHook('the operator may not change the metadata of a webhook configuration: metadata.labels'),
      denyHook(
        "the operator's matchCondition sandbox.remediator.io/armed must be one, and false, true or request.namespace in ['<namespace>', ...]",
      ),
      denyHook(
        "the operator may change only its own matchCondition (sandbox.remediator.io/armed), not the admin's",
      ),
    ]);
    const deleted = await refused(() =>
      webhooks.deleteMutatingWebhookConfiguration({ name: 'sandbox-remediator-pacing' }),
    );
    expect(deleted).to.contain('cannot delete resource "mutatingwebhookconfigurations"');
  });

  it("lets the operator set and remove its own Node condition, and change nothing else in a Node's status", async () => {
    const smp = setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch);
    const patchStatus = (body: object) => asOperator.patchNodeStatus({ name: node, body }, smp);
    let probes = 0; // a new value each time, as above
    await policyInForce(NODE_STATUS_POLICY, () =>
      patchStatus({ status: { capacity: { 'example.com/probe': String(++probes) } } }),
    );
    expect(await typeCheckWarnings(NODE_STATUS_POLICY)).to.deep.equal([]);
    const now = toApiTime(new Date());
    const condition = {
      status: 'True' as const,
      reason: NODE_CONDITION_REASONS.ioSaturated,
      message: '1 pod stuck',
      lastTransitionTime: now,
      lastHeartbeatTime: now,
    };
    const conditionsOf = async () => (await viewOfNode()).conditions.map((c) => `${c.type}=${c.status}`);
    const before = await conditionsOf();
    expect(await actuator.setNodeCondition(node, condition)).to.be.a('string');
    const own = (await viewOfNode()).ownCondition;
    expect(own).to.deep.equal(condition);
    expect(await conditionsOf()).to.have.members([...before, `${NODE_CONDITION_TYPE}=True`]);

    const denyStatus = (message: string) => deniedBy(NODE_STATUS_POLICY, message);
    const refusals = [
      await refused(() => patchStatus({ status: { conditions: [{ type: 'Ready', status: 'False' }] } })),
      await refused(() =>
        patchStatus({ status: { conditions: [{ type: 'DiskPressure', $patch: 'delete' }] } }),
      ),
      await refused(() => patchStatus({ status: { capacity: { cpu: '999' } } })),
      await refused(() => patchStatus({ metadata: { labels: { 'team.example/via-status': 'yes' } } })),
    ];
    expect(refusals).to.deep.equal([
      denyStatus(
        'the operator may add, change or remove only the condition SandboxCreationDegraded, not Ready',
      ),
      denyStatus(
        'the operator may add, change or remove only the condition SandboxCreationDegraded, not DiskPressure',
      ),
      denyStatus(
        "the operator may change only its own condition (SandboxCreationDegraded) in a Node's status, not status.capacity",
      ),
      denyStatus('the operator may not change the metadata of a Node through its status: metadata.labels'),
    ]);

    expect(await actuator.setNodeCondition(node, null)).to.be.a('string');
    expect((await viewOfNode()).ownCondition).to.equal(undefined);
    expect(await conditionsOf()).to.deep.equal(before);
  });

  it('changes nothing for anyone else: an admin labels the node and adds any taint', async () => {
    const labelled = await kubectl(['label', 'node', node, 'team.example/owner=shop', '--overwrite']);
    expect(labelled.code, labelled.stderr).to.equal(0);
    const tainted = await kubectl(['taint', 'node', node, 'example.com/maintenance=true:NoExecute']);
    expect(tainted.code, tainted.stderr).to.equal(0);
  });
});
