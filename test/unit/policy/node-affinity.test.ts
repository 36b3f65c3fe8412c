import { expect } from 'chai';
import {
  matchesTerms,
  mayLandOn,
  type NodeSelectorTerm,
  type Placement,
} from '../../../src/policy/node-affinity.js';

const node = {
  name: 'n1',
  labels: { 'kubernetes.io/hostname': 'n1', zone: 'a', disk: 'ssd', cores: '8' },
  taints: [{ key: 'dedicated', value: 'db', effect: 'NoSchedule' }],
};

describe('node affinity, as the scheduler reads it', () => {
  const terms: { name: string; terms: NodeSelectorTerm[] | undefined; matches: boolean }[] = [
    { name: 'no terms', terms: undefined, matches: true },
    { name: 'an empty list', terms: [], matches: true },
    { name: 'an empty term', terms: [{}], matches: false },
    {
      name: 'In',
      terms: [{ matchExpressions: [{ key: 'zone', operator: 'In', values: ['a', 'b'] }] }],
      matches: true,
    },
    {
      name: 'In, another value',
      terms: [{ matchExpressions: [{ key: 'zone', operator: 'In', values: ['b'] }] }],
      matches: false,
    },
    {
      name: 'NotIn',
      terms: [{ matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['b'] }] }],
      matches: true,
    },
    {
      name: 'NotIn a missing label',
      terms: [{ matchExpressions: [{ key: 'rack', operator: 'NotIn', values: ['r1'] }] }],
      matches: true,
    },
    { name: 'Exists', terms: [{ matchExpressions: [{ key: 'disk', operator: 'Exists' }] }], matches: true },
    {
      name: 'DoesNotExist',
      terms: [{ matchExpressions: [{ key: 'disk', operator: 'DoesNotExist' }] }],
      matches: false,
    },
    {
      name: 'Gt',
      terms: [{ matchExpressions: [{ key: 'cores', operator: 'Gt', values: ['4'] }] }],
      matches: true,
    },
    {
      name: 'Lt',
      terms: [{ matchExpressions: [{ key: 'cores', operator: 'Lt', values: ['4'] }] }],
      matches: false,
    },
    {
      name: 'Gt on a word',
      terms: [{ matchExpressions: [{ key: 'zone', operator: 'Gt', values: ['4'] }] }],
      matches: false,
    },
    {
      name: 'an unknown operator',
      terms: [{ matchExpressions: [{ key: 'zone', operator: 'Near', values: ['a'] }] }],
      matches: false,
    },
    {
      name: 'metadata.name',
      terms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n1'] }] }],
      matches: true,
    },
    {
      name: 'another name',
      terms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n2'] }] }],
      matches: false,
    },
    {
      name: 'terms ORed',
      terms: [
        { matchExpressions: [{ key: 'zone', operator: 'In', values: ['b'] }] },
        { matchExpressions: [{ key: 'disk', operator: 'In', values: ['ssd'] }] },
      ],
      matches: true,
    },
    {
      name: 'expressions ANDed',
      terms: [
        {
          matchExpressions: [
            { key: 'zone', operator: 'In', values: ['a'] },
            { key: 'disk', operator: 'In', values: ['hdd'] },
          ],
        },
      ],
      matches: false,
    },
  ];
  for (const row of terms)
    it(`${row.matches ? 'matches' : 'does not match'} ${row.name}`, () => {
      expect(matchesTerms(row.terms, node)).to.equal(row.matches);
    });

  const placements: { name: string; placement: Placement; unschedulable?: boolean; lands: boolean }[] = [
    { name: 'anything, but the taint', placement: {}, lands: false },
    {
      name: 'a toleration of the taint',
      placement: {
        tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'db', effect: 'NoSchedule' }],
      },
      lands: true,
    },
    {
      name: 'a toleration of another value',
      placement: { tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'web' }] },
      lands: false,
    },
    {
      name: 'Exists with no key (tolerates all)',
      placement: { tolerations: [{ operator: 'Exists' }] },
      lands: true,
    },
    {
      name: 'a nodeSelector that matches',
      placement: { nodeSelector: { zone: 'a' }, tolerations: [{ operator: 'Exists' }] },
      lands: true,
    },
    {
      name: 'a nodeSelector that does not',
      placement: { nodeSelector: { zone: 'b' }, tolerations: [{ operator: 'Exists' }] },
      lands: false,
    },
    {
      name: 'required affinity elsewhere',
      placement: {
        requiredTerms: [{ matchExpressions: [{ key: 'zone', operator: 'In', values: ['b'] }] }],
        tolerations: [{ operator: 'Exists' }],
      },
      lands: false,
    },
    {
      name: 'a cordon, tolerated by key',
      placement: {
        tolerations: [
          { key: 'dedicated', operator: 'Exists' },
          { key: 'node.kubernetes.io/unschedulable', operator: 'Exists', effect: 'NoSchedule' },
        ],
      },
      unschedulable: true,
      lands: true,
    },
    {
      name: 'a cordon, not tolerated',
      placement: { tolerations: [{ key: 'dedicated', operator: 'Exists' }] },
      unschedulable: true,
      lands: false,
    },
  ];
  for (const row of placements)
    it(`${row.lands ? 'lets' : 'keeps'} a pod with ${row.name} ${row.lands ? 'land' : 'off'}`, () => {
      expect(mayLandOn(row.placement, { ...node, unschedulable: row.unschedulable ?? false })).to.equal(
        row.lands,
      );
    });
});
