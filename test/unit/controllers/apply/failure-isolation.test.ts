// A write that fails: the others still go, the failure is reported, and the apply queue retries after its backoff.
import { expect } from 'chai';
import { byObject } from '../../../support/reconciler.js';
import { TerminalError } from '../../../../src/runtime/controller.js';
import {
  policySpec,
  world,
  replicaSetPodsOn,
  health,
  condition,
  actionsOf,
  allHealthsCreated,
  detectedOnN1,
} from '../../../support/remediation-world.js';

describe('PolicyReconciler', () => {
  describe('failure isolation', () => {
    it("writes every other node's status when one SandboxHealth patch fails, then has the queue retry after its backoff", async () => {
      const { cluster, reconciler, requeues, applies } = world(policySpec(), { saturated: [] });
      cluster.failNextHealthPatch.set('n2', new Error('boom'));

      await reconciler.reconcile('p');
      expect(requeues.map((r) => r.after)).to.include('backoff');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject([...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.health('n2')!.status).to.equal(undefined);
      for (const n of ['n1', 'n3', 'n4', 'n5', 'n6']) expect(cluster.health(n)!.status!.policy).to.equal('p');

      // The policy's apply failed with it: the apply queue backs off, and grows the backoff for as long as writes fail.
      expect(String(applies.errors.at(-1))).to.contain('boom');
      // The retry writes what is missing and nothing else.
      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(byObject(['patch health/n2']));
      expect(cluster.health('n2')!.status!.policy).to.equal('p');
    });

    it('asks no retry when the failed SandboxHealth patch is terminal, still writing the other nodes', async () => {
      const { cluster, reconciler, requeues } = world(policySpec(), { saturated: [] });
      cluster.failNextHealthPatch.set('n2', new TerminalError('422 Unprocessable'));

      await reconciler.reconcile('p');
      expect(requeues.map((r) => r.after)).to.not.include('backoff');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject([...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.health('n2')!.status).to.equal(undefined);
      for (const n of ['n1', 'n3', 'n4', 'n5', 'n6']) expect(cluster.health(n)!.status!.policy).to.equal('p');
    });

    it('records a failed cordon as Failed with a RemediationFailed Event, reports the other nodes, then has the queue retry', async () => {
      const { cluster, reconciler, requeues, applies } = world(policySpec());
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      cluster.failNextNodePatch.set('n1', new Error('conflict'));

      await reconciler.reconcile('p');
      // The failure asks for the backoff; the report listing web-1 asks for nothing (the node is not fenced, and a
      // pass at once would skip the backoff).
      expect(requeues).to.deep.equal([{ policy: 'p', after: 'backoff' }]);
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject(['patch node/n1', ...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.takeEvents()).to.deep.equal([
        ...detectedOnN1('web-1'),
        'Node/n1 Warning RemediationFailed',
      ]);
      expect(actionsOf(cluster, 'n1')).to.deep.equal(['Cordon node/n1 Failed']);
      expect(health(cluster, 'n1').actions![0]!.message).to.contain('conflict');
      expect(health(cluster, 'n1').lastAction).to.equal('Cordon Failed');
      for (const n of ['n2', 'n3', 'n4', 'n5', 'n6']) expect(cluster.health(n)!.status!.policy).to.equal('p');
      expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(false);
      expect(cluster.policy('p')!.status).to.include({ actionCount: 0 });

      // The apply failed with it (the queue's backoff); the retry cordons, once.
      expect(String(applies.errors.at(-1))).to.contain('conflict');
      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject(['patch node/n1', 'patch health/n1', 'patch policy/p']),
      );
      expect(cluster.takeEvents()).to.deep.equal(['Node/n1 Normal Cordoned']);
      expect(actionsOf(cluster, 'n1')).to.deep.equal(['Cordon node/n1 Succeeded', 'Cordon node/n1 Failed']);
    });

    it('claims no cordon in status when the cordon failed', async () => {
      const { cluster, reconciler } = world(policySpec());
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      cluster.failNextNodePatch.set('n1', new Error('conflict'));
      await reconciler.reconcile('p');

      expect(cluster.nodeMap.get('n1')!.stamps).to.equal(undefined);
      const status = health(cluster, 'n1');
      expect(status).to.not.have.property('remediation');
      expect(condition(cluster, 'n1', 'Cordoned')).to.include({ status: 'False', reason: 'NotCordoned' });
      expect(status.state).to.equal('IoPressure');
      expect(cluster.policy('p')!.status).to.include({ remediatingNodes: 0 });
    });

    it('resolves (no retry) when the failed cordon is terminal, reporting it and the other nodes', async () => {
      const { cluster, reconciler } = world(policySpec());
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      cluster.failNextNodePatch.set('n1', new TerminalError('422 Unprocessable'));

      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject(['patch node/n1', ...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.takeEvents()).to.deep.equal([
        ...detectedOnN1('web-1'),
        'Node/n1 Warning RemediationFailed',
      ]);
      expect(actionsOf(cluster, 'n1')).to.deep.equal(['Cordon node/n1 Failed']);
    });
  });
});
