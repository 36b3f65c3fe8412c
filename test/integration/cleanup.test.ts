// `sandbox-remediator cleanup`, the uninstall path, on the real cluster and as a user runs it (its own process): the
// operator (leader-elected, safety.nodeLease, a taint, rollout throttling) cordons and taints a saturated node, writes
// its condition, takes the node lease and pauses a rollout feeding it; a pod is gated as the pacing webhook gates one.
// Then the operator dies (kill -9, its leader Lease left fresh) and others cordon, taint, condition and lease too.
// Cleanup refuses while the Lease is fresh, its dry run changes nothing, and once the Lease expired it undoes all of
// ours and nothing of theirs; SandboxHealths stay with --keep-health and go on the next run.
import { runCli, type CliRun } from '../support/cli.js';
import {
  CoordinationV1Api,
  PatchStrategy,
  setHeaderOptions,
  V1MicroTime,
  type V1Node,
} from '@kubernetes/client-node';
import { expect } from 'chai';
import {
  NODE_CONDITION_TYPE,
  PACING_GATE,
  PACING_STAMP,
  ROLLOUT_STAMP,
  STAMP,
} from '../../src/api/v1alpha1/index.js';
import { isNotFound } from '../../src/kube/errors.js';
import { api, Cleanup, eventually, KUBECONFIG, kubectl, uniqueName } from '../support/cluster.js';
import { applyCrds, applyRbac, OperatorProcess } from '../support/operator-process.js';
import {
  createRolloutDeployment,
  isComplete,
  pausedBy,
  readDeployment,
  restartRollout,
} from '../support/rollouts.js';
import { saturablePool } from '../support/saturable-pool.js';
import { isRunning, podsOf, readNode, startIncident } from '../support/workloads.js';

const LEASES = 'medik8s-leases';
const OPERATOR_NAMESPACE = 'sandbox-remediator-system';
const ELECTION_ID = uniqueName('cleanup-it');
const OUR_TAINT = { key: 'sandbox.remediator.io/io-saturated', effect: 'NoSchedule' };
const THEIR_TAINT = { key: 'example.com/maintenance', value: 'disk', effect: 'NoSchedule' };
const THEIR_CONDITION = 'ExampleDiskProblem';
const leases = () => api().kc.makeApiClient(CoordinationV1Api);

/** `sandbox-remediator cleanup ARGS` against the local cluster, naming this test's leader Lease. */
const cleanupCli = (args: string[]): Promise<CliRun> =>
  runCli([
    'cleanup',
    `--kubeconfig=${KUBECONFIG}`,
    `--operator-namespace=${OPERATOR_NAMESPACE}`,
    `--leader-election-id=${ELECTION_ID}`,
    ...args,
  ]);

