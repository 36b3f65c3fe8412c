// What each policy keeps of its own across passes: report deferral ages, its IO source, the status keys it wrote, and
// its own SandboxHealth writes until the watch shows them (found by a review of the reconciler, issue 24, each shown
// failing before its fix).
import { expect } from 'chai';
import type { SandboxPolicySpecInput } from '../../../src/api/v1alpha1/index.js';
import { PolicyMemory, type NodeObservation } from '../../../src/controllers/policy-memory.js';
import { SourceFactory } from '../../../src/signals/factory.js';
import { aPod, anEvent, nameReservedMessage, T0 } from '../../support/builders.js';
import { aNode, MemoryCluster } from '../../support/memory-cluster.js';
import { aReconciler } from '../../support/reconciler.js';

describe("a policy's own state across passes", () => {
  it('keeps the report deferral ages of each policy its own, so no report is deferred for ever', async () => {
    // Two policies of 70 nodes each: more routine reports than a pass writes (64), every pass, for both.
    const spec = (pool: string): SandboxPolicySpecInput => ({
      nodeSelector: { matchLabels: { pool } },
      detection: { stuckThresholdSeconds: 30 },
      safety: { maxUnhealthyNodes: '100%' },
    });
    const nodes = (pool: string) =>
      Array.from({ length: 70 }, (_, i) => aNode(`${pool}${String(i).padStart(2, '0')}`, { pool }));
    const cluster = new MemoryCluster()
      .addPolicy('pa', spec('a'))
      .addPolicy('pb', spec('b'))
      .addNodes(...nodes('a'), ...nodes('b'));
    // A pod stuck on every node, no failure message yet: Degraded, and each new such pod is a routine change.
    const stick = (pool: string, round: number) => {
      for (const node of nodes(pool))
        cluster.pods.push(aPod().named(`${node.name}-${round}`).onNode(node.name).waitingSince(T0).build());
      cluster.changed();
    };
    stick('a', 0);
    stick('b', 0);
    const { reconciler } = aReconciler(cluster, { startSeconds: 60 });
    await reconciler.reconcile('pa'); // creates every SandboxHealth: urgent, all written
    await reconciler.reconcile('pb');
    for (let round = 1; round <= 3; round++) {
      stick('a', round);
      await reconciler.reconcile('pa');
      stick('b', round);
      await reconciler.reconcile('pb');
    }
    // Round 1 deferred pa's last 6 nodes; round 2 must have written them first, whatever pb's passes did.
    const stale = nodes('a').filter((n) => (cluster.health(n.name)?.status?.stuckPodCount ?? 0) < 3);
    expect(stale.map((n) => n.name)).to.deep.equal([]);
  });

  it('lets go of a deleted policy’s IO source', async () => {
    const cluster = new MemoryCluster()
      .addPolicy('p', { ioPressure: { source: 'nodeCondition' } })
      .addNodes(aNode('n1'));
    const factory = new SourceFactory({ cache: cluster, fetchKubeletSummary: () => Promise.resolve({}) });
    const built: unknown[] = [];
    const { reconciler, memories } = aReconciler(cluster, {
      sources: (_name, spec) => {
        const source = factory.build(spec);
        built.push(source);
        return source;
      },
    });
    await reconciler.reconcile('p');
    cluster.policyMap.delete('p');
    cluster.changed();
    await reconciler.reconcile('p');
    expect(memories.size, 'nothing of the policy is kept').to.equal(0);
    cluster.addPolicy('p', { ioPressure: { source: 'nodeCondition' } });
    cluster.changed();
    await reconciler.reconcile('p');
    // The policy made anew gets a source of its own, not the one its namesake left behind.
    expect(built).to.have.length(2);
  });

  it('removes a status key the desired status no longer has, and then writes nothing', async () => {
    const cluster = new MemoryCluster().addPolicy('p', {}).addNodes(aNode('n1'));
    const { reconciler } = aReconciler(cluster);
    await reconciler.reconcile('p');
    expect(cluster.health('n1')!.status!.runtime).to.have.property('note');
    // containerd upgraded past every fix: no note to give.
    cluster.changeNode('n1', (n) => ({ ...n, runtimeVersion: 'containerd://1.7.20' }));
    await reconciler.reconcile('p');
    expect(cluster.health('n1')!.status!.runtime).to.deep.equal({
      version: 'containerd://1.7.20',
      predatesMountFix: false,
    });
    cluster.takeWrites();
    cluster.changed('n1');
    await reconciler.reconcile('p');
    expect(cluster.takeWrites()).to.deep.equal([]);
  });

  it('keeps standing on its own SandboxHealth write after the expectation expires, until the watch shows it', async () => {
    const cluster = new MemoryCluster()
      .addPolicy('p', { detection: { stuckThresholdSeconds: 30 } })
      .addNodes(aNode('n1'));
    const pod = aPod().named('web-1').onNode('n1').waitingSince(T0).build();
    cluster.pods = [pod];
    cluster.events = [anEvent().about(pod).saying(nameReservedMessage(pod)).build()];
    const { clock, reconciler } = aReconciler(cluster, { startSeconds: 60 });
    cluster.lagging = true; // the watch is slow: none of our writes shows in the cache yet
    await reconciler.reconcile('p');
    expect(cluster.takeEvents()).to.deep.equal([
      'Node/n1 Warning SandboxCreationDegraded',
      'Pod/web-1 Warning SandboxCreationStuck',
    ]);
    const since = cluster.apiHealthCondition('n1', 'SandboxCreationDegraded')?.lastTransitionTime;
    clock.advance(31_000); // past the read-your-writes expectation's 30 s
    cluster.changed('n1');
    await reconciler.reconcile('p');
    // Read from the older cache, the node would be new again: its Events repeated, its since moved.
    expect(cluster.takeEvents()).to.deep.equal([]);
    expect(cluster.apiHealthCondition('n1', 'SandboxCreationDegraded')?.lastTransitionTime).to.equal(since);
  });
});

