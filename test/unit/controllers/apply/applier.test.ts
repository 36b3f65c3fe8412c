// The apply controller on a real work queue and Controller, as the Manager runs it: one apply of a policy at a time,
// failures backed off by that queue alone, the retry a new decision, the backoff growing until an apply succeeds.
import { expect } from 'chai';
import { DryRunActuator } from '../../../../src/actuation/actuator.js';
import { buildControllers } from '../../../../src/controllers/manager/wiring.js';
import { silentLogger } from '../../../../src/observability/log.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { Controller } from '../../../../src/runtime/controller.js';
import { WorkQueue } from '../../../../src/runtime/work-queue.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster, tellOfChanges } from '../../../support/memory-cluster.js';
import { IO_SPEC } from '../../../support/reconciler.js';

/** Lets the queue's worker and the writes it starts run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
}

function world({ start = true } = {}) {
  const cluster = new MemoryCluster().addPolicy('p', IO_SPEC).addNodes(aNode('n1'), aNode('n2'), aNode('n3'));
  const clock = new FakeClock(secondsAfter(T0, 600).getTime());
  const queue = new WorkQueue<string>({ clock });
  const passes: number[] = [];
  const controllers = buildControllers({
    cache: cluster,
    writer: cluster,
    recorder: cluster,
    actuators: { real: cluster, dryRun: new DryRunActuator() },
    workloads: cluster,
    clock,
    logger: silentLogger,
    sources: () => ({
      kind: 'prometheus',
      pollMs: 60_000,
      refresh: () => Promise.resolve(),
      read: (node: string) => ({
        source: 'prometheus',
        observedTime: new Date(clock.now()).toISOString(),
        psiSomeAvg10Percent: node === 'n1' ? 80 : 1,
      }),
    }),
    requeue: (_policy, after) => passes.push(after),
    scheduleApply: (policy) => {
      queue.add(policy);
    },
  });
  tellOfChanges(cluster, controllers.reconciler);
  const errors: unknown[] = [];
  const controller = new Controller('apply', queue, (key) => controllers.applier.reconcile(key), {
    onError: (_key, err) => errors.push(err),
  });
  if (start) controller.start(1);
  const pod = {
    ...aPod().named('web-1').onNode('n1').waitingSince(T0).build(),
    controllerKind: 'ReplicaSet',
  };
  cluster.pods.push(pod);
  cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
  const pass = async () => {
    await controllers.reconciler.reconcile('p');
    await settle();
    await controllers.reconciler.idle();
    await settle();
  };
  const cordons = () => cluster.takeWrites().filter((w) => w === 'patch node/n1');
  return { cluster, clock, queue, controller, passes, errors, pass, cordons, ...controllers };
}

describe('the apply controller', () => {
  it('backs a failing apply off on its own queue, decides nothing meanwhile, and retries with a new decision whose failure grows the backoff', async () => {
    const w = world();
    w.cluster.failNextNodePatch.set('n1', new Error('etcdserver: request timed out'));
    await w.pass();
    expect(w.cordons(), 'the cordon was tried').to.deep.equal(['patch node/n1']);
    expect(String(w.errors.at(-1))).to.contain('etcdserver: request timed out');
    expect(w.queue.failures('p'), 'one step of backoff').to.equal(1);

    // Backing off: a pass looks and reports, and decides nothing.
    w.reconciler.markDirty('p', 'n1');
    await w.pass();
    expect(w.cordons()).to.deep.equal([]);
    expect(w.applier.busy('p')).to.equal(true);

    // The backoff over, the retry asks for a pass at once, and its backoff stands.
    w.clock.advance(5);
    await settle();
    expect(w.passes.at(-1)).to.equal(0);
    expect(w.queue.failures('p'), 'kept until an apply succeeds').to.equal(1);

    // The new decision fails again: the backoff grows.
    w.cluster.failNextNodePatch.set('n1', new Error('etcdserver: leader changed'));
    await w.pass();
    expect(w.cordons()).to.deep.equal(['patch node/n1']);
    expect(w.queue.failures('p')).to.equal(2);
    w.clock.advance(5);
    await settle();
    expect(w.queue.failures('p'), 'not yet over: 10 ms').to.equal(2);
    expect(w.applier.busy('p')).to.equal(true);
    w.clock.advance(5);
    await settle();

    // The retry's decision succeeds: the cordon goes, and the backoff is forgotten.
    await w.pass();
    expect(w.cordons()).to.deep.equal(['patch node/n1']);
    expect(w.cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
    expect(w.queue.failures('p')).to.equal(0);
    expect(w.applier.busy('p')).to.equal(false);
    await w.controller.stop();
  });

  it('fails the next apply with a report that failed between applies, once for all of them', async () => {
    const w = world();
    await w.pass();
    expect(w.queue.failures('p')).to.equal(0);
    for (const node of ['n2', 'n3'])
      w.cluster.failNextHealthPatch.set(node, new Error('etcdserver: leader changed'));
    const stuck = (name: string, node: string) => {
      const pod = {
        ...aPod().named(name).onNode(node).waitingSince(T0).build(),
        controllerKind: 'ReplicaSet',
      };
      w.cluster.pods.push(pod);
      w.cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
      w.cluster.changed(node);
    };
    stuck('web-2', 'n2');
    stuck('web-3', 'n3');
    await w.pass();
    expect(w.errors.map(String).filter((e) => e.includes('leader changed'))).to.have.length(1);
    expect(w.queue.failures('p'), 'one step for the round').to.equal(1);
    expect(w.applier.failing('p')).to.equal(true);
    await w.controller.stop();
  });

  it('grows the backoff while reports keep failing though every apply succeeds, and forgets it after a clean round', async () => {
    const w = world();
    await w.pass();
    const pod = {
      ...aPod().named('web-2').onNode('n2').waitingSince(T0).build(),
      controllerKind: 'ReplicaSet',
    };
    w.cluster.pods.push(pod);
    w.cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
    // A round: a pass, its apply done before its report of n2 is answered, and then the backoff's time.
    const round = async (failing: boolean, backoffMs: number) => {
      if (failing) w.cluster.failNextHealthPatch.set('n2', new Error('etcdserver: leader changed'));
      let answer!: () => void;
      w.cluster.healthPatchGate = new Promise<void>((r) => (answer = r));
      w.cluster.changed('n2');
      await w.reconciler.reconcile('p');
      await settle();
      await w.applier.idle();
      expect(w.applier.active, 'the apply is done').to.equal(false);
      w.cluster.healthPatchGate = undefined;
      answer();
      await settle();
      await w.reconciler.idle();
      await settle();
      w.clock.advance(backoffMs);
      await settle();
    };
    await round(true, 5);
    expect(w.queue.failures('p'), 'the first failing round').to.equal(1);
    await round(true, 10);
    expect(w.queue.failures('p'), 'the apply between succeeded, its reports did not: it grows').to.equal(2);
    await round(false, 0);
    await w.pass();
    expect(w.queue.failures('p'), 'a report written, then a clean apply').to.equal(0);
    await w.controller.stop();
  });

  it('carries out no decision whose policy was paused or deleted while it waited for a worker, and asks the policy to decide again', async () => {
    for (const change of ['paused', 'deleted'] as const) {
      const w = world({ start: false });
      await w.reconciler.reconcile('p'); // decides the cordon of n1: it waits for a worker
      const old = w.cluster.policyMap.get('p')!;
      if (change === 'deleted') w.cluster.policyMap.delete('p');
      else
        w.cluster.policyMap.set('p', {
          ...old,
          generation: 2,
          spec: { ...IO_SPEC, safety: { ...IO_SPEC.safety, paused: true } },
        });
      const passes = w.passes.length;
      w.controller.start(1);
      await settle();
      expect(w.cordons(), change).to.deep.equal([]);
      expect(w.cluster.nodeMap.get('n1')!.unschedulable, change).to.equal(false);
      expect(
        w.passes.slice(passes),
        `${change}: a pass asked for only while the policy is there`,
      ).to.deep.equal(change === 'paused' ? [0] : []);
      expect(w.applier.busy('p')).to.equal(false);
      await w.controller.stop();
    }
  });
});
