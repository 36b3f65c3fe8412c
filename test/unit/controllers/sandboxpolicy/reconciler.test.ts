import { silentLogger } from '../../../../src/observability/log.js';
import { expect } from 'chai';
import { DryRunActuator } from '../../../../src/actuation/actuator.js';
import type { ControllerDeps } from '../../../../src/controllers/manager/wiring.js';
import { settledControllers } from '../../../support/reconciler.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster, tellOfChanges } from '../../../support/memory-cluster.js';

const quiet = silentLogger;

function setup(
  cluster: MemoryCluster,
  startSeconds = 0,
  sources?: ControllerDeps['sources'],
  logger: ControllerDeps['logger'] = quiet,
) {
  const clock = new FakeClock(secondsAfter(T0, startSeconds).getTime());
  const { reconciler, sweeper } = settledControllers({
    writeConcurrency: 1, // one write at a time: the tests assert the exact order of writes
    cache: cluster,
    writer: cluster,
    recorder: cluster,
    actuators: { real: cluster, dryRun: new DryRunActuator() },
    workloads: cluster,
    clock,
    logger,
    ...(sources ? { sources } : {}),
  });
  tellOfChanges(cluster, reconciler);
  return { clock, reconciler, sweeper };
}

const condition = (cluster: MemoryCluster, node: string, type: string) =>
  cluster.health(node)?.status?.conditions?.find((c) => c.type === type);
const policyCondition = (cluster: MemoryCluster, name: string, type: string) =>
  cluster.policy(name)?.status?.conditions?.find((c) => c.type === type);

