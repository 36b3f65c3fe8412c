// Reconcile tests of the medik8s node lease over an in-memory cluster: the guard as a pass reports it (status, Event,
// the moment it lifts), and with safety.nodeLease the exact order of writes: the lease before the fence, renewed by
// the lease controller, released after the undo and when the policy goes.
import { expect } from 'chai';
import { DryRunActuator } from '../../../../src/actuation/actuator.js';
import type { ControllerDeps } from '../../../../src/controllers/manager/wiring.js';
import { settledControllers } from '../../../support/reconciler.js';
import { silentLogger } from '../../../../src/observability/log.js';
import { leaseHolder, type NodeLeaseView } from '../../../../src/policy/node-lease.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster, tellOfChanges } from '../../../support/memory-cluster.js';

const NODES = ['n1', 'n2', 'n3', 'n4', 'n5', 'n6'];
const START = secondsAfter(T0, 60);
const HIGH = { psiSomeAvg10Percent: 55 };
const LOW = { psiSomeAvg10Percent: 2 };

// The Node condition is an observation, written whoever holds the lease; its writes are tested elsewhere, and here only
// where escalation hands the lease on.
const spec = (
  safety: Record<string, unknown> = {},
  remediation: Record<string, unknown> = { nodeCondition: false },
) => ({
  detection: { stuckThresholdSeconds: 30 },
  ioPressure: { sustainSeconds: 0, recoverySeconds: 30, staleAfterSeconds: 3600 },
  remediation,
  safety: { maxUnhealthyNodes: 1, cooldownSeconds: 60, ...safety },
});

/** Six nodes, policy p, web-1 stuck on n1 whose IO reads high; a polled source over `readings`. */
function world(safety: Record<string, unknown> = {}, remediation?: Record<string, unknown>) {
  const cluster = new MemoryCluster()
    .addPolicy('p', spec(safety, remediation))
    .addNodes(...NODES.map((n) => aNode(n)));
  const readings = new Map(NODES.map((n) => [n, n === 'n1' ? HIGH : LOW]));
  const clock = new FakeClock(START.getTime());
  const sources: ControllerDeps['sources'] = () => ({
    kind: 'prometheus',
    pollMs: 10_000,
    refresh: () => Promise.resolve(),
    read: (node: string) => ({
      source: 'prometheus',
      observedTime: new Date(clock.now()).toISOString(),
      ...readings.get(node)!,
    }),
  });
  const controllers = settledControllers({
    writeConcurrency: 1,
    cache: cluster,
    writer: cluster,
    recorder: cluster,
    actuators: { real: cluster, dryRun: new DryRunActuator() },
    workloads: cluster,
    clock,
    logger: silentLogger,
    sources,
  });
  tellOfChanges(cluster, controllers.reconciler);
  const pod = {
    ...aPod().named('web-1').onNode('n1').waitingSince(T0).build(),
    controllerKind: 'ReplicaSet',
  };
  cluster.pods.push(pod);
  cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
  return { cluster, clock, readings, ...controllers };
}

const nhcLease = (renewTime: Date, durationSeconds = 300): NodeLeaseView => ({
  node: 'n1',
  uid: 'nhc-lease',
  holder: 'NodeHealthCheck-nhc',
  acquireTime: renewTime,
  renewTime,
  durationSeconds,
  transitions: 0,
});
const blockedOf = (cluster: MemoryCluster) =>
  (cluster.health('n1')?.status?.blocked ?? []).map((b) => `${b.kind} ${b.guard}: ${b.message}`);
const nodeAndLeaseWrites = (cluster: MemoryCluster) =>
  cluster.takeWrites().filter((w) => w.includes('node/') || w.includes('lease/'));

