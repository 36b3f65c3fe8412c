// Carrying out the plan: the exact writes in order, each on the version planned (or the one our own write just made),
// a 409 answered by reading the object again and planning it afresh (at most ATTEMPTS writes), a dry run that writes
// nothing and says the same, and one line per change, then per thing left alone.
import { expect } from 'chai';
import { STAMP, type RolloutKind } from '../../../src/api/v1alpha1/index.js';
import {
  planCleanup,
  type CleanupInput,
  type HealthLeftover,
  type Versioned,
} from '../../../src/cleanup/plan.js';
import {
  ATTEMPTS,
  DryRunCleanupWriter,
  LIFT_POLL_MS,
  runCleanup,
  type CleanupRereader,
  type CleanupWriter,
} from '../../../src/cleanup/run.js';
import type { GatedPodView, NodeView, WorkloadView } from '../../../src/detection/index.js';
import type { NodeLeaseView } from '../../../src/policy/node-lease.js';
import { aDeployment, aGatedPod, aNode, aNodeLease } from '../../support/cleanup-objects.js';

class Conflict extends Error {
  readonly code = 409;
}

/** Records every write; a write can be scripted to fail (a 409, or anything) the first `times` it is made. */
class RecordingWriter implements CleanupWriter {
  readonly dryRun = false;
  readonly writes: string[] = [];
  private readonly failures = new Map<string, { error: Error; times: number }>();
  private nodeVersion = 200;

  failing(what: string, error: Error, times = Infinity): this {
    this.failures.set(what, { error, times });
    return this;
  }
  private made(what: string, detail: string): void {
    this.writes.push(`${what} ${detail}`);
    const failure = this.failures.get(what);
    if (failure && failure.times > 0) {
      failure.times--;
      throw failure.error;
    }
  }
  patchNode: CleanupWriter['patchNode'] = (change) => {
    this.made(
      `node/${change.node}`,
      `@${change.resourceVersion} ${JSON.stringify({ ...change, resourceVersion: undefined, node: undefined })}`,
    );
    return Promise.resolve(String(this.nodeVersion++));
  };
  setNodeCondition: CleanupWriter['setNodeCondition'] = (node, condition, version) => {
    this.made(`node/${node}/status`, `@${version} ${JSON.stringify(condition)}`);
    return Promise.resolve(String(this.nodeVersion++));
  };
  patchWorkload: CleanupWriter['patchWorkload'] = (change) => {
    this.made(
      `${change.kind.toLowerCase()}/${change.namespace}/${change.name}`,
      `@${change.resourceVersion}`,
    );
    return Promise.resolve(undefined);
  };
  releaseGate: CleanupWriter['releaseGate'] = (pod) => {
    this.made(`pod/${pod.namespace}/${pod.name}`, `@${pod.resourceVersion}`);
    return Promise.resolve(!this.staleGates.has(pod.name));
  };
  releaseNodeLease: CleanupWriter['releaseNodeLease'] = (release) => {
    this.made(`lease/${release.node}`, `@${release.resourceVersion} uid=${release.uid}`);
    return Promise.resolve();
  };
  deleteHealth: CleanupWriter['deleteHealth'] = (name, version) => {
    this.made(`sandboxhealth/${name}`, `@${version}`);
    return Promise.resolve();
  };
  patchHealthIoLimits: CleanupWriter['patchHealthIoLimits'] = (name, limits, read) => {
    this.made(`sandboxhealth/${name}/ioLimits`, `${read?.length ?? 'none'} -> ${limits.length}`);
    return Promise.resolve(undefined);
  };
  /** Pods whose gate list changed meanwhile: releaseGate answers false. */
  readonly staleGates = new Set<string>();
}