describe('PolicyMemory.reported: a look our report moved along', () => {
  const look = (version: string) =>
    ({
      node: aNode('n1'),
      exists: false,
      previous: undefined,
      reportsApplied: 0,
      version,
    }) as unknown as NodeObservation;

  it('replaces the look with what the API holds now, and leaves the look it was planned from as it was', () => {
    const memory = new PolicyMemory('uid-p');
    const planned = look('1');
    memory.state('n1').observation = planned;
    expect(memory.reported('n1', planned, { exists: true, reportsApplied: 3 })).to.equal(false);
    expect(memory.state('n1').observation).to.include({ exists: true, reportsApplied: 3, version: '1' });
    expect(planned).to.include({ exists: false, reportsApplied: 0 });
  });

  it('takes a second report of the same look (an urgent one that followed) as the same look, not a newer one', () => {
    const memory = new PolicyMemory('uid-p');
    const planned = look('1');
    memory.state('n1').observation = planned;
    memory.reported('n1', planned, { reportsApplied: 1 });
    expect(memory.reported('n1', planned, { reportsApplied: 2 })).to.equal(false);
    expect(memory.state('n1').observation).to.include({ reportsApplied: 2 });
  });

  it('says a newer look was taken meanwhile, and leaves that look as it is', () => {
    const memory = new PolicyMemory('uid-p');
    const planned = look('1');
    const newer = look('2');
    memory.state('n1').observation = newer;
    expect(memory.reported('n1', planned, { reportsApplied: 1 })).to.equal(true);
    expect(memory.state('n1').observation).to.equal(newer);
  });

  it('has nothing to move along once the look is gone (a full pass dropped it)', () => {
    const memory = new PolicyMemory('uid-p');
    expect(memory.reported('n1', look('1'), { exists: true })).to.equal(false);
    expect(memory.state('n1').observation).to.equal(undefined);
  });
});
