// `sandbox-remediator cleanup` lifts the IO limits (limitIo) through the agents, as an uninstall must: a real agent with
// --allow-io-limits holds a limit of ours in a pod's io.max (a crafted cgroup v2 tree), wanted in the node's
// SandboxHealth as only the operator's ServiceAccount may want one. Cleanup removes the wish first, the agent puts back
// what io.max held and reports it, and only then does cleanup delete the SandboxHealth, which holds that report, and
// take the IO-limit stamps off the pod.
import type { V1Pod } from '@kubernetes/client-node';
import { expect } from 'chai';
import { GROUP, VERSION, type IoLimitReport, type WantedIoLimitSpec } from '../../src/api/v1alpha1/index.js';
import { ioLimitStamps } from '../../src/policy/io-limit-stamp.js';
import type { Qos } from '../support/cgroup-tree.js';
import { runCli } from '../support/cli.js';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  KUBECONFIG,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import { MeasuredNode } from '../support/measured-node.js';
import { applyCrds, applyRbac } from '../support/operator-process.js';
import { waitForRunning } from '../support/workloads.js';

const OPERATOR = 'system:serviceaccount:sandbox-remediator-system:sandbox-remediator-operator';
const MIB = 1024 * 1024;
const qosOf = (pod: V1Pod) => (pod.status?.qosClass ?? 'BestEffort') as Qos;

interface HealthSpecAndReport {
  spec?: { ioLimits?: WantedIoLimitSpec[] };
  status?: { ioLimits?: IoLimitReport };
}

async function readHealth(node: string): Promise<HealthSpecAndReport | undefined> {
  const got = await kubectl(['get', 'sandboxhealth', node, '-o', 'json']);
  return got.code === 0 ? (JSON.parse(got.stdout) as HealthSpecAndReport) : undefined;
}

describe('sandbox-remediator cleanup lifts the IO limits through the agents', function () {
  const cleanup = new Cleanup();
  before(async function () {
    this.timeout(120_000);
    await applyCrds();
    await applyRbac();
  });
  afterEach(() => cleanup.run());

  it("removes the wish, waits for the agent to put io.max back, then deletes the node's SandboxHealth", async function () {
    this.timeout(180_000);
    const namespace = await createNamespace(cleanup);
    const { names } = await createNodes(cleanup, 1);
    const node = names[0]!;
    const { apps } = api();
    await apps.createNamespacedDeployment({
      namespace,
      body: {
        metadata: { name: 'db' },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: 'db' } },
          template: {
            metadata: { labels: { app: 'db' } },
            spec: {
              nodeSelector: { 'kubernetes.io/hostname': node },
              terminationGracePeriodSeconds: 0,
              containers: [{ name: 'app', image: 'registry.local/app:1' }],
            },
          },
        },
      },
    });
    cleanup.add(() => apps.deleteNamespacedDeployment({ name: 'db', namespace }).catch(() => undefined));
    const [db] = await waitForRunning(namespace, 'db', 1);
    const uid = db!.metadata!.uid!;

    // The node's SandboxHealth, as the operator makes one, and the limit it wants, written as it alone may.
    const created = await kubectl(
      ['create', '-f', '-'],
      JSON.stringify({
        apiVersion: `${GROUP}/${VERSION}`,
        kind: 'SandboxHealth',
        metadata: { name: node },
        spec: { nodeName: node },
      }),
    );
    expect(created.code, created.stderr).to.equal(0);
    cleanup.add(() => kubectl(['delete', 'sandboxhealth', node, '--ignore-not-found']));
    const measured = new MeasuredNode(node, cleanup, 'v2', true);
    await measured.start();
    measured.pod(uid, qosOf(db!), { percent: 10 });
    const wish: WantedIoLimitSpec = {
      podUid: uid,
      pod: `${namespace}/${db!.metadata!.name}`,
      device: '254:0',
      limit: { wbps: 8 * MIB },
      policy: uniqueName('it-cleanup-limits'),
      since: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    };
    // kubectl patch reads before it writes: a get the operator's own role (list and watch) does not need.
    const role = uniqueName('it-cleanup-limits');
    for (const args of [
      ['create', 'clusterrole', role, '--verb=get', '--resource=sandboxhealths.sandbox.remediator.io'],
      [
        'create',
        'clusterrolebinding',
        role,
        `--clusterrole=${role}`,
        `--serviceaccount=${OPERATOR.split(':').slice(2).join(':')}`,
      ],
    ]) {
      const made = await kubectl(args);
      expect(made.code, made.stderr).to.equal(0);
      cleanup.add(() => kubectl(['delete', args[1]!, role, '--ignore-not-found']));
    }
    const wanted = await kubectl([
      'patch',
      'sandboxhealth',
      node,
      '--type=merge',
      '-p',
      JSON.stringify({ spec: { ioLimits: [wish] } }),
      `--as=${OPERATOR}`,
    ]);
    expect(wanted.code, wanted.stderr).to.equal(0);
    await eventually(
      'the agent reports the limit applied',
      async () => (await readHealth(node))?.status?.ioLimits?.applied?.some((a) => a.podUid === uid),
      { timeoutMs: 60_000 },
    );
    expect(measured.ioMax(uid, qosOf(db!))).to.match(new RegExp(`^254:0 .*wbps=${8 * MIB}\\b`));

    // The pod's stamps, as the operator writes them with the wish.
    const podName = db!.metadata!.name!;
    const stamped = await kubectl([
      'annotate',
      'pod',
      '-n',
      namespace,
      podName,
      ...Object.entries(ioLimitStamps([wish], uid)).map(([k, v]) => `${k}=${v}`),
    ]);
    expect(stamped.code, stamped.stderr).to.equal(0);

    // No operator leads (none runs here, and this Lease name was never taken).
    const run = await runCli([
      'cleanup',
      `--kubeconfig=${KUBECONFIG}`,
      `--leader-election-id=${uniqueName('cleanup-limits-it')}`,
      '--lift-timeout=60',
    ]);
    const said = run.stdout.split('\n');
    const lifted = said.findIndex((l) => l.startsWith(`Withdrew sandboxhealth/${node}:`));
    const deleted = said.indexOf(`Deleted sandboxhealth/${node}: deleted`);
    expect(said[lifted], run.stdout + run.stderr).to.equal(
      `Withdrew sandboxhealth/${node}: 1 IO limit(s) no longer wanted (${wish.pod}): its node's agent lifts them, putting back what the files held`,
    );
    expect(said, 'waited for the report').to.include(
      `Waiting up to 60 s for the agent to report the IO limits on ${node} lifted`,
    );
    expect(deleted, 'deleted after the lift, once reported').to.be.greaterThan(lifted);
    expect(measured.ioMax(uid, qosOf(db!)), 'io.max holds no limit of ours').to.not.match(/wbps=\d/);
    expect(await readHealth(node)).to.equal(undefined);
    // Last, once the limit is lifted, the pod's stamps.
    const unstamped = said.indexOf(
      `Unstamped pod/${namespace}/${podName}: IO-limit stamps of policy ${wish.policy} (254:0 wbps=${8 * MIB}) removed`,
    );
    expect(unstamped, run.stdout).to.be.greaterThan(deleted);
    const left =
      (await api().core.readNamespacedPod({ namespace, name: podName })).metadata?.annotations ?? {};
    expect(Object.keys(left).filter((k) => k.startsWith('sandbox.remediator.io/'))).to.deep.equal([]);
  });
});