describe('PolicyReconciler', () => {
  it('reports stuck pods per node with their causes, once, and Events only on transitions', async () => {
    const cluster = new MemoryCluster()
      .addPolicy('p', { detection: { stuckThresholdSeconds: 30 } })
      .addNodes(aNode('n1'), aNode('n2'), aNode('cp', { 'node-role.kubernetes.io/control-plane': '' }));
    const stuck = aPod().named('web-1').onNode('n1').waitingSince(T0).build();
    const fresh = aPod().named('web-2').onNode('n1').waitingSince(secondsAfter(T0, 50)).build();
    cluster.pods = [stuck, fresh];
    cluster.events = [anEvent().about(stuck).saying(nameReservedMessage(stuck)).times(4).build()];
    const { clock, reconciler } = setup(cluster, 60);

    const result = await reconciler.reconcile('p');
    expect(cluster.takeWrites()).to.deep.equal([
      'create health/n1',
      'patch health/n1',
      'create health/n2',
      'patch health/n2',
      'patch policy/p',
    ]);
    expect(cluster.takeEvents()).to.deep.equal([
      'Node/n1 Warning SandboxCreationDegraded',
      'Pod/web-1 Warning SandboxCreationStuck',
    ]);
    const n1 = cluster.health('n1')!.status!;
    expect(n1).to.include({ policy: 'p', state: 'Degraded', stuckPodCount: 1, ioEvidence: 'IoSuspected' });
    expect(n1.stuckPods![0]).to.include({
      name: 'web-1',
      cause: 'NameReserved',
      failureCount: 2, // 4 failures, published in steps of 1, 2, 5, 10, ...
      reservedFor: 'ab'.repeat(32),
    });
    expect(n1.causes).to.deep.equal([{ cause: 'NameReserved', count: 1 }]);
    expect(n1.runtime).to.deep.include({ version: 'containerd://1.6.0', predatesMountFix: false });
    expect(condition(cluster, 'n1', 'SandboxCreationDegraded')).to.include({
      status: 'True',
      reason: 'StuckPodsAboveThreshold',
    });
    expect(condition(cluster, 'n2', 'SandboxCreationDegraded')).to.include({
      status: 'False',
      reason: 'NoStuckPods',
    });
    expect(cluster.health('cp')).to.equal(undefined);
    expect(cluster.policy('p')!.status).to.include({
      matchedNodes: 2,
      degradedNodes: 1,
      observedGeneration: 1,
    });
    expect(policyCondition(cluster, 'p', 'Valid')).to.include({ status: 'True' });
    // web-2 crosses the 30 s threshold at t=80 s: the reconciler asks to come back then.
    expect(result.requeueAfterMs).to.equal(20_000);

    // Nothing changed: no writes, no Events.
    await reconciler.reconcile('p');
    expect(cluster.takeWrites()).to.deep.equal([]);
    expect(cluster.takeEvents()).to.deep.equal([]);

    // web-2 becomes stuck too, no failure message yet: listed, with no Event of its own (its cause is not known),
    // the node Event is not repeated, lastTransitionTime kept.
    const since = condition(cluster, 'n1', 'SandboxCreationDegraded')!.lastTransitionTime;
    clock.advance(20_000);
    await reconciler.reconcile('p');
    expect(cluster.takeEvents()).to.deep.equal([]);
    expect(cluster.health('n1')!.status!.stuckPodCount).to.equal(2);
    expect(cluster.health('n1')!.status!.ioEvidence).to.equal('IoSuspected');
    expect(condition(cluster, 'n1', 'SandboxCreationDegraded')!.lastTransitionTime).to.equal(since);

    // The incident ends: pods run (the informer reports them gone from the Pending cache), one recovery Event.
    cluster.pods = [];
    cluster.changed('n1');
    await reconciler.reconcile('p');
    expect(cluster.takeEvents()).to.deep.equal(['Node/n1 Normal SandboxCreationRecovered']);
    expect(cluster.health('n1')!.status).to.include({ state: 'Healthy', stuckPodCount: 0 });
    expect(cluster.health('n1')!.status!.stuckPods).to.deep.equal([]);
  });

  it('does not call a CNI incident an IO suspect', async () => {
    const cluster = new MemoryCluster()
      .addPolicy('p', { detection: { stuckThresholdSeconds: 30 } })
      .addNodes(aNode('n1'));
    const pod = aPod().named('cni').onNode('n1').waitingSince(T0).build();
    cluster.pods = [pod];
    cluster.events = [
      anEvent()
        .about(pod)
        .saying('failed to setup network for sandbox "x": no IP addresses available in range set')
        .build(),
    ];
    await setup(cluster, 60).reconciler.reconcile('p');
    expect(cluster.health('n1')!.status).to.include({ ioEvidence: 'NotIo', state: 'Degraded' });
    expect(cluster.health('n1')!.status!.stuckPods![0]!.cause).to.equal('Network');
  });

  it('reports an invalid policy with every problem and acts on nothing for it', async () => {
    const cluster = new MemoryCluster()
      .addPolicy('bad', {
        ioPressure: { source: 'prometheus' },
        remediation: { migrateWorkloads: { podSelector: {} } },
      })
      .addNodes(aNode('n1'));
    await setup(cluster).reconciler.reconcile('bad');
    expect(cluster.takeWrites()).to.deep.equal(['patch policy/bad']);
    const status = cluster.policy('bad')!.status!;
    expect(status.problems!.map((p) => p.field)).to.deep.equal([
      'spec.ioPressure.prometheus',
      'spec.remediation.migrateWorkloads.podSelector',
    ]);
    expect(policyCondition(cluster, 'bad', 'Valid')).to.include({ status: 'False', reason: 'InvalidSpec' });
    expect(policyCondition(cluster, 'bad', 'Valid')!.message).to.contain('spec.ioPressure.prometheus');
    expect(cluster.health('n1')).to.equal(undefined);
  });

  it('gives a node to the more specific policy, then the older, and says so in the other status', async () => {
    const cluster = new MemoryCluster()
      .addPolicy('broad', {}, T0)
      .addPolicy('zone-a', { nodeSelector: { matchLabels: { zone: 'a' } } }, secondsAfter(T0, 10))
      .addPolicy('also-broad', {}, secondsAfter(T0, 5))
      .addNodes(aNode('a1', { zone: 'a' }), aNode('b1', { zone: 'b' }));
    const { reconciler } = setup(cluster);
    for (const name of ['broad', 'zone-a', 'also-broad']) await reconciler.reconcile(name);
    expect(cluster.health('a1')!.status!.policy).to.equal('zone-a');
    expect(cluster.health('b1')!.status!.policy).to.equal('broad');
    expect(cluster.policy('broad')!.status!.overlappingNodes).to.deep.equal([
      { node: 'a1', ownedBy: 'zone-a' },
    ]);
    expect(cluster.policy('also-broad')!.status).to.deep.include({
      matchedNodes: 0,
      overlappingNodes: [
        { node: 'a1', ownedBy: 'zone-a' },
        { node: 'b1', ownedBy: 'broad' },
      ],
    });
  });

  it('deletes the SandboxHealth of a node no policy owns any more, but freezes those of an invalid policy', async () => {
    const cluster = new MemoryCluster().addPolicy('p', {}).addNodes(aNode('n1'), aNode('n2'));
    const { reconciler, sweeper } = setup(cluster);
    await reconciler.reconcile('p');
    cluster.nodeMap.set('n2', aNode('n2', { 'sandbox.remediator.io/exclude': 'true' }));
    cluster.takeWrites();
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.takeWrites()).to.include('delete health/n2');

    cluster.policyMap.set('p', {
      ...cluster.policy('p')!,
      generation: 2,
      spec: { detection: { stuckThresholdSeconds: -1 } },
    });
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.takeWrites()).to.deep.equal(['patch policy/p']);
    expect(cluster.health('n1')).to.not.equal(undefined);

    cluster.policyMap.delete('p');
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.takeWrites()).to.deep.equal(['delete health/n1']);
  });

  it('reports a paused or dry-run policy in its Active condition', async () => {
    const cluster = new MemoryCluster()
      .addPolicy('paused', { safety: { paused: true } })
      .addPolicy('dry', { safety: { dryRun: true } }, secondsAfter(T0, 1));
    const { reconciler } = setup(cluster);
    await reconciler.reconcile('paused');
    await reconciler.reconcile('dry');
    expect(policyCondition(cluster, 'paused', 'Active')).to.include({ status: 'False', reason: 'Paused' });
    expect(policyCondition(cluster, 'dry', 'Active')).to.include({ status: 'True', reason: 'DryRun' });
  });
});

