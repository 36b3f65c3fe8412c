// Evictions and migrations a PodDisruptionBudget refuses: blocked, said once, retried, and spending no budget.
import { expect } from 'chai';
import type { PodView } from '../../../../src/detection/index.js';
import { aPod } from '../../../support/builders.js';
import { MemoryCluster } from '../../../support/memory-cluster.js';
import {
  at,
  policySpec,
  world,
  stuckOn,
  replicaSetPodsOn,
  health,
  actionsOf,
  blockedOf,
  evictionWrites,
} from '../../../support/remediation-world.js';

describe('PolicyReconciler', () => {
  describe('PodDisruptionBudget', () => {
    const migrating = policySpec({}, { migrateWorkloads: { podSelector: { matchLabels: { io: 'heavy' } } } });
    function heavyOn(cluster: MemoryCluster, node: string, name: string): PodView {
      const pod = {
        ...aPod().named(name).onNode(node).running().labelled({ io: 'heavy' }).build(),
        controllerKind: 'ReplicaSet',
      };
      cluster.running.push(pod);
      return pod;
    }

    it('lists a migration the budget refuses as blocked with one Event, and migrates once it allows', async () => {
      const { cluster, reconciler } = world(migrating);
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      stuckOn(cluster, 'n1', ['bare']); // no controller: never evicted, so the node stays degraded
      heavyOn(cluster, 'n1', 'db-0');
      cluster.protectedPods.add('default/db-0');

      await reconciler.reconcile('p'); // cordon
      cluster.takeWrites();
      cluster.takeEvents();

      await reconciler.reconcile('p');
      expect(evictionWrites(cluster)).to.deep.equal(['evict pod/default/web-1']);
      expect(cluster.takeEvents()).to.deep.equal([
        'Pod/web-1 Normal EvictedStuckPod',
        'Node/n1 Warning RemediationBlocked',
        'Node/n1 Warning RemediationBlocked',
      ]);
      expect(blockedOf(cluster, 'n1')).to.deep.equal([
        'Evict pod/default/bare NoController',
        'Migrate pod/default/db-0 DisruptionBudget',
      ]);
      const refused = health(cluster, 'n1').blocked!.find((b) => b.guard === 'DisruptionBudget')!;
      expect(refused.message).to.contain('disruption budget');
      expect(cluster.running.map((p) => p.name)).to.deep.equal(['db-0']);
      cluster.takeWrites();

      // Still refused on the next passes: listed, not announced again, nothing evicted.
      for (let pass = 0; pass < 2; pass++) {
        await reconciler.reconcile('p');
        expect(cluster.takeEvents()).to.deep.equal([]);
        expect(blockedOf(cluster, 'n1')).to.deep.equal([
          'Evict pod/default/bare NoController',
          'Migrate pod/default/db-0 DisruptionBudget',
        ]);
      }
      expect(evictionWrites(cluster)).to.deep.equal([]);
      expect(refused.since).to.equal(health(cluster, 'n1').blocked![1]!.since);

      // The budget allows it now.
      cluster.protectedPods.delete('default/db-0');
      await reconciler.reconcile('p');
      expect(evictionWrites(cluster)).to.deep.equal(['evict pod/default/db-0']);
      expect(cluster.takeEvents()).to.deep.equal(['Pod/db-0 Normal MigratedIoHeavyPod']);
      expect(blockedOf(cluster, 'n1')).to.deep.equal(['Evict pod/default/bare NoController']);
      expect(actionsOf(cluster, 'n1')[0]).to.equal('Migrate pod/default/db-0 Succeeded');
      expect(cluster.running).to.deep.equal([]);
    });

    it('retries a refused migration while the node is still saturated and cordoned, after its stuck pods are gone', async () => {
      const { cluster, reconciler } = world(migrating);
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      heavyOn(cluster, 'n1', 'db-0');
      cluster.protectedPods.add('default/db-0');

      await reconciler.reconcile('p'); // cordon
      await reconciler.reconcile('p'); // evict web-1; db-0 refused
      expect(blockedOf(cluster, 'n1')).to.deep.equal(['Migrate pod/default/db-0 DisruptionBudget']);
      cluster.takeWrites();

      cluster.protectedPods.delete('default/db-0');
      await reconciler.reconcile('p');
      await reconciler.reconcile('p');
      expect(evictionWrites(cluster)).to.deep.equal(['evict pod/default/db-0']);
    });

    it('spends no eviction budget on an eviction the budget refused', async () => {
      const { cluster, reconciler } = world(migrating);
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      stuckOn(cluster, 'n1', ['bare']);
      heavyOn(cluster, 'n1', 'db-0');
      cluster.protectedPods.add('default/db-0');

      for (let pass = 0; pass < 4; pass++) await reconciler.reconcile('p');
      // One pod left the node; the refused attempts at db-0 evicted nothing.
      expect(cluster.evicted).to.deep.equal(['default/web-1']);
      expect(cluster.policy('p')!.status!.recentEvictions).to.deep.equal([at(0)]);
    });
  });
});
