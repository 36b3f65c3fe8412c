// `make test-lab`, as users run it: the chart installed on the lab's real node (hack/lab/install.sh, make
// lab-install), the operator and the agent as Pods of the image built here, on the real kubelet, in the lab's network
// namespace. The agent Pod reads the real node; the operator Pod holds the leader Lease, and remediates the genuine
// stall (containerd's own IO slowed: hack/lab/incident.sh) by cordoning the real node, then undoes it; the README's
// uninstall (the operator scaled to 0, cleanup while the agent runs, helm uninstall) leaves nothing of ours. Runs before test/lab/lab.test.ts, whose operator is a process.
import type { V1Pod } from '@kubernetes/client-node';
import { expect } from 'chai';
import { execFileSync, spawn } from 'node:child_process';
import { join } from 'node:path';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import { REPO_ROOT } from '../support/manifests.js';
import { removeRbac } from '../support/operator-process.js';
import { armedAs, armedFor, callsDuring } from '../support/webhook-calls.js';
import { applyPolicy, condition, getHealth } from '../support/resources.js';
import { readNode, stampsOf } from '../support/workloads.js';

const NODE = process.env.LAB_NODE ?? 'lab-node-1';
const OPERATOR_NS = 'sandbox-remediator-system';
const AGENT_NS = 'sandbox-remediator-agent';
const RESERVED = /failed to reserve sandbox name/;
const log = (msg: string) => {
  console.error(`      [in-cluster ${new Date().toISOString().slice(11, 19)}] ${msg}`);
};

/** Runs a lab script to its end; its stderr is the progress, shown when it fails. */
function script(path: string, args: string[] = []): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(join(REPO_ROOT, path), args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => {
      if (code === 0) resolve();
      else reject(new Error(`${path} ${args.join(' ')} exited ${code}:\n${stderr.slice(-4000)}`));
    });
  });
}

/** The image's config digest as the archive built here holds it: what containerd reports as the Pods' imageID. */
function builtImageId(): string {
  const archive = join(REPO_ROOT, '.image', 'sandbox-remediator.oci.tar');
  const read = (path: string) => execFileSync('tar', ['-xOf', archive, path], { encoding: 'utf8' });
  const index = JSON.parse(read('index.json')) as { manifests: { digest: string }[] };
  const manifest = JSON.parse(read(`blobs/sha256/${index.manifests[0]!.digest.slice(7)}`)) as {
    config: { digest: string };
  };
  return manifest.config.digest;
}

const podsIn = async (namespace: string) =>
  (
    await api().core.listNamespacedPod({
      namespace,
      labelSelector: 'app.kubernetes.io/name=sandbox-remediator',
    })
  ).items;
const ready = (pod: V1Pod) => pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');

