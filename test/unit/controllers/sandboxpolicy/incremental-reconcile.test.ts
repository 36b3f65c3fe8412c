// The cost of a change: a pod or Event change re-observes its node only; the policy-wide pass reads the
// summaries held from earlier passes. Counted in nodes observed (PassStats), not timed.
import { silentLogger } from '../../../../src/observability/log.js';
import { expect } from 'chai';
import { DryRunActuator } from '../../../../src/actuation/actuator.js';
import type { ControllerDeps } from '../../../../src/controllers/manager/wiring.js';
import { settledControllers } from '../../../support/reconciler.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { EVENT_WINDOW_MS } from '../../../../src/status/health-status.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';

const quiet = silentLogger;
const NODE_COUNT = 200;

function setup(sources?: ControllerDeps['sources']) {
  const names = Array.from({ length: NODE_COUNT }, (_, i) => `n${String(i).padStart(3, '0')}`);
  const cluster = new MemoryCluster()
    .addPolicy('p', { detection: { stuckThresholdSeconds: 30 }, safety: { maxUnhealthyNodes: 10 } })
    .addNodes(...names.map((n) => aNode(n)));
  const clock = new FakeClock(secondsAfter(T0, 600).getTime());
  const { reconciler, sweeper } = settledControllers({
    writeConcurrency: 1, // one write at a time: the tests assert the exact order of writes
    cache: cluster,
    writer: cluster,
    recorder: cluster,
    actuators: { real: cluster, dryRun: new DryRunActuator() },
    clock,
    logger: quiet,
    resyncMs: 300_000,
    ...(sources ? { sources } : {}),
  });
  return { cluster, clock, reconciler, sweeper, names };
}

