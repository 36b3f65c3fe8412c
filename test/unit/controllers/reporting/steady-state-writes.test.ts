// A node whose verdict does not change must cost no SandboxHealth write, however its readings and kubelet's
// retries move: the reconciler patches only what differs (report()), so the desired status must be byte-identical.
import { silentLogger } from '../../../../src/observability/log.js';
import { expect } from 'chai';
import { DryRunActuator } from '../../../../src/actuation/actuator.js';
import type { IoReadingStatus } from '../../../../src/api/v1alpha1/index.js';
import type { ControllerDeps } from '../../../../src/controllers/manager/wiring.js';
import { byObject, settledControllers } from '../../../support/reconciler.js';
import type { EventView } from '../../../../src/detection/index.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster, tellOfChanges } from '../../../support/memory-cluster.js';

const quiet = silentLogger;

/** One node under pressure with a stuck pod; the agent's reading and the pod's failure Event are ours to move. */
function world() {
  const cluster = new MemoryCluster()
    .addPolicy('p', {
      detection: { stuckThresholdSeconds: 30 },
      ioPressure: { sustainSeconds: 0, recoverySeconds: 30, staleAfterSeconds: 90 },
      remediation: { cordon: false, evictStuckPods: false },
      safety: { maxUnhealthyNodes: 1 },
    })
    .addNodes(aNode('n1'));
  const clock = new FakeClock(secondsAfter(T0, 60).getTime());
  let values: Partial<IoReadingStatus> = { psiSomeAvg10Percent: 55.2, diskBusyPercent: 97.1 };
  const sources: ControllerDeps['sources'] = () => ({
    kind: 'agent',
    pollMs: 10_000,
    refresh: () => Promise.resolve(),
    read: () => ({ source: 'agent', observedTime: new Date(clock.now()).toISOString(), ...values }),
  });
  const reconciler = settledControllers({
    writeConcurrency: 1, // one write at a time: the tests assert the exact order of writes
    cache: cluster,
    writer: cluster,
    recorder: cluster,
    actuators: { real: cluster, dryRun: new DryRunActuator() },
    workloads: cluster,
    clock,
    logger: quiet,
    sources,
  }).reconciler;
  tellOfChanges(cluster, reconciler);
  const pod = aPod().named('web-1').onNode('n1').waitingSince(T0).build();
  cluster.pods = [pod];
  const event = anEvent()
    .about(pod)
    .saying(nameReservedMessage(pod))
    .times(3)
    .at(secondsAfter(T0, 50))
    .build();
  cluster.events = [event];
  /** kubelet retried: the same Event, counted again, a new lastTimestamp. */
  const retry = (count: number) => {
    const next: EventView = { ...event, count, lastTime: new Date(clock.now()) };
    cluster.events = [next];
    cluster.changed('n1');
  };
  const read = (next: Partial<IoReadingStatus>) => {
    values = next;
    cluster.changed('n1'); // the agent's write to SandboxHealth, as the informer tells of it
  };
  return { cluster, clock, reconciler, retry, read };
}

describe('PolicyReconciler steady state', () => {
  it('writes nothing when readings move but the verdict holds, nor for retries within a failureCount step', async () => {
    const { cluster, clock, reconciler, retry, read } = world();
    await reconciler.reconcile('p');
    // The report goes at once (nothing is done on the node), beside the Node condition the decision writes.
    expect(byObject(cluster.takeWrites())).to.deep.equal(
      byObject(['create health/n1', 'patch health/n1', 'set condition node/n1', 'patch policy/p']),
    );
    expect(cluster.takeEvents()).to.have.members([
      'Node/n1 Warning SandboxCreationDegraded',
      'Node/n1 Warning IoPressureHigh',
      'Pod/web-1 Warning SandboxCreationStuck',
      'Node/n1 Warning NodeConditionSet',
    ]);
    const first = JSON.stringify(cluster.health('n1')!.status);
    const pressure = cluster.health('n1')!.status!.conditions!.find((c) => c.type === 'IoPressureHigh');
    expect(pressure).to.include({
      status: 'True',
      reason: 'ThresholdSustained',
      message: `Over threshold since ${secondsAfter(T0, 60).toISOString()}: PSI some avg10 >= 40%; disk busy >= 90%.`,
    });
    expect(cluster.health('n1')!.status!.stuckPods![0]).to.include({
      failureCount: 2,
      causeSince: secondsAfter(T0, 50).toISOString(),
    });

    for (const [seconds, values, count] of [
      [5, { psiSomeAvg10Percent: 71.8, diskBusyPercent: 92.4 }, 4],
      [10, { psiSomeAvg10Percent: 43.0, diskBusyPercent: 99.9 }, 4],
    ] as const) {
      clock.advance(seconds * 1000);
      read(values);
      retry(count);
      await reconciler.reconcile('p');
      expect(cluster.takeWrites(), `after ${seconds}s`).to.deep.equal([]);
      expect(cluster.takeEvents()).to.deep.equal([]);
      expect(JSON.stringify(cluster.health('n1')!.status)).to.equal(first);
    }

    // The fifth failure is the next step: one write, and the cause's time stays where it was.
    clock.advance(5000);
    retry(5);
    await reconciler.reconcile('p');
    expect(cluster.takeWrites()).to.deep.equal(['patch health/n1']);
    expect(cluster.health('n1')!.status!.stuckPods![0]).to.include({
      failureCount: 5,
      causeSince: secondsAfter(T0, 50).toISOString(),
    });

    // Which signals are over changes around the thresholds: the message keeps naming those of the run's start.
    read({ psiSomeAvg10Percent: 12, diskBusyPercent: 97.1 });
    await reconciler.reconcile('p');
    expect(cluster.takeWrites()).to.deep.equal([]);
    // Under every threshold: a new reason, a new message, one write (and the policy's counts change).
    read({ psiSomeAvg10Percent: 12, diskBusyPercent: 20 });
    await reconciler.reconcile('p');
    expect(cluster.takeWrites()).to.deep.equal(['patch health/n1', 'patch policy/p']);
    expect(cluster.health('n1')!.status!.conditions!.find((c) => c.type === 'IoPressureHigh')).to.include({
      status: 'True',
      reason: 'RecoveryPending',
    });
    expect(cluster.takeEvents()).to.deep.equal([]);
  });
});
