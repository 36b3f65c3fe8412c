// The SandboxCreationDegraded Node condition: held through an incident, escalated, and taken back.
import { expect } from 'chai';
import { toApiTime } from '../../../../src/api/v1alpha1/index.js';
import { secondsAfter } from '../../../support/builders.js';
import { MemoryCluster } from '../../../support/memory-cluster.js';
import {
  NODES,
  LOW,
  START,
  policySpec,
  world,
  replicaSetPodsOn,
} from '../../../support/remediation-world.js';

describe('PolicyReconciler and the Node condition', () => {
  const apiAt = (seconds: number) => toApiTime(secondsAfter(START, seconds));
  const own = (cluster: MemoryCluster, node = 'n1') => cluster.nodeMap.get(node)!.ownCondition;
  const conditionWrites = (cluster: MemoryCluster) =>
    cluster.takeWrites().filter((w) => w.includes('condition'));
  const conditionEvents = (cluster: MemoryCluster) =>
    cluster.takeEvents().filter((e) => /NodeCondition|RemediationExhausted/.test(e));

  describe('while its own write is in flight', () => {
    /** Holds the next condition write; resolves once it has reached the API, with the hand that releases it. */
    const holdConditionWrite = async (cluster: MemoryCluster) => {
      const write = cluster.holdConditionWrite();
      await write.reached();
      return write.release;
    };

    it('writes it once when a look ran during the write and the next pass runs before the watch shows it', async () => {
      const { cluster, reconciler, applies } = world(policySpec({}, { nodeCondition: true, cordon: false }));
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      cluster.lagging = true;
      await reconciler.pass('p'); // decides the condition alone: no node patch
      const release = await holdConditionWrite(cluster);
      cluster.deliver(); // the reports so far; the condition is not written yet
      await reconciler.pass('p'); // a look at n1 as it was before the write
      release();
      await applies.idle();
      await reconciler.reconcile('p'); // the pass the apply asks for, before the watch shows the condition
      expect(conditionWrites(cluster)).to.deep.equal(['set condition node/n1']);
      cluster.deliver();
      await reconciler.reconcile('p');
      expect(conditionWrites(cluster)).to.deep.equal([]);
      expect(own(cluster)).to.include({ status: 'True', reason: 'IoSaturated' });
    });
  });

  it('holds True through the incident with one lastTransitionTime, across a restart, and turns False on recovery', async () => {
    const { cluster, clock, readings, reconciler, start } = world(policySpec({}, { nodeCondition: true }));
    replicaSetPodsOn(cluster, 'n1', 'web-1', 'web-2');
    await reconciler.reconcile('p');
    expect(conditionWrites(cluster)).to.deep.equal(['set condition node/n1']);
    expect(conditionEvents(cluster)).to.deep.equal(['Node/n1 Warning NodeConditionSet']);
    const set = own(cluster)!;
    expect(set).to.include({ status: 'True', reason: 'IoSaturated', lastTransitionTime: apiAt(0) });
    expect(set.message).to.match(/^2 pods stuck creating their sandbox for an IO cause; IO pressure proven/);
    for (const node of NODES.slice(1)) expect(own(cluster, node), node).to.equal(undefined);

    // The stuck pods are evicted and leave; the disk stays saturated: still True, since the same moment.
    await reconciler.reconcile('p');
    cluster.pods = [];
    clock.advance(70_000);
    await reconciler.reconcile('p');
    expect(own(cluster)).to.include({ status: 'True', reason: 'IoSaturated', lastTransitionTime: apiAt(0) });
    conditionEvents(cluster);

    // A restarted operator reads the condition back and rewrites neither its status nor its time.
    const restarted = start().reconciler;
    clock.advance(5_000);
    await restarted.reconcile('p');
    expect(own(cluster)).to.include({ status: 'True', lastTransitionTime: apiAt(0) });
    expect(conditionEvents(cluster)).to.deep.equal([]);

    // Recovered (recoverySeconds 30 of low readings): False, reason Recovered, a new transition time, one Event.
    readings.set('n1', LOW);
    clock.advance(10_000);
    await restarted.reconcile('p');
    expect(own(cluster)?.status, 'recovering is not recovered').to.equal('True');
    clock.advance(30_000);
    await restarted.reconcile('p');
    expect(own(cluster)).to.include({ status: 'False', reason: 'Recovered', lastTransitionTime: apiAt(115) });
    expect(conditionEvents(cluster)).to.deep.equal(['Node/n1 Normal NodeConditionCleared']);
    clock.advance(120_000);
    await restarted.reconcile('p');
    expect(own(cluster)).to.include({ status: 'False', lastTransitionTime: apiAt(115) });
  });

  it('escalates with RemediationExhausted once the fenced, emptied node stays saturated for afterSeconds', async () => {
    const { cluster, clock, reconciler } = world(
      policySpec({}, { nodeCondition: true, escalation: { afterSeconds: 600 } }),
    );
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    cluster.pods = [];
    clock.advance(599_000);
    await reconciler.reconcile('p');
    expect(own(cluster)).to.include({ status: 'True', reason: 'IoSaturated' });
    conditionEvents(cluster);
    clock.advance(1_000);
    await reconciler.reconcile('p');
    expect(own(cluster)).to.include({
      status: 'True',
      reason: 'RemediationExhausted',
      lastTransitionTime: apiAt(0),
    });
    expect(own(cluster)!.message).to.match(/^Still IO-saturated since policy p fenced the node at \S+Z, /);
    // The message holds: a minute on, the refresh finds nothing to write.
    clock.advance(61_000);
    cluster.takeWrites();
    await reconciler.reconcile('p');
    expect(conditionWrites(cluster)).to.deep.equal([]);
    expect(conditionEvents(cluster)).to.deep.equal(['Node/n1 Warning RemediationExhausted']);
    // Nothing more is done by the operator: the node stays cordoned, no more writes but the message's refresh.
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
  });

  it('writes nothing in a dry run or while paused, and removes its condition when nodeCondition turns false', async () => {
    for (const safety of [{ dryRun: true }, { paused: true }]) {
      const { cluster, reconciler } = world(policySpec(safety, { nodeCondition: true }));
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      await reconciler.reconcile('p');
      expect(conditionWrites(cluster), JSON.stringify(safety)).to.deep.equal([]);
      expect(own(cluster)).to.equal(undefined);
    }
    const { cluster, reconciler } = world(policySpec({}, { nodeCondition: true }));
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    await reconciler.reconcile('p');
    expect(own(cluster)?.status).to.equal('True');
    cluster.addPolicy('p', policySpec({}, { nodeCondition: false }));
    cluster.policyMap.get('p')!.generation = 2;
    cluster.changed();
    cluster.takeEvents();
    cluster.takeWrites();
    await reconciler.reconcile('p');
    expect(own(cluster)).to.equal(undefined);
    expect(conditionWrites(cluster)).to.deep.equal(['remove condition node/n1']);
    expect(conditionEvents(cluster)).to.deep.equal(['Node/n1 Normal NodeConditionRemoved']);
  });

  it('switched to a dry run or paused mid-incident, sets nothing more but takes its True back once recovered', async () => {
    for (const safety of [{ dryRun: true }, { paused: true }]) {
      const { cluster, clock, readings, reconciler } = world(policySpec({}, { nodeCondition: true }));
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      await reconciler.reconcile('p');
      expect(own(cluster)?.status).to.equal('True');
      cluster.addPolicy('p', policySpec(safety, { nodeCondition: true }));
      cluster.policyMap.get('p')!.generation = 2;
      cluster.changed();
      cluster.takeWrites();
      cluster.takeEvents();
      // Still saturated, the message due for a refresh: nothing written.
      clock.advance(70_000);
      await reconciler.reconcile('p');
      expect(conditionWrites(cluster), JSON.stringify(safety)).to.deep.equal([]);
      // Recovered: False, so that no health check acts on a verdict this policy no longer keeps.
      cluster.pods = [];
      readings.set('n1', LOW);
      await reconciler.reconcile('p');
      for (const step of [31_000, 31_000]) {
        clock.advance(step);
        await reconciler.reconcile('p');
      }
      expect(own(cluster), JSON.stringify(safety)).to.include({ status: 'False', reason: 'Recovered' });
      expect(conditionWrites(cluster), JSON.stringify(safety)).to.deep.equal(['set condition node/n1']);
      expect(conditionEvents(cluster)).to.deep.equal(['Node/n1 Normal NodeConditionCleared']);
    }
  });

  it('the sweep removes it when the policy is gone, and keeps it while the policy is only invalid', async () => {
    const { cluster, reconciler, sweeper } = world(policySpec({}, { nodeCondition: true }));
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    await reconciler.reconcile('p');
    expect(own(cluster)?.status).to.equal('True');
    cluster.addPolicy('p', { ...policySpec(), safety: { maxUnhealthyNodes: 'lots' } });
    cluster.takeWrites();
    await sweeper.sweep();
    expect(own(cluster)?.status, 'frozen with its invalid policy').to.equal('True');
    cluster.policyMap.delete('p');
    await sweeper.sweep();
    expect(own(cluster)).to.equal(undefined);
    expect(conditionWrites(cluster)).to.deep.equal(['remove condition node/n1']);
  });
});
