import { expect } from 'chai';
import { nodeOf, policiesFor } from '../../../../src/controllers/manager/mapper.js';
import type { EventView } from '../../../../src/detection/index.js';
import { aPod, anEvent, nameReservedMessage } from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';

describe('policiesFor', () => {
  const cluster = new MemoryCluster()
    .addPolicy('zone-a', { nodeSelector: { matchLabels: { zone: 'a' } } })
    .addPolicy('rest', {})
    .addNodes(aNode('a1', { zone: 'a' }), aNode('b1', { zone: 'b' }));
  const pod = aPod().named('p').onNode('a1').build();
  const byUid = (uid: string) => (uid === pod.uid ? pod : undefined);
  const reading = (source: string, psi: number) => ({
    source,
    observedTime: '2026-11-30T10:00:00Z',
    psiSomeAvg10Percent: psi,
  });
  const health = (source: string, psi: number) => ({
    name: 'a1',
    uid: 'h',
    nodeName: 'a1',
    status: { ioReading: reading(source, psi) },
  });

  it('maps pods and their events to the policy owning their node', () => {
    expect(policiesFor({ kind: 'Pod', type: 'add', key: 'default/p', pod }, cluster, byUid)).to.deep.equal([
      'zone-a',
    ]);
    const event = anEvent().about(pod).build();
    expect(
      policiesFor({ kind: 'Event', type: 'update', key: 'default/e', event }, cluster, byUid),
    ).to.deep.equal(['zone-a']);
    const stray = anEvent().about(aPod().build()).build();
    expect(
      policiesFor({ kind: 'Event', type: 'add', key: 'default/x', event: stray }, cluster, byUid),
    ).to.deep.equal([]);
  });

  it('maps node and policy changes to every policy, a deleted policy included', () => {
    expect(policiesFor({ kind: 'Node', type: 'update', key: 'b1' }, cluster, byUid).sort()).to.deep.equal([
      'rest',
      'zone-a',
    ]);
    expect(
      policiesFor({ kind: 'SandboxPolicy', type: 'delete', key: 'gone' }, cluster, byUid).sort(),
    ).to.deep.equal(['gone', 'rest', 'zone-a']);
  });

  it('maps a node lease to the policy owning its node, and marks that node', () => {
    const change = { kind: 'NodeLease' as const, type: 'update' as const, key: 'b1' };
    expect(policiesFor(change, cluster, byUid)).to.deep.equal(['rest']);
    expect(nodeOf(change, byUid)).to.equal('b1');
    expect(policiesFor({ ...change, key: 'no-such-node' }, cluster, byUid)).to.deep.equal([]);
  });

  it("reacts to a new agent reading or a deleted SandboxHealth, not to the operator's own writes", () => {
    const change = (source: string, before: number, after: number) =>
      policiesFor(
        {
          kind: 'SandboxHealth',
          type: 'update',
          key: 'a1',
          health: health(source, after),
          previous: health(source, before),
        },
        cluster,
        byUid,
      );
    expect(change('agent', 1, 50)).to.deep.equal(['zone-a']);
    expect(change('agent', 50, 50)).to.deep.equal([]);
    expect(change('prometheus', 1, 50)).to.deep.equal([]);
    expect(
      policiesFor(
        { kind: 'SandboxHealth', type: 'delete', key: 'a1', health: health('agent', 1) },
        cluster,
        byUid,
      ),
    ).to.deep.equal(['zone-a']);
  });
});

describe('nodeOf', () => {
  const pod = aPod().named('p').onNode('a1').build();
  const byUid = (uid: string) => (uid === pod.uid ? pod : undefined);

  it('names the node of a pod, its Events, a node and a SandboxHealth', () => {
    expect(nodeOf({ kind: 'Pod', type: 'add', key: 'default/p', pod }, byUid)).to.equal('a1');
    const event = anEvent().about(pod).build();
    expect(nodeOf({ kind: 'Event', type: 'add', key: 'default/e', event }, byUid)).to.equal('a1');
    expect(nodeOf({ kind: 'Node', type: 'update', key: 'b1' }, byUid)).to.equal('b1');
  });

  it('marks no node for a policy change (its own status coming back) or an Event about a pod not cached', () => {
    // A spec or ownership change makes the next pass a full one anyway (incremental-reconcile.test.ts); marking
    // every node here would make every pass after a status write a full one.
    expect(nodeOf({ kind: 'SandboxPolicy', type: 'update', key: 'p' }, byUid)).to.equal(null);
    const stray = anEvent().about(aPod().build()).build();
    expect(nodeOf({ kind: 'Event', type: 'add', key: 'default/x', event: stray }, byUid)).to.equal(null);
  });
});

describe('mapping Events that name their pod oddly', () => {
  const cluster = new MemoryCluster()
    .addPolicy('zone-a', { nodeSelector: { matchLabels: { zone: 'a' } } })
    .addNodes(aNode('a1', { zone: 'a' }));
  const pod = aPod().named('web-0', 'shop').onNode('a1').build();
  const byUid = (uid: string) => (uid === pod.uid ? pod : undefined);
  const map = (event: EventView) => {
    const change = { kind: 'Event' as const, type: 'add' as const, key: 'x/e', event };
    return { node: nodeOf(change, byUid), policies: policiesFor(change, cluster, byUid) };
  };
  const cases: { name: string; event: EventView; node: string | null }[] = [
    { name: 'its uid, namespace and name', event: anEvent().about(pod).build(), node: 'a1' },
    {
      // Regression: the uid alone mapped an Event about another namespace's pod to this pod's node.
      name: "this pod's uid with another namespace",
      event: { ...anEvent().about(pod).build(), involvedNamespace: 'tenant' },
      node: null,
    },
    {
      name: "this pod's uid with another name (an old pod's Event)",
      event: { ...anEvent().about(pod).build(), involvedName: 'web-1' },
      node: null,
    },
    {
      name: 'no uid, with the reserved name of this pod in its message',
      event: anEvent().aboutNameOnly(pod).saying(nameReservedMessage(pod)).build(),
      node: 'a1',
    },
    {
      name: "no uid, with this pod's reserved name but another involved name",
      event: {
        ...anEvent().aboutNameOnly(pod).saying(nameReservedMessage(pod)).build(),
        involvedName: 'web-1',
      },
      node: null,
    },
    { name: 'no uid and no reserved name', event: anEvent().aboutNameOnly(pod).build(), node: null },
    {
      name: 'nothing at all',
      event: { ...anEvent().build(), involvedKind: '', involvedNamespace: '', involvedName: '' },
      node: null,
    },
  ];
  for (const { name, event, node } of cases) {
    it(`maps an Event naming ${name} to ${node ?? 'no node'}`, () => {
      expect(map(event)).to.deep.equal({ node, policies: node ? ['zone-a'] : [] });
    });
  }

  it('maps a pod on a node no node can be named to no node and no policy', () => {
    for (const nodeName of ['A1', 'a1 ', '../a1', 'ａ1', 'a'.repeat(300)]) {
      const odd = aPod().named('p').onNode(nodeName).build();
      expect(
        policiesFor({ kind: 'Pod', type: 'add', key: 'default/p', pod: odd }, cluster, byUid),
      ).to.deep.equal([]);
    }
  });
});