/** Answers each read again with what the test put there. */
class Rereads implements CleanupRereader {
  readonly reads: string[] = [];
  nodes = new Map<string, Versioned<NodeView>>();
  workloads = new Map<string, Versioned<WorkloadView>>();
  pods = new Map<string, Versioned<GatedPodView>>();
  leases = new Map<string, Versioned<NodeLeaseView>>();
  /** Each read of a SandboxHealth takes the next of its answers; the last one stays. */
  healths = new Map<string, Versioned<HealthLeftover>[]>();
  node(name: string) {
    this.reads.push(`node/${name}`);
    return Promise.resolve(this.nodes.get(name));
  }
  workload(kind: RolloutKind, namespace: string, name: string) {
    this.reads.push(`${kind}/${namespace}/${name}`);
    return Promise.resolve(this.workloads.get(name));
  }
  gatedPod(namespace: string, name: string) {
    this.reads.push(`pod/${namespace}/${name}`);
    return Promise.resolve(this.pods.get(name));
  }
  lease(node: string) {
    this.reads.push(`lease/${node}`);
    return Promise.resolve(this.leases.get(node));
  }
  health(name: string) {
    this.reads.push(`sandboxhealth/${name}`);
    const answers = this.healths.get(name) ?? [];
    return Promise.resolve(answers.length > 1 ? answers.shift() : answers[0]);
  }
}

const empty: CleanupInput = {
  nodes: [],
  workloads: [],
  gatedPods: [],
  leases: [],
  nodesListed: true,
  healths: [],
  policies: [],
  keepHealth: false,
};
const NO_STAMPS = Object.fromEntries(Object.values(STAMP).map((k) => [k, null]));
const CLEARED = JSON.stringify({ annotations: NO_STAMPS });

async function run(
  input: Partial<CleanupInput>,
  writer: CleanupWriter,
  reread = new Rereads(),
  liftTimeoutMs = 10_000,
) {
  let text = '';
  const slept: number[] = [];
  const outcome = await runCleanup(planCleanup({ ...empty, ...input }), {
    writer,
    reread,
    out: { write: (t: string) => (text += t) },
    isConflict: (err) => err instanceof Conflict,
    describeError: (err) => (err instanceof Error ? err.message : String(err)),
    liftTimeoutMs,
    sleep: (ms) => {
      slept.push(ms);
      return Promise.resolve();
    },
  });
  return { outcome, lines: text.trimEnd().split('\n'), reread, slept };
}

const limit = { podUid: 'db-uid', device: '8:0', pod: 'data/db-0' };
const wanted = {
  ...limit,
  policy: 'p',
  limit: { wbps: '1048576' },
  firstLimitedAt: '2026-12-06T10:00:00Z',
} as unknown as NonNullable<HealthLeftover['ioLimits']>[number];
const inForce = { ...limit, cgroupVersion: 'v1' } as unknown as NonNullable<
  HealthLeftover['applied']
>[number];
const limitedHealth = (version: string): Versioned<HealthLeftover> => ({
  view: { name: 'n1', ioLimits: [wanted], applied: [inForce] },
  version,
});
const answered = (view: HealthLeftover, version = '31'): Versioned<HealthLeftover> => ({ view, version });

const stampedNode = (version = '10') =>
  aNode('n1').cordoned().stampedBy('p', { cordoned: true }).withOurCondition().atVersion(version);

