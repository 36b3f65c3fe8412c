// Our own writes, not yet back through the watch: nothing decided twice, reports planned on what is in flight.
import { expect } from 'chai';
import { byObject } from '../../../support/reconciler.js';
import { aPod, T0 } from '../../../support/builders.js';
import {
  policySpec,
  world,
  replicaSetPodsOn,
  health,
  condition,
  evictionWrites,
  allHealthsCreated,
  detectedOnN1,
  reportedWhileLagging,
} from '../../../support/remediation-world.js';

describe('PolicyReconciler', () => {
  describe('read-your-writes', () => {
    it('decides nothing twice while its own cordon and evictions have not come back through the watch', async () => {
      const { cluster, reconciler } = world(policySpec());
      replicaSetPodsOn(cluster, 'n1', 'web-1', 'web-2');
      cluster.lagging = true;

      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject(['patch node/n1', ...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.takeEvents()).to.deep.equal([
        ...detectedOnN1('web-1', 'web-2'),
        'Node/n1 Normal Cordoned',
      ]);
      expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(false); // the cache has not seen it yet

      // Before the watch delivers: no second cordon, no SandboxHealth rewritten, no Event repeated.
      const early = await reconciler.reconcile('p');
      const writes = cluster.takeWrites();
      // Policy status writes are the subject of the next test.
      expect(writes.filter((w) => !w.startsWith('patch policy/'))).to.deep.equal([]);
      expect(cluster.takeEvents()).to.deep.equal([]);
      expect(early.requeueAfterMs).to.be.at.most(500);

      cluster.deliver();
      expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject([
          'patch policy/p',
          'evict pod/default/web-1',
          'evict pod/default/web-2',
          'patch health/n1',
          'patch policy/p',
        ]),
      );
      expect(cluster.takeEvents()).to.deep.equal([
        'Pod/web-1 Normal EvictedStuckPod',
        'Pod/web-2 Normal EvictedStuckPod',
      ]);

      // The evicted pods and the new status are still on their way: nothing is evicted twice.
      const again = await reconciler.reconcile('p');
      expect(evictionWrites(cluster)).to.deep.equal([]);
      expect(cluster.takeWrites().filter((w) => !w.startsWith('patch policy/'))).to.deep.equal([]);
      expect(cluster.takeEvents()).to.deep.equal([]);
      // Nothing to wait for at once: what was written stands in for the status, and the watch's delivery of the
      // evicted pods brings the next pass.
      expect(again.requeueAfterMs).to.be.greaterThan(500);

      cluster.deliver();
      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(byObject(['patch health/n1', 'patch policy/p']));
      expect(cluster.takeEvents()).to.deep.equal(['Node/n1 Normal SandboxCreationRecovered']);
      expect(cluster.evicted).to.deep.equal(['default/web-1', 'default/web-2']);
    });

    it("decides on a saturated node while another node's SandboxHealth write is still on its way", async () => {
      const { cluster, reconciler } = world(policySpec());
      await reconciler.reconcile('p');
      cluster.takeWrites();
      cluster.takeEvents();
      cluster.lagging = true;

      // n2's status is written and its write is not back through the watch...
      cluster.pods.push(aPod().named('slow').onNode('n2').waitingSince(T0).build());
      reconciler.markDirty('p', 'n2');
      await reconciler.reconcile('p');
      expect(cluster.takeWrites()).to.include('patch health/n2');

      // ...when n1's pods get stuck on IO: the cordon does not wait for n2's write to come back.
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      reconciler.markDirty('p', 'n1');
      await reconciler.reconcile('p');
      expect(cluster.takeWrites()).to.include.members(['patch node/n1', 'patch health/n1']);
      // The policy's counts stand on what was written for n2: two degraded nodes, one remediated.
      cluster.deliver();
      expect(cluster.policy('p')!.status).to.include({ degradedNodes: 2, remediatingNodes: 1 });
      expect(condition(cluster, 'n2', 'SandboxCreationDegraded')).to.include({ status: 'True' });
      expect(cluster.nodeMap.get('n2')!.unschedulable).to.equal(false);
    });

    it('keeps the policy status as it was while its own writes are in flight', async () => {
      const { cluster, reconciler } = world(policySpec());
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      cluster.lagging = true;
      await reconciler.reconcile('p');
      cluster.takeWrites();

      // Our writes are not back through the watch: there is nothing new to report, least of all "0 degraded".
      const early = await reconciler.reconcile('p');
      expect(cluster.takeWrites()).to.deep.equal([]);
      expect(early.requeueAfterMs).to.be.at.most(500);
      cluster.deliver();
      expect(cluster.policy('p')!.status).to.include({
        matchedNodes: 6,
        degradedNodes: 1,
        remediatingNodes: 1,
      });
    });

    it('records SandboxCreationDegraded once when the next reconcile runs before the watch delivers', async () => {
      const { cluster, reconciler } = world(policySpec(), { source: false });
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      cluster.lagging = true;

      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject([...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.takeEvents()).to.deep.equal([
        'Node/n1 Warning SandboxCreationDegraded',
        'Pod/web-1 Warning SandboxCreationStuck',
      ]);

      // Another change on n1 (a kubelet retry Event) arrives before the watch delivers our own write.
      reconciler.markDirty('p', 'n1');
      const early = await reconciler.reconcile('p');
      expect(cluster.takeWrites().filter((w) => w.startsWith('patch health/'))).to.deep.equal([]);
      expect(cluster.takeEvents()).to.deep.equal([]);
      expect(
        early.requeueAfterMs,
        'no polling for the watch: the status written stands in',
      ).to.be.greaterThan(500);

      // Policy status writes are the subject of the test above.
      cluster.deliver();
      await reconciler.reconcile('p');
      expect(cluster.takeWrites().filter((w) => !w.startsWith('patch policy/'))).to.deep.equal([]);
      expect(cluster.takeEvents()).to.deep.equal([]);
      expect(condition(cluster, 'n1', 'SandboxCreationDegraded')).to.include({ status: 'True' });
    });

    it('creates a SandboxHealth again that vanished while its write stood in for it, instead of patching it forever', async () => {
      const { cluster, reconciler } = await reportedWhileLagging();
      cluster.vanishHealth('n1');

      // The cache still shows it: the patch meets a 404, and the object is created again in the same pass.
      replicaSetPodsOn(cluster, 'n1', 'web-2');
      reconciler.markDirty('p', 'n1');
      await reconciler.reconcile('p');
      expect(cluster.takeWrites().filter((w) => w.endsWith('health/n1'))).to.deep.equal([
        'patch health/n1',
        'create health/n1',
        'patch health/n1',
      ]);
      cluster.deliver();
      expect(health(cluster, 'n1').stuckPods!.map((p) => p.name)).to.have.members(['web-1', 'web-2']);
    });

    it('reports a pod newly stuck on a node whose last SandboxHealth write is not back yet, on what it wrote', async () => {
      const { cluster, reconciler } = await reportedWhileLagging();

      // A second pod gets stuck before the watch shows n1's first report: it is reported at once, with no wait
      // for the watch, and what was reported before (the degraded condition, web-1) is not reported again.
      replicaSetPodsOn(cluster, 'n1', 'web-2');
      reconciler.markDirty('p', 'n1');
      await reconciler.reconcile('p');
      expect(cluster.takeWrites().filter((w) => w.startsWith('patch health/'))).to.deep.equal([
        'patch health/n1',
      ]);
      expect(cluster.takeEvents()).to.deep.equal(['Pod/web-2 Warning SandboxCreationStuck']);
      cluster.deliver();
      expect(health(cluster, 'n1').stuckPods!.map((p) => p.name)).to.have.members(['web-1', 'web-2']);
      expect(condition(cluster, 'n1', 'SandboxCreationDegraded')).to.include({ status: 'True' });

      // Both writes came back: nothing is left to write or record.
      await reconciler.reconcile('p');
      expect(cluster.takeWrites().filter((w) => !w.startsWith('patch policy/'))).to.deep.equal([]);
      expect(cluster.takeEvents()).to.deep.equal([]);
    });
  });
});