describe('PolicyReconciler with IO readings', () => {
  function setupWithSource(readings: Map<string, Record<string, unknown>>) {
    const cluster = new MemoryCluster()
      .addPolicy('p', {
        detection: { stuckThresholdSeconds: 30 },
        ioPressure: { sustainSeconds: 30, recoverySeconds: 60 },
      })
      .addNodes(aNode('n1'));
    const stuck = aPod().named('web').onNode('n1').waitingSince(T0).build();
    cluster.pods = [stuck];
    cluster.events = [anEvent().about(stuck).saying(nameReservedMessage(stuck)).build()];
    // The source reads the clock setup() creates: bound late, after setup returns it.
    const ref: { clock?: FakeClock } = {};
    const { clock, reconciler } = setup(cluster, 60, () => ({
      kind: 'prometheus',
      pollMs: 10_000,
      refresh: () => Promise.resolve(),
      read: (node: string) => {
        const r = readings.get(node);
        return r
          ? { source: 'prometheus', observedTime: new Date(ref.clock!.now()).toISOString(), ...r }
          : undefined;
      },
    }));
    ref.clock = clock;
    return { cluster, clock, reconciler };
  }

  it('raises IoPressureHigh after sustainSeconds, reports state IoPressure, and recovers after recoverySeconds', async () => {
    const readings = new Map([['n1', { psiSomeAvg10Percent: 55 }]]);
    const { cluster, clock, reconciler } = setupWithSource(readings);
    const first = await reconciler.reconcile('p');
    expect(condition(cluster, 'n1', 'IoPressureHigh')).to.include({
      status: 'False',
      reason: 'ThresholdNotSustained',
    });
    expect(cluster.health('n1')!.status!.ioReading).to.include({
      source: 'prometheus',
      psiSomeAvg10Percent: 55,
    });
    expect(first.requeueAfterMs).to.equal(10_000); // the poll interval comes before the 30 s sustain
    cluster.takeEvents();

    clock.advance(30_000);
    await reconciler.reconcile('p');
    expect(condition(cluster, 'n1', 'IoPressureHigh')).to.include({
      status: 'True',
      reason: 'ThresholdSustained',
    });
    expect(cluster.health('n1')!.status!.state).to.equal('IoPressure');
    // One node: maxUnhealthyNodes 20% allows it, but minSchedulableNodes 1 holds the cordon (none would be left).
    // The verdict is written to the node even where a guard holds every action. The report of a node nothing is done
    // on goes at once, beside the decision's writes.
    expect(cluster.takeEvents()).to.deep.equal([
      'Node/n1 Warning IoPressureHigh',
      'Node/n1 Warning RemediationBlocked',
      'Node/n1 Warning NodeConditionSet',
    ]);
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(false);

    readings.set('n1', { psiSomeAvg10Percent: 2 });
    clock.advance(10_000);
    await reconciler.reconcile('p');
    expect(cluster.health('n1')!.status!.state).to.equal('Recovering');
    clock.advance(60_000);
    await reconciler.reconcile('p');
    expect(condition(cluster, 'n1', 'IoPressureHigh')).to.include({ status: 'False', reason: 'Recovered' });
    expect(cluster.takeEvents()).to.deep.equal(['Node/n1 Normal IoPressureRecovered']);
    expect(cluster.health('n1')!.status!.state).to.equal('Degraded');
  });

  it('reports Unknown, not Under, when the source has no reading', async () => {
    const { cluster, reconciler } = setupWithSource(new Map());
    await reconciler.reconcile('p');
    expect(condition(cluster, 'n1', 'IoPressureHigh')).to.include({
      status: 'Unknown',
      reason: 'ReadingUnknown',
    });
    expect(cluster.health('n1')!.status!.ioPressure).to.include({ observation: 'Unknown' });
    expect(cluster.health('n1')!.status!.state).to.equal('Degraded');
  });
});

