// The refused node changes alone: a refusal holds for the node as it was and the policy as it decided, and lapses
// when either changes, after REFUSAL_RETRY_MS, or with the node.
import { expect } from 'chai';
import { REFUSAL_RETRY_MS, RefusedChanges } from '../../../../src/controllers/remediation/refused-changes.js';
import type { NodeView } from '../../../../src/detection/index.js';
import { T0 } from '../../../support/builders.js';
import { aNode } from '../../../support/memory-cluster.js';

const at = (ms: number) => new Date(T0.getTime() + ms);
const POLICY = { uid: 'uid-p', generation: 3 };

describe('RefusedChanges', () => {
  const cases: {
    name: string;
    node?: (n: NodeView) => NodeView;
    policy?: { uid: string; generation: number };
    after?: number;
    forget?: boolean;
    holds: boolean;
  }[] = [
    { name: 'holds for the same node, policy and generation, within the window', holds: true },
    { name: 'holds just before REFUSAL_RETRY_MS', after: REFUSAL_RETRY_MS - 1, holds: true },
    {
      name: 'lapses at REFUSAL_RETRY_MS: what refused it may be fixed',
      after: REFUSAL_RETRY_MS,
      holds: false,
    },
    {
      name: 'lapses when someone labels the node',
      node: (n) => ({ ...n, labels: { a: 'b' } }),
      holds: false,
    },
    {
      name: 'lapses when someone cordons the node',
      node: (n) => ({ ...n, unschedulable: true }),
      holds: false,
    },
    {
      name: 'lapses when someone taints the node',
      node: (n) => ({ ...n, taints: [{ key: 'k', effect: 'NoSchedule' }] }),
      holds: false,
    },
    {
      name: 'holds when only the status changed (a heartbeat, our condition)',
      node: (n) => ({ ...n, ready: false, conditions: [{ type: 'Ready', status: 'False' }] }),
      holds: true,
    },
    { name: 'lapses when the policy is edited', policy: { uid: 'uid-p', generation: 4 }, holds: false },
    {
      name: 'lapses for a policy made again under the name (a new UID, the same generation)',
      policy: { uid: 'uid-q', generation: 3 },
      holds: false,
    },
    { name: 'goes with the node', forget: true, holds: false },
  ];
  for (const c of cases)
    it(c.name, () => {
      const refused = new RefusedChanges();
      const node = aNode('n1');
      refused.refuse(node, POLICY, 'denied by policy', T0);
      if (c.forget) refused.forgetNode('n1');
      const now = (c.node ?? ((n) => n))(node);
      const got = refused.refusal(now, c.policy ?? POLICY, at(c.after ?? 0));
      expect(got).to.equal(c.holds ? 'denied by policy' : undefined);
    });

  it('once lapsed, is gone: the node changed back does not bring it back', () => {
    const refused = new RefusedChanges();
    const node = aNode('n1');
    refused.refuse(node, POLICY, 'denied', T0);
    expect(refused.refusal({ ...node, labels: { a: 'b' } }, POLICY, T0)).to.equal(undefined);
    expect(refused.refusal(node, POLICY, T0)).to.equal(undefined);
  });

  it('keeps one refusal per node, the latest', () => {
    const refused = new RefusedChanges();
    refused.refuse(aNode('n1'), POLICY, 'first', T0);
    refused.refuse(aNode('n1'), POLICY, 'second', T0);
    refused.refuse(aNode('n2'), POLICY, 'other', T0);
    expect(refused.refusal(aNode('n1'), POLICY, T0)).to.equal('second');
    expect(refused.refusal(aNode('n2'), POLICY, T0)).to.equal('other');
  });
});