describe('the chart on the real lab node (make lab-install): the operator and the agent as Pods of the image built here', function () {
  const cleanup = new Cleanup();
  let installedAt = 0;

  before(async function () {
    this.timeout(900_000);
    const node = await readNode(NODE).catch(() => undefined);
    if (!node?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'))
      throw new Error(`node ${NODE} is not Ready: run make lab first (hack/lab/up.sh)`);
    // What test/lab/lab.test.ts applies with kubectl, should an earlier run have stopped before removing it.
    await removeRbac();
    installedAt = Date.now();
    await script('hack/lab/install.sh');
  });
  afterEach(async function () {
    this.timeout(120_000);
    await script('hack/lab/incident.sh', ['stop']);
    await cleanup.run();
  });
  after(async function () {
    this.timeout(300_000);
    // Whatever failed above, the lab is left without the chart for test/lab/lab.test.ts.
    await script('hack/lab/install.sh', ['uninstall']).catch((err: unknown) => {
      log(String(err));
    });
  });

  it("runs the image built here on the real kubelet: the operator Pod holds the leader Lease, the agent Pod publishes the real node's reading", async function () {
    this.timeout(180_000);
    const imageId = builtImageId();
    const pods = [...(await podsIn(OPERATOR_NS)), ...(await podsIn(AGENT_NS))];
    expect(pods.map((p) => p.metadata?.labels?.['app.kubernetes.io/component']).sort()).to.deep.equal([
      'agent',
      'operator',
    ]);
    for (const pod of pods) {
      expect(pod.spec?.nodeName, pod.metadata?.name).to.equal(NODE);
      expect(ready(pod), `${pod.metadata?.name} Ready`).to.equal(true);
      const status = pod.status?.containerStatuses?.[0];
      expect(status?.imageID, `${pod.metadata?.name} runs the image built here`).to.equal(imageId);
      expect(status?.restartCount, `${pod.metadata?.name} restarts`).to.equal(0);
    }
    const operatorPod = pods.find((p) => p.metadata?.labels?.['app.kubernetes.io/component'] === 'operator')!;
    const holder = async () =>
      (
        await kubectl([
          'get',
          'lease',
          '-n',
          OPERATOR_NS,
          'sandbox-remediator-operator',
          '-o',
          'jsonpath={.spec.holderIdentity}',
        ])
      ).stdout;
    await eventually(
      'the operator Pod holds the leader Lease',
      async () => (await holder()).startsWith(`${operatorPod.metadata!.name!}_`),
      { timeoutMs: 60_000, intervalMs: 1000 },
    );

    // A policy over the lab node: the operator creates its SandboxHealth, and the agent Pod fills in its reading.
    await applyPolicy(cleanup, uniqueName('lab-in-cluster'), {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/lab': 'true' } },
      ioPressure: { sustainSeconds: 5, recoverySeconds: 15, staleAfterSeconds: 10 },
    });
    const reading = await eventually(
      "the agent Pod's reading of the node",
      async () => {
        const r = (await getHealth(NODE))?.ioReading;
        return r && Date.parse(r.observedTime) > installedAt ? r : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 1000 },
    );
    log(`reading: ${JSON.stringify({ ...reading, devices: reading.devices?.slice(0, 2) })}`);
    expect(reading.source).to.equal('agent');
    // The lab disk is a loop device: seen from inside the Pod, through the host's /proc.
    expect(reading.devices?.some((d) => d.name.startsWith('loop'))).to.equal(true);
  });

  it("stall: a new pod stuck with containerd's genuine error; the in-cluster operator cordons the real node, and undoes it after the stall", async function () {
    this.timeout(600_000);
    const namespace = await createNamespace(cleanup, 'lab-in-cluster');
    const paced = await createNamespace(cleanup, 'lab-paced');
    await kubectl(['label', 'namespace', paced, 'pacing=lab']);
    // Two kwok nodes beside it in the policy, so that fencing one node of three stays within the safety limits.
    await createNodes(cleanup, 2, { labels: { 'sandbox.remediator.io/lab': 'spare' } });
    await applyPolicy(cleanup, uniqueName('lab-in-cluster-stall'), {
      nodeSelector: {
        matchExpressions: [{ key: 'sandbox.remediator.io/lab', operator: 'In', values: ['true', 'spare'] }],
      },
      detection: { stuckThresholdSeconds: 45 },
      ioPressure: { sustainSeconds: 5, recoverySeconds: 15, staleAfterSeconds: 10 },
      safety: { maxUnhealthyNodes: 1, cooldownSeconds: 5, maxEvictionsPerMinute: 5 },
      // Pacing too, for the apiserver's calls to the operator Pod's webhook at its pod IP, inside the lab.
      remediation: {
        throttleRollouts: { pacePodStarts: { namespaceSelector: { matchLabels: { pacing: 'lab' } } } },
      },
    });
    await script('hack/lab/incident.sh', ['stall', '240']);
    const stuck = await api().core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name: 'stuck' },
        spec: {
          nodeName: NODE,
          terminationGracePeriodSeconds: 5,
          containers: [{ name: 'app', image: 'sandbox-remediator.local/app:lab', imagePullPolicy: 'Never' }],
        },
      },
    });
    const operatorPod = (await podsIn(OPERATOR_NS))[0]!.metadata!.name!;
    let last = '';
    await eventually(
      "kubelet's genuine error, and the real node cordoned by the in-cluster operator",
      async () => {
        const events = await kubectl([
          'get',
          'events',
          '-n',
          namespace,
          '--field-selector',
          `reason=FailedCreatePodSandBox,involvedObject.uid=${stuck.metadata!.uid!}`,
          '-o',
          'jsonpath={range .items[*]}{.message}{"\\n"}{end}',
        ]);
        const node = await readNode(NODE);
        const health = await getHealth(NODE);
        const seen = `reserved ${RESERVED.test(events.stdout)}, cordoned ${node.spec?.unschedulable === true}, conditions ${JSON.stringify(
          (health?.conditions ?? []).map((c) => `${c.type}=${c.status}`),
        )}, stuck ${health?.stuckPods?.length ?? 0}, psi ${health?.ioReading?.psiSomeAvg10Percent ?? '?'}`;
        if (seen !== last) log((last = seen));
        return (
          RESERVED.test(events.stdout) &&
          node.spec?.unschedulable === true &&
          Object.keys(stampsOf(node)).length > 0
        );
      },
      { timeoutMs: 300_000, intervalMs: 2000 },
    );
    const health = await getHealth(NODE);
    expect(condition(health?.conditions, 'IoPressureHigh')?.status, 'the pressure proven').to.equal('True');
    const cordoned = await kubectl([
      'get',
      'events',
      '-A',
      '--field-selector',
      `involvedObject.kind=Node,involvedObject.name=${NODE},reason=Cordoned`,
      '-o',
      'jsonpath={range .items[*]}{.source.component}/{.source.host} {.reportingInstance}{"\\n"}{end}',
    ]);
    log(`Cordoned Event from ${cordoned.stdout.trim()}; the operator Pod is ${operatorPod}`);
    expect(cordoned.stdout, 'the Cordoned Event, reported by the operator Pod').to.contain(operatorPod);
    expect(
      (await podsIn(OPERATOR_NS)).map((p) => p.metadata?.name),
      'the same operator Pod, still',
    ).to.deep.equal([operatorPod]);

    // The node is saturated: the webhook is armed for the paced namespace, and the apiserver reaches the operator
    // Pod's webhook (at its pod IP on the lab's bridge) without failing open.
    await eventually('armed for the paced namespace', async () => armedFor(await armedAs(), paced), {
      timeoutMs: 30_000,
    });
    const calls = await callsDuring(() =>
      api().core.createNamespacedPod({
        namespace: paced,
        body: {
          metadata: { name: 'paced' },
          spec: {
            containers: [
              { name: 'app', image: 'sandbox-remediator.local/app:lab', imagePullPolicy: 'Never' },
            ],
          },
        },
      }),
    );
    expect(calls, 'one call to the in-cluster webhook, answered').to.deep.equal({ calls: 1, failedOpen: 0 });

    await script('hack/lab/incident.sh', ['stop']);
    await eventually(
      `${NODE} uncordoned and unstamped by the in-cluster operator`,
      async () => {
        const node = await readNode(NODE);
        return !node.spec?.unschedulable && Object.keys(stampsOf(node)).length === 0;
      },
      { timeoutMs: 180_000, intervalMs: 2000 },
    );
  });

  it("the README's uninstall (operator to 0, cleanup, helm uninstall) leaves nothing of ours behind", async function () {
    this.timeout(300_000);
    await script('hack/lab/install.sh', ['uninstall']);
    const leftovers: string[] = [];
    for (const kind of [
      'namespaces',
      'clusterroles',
      'clusterrolebindings',
      'validatingadmissionpolicies',
      'validatingadmissionpolicybindings',
      'mutatingwebhookconfigurations',
      'customresourcedefinitions',
    ]) {
      const listed = await kubectl([
        'get',
        kind,
        '-o',
        'jsonpath={range .items[*]}{.metadata.name}{"\\n"}{end}',
      ]);
      expect(listed.code, listed.stderr).to.equal(0);
      for (const name of listed.stdout.split('\n'))
        if (/sandbox-remediator|sandbox\.remediator\.io/.test(name)) leftovers.push(`${kind}/${name}`);
    }
    expect(leftovers).to.deep.equal([]);
    const node = await readNode(NODE);
    expect(stampsOf(node), 'no stamp on the node').to.deep.equal({});
    expect(node.spec?.unschedulable ?? false).to.equal(false);
    expect(
      (node.status?.conditions ?? []).filter((c) => c.type === 'SandboxCreationDegraded'),
      'no condition of ours',
    ).to.deep.equal([]);
  });
});
