// The Manager as the operator runs it, over the in-memory cluster: two workers, the policy queue and the sweeper's.
import { expect } from 'chai';
import { DryRunActuator } from '../../../../src/actuation/actuator.js';
import { Manager } from '../../../../src/controllers/manager/manager.js';
import { silentLogger } from '../../../../src/observability/log.js';
import { OperatorMetrics } from '../../../../src/observability/metrics.js';
import { Fence } from '../../../../src/runtime/fence.js';
import { aPod, anEvent, nameReservedMessage, T0 } from '../../../support/builders.js';
import { aNode, RunningMemoryCluster } from '../../../support/memory-cluster.js';

/** Counts the calls made to an object's methods, before they reach it. */
function counted<T extends object>(target: T): { proxy: T; calls: string[] } {
  const calls: string[] = [];
  const proxy = new Proxy(target, {
    get(object, property, receiver) {
      const value: unknown = Reflect.get(object, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        calls.push(String(property));
        return (value as (...a: unknown[]) => unknown).apply(object, args);
      };
    },
  });
  return { proxy, calls };
}

function aManager(cluster: RunningMemoryCluster) {
  const fence = new Fence();
  // Counted outside the fence: what the controllers ask to write, whether the fence lets it through or not.
  const writer = counted(fence.guard(cluster));
  const manager = new Manager({
    cache: cluster,
    writer: writer.proxy,
    recorder: fence.guard(cluster),
    actuators: { real: fence.guard(cluster), dryRun: new DryRunActuator() },
    workloads: cluster,
    sources: () => ({ kind: 'agent', refresh: () => Promise.resolve(), read: () => undefined }),
    fence,
    logger: silentLogger,
    metrics: new OperatorMetrics(),
    workers: 2,
  });
  return { manager, fence, asked: writer.calls };
}

const settle = async (until: () => boolean, rounds = 200) => {
  for (let i = 0; i < rounds && !until(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
};

describe('Manager', () => {
  it('sweeps for orphans in one worker at a time, however many policies the two workers reconcile at once', async () => {
    const cluster = new RunningMemoryCluster()
      .addPolicy('pa', { nodeSelector: { matchLabels: { pool: 'a' } } })
      .addPolicy('pb', { nodeSelector: { matchLabels: { pool: 'b' } } })
      .addNodes(aNode('a1', { pool: 'a' }), aNode('b1', { pool: 'b' }));
    // The SandboxHealth of a node that is gone: an orphan every sweep would delete.
    cluster.healthMap.set('gone', {
      name: 'gone',
      uid: 'h-gone',
      nodeName: 'gone',
      status: { policy: 'p9' },
    });
    let inFlight = 0;
    let most = 0;
    let deletions = 0;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const deleteHealth = cluster.deleteHealth.bind(cluster);
    cluster.deleteHealth = async (name) => {
      deletions++;
      most = Math.max(most, ++inFlight);
      await held;
      inFlight--;
      return deleteHealth(name);
    };
    const { manager } = aManager(cluster);
    await manager.start();
    // Changes keep coming while the first sweep waits on its deletion: each asks for a sweep, and both policies.
    for (let i = 0; i < 5; i++) cluster.changed('a1');
    await settle(() => cluster.health('a1') !== undefined && cluster.health('b1') !== undefined);
    expect(cluster.health('a1'), 'pa reconciled meanwhile').to.not.equal(undefined);
    expect(cluster.health('b1'), 'pb reconciled meanwhile').to.not.equal(undefined);
    expect(most, 'sweeps at once').to.equal(1);
    release();
    await settle(() => cluster.health('gone') === undefined);
    await manager.stop();
    expect(cluster.health('gone')).to.equal(undefined);
    expect(deletions, 'the orphan deleted once').to.equal(1);
  });

  it('runs a pass for each policy from a change, with nothing written once the fence is closed', async () => {
    const cluster = new RunningMemoryCluster()
      .addPolicy('p', { detection: { stuckThresholdSeconds: 30 }, ioPressure: { sustainSeconds: 0 } })
      .addNodes(aNode('n1'));
    const { manager, fence, asked } = aManager(cluster);
    await manager.start();
    await settle(() => cluster.health('n1')?.status?.state === 'Healthy');
    expect(cluster.health('n1')!.status!.state).to.equal('Healthy');
    manager.fence();
    expect(fence.mayAct()).to.equal(false);
    cluster.takeWrites();
    const pod = aPod().named('web-1').onNode('n1').waitingSince(T0).build();
    cluster.pods.push(pod);
    cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
    const before = asked.length;
    cluster.changed('n1');
    await settle(() => asked.length > before);
    await manager.stop();
    expect(asked.length, 'the pass ran and asked to write').to.be.greaterThan(before);
    expect(cluster.takeWrites(), 'a fenced replica writes nothing').to.deep.equal([]);
    expect(cluster.health('n1')!.status!.stuckPodCount).to.equal(0);
  });

  it("drops its stand-in for the policy status once the watch shows its write, so that someone else's edit counts", async () => {
    const cluster = new RunningMemoryCluster().addPolicy('p', {}).addNodes(aNode('n1'));
    cluster.lagging = true; // our first status write is not in the cache yet: the mutation cache stands in for it
    const { manager, asked } = aManager(cluster);
    await manager.start();
    await settle(() => asked.includes('patchPolicyStatus'));
    await settle(() => false, 20);
    cluster.lagging = false;
    cluster.deliver(); // the watch shows it: the policy's event drops the stand-in
    // Someone else empties the conditions (kubectl edit --subresource=status): a pass on its event writes them again.
    await cluster.patchPolicyStatus('p', { conditions: [] });
    const valid = () =>
      cluster.policyMap.get('p')!.status?.conditions?.some((c) => c.type === 'Valid') === true;
    await settle(valid);
    await manager.stop();
    expect(valid(), 'the pass read the edited status, not its own last write').to.equal(true);
  });

  it('sweeps on a Deployment change: resumes what a gone policy paused', async () => {
    const cluster = new RunningMemoryCluster().addPolicy('p', {}).addNodes(aNode('n1'));
    const { manager } = aManager(cluster);
    await manager.start();
    await settle(() => cluster.health('n1') !== undefined);
    // A Deployment a deleted policy paused shows up (restored from a backup, say): only its change tells of it.
    cluster.deploymentMap.set('shop/web', {
      kind: 'Deployment',
      namespace: 'shop',
      name: 'web',
      uid: 'uid-web',
      generation: 2,
      paused: true,
      createdAt: T0,
      rollingOut: true,
      stamps: { policy: 'gone', since: T0, reason: 'RolloutQueued', startedAt: T0 },
    });
    cluster.tell({ kind: 'Deployment', type: 'add', key: 'shop/web' });
    await settle(() => !cluster.deploymentMap.get('shop/web')!.paused);
    await manager.stop();
    expect(cluster.deploymentMap.get('shop/web')).to.include({ paused: false });
    expect(cluster.deploymentMap.get('shop/web')!.stamps).to.equal(undefined);
  });
});