const readLease = async (namespace: string, name: string) => {
  try {
    return await leases().readNamespacedLease({ name, namespace });
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
};
/** The annotations of ours among `keys` (the incident injector's own is not the operator's). */
const ours = (annotations: Record<string, string> | undefined, keys: Record<string, string>) =>
  Object.keys(annotations ?? {}).filter((k) => Object.values(keys).includes(k));
const healthExists = async (name: string) => (await kubectl(['get', 'sandboxhealth', name])).code === 0;
/** The node lifecycle controller's own taints (node.kubernetes.io/unschedulable follows a cordon) are nobody's here. */
const isControllers = (key: string) => key.startsWith('node.kubernetes.io/');
const conditionTypes = (node: V1Node) => (node.status?.conditions ?? []).map((c) => c.type);

describe('sandbox-remediator cleanup on the real cluster', function () {
  const cleanup = new Cleanup();
  const operator = new OperatorProcess();
  let createdLeaseNamespace = false;
  before(async function () {
    this.timeout(180_000);
    await applyCrds();
    await applyRbac();
    createdLeaseNamespace = (await kubectl(['create', 'namespace', LEASES])).code === 0;
  });
  after(async function () {
    this.timeout(90_000);
    if (operator.isRunning()) await operator.stop();
    await leases()
      .deleteNamespacedLease({ name: ELECTION_ID, namespace: OPERATOR_NAMESPACE })
      .catch(() => undefined);
    await cleanup.run();
    if (createdLeaseNamespace) await kubectl(['delete', 'namespace', LEASES, '--wait=false']);
  });

  it('refuses while the leader Lease is fresh, changes nothing in a dry run, then undoes all of ours and nothing of theirs', async function () {
    this.timeout(420_000);
    // The operator leads, with a policy that cordons, taints, takes the node lease and throttles rollouts.
    await operator.start(
      ['--leader-elect', `--leader-election-id=${ELECTION_ID}`, `--operator-namespace=${OPERATOR_NAMESPACE}`],
      { env: { POD_NAME: 'cleanup-it' } },
    );
    const [first] = await saturablePool(
      cleanup,
      {
        remediation: {
          evictStuckPods: false,
          taint: OUR_TAINT,
          throttleRollouts: { maxConcurrentRollouts: 5 },
        },
        safety: { maxUnhealthyNodes: 1, cooldownSeconds: 5, nodeLease: true },
      },
      { prefix: 'it-cleanup' },
    );
    const { namespace, pool, sick, policy, proc } = first!;
    const other = `${pool}-n1`;
    await createRolloutDeployment(cleanup, namespace, 'web', pool, sick);
    await eventually('web available', async () => isComplete(await readDeployment(namespace, 'web')), {
      timeoutMs: 60_000,
    });
    await startIncident(cleanup, sick);
    await restartRollout(namespace, 'web');
    await eventually('the new pod stuck on the sick node', async () =>
      (await podsOf(namespace, 'web')).some((pod) => pod.spec?.nodeName === sick && !isRunning(pod)),
    );
    await proc.setPressure('load');
    await eventually(
      'the operator cordoned and tainted the node, wrote its condition, took the lease and paused web',
      async () => {
        const node = await readNode(sick);
        const deployment = await readDeployment(namespace, 'web');
        const lease = await readLease(LEASES, `node-${sick}`);
        return (
          node.spec?.unschedulable === true &&
          (node.spec.taints ?? []).some((t) => t.key === OUR_TAINT.key) &&
          conditionTypes(node).includes(NODE_CONDITION_TYPE) &&
          lease?.spec?.holderIdentity === `sandbox-remediator-${policy}` &&
          pausedBy(deployment) === policy
        );
      },
      { timeoutMs: 90_000 },
    );
    expect(await healthExists(sick), 'its SandboxHealth').to.equal(true);

    // It dies without releasing its leader Lease; a pod is gated as the pacing webhook gates one (ours beside another's).
    operator.kill();
    await operator.exited;
    const { core } = api();
    for (const [name, gates] of [
      ['gated-ours', [PACING_GATE]],
      ['gated-both', ['example.com/quota', PACING_GATE]],
    ] as const)
      await core.createNamespacedPod({
        namespace,
        body: {
          metadata: { name, annotations: { [PACING_STAMP.policy]: policy } },
          spec: {
            schedulingGates: gates.map((g) => ({ name: g })),
            nodeSelector: { 'sandbox.remediator.io/test-pool': pool },
            containers: [{ name: 'app', image: 'registry.local/app:1' }],
          },
        },
      });
    // Others' changes: a taint and a condition on our node; a cordon, a taint and NodeHealthCheck's lease on another.
    const theirs = await theirChanges(sick, other);

    const refused = await cleanupCli([]);
    expect(refused.code, refused.stdout + refused.stderr).to.equal(2);
    expect(refused.stderr).to.match(
      new RegExp(
        `^cleanup: the operator's leader Lease ${OPERATOR_NAMESPACE}/${ELECTION_ID} is held by cleanup-it_\\w+ \\(renewed \\d+ s ago, lease 15 s\\).*--force`,
      ),
    );
    const before = await snapshot(namespace, sick, other);
    expect(before.sick.unschedulable, 'nothing changed by the refusal').to.equal(true);

    const dry = await cleanupCli(['--dry-run', '--force']);
    expect(dry.code, dry.stderr).to.equal(0);
    expect(dry.stdout).to.include(
      `The leader Lease ${OPERATOR_NAMESPACE}/${ELECTION_ID} is held by cleanup-it_`,
    );
    expect(dry.stdout).to.include('Dry run: nothing is changed');
    for (const line of [
      `Would release pod/${namespace}/gated-ours: scheduling gate ${PACING_GATE} lifted (set for policy ${policy})`,
      `Would release deployment/${namespace}/web: spec.paused reset, stamps of policy ${policy} removed`,
      `Would release node/${sick}: taint ${OUR_TAINT.key}=true:NoSchedule removed, uncordoned, stamps of policy ${policy} removed`,
      `Would clear node/${sick}: condition ${NODE_CONDITION_TYPE}=True (IoSaturated) removed`,
      `Would delete lease/${LEASES}/node-${sick}: deleted (holder sandbox-remediator-${policy})`,
      `Would delete sandboxhealth/${sick}: deleted`,
      `Left alone pod/${namespace}/gated-both: scheduling gates example.com/quota are not ours`,
      `Left alone node/${other}: cordoned, with no stamp of ours`,
      `Left alone lease/${LEASES}/node-${other}: held by NodeHealthCheck, not by us`,
      `Left alone sandboxpolicy/${policy}: yours`,
    ])
      expect(dry.stdout, dry.stdout).to.include(line);
    expect(await snapshot(namespace, sick, other), 'the dry run changed nothing').to.deep.equal(before);

    // Once the Lease has expired (15 s, and the 10 s allowed for clocks), no --force is needed.
    await eventually(
      'the leader Lease expired',
      async () => {
        const renewed = (await readLease(OPERATOR_NAMESPACE, ELECTION_ID))?.spec?.renewTime;
        return renewed !== undefined && Date.now() - new Date(renewed).getTime() > 26_000;
      },
      { timeoutMs: 60_000 },
    );
    const real = await cleanupCli(['--keep-health']);
    expect(real.code, real.stdout + real.stderr).to.equal(0);
    expect(real.stdout).to.match(
      /^No operator leads: the leader Lease \S+ is expired: last renewed \d+ s ago by cleanup-it_/,
    );
    expect(real.stdout).to.include(
      `Released node/${sick}: taint ${OUR_TAINT.key}=true:NoSchedule removed, uncordoned`,
    );
    expect(real.stdout).to.include(`Left alone sandboxhealth/${sick}: kept (--keep-health)`);

    const after = await snapshot(namespace, sick, other);
    expect(after.sick).to.deep.equal({
      unschedulable: false,
      taints: [theirs.taint],
      stamps: [],
      conditions: before.sick.conditions.filter((c) => c !== NODE_CONDITION_TYPE),
      lease: undefined,
    });
    expect(after.sick.conditions).to.include(THEIR_CONDITION);
    expect(after.other, "another's node exactly as it was").to.deep.equal(before.other);
    expect(after.web).to.deep.equal({ paused: false, stamps: [] });
    expect(after.gates).to.deep.equal({ 'gated-ours': [], 'gated-both': ['example.com/quota'] });
    expect(after.healths, 'kept with --keep-health').to.deep.equal(before.healths);

    // The next run finds nothing else of ours, and the SandboxHealths go.
    const again = await cleanupCli([]);
    expect(again.code, again.stdout + again.stderr).to.equal(0);
    expect(again.stdout).to.include(`Deleted sandboxhealth/${sick}: deleted`);
    expect(again.stdout).to.not.match(new RegExp(`(Released|Cleared) node/${sick}`));
    expect((await snapshot(namespace, sick, other)).healths).to.deep.equal([]);
    const nodeAfter = await readNode(sick);
    expect(nodeAfter.metadata?.annotations ?? {}).to.not.have.property(STAMP.policy);
  });

  /** Cordons, taints, conditions and leases of others, on our node and on another of the pool. */
  async function theirChanges(sick: string, other: string) {
    const taintOn = async (node: string, cordon: boolean) => {
      const taints = [...((await readNode(node)).spec?.taints ?? []), THEIR_TAINT];
      await api().core.patchNode(
        { name: node, body: { spec: { taints, ...(cordon ? { unschedulable: true } : {}) } } },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
    };
    await taintOn(sick, false);
    await taintOn(other, true);
    for (const node of [sick, other]) {
      const patched = await kubectl([
        'patch',
        'node',
        node,
        '--subresource=status',
        '--type=strategic',
        '-p',
        JSON.stringify({
          status: {
            conditions: [{ type: THEIR_CONDITION, status: 'True', reason: 'Test', message: 'theirs' }],
          },
        }),
      ]);
      expect(patched.code, patched.stderr).to.equal(0);
    }
    const now = new V1MicroTime(new Date().toISOString());
    await leases().createNamespacedLease({
      namespace: LEASES,
      body: {
        metadata: { name: `node-${other}` },
        spec: {
          holderIdentity: 'NodeHealthCheck',
          leaseDurationSeconds: 600,
          acquireTime: now,
          renewTime: now,
        },
      },
    });
    cleanup.add(() => leases().deleteNamespacedLease({ name: `node-${other}`, namespace: LEASES }));
    return { taint: THEIR_TAINT };
  }

  /** What cleanup may change, of our objects and of theirs (not resourceVersions: kwok's heartbeats change those). */
  async function snapshot(namespace: string, sick: string, other: string) {
    const nodeState = async (name: string) => {
      const node = await readNode(name);
      const lease = await readLease(LEASES, `node-${name}`);
      return {
        unschedulable: node.spec?.unschedulable === true,
        taints: (node.spec?.taints ?? [])
          .filter((t) => !isControllers(t.key))
          .map(({ key, value, effect }) => ({ key, ...(value ? { value } : {}), effect })),
        stamps: ours(node.metadata?.annotations, STAMP),
        conditions: conditionTypes(node).sort(),
        lease: lease && { holder: lease.spec?.holderIdentity, version: lease.metadata?.resourceVersion },
      };
    };
    const web = await readDeployment(namespace, 'web');
    const gates: Record<string, string[]> = {};
    for (const name of ['gated-ours', 'gated-both'])
      gates[name] = (
        (await api().core.readNamespacedPod({ name, namespace })).spec?.schedulingGates ?? []
      ).map((g) => g.name);
    const healths = [];
    for (const name of [sick, other]) if (await healthExists(name)) healths.push(name);
    return {
      sick: await nodeState(sick),
      other: await nodeState(other),
      web: { paused: web.spec?.paused === true, stamps: ours(web.metadata?.annotations, ROLLOUT_STAMP) },
      gates,
      healths,
    };
  }
});
