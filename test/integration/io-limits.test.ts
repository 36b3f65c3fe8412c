// The culprit limited in place on the real cluster (issue 44): a real agent with --allow-io-limits reads a crafted
// /proc and cgroup v2 tree in which one pod saturates the disk; the operator wants a limit on it in its node's
// SandboxHealth (spec.ioLimits), the agent writes it into the pod's io.max and reports it, and once the disk is quiet
// and the pod wants no more, the limit is lifted and io.max holds no limit again. The pod is never moved.
import type { V1Pod } from '@kubernetes/client-node';
import { expect } from 'chai';
import {
  IO_LIMIT_STAMP,
  IO_LIMIT_UNSTAMPED,
  type IoLimitReport,
  type WantedIoLimitSpec,
} from '../../src/api/v1alpha1/index.js';
import { KubeActuator } from '../../src/kube/actuator.js';
import { TerminalError } from '../../src/runtime/controller.js';
import { ioLimitStamps, ioMaxLine } from '../../src/policy/io-limit-stamp.js';
import type { Qos } from '../support/cgroup-tree.js';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  hack,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import { MeasuredNode } from '../support/measured-node.js';
import { useOperator } from '../support/operator-process.js';
import { FAST_IO } from '../support/proc-root.js';
import { applyPolicy } from '../support/resources.js';
import { isRunning, podsOf, startIncident, waitForRunning } from '../support/workloads.js';

const SATURATING_IO = { ...FAST_IO, thresholds: { ...FAST_IO.thresholds, diskBusyPercent: 85 } };
const MIB = 1024 * 1024;
const WISH: WantedIoLimitSpec = {
  podUid: '',
  pod: '',
  device: '8:0',
  limit: { wbps: 4 * MIB },
  policy: 'p',
  since: '2026-12-06T10:00:00Z',
};
const poolSelector = (pool: string) => ({ matchLabels: { 'sandbox.remediator.io/test-pool': pool } });
const qosOf = (pod: V1Pod) => (pod.status?.qosClass ?? 'BestEffort') as Qos;

interface HealthSpecAndReport {
  spec?: { ioLimits?: WantedIoLimitSpec[] };
  status?: { ioLimits?: IoLimitReport };
}

async function readHealth(node: string): Promise<HealthSpecAndReport> {
  const got = await kubectl(['get', 'sandboxhealth', node, '-o', 'json']);
  return got.code === 0 ? (JSON.parse(got.stdout) as HealthSpecAndReport) : {};
}

