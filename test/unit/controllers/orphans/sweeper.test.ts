// The orphan sweep: what no policy owns any more is undone exactly as its stamps say, or handed over.
import { expect } from 'chai';
import { T0 } from '../../../support/builders.js';
import { aNode } from '../../../support/memory-cluster.js';
import { policySpec, world } from '../../../support/remediation-world.js';

describe('PolicyReconciler releasing what no policy owns', () => {
  const stampedBy = (policy: string) => ({
    ...aNode('orphan', { pool: 'other' }),
    unschedulable: true,
    taints: [{ key: 'sandbox.remediator.io/io-pressure', value: 'true', effect: 'NoSchedule' }],
    stamps: {
      policy,
      since: T0,
      reason: 'Sandbox creation stuck from IO.',
      cordoned: true,
      taint: { key: 'sandbox.remediator.io/io-pressure', value: 'true', effect: 'NoSchedule' },
    },
  });

  it('undoes exactly what the stamps say on a node whose policy is gone, and nothing on unstamped nodes', async () => {
    const byOthers = { ...aNode('cordoned-by-admin', { pool: 'other' }), unschedulable: true };
    const { cluster, reconciler, sweeper } = world(
      { ...policySpec(), nodeSelector: { matchLabels: { pool: 'mine' } } },
      { nodes: [aNode('n1', { pool: 'mine' }), stampedBy('deleted-policy'), byOthers] },
    );
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.writes.filter((w) => w.startsWith('patch node/'))).to.deep.equal(['patch node/orphan']);
    const orphan = cluster.nodeMap.get('orphan')!;
    expect(orphan.unschedulable).to.equal(false);
    expect(orphan.taints).to.deep.equal([]);
    expect(orphan.stamps).to.equal(undefined);
    expect(cluster.nodeMap.get('cordoned-by-admin')!.unschedulable).to.equal(true);
    expect(cluster.takeEvents()).to.include.members([
      'Node/orphan Normal Untainted',
      'Node/orphan Normal Uncordoned',
    ]);
    cluster.takeWrites();
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.startsWith('patch node/'))).to.deep.equal([]);
  });

  it('waits to undo on a node whose policy is gone while a NodeMaintenance drains it, and undoes once it ends', async () => {
    const drained = stampedBy('deleted-policy');
    const maintained = {
      ...drained,
      taints: [...drained.taints, { key: 'medik8s.io/drain', effect: 'NoSchedule' }],
      stamps: { ...drained.stamps, taintsBefore: [] },
    };
    const { cluster, sweeper } = world(
      { ...policySpec(), nodeSelector: { matchLabels: { pool: 'mine' } } },
      { nodes: [aNode('n1', { pool: 'mine' }), maintained] },
    );
    await sweeper.sweep();
    expect(cluster.nodeMap.get('orphan')!.unschedulable, 'not uncordoned under maintenance').to.equal(true);
    expect(cluster.nodeMap.get('orphan')!.stamps?.policy).to.equal('deleted-policy');
    // The maintenance ends: its taint goes, and the sweep undoes ours.
    cluster.nodeMap.set('orphan', { ...cluster.nodeMap.get('orphan')!, taints: drained.taints });
    await sweeper.sweep();
    expect(cluster.nodeMap.get('orphan')!.unschedulable).to.equal(false);
    expect(cluster.nodeMap.get('orphan')!.stamps).to.equal(undefined);
  });

  it('hands an excluded node over as it is: drops the stamps, keeps its cordon and taint, and says so', async () => {
    const excluded = {
      ...stampedBy('p'),
      labels: { pool: 'mine', 'sandbox.remediator.io/exclude': 'true' },
    };
    const { cluster, reconciler, sweeper } = world(
      { ...policySpec(), nodeSelector: { matchLabels: { pool: 'mine' } } },
      { nodes: [aNode('n1', { pool: 'mine' }), excluded] },
    );
    await sweeper.sweep();
    await reconciler.reconcile('p');
    const orphan = cluster.nodeMap.get('orphan')!;
    expect(orphan.stamps, 'no claim of ours').to.equal(undefined);
    expect(orphan.unschedulable, 'still cordoned').to.equal(true);
    expect(orphan.taints.map((t) => t.key)).to.deep.equal(['sandbox.remediator.io/io-pressure']);
    expect(cluster.takeEvents()).to.include('Node/orphan Normal RemediationReleased');
    cluster.takeWrites();
    await sweeper.sweep();
    expect(
      cluster.takeWrites().filter((w) => w.startsWith('patch node/')),
      'once',
    ).to.deep.equal([]);
  });

  it('leaves the stamps of a policy that still exists but is invalid (frozen), and acts on nothing before the watches are healthy', async () => {
    const { cluster, reconciler, sweeper } = world(
      { ...policySpec(), nodeSelector: { matchLabels: { pool: 'mine' } } },
      { nodes: [aNode('n1', { pool: 'mine' }), stampedBy('broken')] },
    );
    cluster.addPolicy('broken', { ioPressure: { source: 'prometheus' } });
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('orphan')!.stamps?.policy).to.equal('broken');

    cluster.policyMap.delete('broken');
    cluster.watching = false;
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('orphan')!.stamps?.policy, 'not while a watch is broken').to.equal('broken');
    cluster.watching = true;
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('orphan')!.stamps).to.equal(undefined);
  });
});
