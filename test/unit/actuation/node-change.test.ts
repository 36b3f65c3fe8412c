// The one patch for a node's actions: each node action kind by name, the taint list changed only where it must be,
// and one rule for what leaves the node unschedulable (a stamp drop leaves spec.unschedulable to whoever set it).
import { expect } from 'chai';
import { nodeChange, unschedulableBy } from '../../../src/actuation/node-change.js';
import type { Taint } from '../../../src/api/v1alpha1/index.js';
import type { NodeAction } from '../../../src/policy/actions.js';
import { aNode } from '../../support/cleanup-objects.js';

const OURS: Taint = { key: 'sandbox.remediator.io/io-saturated', effect: 'NoSchedule' };
const THEIRS: Taint = { key: 'example.com/maintenance', effect: 'NoSchedule' };
const base = { node: 'n1', target: 'node/n1', reason: 'IoSaturated', message: 'm' };
const act = (kind: NodeAction['kind'], reason = 'IoSaturated'): NodeAction =>
  kind === 'Taint' || kind === 'Untaint' ? { ...base, kind, reason, taint: OURS } : { ...base, kind, reason };

describe('nodeChange', () => {
  const cases: {
    name: string;
    taints: Taint[];
    actions: NodeAction[];
    unschedulable: boolean | undefined;
    taintsAfter: Taint[] | undefined;
  }[] = [
    { name: 'a cordon', taints: [], actions: [act('Cordon')], unschedulable: true, taintsAfter: undefined },
    {
      name: 'an uncordon',
      taints: [],
      actions: [act('Uncordon')],
      unschedulable: false,
      taintsAfter: undefined,
    },
    {
      name: 'a stamp drop after someone else uncordoned: the field is theirs',
      taints: [],
      actions: [act('Uncordon', 'UncordonedByOthers')],
      unschedulable: undefined,
      taintsAfter: undefined,
    },
    {
      name: 'our taint, beside theirs',
      taints: [THEIRS],
      actions: [act('Cordon'), act('Taint')],
      unschedulable: true,
      taintsAfter: [THEIRS, OURS],
    },
    {
      name: 'our taint when it is there already',
      taints: [OURS],
      actions: [act('Taint')],
      unschedulable: undefined,
      taintsAfter: undefined,
    },
    {
      name: 'the undo: ours removed, theirs kept',
      taints: [THEIRS, OURS],
      actions: [act('Untaint'), act('Uncordon')],
      unschedulable: false,
      taintsAfter: [THEIRS],
    },
    {
      name: 'our taint twice in one list: added once',
      taints: [THEIRS],
      actions: [act('Taint'), act('Taint')],
      unschedulable: undefined,
      taintsAfter: [THEIRS, OURS],
    },
    {
      name: 'a taint then an untaint in one list: the list as it was, sent as changed',
      taints: [THEIRS],
      actions: [act('Taint'), act('Untaint')],
      unschedulable: undefined,
      taintsAfter: [THEIRS],
    },
    {
      name: 'an untaint of a taint not there',
      taints: [THEIRS],
      actions: [act('Untaint')],
      unschedulable: undefined,
      taintsAfter: undefined,
    },
  ];
  for (const c of cases)
    it(c.name, () => {
      const builder = aNode('n1');
      for (const t of c.taints) builder.tainted(t);
      const change = nodeChange(builder.build().view, c.actions, undefined, '7');
      expect(change.unschedulable).to.equal(c.unschedulable);
      expect(change.taints).to.deep.equal(c.taintsAfter);
      expect(change.resourceVersion).to.equal('7');
      expect(change.node).to.equal('n1');
    });

  it('says what leaves a node unschedulable for every kind, evictions included (they do not say)', () => {
    expect(
      (['Cordon', 'Uncordon', 'Taint', 'Untaint', 'Evict', 'Migrate'] as const).map((kind) =>
        unschedulableBy({ kind, reason: 'IoSaturated' }),
      ),
    ).to.deep.equal([true, false, undefined, undefined, undefined, undefined]);
  });
});