describe('the medik8s node lease in a pass', () => {
  it('holds the cordon while another holder has the node, says so in status and an Event, and cordons once it expires', async () => {
    const { cluster, clock, reconciler } = world();
    cluster.putLease(nhcLease(START));
    await reconciler.reconcile('p');
    expect(nodeAndLeaseWrites(cluster), 'the node untouched').to.deep.equal([]);
    const until = secondsAfter(START, 300).toISOString();
    expect(blockedOf(cluster)).to.deep.equal([
      `Cordon NodeLease: medik8s-leases/node-n1 is held by NodeHealthCheck-nhc until ${until}: hands off while another holder has the node`,
    ]);
    expect(cluster.takeEvents()).to.include('Node/n1 Warning RemediationBlocked');

    clock.advance(299_000);
    await reconciler.reconcile('p');
    expect(nodeAndLeaseWrites(cluster), 'held to the last second').to.deep.equal([]);
    clock.advance(1_001);
    await reconciler.reconcile('p');
    expect(nodeAndLeaseWrites(cluster), 'no lease taken without safety.nodeLease').to.deep.equal([
      'patch node/n1',
    ]);
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
    expect(blockedOf(cluster)).to.deep.equal([]);
  });

  it('with safety.nodeLease takes the lease before the cordon, renews it, and releases it after the undo', async () => {
    const { cluster, clock, readings, reconciler, leases } = world({ nodeLease: true });
    await reconciler.reconcile('p');
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal(['create lease/node-n1', 'patch node/n1']);
    expect(cluster.nodeLease('n1')).to.deep.include({
      holder: leaseHolder('p'),
      durationSeconds: 120,
      renewTime: START,
      acquireTime: START,
      transitions: 0,
    });
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);

    // The lease controller renews it once half of it is gone, and keeps its acquireTime.
    expect(await leases.reconcile()).to.deep.equal({ requeueAfterMs: 60_000 });
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal([]);
    clock.advance(60_000);
    await leases.reconcile();
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal(['update lease/node-n1']);
    expect(cluster.nodeLease('n1')).to.deep.include({
      renewTime: secondsAfter(START, 60),
      acquireTime: START,
    });

    // Recovery: the stuck pod gone, the IO low for recoverySeconds, and the cooldown over: uncordon, then release.
    cluster.pods = [];
    readings.set('n1', LOW);
    await reconciler.reconcile('p');
    clock.advance(31_000);
    await reconciler.reconcile('p');
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal(['patch node/n1', 'delete lease/node-n1']);
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(false);
    expect(cluster.nodeLease('n1')).to.equal(undefined);
  });

  it('with safety.nodeLease gives the lease up once the node is RemediationExhausted, for NodeHealthCheck to take', async () => {
    const { cluster, clock, reconciler, leases } = world(
      { nodeLease: true },
      { escalation: { afterSeconds: 60 } },
    );
    await reconciler.reconcile('p');
    expect(nodeAndLeaseWrites(cluster)).to.include.members(['create lease/node-n1', 'patch node/n1']);
    cluster.pods = []; // evicted: nothing left to move, the IO still high
    clock.advance(30_000);
    await reconciler.reconcile('p');
    await leases.reconcile();
    expect(cluster.nodeLease('n1')?.holder, 'held while the operator still remediates').to.equal(
      leaseHolder('p'),
    );
    cluster.takeWrites();

    clock.advance(31_000);
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.ownCondition).to.include({
      status: 'True',
      reason: 'RemediationExhausted',
    });
    await leases.reconcile();
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal(['set condition node/n1', 'delete lease/node-n1']);
    expect(cluster.nodeLease('n1')).to.equal(undefined);
    expect(cluster.nodeMap.get('n1')!.unschedulable, 'the cordon stays').to.equal(true);
    // Held by NodeHealthCheck now; nothing of ours takes it back, the renewals included.
    cluster.putLease(nhcLease(new Date(clock.now())));
    clock.advance(60_000);
    await reconciler.reconcile('p');
    await leases.reconcile();
    expect(nodeAndLeaseWrites(cluster).filter((w) => w.includes('lease/'))).to.deep.equal([]);
    expect(cluster.nodeLease('n1')?.holder).to.equal('NodeHealthCheck-nhc');
  });

  it('with safety.nodeLease takes over an expired lease of another, and never an unexpired one', async () => {
    const { cluster, clock, reconciler } = world({ nodeLease: true });
    cluster.putLease(nhcLease(START, 30));
    await reconciler.reconcile('p');
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal([]);
    expect(cluster.nodeLease('n1')?.holder).to.equal('NodeHealthCheck-nhc');

    clock.advance(30_001);
    await reconciler.reconcile('p');
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal(['update lease/node-n1', 'patch node/n1']);
    expect(cluster.nodeLease('n1')).to.deep.include({
      holder: leaseHolder('p'),
      acquireTime: new Date(clock.now()),
      transitions: 1,
    });
  });

  it('fences no node whose lease it could not take, and says why', async () => {
    const { cluster, reconciler } = world({ nodeLease: true });
    cluster.writeNodeLease = () =>
      Promise.reject(Object.assign(new Error('leases is forbidden'), { code: 403 }));
    await reconciler.reconcile('p');
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal([]);
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(false);
    expect(blockedOf(cluster)).to.have.length(1);
    expect(blockedOf(cluster)[0]).to.match(
      /^Cordon NodeLease: could not take medik8s-leases\/node-n1 before fencing \(safety.nodeLease\): .*forbidden/,
    );
  });

  it('releases the lease of a deleted policy, of one that stopped asking for leases, and never one not ours', async () => {
    const { cluster, reconciler, leases } = world({ nodeLease: true });
    await reconciler.reconcile('p');
    cluster.putLease({ ...nhcLease(START), node: 'n2', uid: 'nhc-n2' });
    cluster.takeWrites();
    cluster.policyMap.set('p', { ...cluster.policy('p')!, generation: 2, spec: spec({ nodeLease: false }) });
    await leases.reconcile();
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal(['delete lease/node-n1']);
    expect(cluster.nodeLease('n2')?.holder, "another's stays").to.equal('NodeHealthCheck-nhc');

    // Taken again while the policy asks for it; then the policy goes.
    cluster.policyMap.set('p', { ...cluster.policy('p')!, generation: 3, spec: spec({ nodeLease: true }) });
    await leases.reconcile();
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal(['create lease/node-n1']);
    cluster.policyMap.delete('p');
    await leases.reconcile();
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal(['delete lease/node-n1']);
  });

  it('takes no lease in a dry run, though the guard still holds the node another has', async () => {
    const { cluster, reconciler } = world({ nodeLease: true, dryRun: true });
    await reconciler.reconcile('p');
    expect(nodeAndLeaseWrites(cluster)).to.deep.equal([]);
    expect(cluster.nodeLease('n1')).to.equal(undefined);
    expect(cluster.health('n1')?.status?.actions?.map((a) => `${a.kind} ${a.dryRun}`)).to.deep.equal([
      'Cordon true',
    ]);
  });
});