describe('the culprit limited in place on the real cluster', function () {
  // Under its own ServiceAccount, with config/rbac applied: RBAC's patch on SandboxHealths, and the admission policy
  // that lets no one else add a limit (config/rbac/io-limits-admission-policy.yaml).
  const operator = useOperator([], { serviceAccount: 'io-limits' });
  const cleanup = new Cleanup();
  afterEach(() => cleanup.run());

  it('limits the pod that saturates the disk in its io.max, verified by the agent, and lifts it once the disk is quiet', async function () {
    this.timeout(240_000);
    const namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 3);
    const sick = names[0]!;
    const policy = uniqueName('it-limit');
    await applyPolicy(cleanup, policy, {
      nodeSelector: poolSelector(pool),
      detection: { stuckThresholdSeconds: 3 },
      ioPressure: SATURATING_IO,
      // No step within the test; a lift soon after the pod is quiet.
      remediation: { limitIo: { sustainSeconds: 600, recoverySeconds: 5, cooldownSeconds: 5 } },
      safety: { maxUnhealthyNodes: 1, minSchedulableNodes: 1, cooldownSeconds: 5 },
    });
    const { apps } = api();
    const deployment = async (name: string) => {
      await apps.createNamespacedDeployment({
        namespace,
        body: {
          metadata: { name },
          spec: {
            replicas: 1,
            selector: { matchLabels: { app: name } },
            template: {
              metadata: { labels: { app: name } },
              spec: {
                nodeSelector: { 'kubernetes.io/hostname': sick },
                terminationGracePeriodSeconds: 0,
                containers: [{ name: 'app', image: 'registry.local/app:1' }],
              },
            },
          },
        },
      });
      cleanup.add(() => apps.deleteNamespacedDeployment({ name, namespace }).catch(() => undefined));
    };
    await deployment('db');
    const [db] = await waitForRunning(namespace, 'db', 1);
    const uid = db!.metadata!.uid!;

    const node = new MeasuredNode(sick, cleanup, 'v2', true);
    await node.start();
    node.pod(uid, qosOf(db!), { percent: 60 }); // 60 MiB/s and 600 writes/s of the crafted disk's 100 MiB/s
    node.runtimeLoad({ percent: 3 });
    await startIncident(cleanup, sick);
    await deployment('web');
    await eventually('the web pod stuck on the sick node', async () =>
      (await podsOf(namespace, 'web')).some((p) => !isRunning(p)),
    );
    await node.pressure('load');

    // The operator's wish, then the agent's write and report of it.
    const wanted = await eventually(
      'a limit wanted on the culprit',
      async () => (await readHealth(sick)).spec?.ioLimits?.find((l) => l.podUid === uid),
      { timeoutMs: 90_000 },
    ).catch((err: unknown) => {
      const trail = operator.logs
        .filter((l) => l.level !== 'debug')
        .map((l) => JSON.stringify(l))
        .slice(-30);
      throw new Error(`${String(err)}\n${trail.join('\n')}`);
    });
    expect(wanted).to.include({ device: '254:0', pod: `${namespace}/${db!.metadata!.name}` });
    // Half of what it did when limited (startPercent 50): about 30 MiB/s written, measured over the agent's window.
    expect(Number(wanted.limit.wbps)).to.be.within(20 * MIB, 40 * MIB);
    expect(wanted.limit.rbps, 'no reads: the floor').to.equal(MIB);
    const applied = await eventually(
      'the agent reports the limit applied',
      async () => (await readHealth(sick)).status?.ioLimits?.applied?.find((a) => a.podUid === uid),
      { timeoutMs: 30_000 },
    );
    expect(applied.wanted).to.deep.equal(wanted.limit);
    expect(node.ioMax(uid, qosOf(db!))).to.match(new RegExp(`^254:0 .*wbps=${wanted.limit.wbps}\\b`));
    expect(
      (await kubectl(['get', 'sandboxhealth', sick])).stdout,
      'kubectl get sbh: the limited pod',
    ).to.contain(`${namespace}/${db!.metadata!.name}`);
    // The pod stamped: whose limit, io.max's line, since when (kubectl describe pod shows them).
    const stamps = async () =>
      (await api().core.readNamespacedPod({ namespace, name: db!.metadata!.name! })).metadata?.annotations ??
      {};
    expect(await stamps()).to.include({
      [IO_LIMIT_STAMP.policy]: policy,
      [IO_LIMIT_STAMP.limit]: ioMaxLine('254:0', wanted.limit),
      [IO_LIMIT_STAMP.since]: wanted.since,
      [IO_LIMIT_STAMP.uid]: uid,
    });
    await eventually('the IoLimited Event on the pod', async () =>
      (await kubectl(['describe', 'pod', '-n', namespace, db!.metadata!.name!])).stdout.includes('IoLimited'),
    );

    // The disk quiet and the pod wanting no more: the limit is lifted, and io.max holds no limit again.
    const stopped = await hack('incident', ['stop', '--node', sick]);
    expect(stopped.code, stopped.stderr).to.equal(0);
    node.pod(uid, qosOf(db!), { percent: 1 });
    await node.pressure('idle');
    await eventually(
      'the limit no longer wanted',
      async () => !(await readHealth(sick)).spec?.ioLimits?.length,
      {
        timeoutMs: 90_000,
      },
    );
    await eventually(
      'io.max without our limit',
      () => Promise.resolve(!/wbps=\d/.test(node.ioMax(uid, qosOf(db!)))),
      { timeoutMs: 30_000 },
    );
    await eventually('the IoLimitLifted Event on the pod', async () =>
      (await kubectl(['describe', 'pod', '-n', namespace, db!.metadata!.name!])).stdout.includes(
        'IoLimitLifted',
      ),
    );
    // The stamps go once the agent reports the limit lifted (io.max as it was, above).
    await eventually(
      'the stamps off',
      async () => Object.keys(await stamps()).every((k) => !k.startsWith('sandbox.remediator.io/io-')),
      { timeoutMs: 30_000 },
    );
    // Limited, never moved.
    expect((await podsOf(namespace, 'db')).map((p) => p.metadata?.uid)).to.deep.equal([uid]);
  });

  it("stamps only the pod of the uid (one made again under the name is left as it is, and said gone), and takes an admission policy's denial as refused for what it is", async function () {
    this.timeout(60_000);
    const namespace = await createNamespace(cleanup);
    const { core, kc } = api();
    const make = async () =>
      (
        await core.createNamespacedPod({
          namespace,
          body: {
            metadata: { name: 'db-0' },
            spec: { nodeName: 'nowhere', containers: [{ name: 'app', image: 'registry.local/app:1' }] },
          },
        })
      ).metadata!.uid!;
    const first = await make();
    const actuator = new KubeActuator(kc);
    const stamps = ioLimitStamps([{ ...WISH, podUid: first, pod: `${namespace}/db-0` }], first);
    expect(await actuator.stampPod({ namespace, name: 'db-0', uid: first }, stamps)).to.equal(true);
    const annotations = async () =>
      (await core.readNamespacedPod({ namespace, name: 'db-0' })).metadata?.annotations;
    expect(await annotations()).to.include(stamps);
    await core.deleteNamespacedPod({ namespace, name: 'db-0', gracePeriodSeconds: 0 });
    const second = await eventually('the pod made again', () => make().catch(() => undefined), {
      timeoutMs: 30_000,
    });
    expect(second).to.not.equal(first);
    expect(
      await actuator.stampPod({ namespace, name: 'db-0', uid: first }, IO_LIMIT_UNSTAMPED),
      'another pod',
    ).to.equal(false);
    expect(await actuator.stampPod({ namespace, name: 'db-1', uid: first }, stamps), 'no pod').to.equal(
      false,
    );
    expect(await annotations(), 'the new pod untouched').to.equal(undefined);

    // A cluster's own admission policy that denies the update: refused for what it is (TerminalError), which
    // IoLimitStamps keeps as stamps refused (not tried again for 5 minutes; the unit tests show the rest).
    const freeze = uniqueName('it-freeze');
    const vap = {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicy',
      metadata: { name: freeze },
      spec: {
        failurePolicy: 'Fail',
        matchConstraints: {
          resourceRules: [
            { apiGroups: [''], apiVersions: ['v1'], operations: ['UPDATE'], resources: ['pods'] },
          ],
        },
        // Forbidden (403), as a webhook's denial mostly is: refused for what it is all the same.
        validations: [{ expression: 'false', message: 'pods are frozen', reason: 'Forbidden' }],
      },
    };
    const binding = {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicyBinding',
      metadata: { name: freeze },
      spec: {
        policyName: freeze,
        validationActions: ['Deny'],
        matchResources: { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': namespace } } },
      },
    };
    cleanup.add(async () => {
      await kubectl([
        'delete',
        'validatingadmissionpolicybinding,validatingadmissionpolicy',
        freeze,
        '--ignore-not-found',
      ]);
    });
    const applied = await kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [vap, binding] }),
    );
    expect(applied.code, applied.stderr).to.equal(0);
    const pod = { namespace, name: 'db-0', uid: second };
    const secondStamps = ioLimitStamps([{ ...WISH, podUid: second, pod: `${namespace}/db-0` }], second);
    // Policies load asynchronously: the stamp goes through until this one is in force.
    const refused = await eventually(
      'the stamp refused by the policy',
      () =>
        actuator.stampPod(pod, secondStamps).then(
          () => undefined,
          (err: unknown) => (String(err).includes(freeze) ? err : undefined),
        ),
      { timeoutMs: 30_000 },
    );
    expect(refused).to.be.instanceOf(TerminalError);
    expect(String(refused)).to.contain('pods are frozen');
  });
});
