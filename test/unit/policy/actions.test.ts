// Which actions are carried out by patching their node, and which by the Eviction API: each kind by name.
import { expect } from 'chai';
import { ACTION_KINDS } from '../../../src/api/v1alpha1/index.js';
import {
  fenceStepOf,
  isEviction,
  isNodeAction,
  subjectOf,
  type Action,
} from '../../../src/policy/actions.js';

const base = { node: 'n1', target: 'node/n1', reason: 'SandboxCreationStuckOnIo', message: 'stuck' };
const pod = { namespace: 'ns', name: 'web-1', uid: 'u1' };
const taint = { key: 'sandbox.remediator.io/io-saturated', effect: 'NoSchedule' };
const actionOf: Record<Action['kind'], Action> = {
  Cordon: { ...base, kind: 'Cordon' },
  Uncordon: { ...base, kind: 'Uncordon' },
  Taint: { ...base, kind: 'Taint', taint },
  Untaint: { ...base, kind: 'Untaint', taint },
  Evict: { ...base, kind: 'Evict', pod },
  Migrate: { ...base, kind: 'Migrate', pod },
};

describe('action kinds', () => {
  const table: [Action['kind'], 'node' | 'eviction', 'Up' | 'Down' | undefined][] = [
    ['Cordon', 'node', 'Up'],
    ['Uncordon', 'node', 'Down'],
    ['Taint', 'node', 'Up'],
    ['Untaint', 'node', 'Down'],
    ['Evict', 'eviction', undefined],
    ['Migrate', 'eviction', undefined],
  ];
  for (const [kind, carrier, fence] of table) {
    it(`says ${kind} ${fence === undefined ? 'leaves the fence alone' : fence === 'Up' ? 'puts the fence up' : 'takes the fence down'}`, () => {
      expect(fenceStepOf(kind)).to.equal(fence);
    });
    it(`carries ${kind} out by ${carrier === 'node' ? 'patching its node' : 'the Eviction API'}`, () => {
      const action = actionOf[kind];
      expect([isNodeAction(action), isEviction(action)]).to.deep.equal([
        carrier === 'node',
        carrier === 'eviction',
      ]);
    });
    it(`names the ${carrier === 'node' ? 'node' : 'pod'} in ${kind}'s Event`, () => {
      const want =
        carrier === 'node'
          ? { kind: 'Node', name: 'n1', uid: 'node-uid' }
          : { kind: 'Pod', namespace: 'ns', name: 'web-1', uid: 'u1' };
      expect(subjectOf(actionOf[kind], { name: 'n1', uid: 'node-uid' })).to.deep.equal(want);
    });
  }

  it('names every kind the API knows', () => {
    expect(table.map(([kind]) => kind)).to.have.members([...ACTION_KINDS]);
  });

  it('refuses a kind it does not name rather than patch a node with it', () => {
    const unknown = { ...base, kind: 'Throttle' } as unknown as Action;
    expect(() => isNodeAction(unknown)).to.throw(/no place for action kind Throttle/);
    expect(() => isEviction(unknown)).to.throw(/no place for action kind Throttle/);
    expect(() => fenceStepOf(unknown.kind)).to.throw(/no place for action kind Throttle/);
    expect(() => subjectOf(unknown, { name: 'n1', uid: 'node-uid' })).to.throw(
      /no place for action kind Throttle/,
    );
  });
});