describe('runCleanup', () => {
  it('writes each step on its version, the condition on the version our node patch made, and says what each changed', async () => {
    const writer = new RecordingWriter();
    const { outcome, lines } = await run(
      {
        nodes: [stampedNode().build(), aNode('n2').cordoned().build()],
        gatedPods: [aGatedPod('web-1', undefined, 'p', '5')],
        workloads: [aDeployment('web', { paused: true, pausedBy: 'p', version: '70' })],
        leases: [aNodeLease('n1', 'sandbox-remediator-p', { version: '31' })],
        healths: [{ view: { name: 'n1' }, version: '4' }],
      },
      writer,
    );
    expect(writer.writes).to.deep.equal([
      'pod/shop/web-1 @5',
      'deployment/shop/web @70',
      `node/n1 @10 ${JSON.stringify({ annotations: NO_STAMPS, unschedulable: false })}`,
      'node/n1/status @200 null',
      'lease/n1 @31 uid=lease-n1',
      'sandboxhealth/n1 @4',
    ]);
    expect(lines).to.deep.equal([
      'Released pod/shop/web-1: scheduling gate sandbox.remediator.io/paced lifted (set for policy p)',
      'Released deployment/shop/web: spec.paused reset, stamps of policy p removed',
      'Released node/n1: uncordoned, stamps of policy p removed',
      'Cleared node/n1: condition SandboxCreationDegraded=True (IoSaturated) removed',
      'Deleted lease/medik8s-leases/node-n1: deleted (holder sandbox-remediator-p)',
      'Deleted sandboxhealth/n1: deleted',
      'Left alone node/n2: cordoned, with no stamp of ours',
    ]);
    expect(outcome).to.deep.equal({ done: 6, failed: 0, leftAlone: 1 });
  });

  it('in a dry run writes nothing and says the same, with "would"', async () => {
    const { outcome, lines } = await run(
      { nodes: [stampedNode().build()], healths: [{ view: { name: 'n1' }, version: '4' }] },
      new DryRunCleanupWriter(),
    );
    expect(lines).to.deep.equal([
      'Would release node/n1: uncordoned, stamps of policy p removed',
      'Would clear node/n1: condition SandboxCreationDegraded=True (IoSaturated) removed',
      'Would delete sandboxhealth/n1: deleted',
    ]);
    expect(outcome).to.deep.equal({ done: 3, failed: 0, leftAlone: 0 });
  });

  it('on a 409 reads the node again and undoes what its stamps record then, on the new version', async () => {
    const writer = new RecordingWriter().failing('node/n1', new Conflict('conflict'), 1);
    const reread = new Rereads();
    // Meanwhile someone uncordoned it and added a taint of their own; our stamps are still there.
    const foreign = { key: 'example.com/x', effect: 'NoSchedule' };
    reread.nodes.set(
      'n1',
      aNode('n1').tainted(foreign).stampedBy('p', { cordoned: true }).atVersion('12').build(),
    );
    const { lines, outcome } = await run(
      { nodes: [aNode('n1').cordoned().stampedBy('p', { cordoned: true }).build()] },
      writer,
      reread,
    );
    expect(writer.writes).to.deep.equal([
      `node/n1 @100 ${JSON.stringify({ annotations: NO_STAMPS, unschedulable: false })}`,
      `node/n1 @12 ${CLEARED}`,
    ]);
    expect(reread.reads).to.deep.equal(['node/n1']);
    expect(lines).to.deep.equal([
      'Released node/n1: already uncordoned by someone else, stamps of policy p removed',
    ]);
    expect(outcome.done).to.equal(1);
  });

  it(`gives up after ${ATTEMPTS} conflicting writes, keeps that node's lease, and goes on with the rest`, async () => {
    const writer = new RecordingWriter().failing('node/n1', new Conflict('the object has been modified'));
    const reread = new Rereads();
    reread.nodes.set('n1', aNode('n1').cordoned().stampedBy('p', { cordoned: true }).atVersion('11').build());
    const { lines, outcome } = await run(
      {
        nodes: [aNode('n1').cordoned().stampedBy('p', { cordoned: true }).build()],
        leases: [aNodeLease('n1', 'sandbox-remediator-p')],
        healths: [{ view: { name: 'n1' }, version: '4' }],
      },
      writer,
      reread,
    );
    expect(writer.writes.filter((w) => w.startsWith('node/n1 '))).to.have.length(ATTEMPTS);
    expect(writer.writes.some((w) => w.startsWith('lease/'))).to.equal(false);
    expect(lines).to.deep.equal([
      'Failed node/n1: the object has been modified',
      'Deleted sandboxhealth/n1: deleted',
      'Left alone lease/medik8s-leases/node-n1: kept: node/n1 still carries our stamps (its release failed)',
    ]);
    expect(outcome).to.deep.equal({ done: 1, failed: 1, leftAlone: 1 });
  });

  it('a write refused for another reason is not retried', async () => {
    const writer = new RecordingWriter().failing('deployment/shop/web', new Error('forbidden'));
    const { lines, reread } = await run(
      { workloads: [aDeployment('web', { paused: true, pausedBy: 'p' })] },
      writer,
    );
    expect(writer.writes).to.deep.equal(['deployment/shop/web @7']);
    expect(reread.reads).to.deep.equal([]);
    expect(lines).to.deep.equal(['Failed deployment/shop/web: forbidden']);
  });

  it('a lease someone else took meanwhile is left alone, named', async () => {
    const writer = new RecordingWriter().failing('lease/n1', new Conflict('precondition failed'), 1);
    const reread = new Rereads();
    reread.leases.set('n1', aNodeLease('n1', 'NodeHealthCheck', { version: '40' }));
    const { lines, outcome } = await run(
      { leases: [aNodeLease('n1', 'sandbox-remediator-p')] },
      writer,
      reread,
    );
    expect(writer.writes).to.deep.equal(['lease/n1 @3 uid=lease-n1']);
    expect(lines).to.deep.equal([
      'Left alone lease/medik8s-leases/node-n1: held by NodeHealthCheck, not by us',
    ]);
    expect(outcome).to.deep.equal({ done: 0, failed: 0, leftAlone: 1 });
  });

  it('a gate whose pod changed is lifted from the pod as it is now; one gone meanwhile is skipped', async () => {
    const writer = new RecordingWriter();
    writer.staleGates.add('web-1');
    writer.staleGates.add('web-2');
    const reread = new Rereads();
    reread.pods.set('web-1', aGatedPod('web-1', undefined, 'p', '9'));
    const first = await run({ gatedPods: [aGatedPod('web-1'), aGatedPod('web-2')] }, writer, reread);
    expect(writer.writes).to.deep.equal([
      'pod/shop/web-1 @5',
      'pod/shop/web-1 @9',
      'pod/shop/web-1 @9',
      'pod/shop/web-2 @5',
    ]);
    expect(first.lines).to.deep.equal([
      `Failed pod/shop/web-1: it kept changing meanwhile (${ATTEMPTS} attempts)`,
      'Skipped pod/shop/web-2: nothing of ours on it any more (it changed meanwhile)',
    ]);
    writer.staleGates.clear();
    const second = await run({ gatedPods: [aGatedPod('web-1')] }, writer, reread);
    expect(second.lines).to.deep.equal([
      'Released pod/shop/web-1: scheduling gate sandbox.remediator.io/paced lifted (set for policy p)',
    ]);
  });

  it('lifts the IO limits first, and deletes the SandboxHealth once its agent reports none in force', async () => {
    const writer = new RecordingWriter();
    const reread = new Rereads();
    reread.healths.set('n1', [
      answered({ name: 'n1', applied: [inForce] }),
      answered({ name: 'n1', applied: [inForce] }),
      answered({ name: 'n1' }),
    ]);
    const { outcome, lines, slept } = await run(
      { healths: [limitedHealth('30')], nodes: [stampedNode().build()] },
      writer,
      reread,
    );
    expect(writer.writes[0], 'the wish first').to.equal('sandboxhealth/n1/ioLimits 1 -> 0');
    expect(
      writer.writes.filter((w) => w.startsWith('node/n1')),
      'then the rest',
    ).to.have.length(2);
    expect(writer.writes.at(-1), 'the SandboxHealth last, on the version the wait read').to.equal(
      'sandboxhealth/n1 @31',
    );
    expect(slept, 'read again until the agent reported the lift').to.deep.equal([LIFT_POLL_MS, LIFT_POLL_MS]);
    expect(lines[0]).to.equal(
      "Withdrew sandboxhealth/n1: 1 IO limit(s) no longer wanted (data/db-0): its node's agent lifts them, putting back what the files held",
    );
    expect(lines).to.include('Deleted sandboxhealth/n1: deleted');
    expect(outcome.failed).to.equal(0);
  });

  it('keeps a SandboxHealth whose agent does not report the lift in time, names the pods, and fails the run', async () => {
    const writer = new RecordingWriter();
    const reread = new Rereads();
    // On cgroup v1, in force in the pod's cgroup and its container's: one pod named.
    const container = { ...inForce, cgroup: 'kubepods/poddb-uid/c1' };
    reread.healths.set('n1', [answered({ name: 'n1', applied: [inForce, container] })]);
    const { outcome, lines, slept } = await run(
      { healths: [limitedHealth('30')], nodes: [aNode('n1').build()] },
      writer,
      reread,
      6_000,
    );
    expect(writer.writes, 'the wish removed, the SandboxHealth kept').to.deep.equal([
      'sandboxhealth/n1/ioLimits 1 -> 0',
    ]);
    expect(slept).to.deep.equal([LIFT_POLL_MS, LIFT_POLL_MS, LIFT_POLL_MS]);
    expect(outcome.failed).to.equal(1);
    expect(lines.at(-1)).to.match(
      /^Failed sandboxhealth\/n1: kept: its node's agent has not reported the IO limits of 1 pod\(s\) lifted within 6 s \(data\/db-0\), and.*Is the agent running\?/,
    );
  });

  it('lifts a wish changed meanwhile as it is then, and in a dry run waits for no agent', async () => {
    const writer = new RecordingWriter().failing('sandboxhealth/n1/ioLimits', new Conflict('changed'), 1);
    const reread = new Rereads();
    const two = { ...wanted, podUid: 'web-uid', pod: 'data/web-0' };
    reread.healths.set('n1', [answered({ name: 'n1', ioLimits: [wanted, two] }), answered({ name: 'n1' })]);
    const { lines } = await run(
      { healths: [limitedHealth('30')], nodes: [aNode('n1').build()] },
      writer,
      reread,
    );
    expect(writer.writes).to.deep.equal([
      'sandboxhealth/n1/ioLimits 1 -> 0',
      'sandboxhealth/n1/ioLimits 2 -> 0',
      'sandboxhealth/n1 @31',
    ]);
    expect(lines[0]).to.contain('2 IO limit(s) no longer wanted (data/db-0, data/web-0)');

    const dry = await run(
      { healths: [limitedHealth('30')], nodes: [aNode('n1').build()] },
      new DryRunCleanupWriter(),
      new Rereads(),
    );
    expect(dry.slept).to.deep.equal([]);
    expect(dry.lines[0]).to.match(/^Would withdraw sandboxhealth\/n1: 1 IO limit/);
    expect(dry.lines.at(-1)).to.equal('Would delete sandboxhealth/n1: deleted');
  });

  it("deletes a gone node's SandboxHealth after its wish is withdrawn, waiting for no agent, on the version read again", async () => {
    const writer = new RecordingWriter().failing(
      'sandboxhealth/n1',
      new Conflict('our own lift changed it'),
      1,
    );
    const reread = new Rereads();
    reread.healths.set('n1', [answered({ name: 'n1', applied: [inForce] }, '32')]);
    const { outcome, slept } = await run({ healths: [limitedHealth('30')] }, writer, reread);
    expect(writer.writes).to.deep.equal([
      'sandboxhealth/n1/ioLimits 1 -> 0',
      'sandboxhealth/n1 @30',
      'sandboxhealth/n1 @32',
    ]);
    expect(slept, 'its node, and the cgroups, are gone').to.deep.equal([]);
    expect(outcome.failed).to.equal(0);
  });

  it('a node whose stamps someone else removed meanwhile is skipped: nothing of ours is on it', async () => {
    const writer = new RecordingWriter().failing('node/n1', new Conflict('conflict'), 1);
    const reread = new Rereads();
    reread.nodes.set('n1', aNode('n1').cordoned().atVersion('13').build());
    const { lines } = await run(
      { nodes: [aNode('n1').cordoned().stampedBy('p', { cordoned: true }).build()] },
      writer,
      reread,
    );
    expect(writer.writes).to.have.length(1);
    expect(lines).to.deep.equal(['Left alone node/n1: cordoned, with no stamp of ours']);
  });
});
