import { expect } from 'chai';
import type { NodeState, SandboxHealthStatus } from '../../../src/api/v1alpha1/index.js';
import type { HealthObject } from '../../../src/ports/cluster.js';
import { diagnoseCluster } from '../../../src/diagnose/cluster.js';
import { aNode, aPolicy, at, NOW, remediatingStatus } from '../../support/diagnosis.js';

const health = (
  name: string,
  state: NodeState | undefined,
  stuck = 0,
  extra: Partial<SandboxHealthStatus> = {},
) => {
  const status: SandboxHealthStatus = { policy: 'p1', stuckPodCount: stuck, conditions: [], ...extra };
  if (state) status.state = state;
  return { name, uid: `uid-${name}`, nodeName: name, status } satisfies HealthObject;
};
const plain = (name: string) => aNode(name, {}, false);

describe('diagnoseCluster', () => {
  it('says all nodes are healthy when none needs attention', () => {
    const overview = diagnoseCluster({
      now: NOW,
      healths: [health('n1', 'Healthy'), health('n2', 'Healthy')],
      nodes: [plain('n1'), plain('n2')],
      policies: [aPolicy()],
      unavailable: [],
    });
    expect(overview.summary).to.equal('all 2 nodes healthy');
    expect(overview.attention).to.deep.equal([]);
    expect(overview.watchedNodes).to.equal(2);
    expect(overview.policies.map((p) => [p.name, p.valid])).to.deep.equal([['p1', true]]);
  });

  it('lists the nodes that need attention worst first: state, then stuck pods, then name', () => {
    const overview = diagnoseCluster({
      now: NOW,
      healths: [
        health('a-healthy', 'Healthy'),
        health('b-degraded', 'Degraded', 1),
        health('c-remediating', 'Remediating', 0, remediatingStatus()),
        health('d-iopressure', 'IoPressure', 2),
        health('e-degraded', 'Degraded', 4),
        health('f-recovering', 'Recovering'),
        health('g-unset', undefined),
      ],
      nodes: ['a-healthy', 'b-degraded', 'd-iopressure', 'e-degraded', 'f-recovering', 'g-unset']
        .map(plain)
        .concat(aNode('c-remediating')),
      policies: [],
      unavailable: [],
    });
    expect(overview.attention.map((a) => [a.node, a.state, a.stuckPodCount])).to.deep.equal([
      ['d-iopressure', 'IoPressure', 2],
      ['c-remediating', 'Remediating', 2],
      ['e-degraded', 'Degraded', 4],
      ['b-degraded', 'Degraded', 1],
      ['g-unset', 'Unknown', 0],
      ['f-recovering', 'Recovering', 0],
    ]);
    expect(overview.summary).to.equal('6 of 7 watched node(s) need attention');
  });

  it('gives the IO source and age, the cordon and the last action of each', () => {
    const status = remediatingStatus();
    const overview = diagnoseCluster({
      now: NOW,
      healths: [{ name: 'n1', uid: 'u', nodeName: 'n1', status, readingWrittenTime: at(590) }],
      nodes: [aNode('n1')],
      policies: [aPolicy()],
      unavailable: [],
    });
    expect(overview.attention).to.deep.equal([
      {
        node: 'n1',
        state: 'Remediating',
        policy: 'p1',
        stuckPodCount: 2,
        unschedulable: true,
        cordonedByOperator: true,
        io: { source: 'agent', observedTime: at(595), ageSeconds: 9 },
        lastAction: { text: 'Evict Succeeded', time: at(140), ageSeconds: 460 },
        why: 'the operator is remediating it',
      },
    ]);
  });

  it('lists a healthy node still carrying our stamps, and a stamped Node without a SandboxHealth', () => {
    const overview = diagnoseCluster({
      now: NOW,
      healths: [health('n1', 'Healthy')],
      nodes: [aNode('n1'), aNode('n2')],
      policies: [aPolicy()],
      unavailable: [],
    });
    expect(overview.attention.map((a) => [a.node, a.state, a.cordonedByOperator, a.why])).to.deep.equal([
      ['n2', 'Unknown', true, "carries the operator's stamps but has no SandboxHealth"],
      ['n1', 'Healthy', true, "healthy, but it still carries the operator's stamps"],
    ]);
  });

  it('names the nodes without a SandboxHealth, and a SandboxHealth whose Node is gone', () => {
    const overview = diagnoseCluster({
      now: NOW,
      healths: [health('gone', 'Degraded', 1), health('n1', 'Healthy')],
      nodes: [plain('n1'), plain('n3'), plain('n2')],
      policies: [aPolicy()],
      unavailable: [],
    });
    expect(overview.unwatchedNodes).to.deep.equal(['n2', 'n3']);
    expect(overview.attention[0]).to.include({
      node: 'gone',
      why: 'pods stuck; IO pressure not proven; the Node no longer exists',
    });
    expect(overview.attention[0]).to.not.have.property('unschedulable');
    expect(overview.summary).to.equal(
      '1 of 2 watched node(s) need attention; 2 node(s) without a SandboxHealth (no policy selects them)',
    );
  });

  it('says why nothing is watched: no policy, or no operator', () => {
    const without = (policies: ReturnType<typeof aPolicy>[]) =>
      diagnoseCluster({ now: NOW, healths: [], nodes: [plain('n1')], policies, unavailable: [] }).summary;
    expect(without([])).to.equal('no SandboxPolicy, so no node is watched: apply one (config/samples)');
    expect(without([aPolicy()])).to.equal(
      'no node has a SandboxHealth yet (is the operator running?); 1 node(s) without a SandboxHealth (no policy selects them)',
    );
  });
});
