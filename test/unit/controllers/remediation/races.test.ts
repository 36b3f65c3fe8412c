// Remediation under races and refusals: a change someone made meanwhile is never claimed or undone.
import { expect } from 'chai';
import { TerminalError } from '../../../../src/runtime/controller.js';
import { T0 } from '../../../support/builders.js';
import {
  LOW,
  policySpec,
  world,
  replicaSetPodsOn,
  condition,
  actionsOf,
  blockedOf,
} from '../../../support/remediation-world.js';

describe('PolicyReconciler safety under races and refusals', () => {
  it('claims nothing when someone else cordons the node between its decision and its patch (409)', async () => {
    const { cluster, reconciler, requeues, applies } = world(policySpec());
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    cluster.changeNode('n1', (n) => n); // the node has a resourceVersion from here on
    cluster.beforeNextNodePatch = () => {
      cluster.changeNode('n1', (n) => ({ ...n, unschedulable: true })); // kubectl cordon n1
    };
    await reconciler.reconcile('p');
    expect(requeues, 'the conflict is retried by the queue').to.deep.include({
      policy: 'p',
      after: 'backoff',
    });
    expect(cluster.nodeMap.get('n1')!.stamps, 'the admin cordon carries no stamp of ours').to.equal(
      undefined,
    );
    expect(cluster.takeEvents()).to.not.include('Node/n1 Normal Cordoned');
    expect(actionsOf(cluster, 'n1').filter((a) => a.startsWith('Cordon'))).to.deep.equal([]);

    expect(String(applies.errors.at(-1)), 'the apply failed with the conflict').to.contain('409');
    await reconciler.reconcile('p'); // the retry, after the apply queue's backoff
    expect(cluster.nodeMap.get('n1')!.stamps).to.equal(undefined);
    expect(condition(cluster, 'n1', 'Cordoned')).to.include({ status: 'False', reason: 'CordonedByOthers' });
  });

  it('does not retry a change the apiserver refused (422) until the node or the policy changes', async () => {
    const { cluster, reconciler, clock } = world(policySpec());
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    cluster.failNextNodePatch.set(
      'n1',
      new TerminalError('patch of node/n1 refused: spec.taints: Invalid value'),
    );
    await reconciler.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.startsWith('patch node/'))).to.deep.equal(['patch node/n1']);
    expect(cluster.takeEvents()).to.include('Node/n1 Warning RemediationFailed');
    for (let i = 0; i < 3; i++) {
      clock.advance(5_000);
      await reconciler.reconcile('p');
    }
    expect(cluster.takeWrites().filter((w) => w.startsWith('patch node/'))).to.deep.equal([]);
    expect(blockedOf(cluster, 'n1')).to.deep.equal(['Cordon node/n1 RefusedByApi']);
    expect(cluster.takeEvents().filter((e) => e.includes('RemediationFailed'))).to.deep.equal([]);

    cluster.changeNode('n1', (n) => ({ ...n, labels: { ...n.labels, fixed: 'true' } }));
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.unschedulable, 'the node changed: decided and tried again').to.equal(
      true,
    );
  });

  it('does not cordon on a reading that went stale while the node waited in a storm', async () => {
    const spec = policySpec({ maxUnhealthyNodes: 1 });
    spec.ioPressure = { sustainSeconds: 0, recoverySeconds: 30, staleAfterSeconds: 10 };
    const { cluster, clock, readings, reconciler } = world(spec, { saturated: ['n1', 'n2'] });
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    replicaSetPodsOn(cluster, 'n2', 'api-1');
    await reconciler.reconcile('p');
    expect(blockedOf(cluster, 'n1')).to.deep.equal(['Cordon node/n1 StormLimit']);
    // n1's source dies (no reading any more); n2 recovers and is no longer degraded.
    readings.delete('n1');
    readings.set('n2', LOW);
    cluster.pods = cluster.pods.filter((p) => p.nodeName !== 'n2');
    cluster.changed('n2');
    clock.advance(11_000); // n1's last reading is now older than staleAfterSeconds
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.unschedulable, 'no verified reading: nothing starts').to.equal(false);
    expect(condition(cluster, 'n1', 'IoPressureHigh')).to.include({ reason: 'ReadingUnknown' });
  });

  it('leaves a cordon the admin reverted alone for cooldownSeconds, and counts no action for letting go', async () => {
    const { cluster, clock, reconciler } = world(policySpec({ cooldownSeconds: 120 }));
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
    const actionsBefore = cluster.policy('p')!.status!.actionCount;
    cluster.changeNode('n1', (n) => ({ ...n, unschedulable: false })); // kubectl uncordon n1
    clock.advance(1_000);
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.stamps, 'our claim dropped').to.equal(undefined);
    expect(cluster.takeEvents()).to.include('Node/n1 Normal RemediationReleased');
    for (let i = 0; i < 3; i++) {
      clock.advance(10_000);
      await reconciler.reconcile('p');
    }
    expect(cluster.nodeMap.get('n1')!.unschedulable, 'not cordoned again within the cooldown').to.equal(
      false,
    );
    expect(blockedOf(cluster, 'n1')).to.include('Cordon node/n1 Cooldown');
    expect(cluster.policy('p')!.status!.actionCount).to.equal(actionsBefore);
    clock.advance(120_000);
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.unschedulable, 'after the cooldown, the evidence acts again').to.equal(
      true,
    );
  });

  it('in a dry run leaves real stamps exactly as they are, and says so once', async () => {
    const { cluster, clock, reconciler } = world(policySpec({ dryRun: true }), { saturated: [] });
    cluster.changeNode('n1', (n) => ({
      ...n,
      unschedulable: true,
      stamps: { policy: 'p', since: T0, reason: 'earlier real run', cordoned: true },
    }));
    for (let i = 0; i < 3; i++) {
      await reconciler.reconcile('p');
      clock.advance(200_000);
    }
    expect(cluster.nodeMap.get('n1')!.stamps?.reason).to.equal('earlier real run');
    const events = cluster.takeEvents().filter((e) => e.startsWith('Node/n1'));
    expect(events.filter((e) => e.includes('Uncordoned'))).to.deep.equal([]);
    expect(events.filter((e) => e.includes('RemediationBlocked'))).to.have.length(1);
    expect(blockedOf(cluster, 'n1')).to.deep.equal(['Uncordon node/n1 DryRun']);
  });
});
