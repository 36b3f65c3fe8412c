// How the reports are written: independent nodes side by side under a limit, each node's writes in order, and in a
// storm of routine changes urgent news first, ahead of the routine reports queued before it.
import { silentLogger } from '../../../../src/observability/log.js';
import { expect } from 'chai';
import { DryRunActuator } from '../../../../src/actuation/actuator.js';
import { settledControllers } from '../../../support/reconciler.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';

const quiet = silentLogger;
const names = (n: number) => Array.from({ length: n }, (_, i) => `n${String(i).padStart(3, '0')}`);

/** The cluster's writer and recorder, each call held for a few ms, counting how many are in flight. */
function slowed(cluster: MemoryCluster) {
  const stats = { inFlight: 0, peak: 0 };
  const proxy = new Proxy(cluster, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (
        typeof value !== 'function' ||
        !['createHealth', 'patchHealthStatus', 'record'].includes(String(prop))
      )
        return value;
      return async (...args: unknown[]) => {
        stats.inFlight++;
        stats.peak = Math.max(stats.peak, stats.inFlight);
        await new Promise((r) => setTimeout(r, 3));
        try {
          return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        } finally {
          stats.inFlight--;
        }
      };
    },
  });
  return { proxy, stats };
}

function setup(nodeCount: number, writeConcurrency?: number) {
  const cluster = new MemoryCluster()
    .addPolicy('p', { detection: { stuckThresholdSeconds: 30 }, safety: { maxUnhealthyNodes: 1000 } })
    .addNodes(...names(nodeCount).map((n) => aNode(n)));
  const { proxy, stats } = slowed(cluster);
  const reconciler = settledControllers({
    ...(writeConcurrency ? { writeConcurrency } : {}),
    cache: cluster,
    writer: proxy,
    recorder: proxy,
    actuators: { real: cluster, dryRun: new DryRunActuator() },
    clock: new FakeClock(secondsAfter(T0, 600).getTime()),
    logger: quiet,
  }).reconciler;
  return { cluster, reconciler, stats };
}

/** A pod stuck since T0 with no failure Event (cause Unknown): routine news once the node is Degraded already. */
const unknownStuck = (name: string, node: string) => aPod().named(name).onNode(node).waitingSince(T0).build();

describe('PolicyReconciler writes', () => {
  it('writes independent nodes side by side, never more than the limit at once, each node in order', async () => {
    const { cluster, reconciler, stats } = setup(20, 4);
    for (const node of names(20)) {
      const pod = aPod().named(`web-${node}`).onNode(node).waitingSince(T0).build();
      cluster.pods.push(pod);
      cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
    }
    await reconciler.reconcile('p');
    expect(stats.peak).to.equal(4);
    const writes = cluster.takeWrites();
    for (const node of names(20)) {
      const create = writes.indexOf(`create health/${node}`);
      const patch = writes.indexOf(`patch health/${node}`);
      expect(create, node).to.be.at.least(0);
      expect(patch, node).to.be.greaterThan(create);
    }
    // Side by side: the first nodes' creates all come before the first patch.
    expect(writes.filter((w) => w.includes(' health/')).slice(0, 4)).to.deep.equal(
      names(4).map((n) => `create health/${n}`),
    );
    expect(writes.filter((w) => w === 'patch policy/p')).to.have.length(1);
    expect(cluster.health('n019')!.status!.stuckPodCount).to.equal(1);
  });

  it('writes 8 at once by default', async () => {
    const { cluster, reconciler, stats } = setup(30);
    for (const node of names(30)) cluster.pods.push(unknownStuck(`web-${node}`, node));
    await reconciler.reconcile('p');
    expect(stats.peak).to.equal(8);
  });

  it('in a storm of routine changes writes urgent news before the routine reports queued ahead of it, then every one', async () => {
    const { cluster, reconciler } = setup(100, 1);
    for (const node of names(100)) cluster.pods.push(unknownStuck(`a-${node}`, node));
    await reconciler.reconcile('p'); // every node Degraded: new objects and a state change are urgent, all written
    expect(reconciler.lastPass).to.deep.include({ full: true, observed: 100 });
    expect(cluster.takeWrites().filter((w) => w.startsWith('patch health/'))).to.have.length(100);
    cluster.takeEvents();

    // A second slow pod on every node (routine: no new state, no known cause), and on the last node, news.
    for (const node of names(100)) {
      cluster.pods.push(unknownStuck(`b-${node}`, node));
      reconciler.markDirty('p', node);
    }
    const news = aPod().named('io').onNode('n099').waitingSince(T0).build();
    cluster.pods.push(news);
    cluster.events.push(anEvent().about(news).saying(nameReservedMessage(news)).build());
    await reconciler.reconcile('p');
    // One write at a time: n000 was under way when the rest were asked for, 98 routine ones in line before the news.
    expect(reconciler.lastPass).to.deep.include({ full: false, observed: 100, reported: 100, deferred: 99 });
    const writes = cluster.takeWrites().filter((w) => w.startsWith('patch health/'));
    expect(writes.slice(0, 2)).to.deep.equal(['patch health/n000', 'patch health/n099']);
    expect(writes).to.have.length(100);
    expect(cluster.health('n099')!.status!.stuckPods!.map((p) => p.name)).to.include('io');
    expect(cluster.health('n098')!.status!.stuckPodCount).to.equal(2);

    await reconciler.reconcile('p');
    expect(reconciler.lastPass).to.deep.include({ observed: 0, reported: 0 });
    expect(cluster.takeWrites()).to.deep.equal([]);
  });
});