describe('PolicyReconciler when the IO source fails', () => {
  it('warns once per change of error, says when reading works again, and names the reason a source gives', async () => {
    const cluster = new MemoryCluster()
      .addPolicy('p', { ioPressure: { sustainSeconds: 0 } })
      .addNodes(aNode('n1'));
    let failure: string | undefined = 'connect ECONNREFUSED 127.0.0.1:9090';
    const lines: string[] = [];
    const logger = {
      ...quiet,
      info: (message: string) => lines.push(`info ${message}`),
      warn: (message: string, fields?: Record<string, unknown>) =>
        lines.push(`warn ${message}: ${String(fields?.error)}`),
    };
    const { clock, reconciler } = setup(
      cluster,
      0,
      () => ({
        kind: 'kubeletSummary',
        pollMs: 10_000,
        refresh: () => (failure ? Promise.reject(new Error(failure)) : Promise.resolve()),
        read: () => undefined,
        problem: () => ({ reason: 'SourceForbidden', message: 'the operator may not read nodes/proxy' }),
      }),
      logger,
    );
    const poll = async () => {
      await reconciler.reconcile('p');
      clock.advance(10_000);
    };
    for (let i = 0; i < 3; i++) await poll();
    failure = 'HTTP 503';
    for (let i = 0; i < 2; i++) await poll();
    failure = undefined;
    for (let i = 0; i < 2; i++) await poll();
    const source = lines.filter((l) => /IO pressure/.test(l));
    expect(source).to.deep.equal([
      'warn Failed to read IO pressure: connect ECONNREFUSED 127.0.0.1:9090',
      'warn Failed to read IO pressure: HTTP 503',
      'info Reading IO pressure again',
    ]);
    expect(condition(cluster, 'n1', 'IoPressureHigh')).to.include({
      status: 'Unknown',
      reason: 'SourceForbidden',
    });
    expect(condition(cluster, 'n1', 'IoPressureHigh')?.message).to.match(/nodes\/proxy/);
  });
});