describe('PolicyReconciler cost of a change', () => {
  it('looks at every node on the first pass, then only at the node a pod change is about', async () => {
    const { cluster, reconciler } = setup();
    await reconciler.reconcile('p');
    expect(reconciler.lastPass).to.deep.include({ full: true, observed: NODE_COUNT, owned: NODE_COUNT });
    cluster.takeWrites();

    const pod = aPod().named('web').onNode('n042').waitingSince(T0).build();
    cluster.pods.push(pod);
    cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
    reconciler.markDirty('p', 'n042');
    await reconciler.reconcile('p');
    expect(reconciler.lastPass).to.deep.include({ full: false, observed: 1, owned: NODE_COUNT });
    expect(cluster.takeWrites()).to.deep.equal(['patch health/n042', 'patch policy/p']);
    expect(cluster.health('n042')!.status!.stuckPodCount).to.equal(1);
    expect(cluster.policy('p')!.status!.degradedNodes).to.equal(1);
    expect(cluster.takeEvents()).to.deep.equal([
      'Node/n042 Warning SandboxCreationDegraded',
      'Pod/web Warning SandboxCreationStuck',
    ]);

    // The status written last time is remembered: a pass with no change looks at nothing.
    await reconciler.reconcile('p');
    expect(reconciler.lastPass).to.deep.include({ full: false, observed: 0, owned: NODE_COUNT });
    expect(cluster.takeWrites()).to.deep.equal([]);
  });

  it('goes back to a full pass on a policy edit or an ownership change, and looks again at a node whose time has come', async () => {
    const { cluster, clock, reconciler } = setup();
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    expect(reconciler.lastPass?.full).to.equal(false);

    reconciler.markDirty('p'); // a policy change
    await reconciler.reconcile('p');
    expect(reconciler.lastPass?.full).to.equal(true);

    cluster.addNodes(aNode('late'));
    await reconciler.reconcile('p');
    expect(reconciler.lastPass).to.deep.include({ full: true, owned: NODE_COUNT + 1 });

    // A pod that becomes stuck with time alone: the pass its threshold crossing asks for is a full one.
    const pod = aPod()
      .named('slow')
      .onNode('n007')
      .waitingSince(new Date(clock.now() - 10_000))
      .build();
    cluster.pods.push(pod);
    reconciler.markDirty('p', 'n007');
    const result = await reconciler.reconcile('p');
    expect(result.requeueAfterMs).to.equal(20_000);
    expect(cluster.health('n007')!.status!.stuckPodCount).to.equal(0);
    clock.advance(20_000);
    await reconciler.reconcile('p');
    expect(reconciler.lastPass).to.deep.include({ full: false, observed: 1, owned: NODE_COUNT + 1 });
    expect(cluster.health('n007')!.status!.stuckPodCount).to.equal(1);

    // The resync is a full pass.
    clock.advance(300_000);
    await reconciler.reconcile('p');
    expect(reconciler.lastPass?.full).to.equal(true);
  });

  it('gives pods trickling onto one node a few Events of their own per window, then one on the node, then none', async () => {
    const { cluster, clock, reconciler } = setup();
    await reconciler.reconcile('p');
    cluster.takeEvents();
    const stickOne = async (name: string) => {
      const pod = aPod().named(name).onNode('n001').waitingSince(T0).build();
      cluster.pods.push(pod);
      cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
      reconciler.markDirty('p', 'n001');
      await reconciler.reconcile('p');
      return cluster.takeEvents();
    };
    // One pod per pass: each pass's cap alone would give every one of them an Event.
    expect(await stickOne('a')).to.deep.equal([
      'Node/n001 Warning SandboxCreationDegraded',
      'Pod/a Warning SandboxCreationStuck',
    ]);
    expect(await stickOne('b')).to.deep.equal(['Pod/b Warning SandboxCreationStuck']);
    expect(await stickOne('c')).to.deep.equal(['Pod/c Warning SandboxCreationStuck']);
    expect(await stickOne('d')).to.deep.equal(['Node/n001 Warning SandboxCreationStuck']);
    expect(await stickOne('e')).to.deep.equal([]);
    expect(cluster.health('n001')!.status!.stuckPodCount).to.equal(5); // the status lists them all

    // Another node has a budget of its own.
    const other = aPod().named('x').onNode('n002').waitingSince(T0).build();
    cluster.pods.push(other);
    cluster.events.push(anEvent().about(other).saying(nameReservedMessage(other)).build());
    reconciler.markDirty('p', 'n002');
    await reconciler.reconcile('p');
    expect(cluster.takeEvents()).to.include('Pod/x Warning SandboxCreationStuck');

    // Just short of the window: still none. Past it: Events again.
    clock.advance(EVENT_WINDOW_MS - 1);
    expect(await stickOne('f')).to.deep.equal([]);
    clock.advance(1);
    expect(await stickOne('g')).to.deep.equal(['Pod/g Warning SandboxCreationStuck']);
  });

  it('comes back when a reading goes stale, once: a reading stale already (its agent gone) brings nothing due', async () => {
    const observedAt = secondsAfter(T0, 600).getTime(); // the fake clock's start
    const { clock, reconciler } = setup(() => ({
      kind: 'agent',
      refresh: () => Promise.resolve(),
      read: (node) =>
        node === 'n000'
          ? { source: 'agent', observedTime: new Date(observedAt).toISOString(), psiSomeAvg10Percent: 1 }
          : undefined,
    }));
    const first = await reconciler.reconcile('p');
    // Stale after the policy's default staleAfterSeconds (and 1 ms): the node is looked at again then.
    expect(first.requeueAfterMs).to.be.greaterThan(0);
    clock.advance(first.requeueAfterMs!);
    await reconciler.reconcile('p');
    expect(reconciler.lastPass).to.deep.include({ full: false, observed: 1 });
    // Stale now: nothing is due until the resync, however often the policy is reconciled.
    const after = await reconciler.reconcile('p');
    expect(reconciler.lastPass).to.deep.include({ full: false, observed: 0 });
    expect(after.requeueAfterMs).to.be.greaterThan(60_000);
  });

  it('sweeps for orphans (every SandboxHealth, every node) when ownership changes and at the resync, not on every run', async () => {
    const { cluster, clock, sweeper } = setup();
    let sweeps = 0;
    const healths = cluster.healths.bind(cluster);
    cluster.healths = () => {
      sweeps++;
      return healths();
    };
    await sweeper.sweep();
    expect(sweeps).to.equal(1);
    // The Manager runs the sweeper on every change that can leave something unowned (a node's status, say).
    await sweeper.sweep();
    await sweeper.sweep();
    expect(sweeps, 'no sweep while ownership stands').to.equal(1);

    cluster.addNodes(aNode('late'));
    await sweeper.sweep();
    expect(sweeps, 'a new node changes ownership').to.equal(2);
    clock.advance(300_000);
    await sweeper.sweep();
    expect(sweeps, 'the resync sweeps').to.equal(3);
  });
});
