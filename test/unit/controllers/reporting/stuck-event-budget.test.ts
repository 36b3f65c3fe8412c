// The stuck-pod Event budget alone: POD_EVENTS_PER_NODE Events of their own per node and one on the node per
// EVENT_WINDOW_MS, spent only by SandboxCreationStuck Events, given back as each leaves the window, gone with the node.
import { expect } from 'chai';
import { StuckEventBudget } from '../../../../src/controllers/reporting/stuck-event-budget.js';
import type { Transition } from '../../../../src/ports/writes.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { EVENT_WINDOW_MS, POD_EVENTS_PER_NODE } from '../../../../src/status/health-status.js';
import { T0 } from '../../../support/builders.js';

const onPod = (name: string, reason = 'SandboxCreationStuck'): Transition => ({
  target: { kind: 'Pod', namespace: 'shop', name, uid: `uid-${name}` },
  type: 'Warning',
  reason,
  message: `${name} is stuck`,
});
const onNode = (reason = 'SandboxCreationStuck'): Transition => ({
  target: { kind: 'Node', name: 'n1', uid: 'uid-n1' },
  type: 'Warning',
  reason,
  message: 'pods are stuck',
});

function aBudget() {
  const clock = new FakeClock(T0.getTime());
  return { clock, budget: new StuckEventBudget(clock) };
}

describe('StuckEventBudget', () => {
  const FULL = { pods: POD_EVENTS_PER_NODE, node: true };
  const cases: {
    name: string;
    spent: Transition[];
    after?: number;
    left: { pods: number; node: boolean };
  }[] = [
    { name: 'leaves the whole budget to a node that got no Event', spent: [], left: FULL },
    {
      name: "spends one of the node's pod Events per stuck pod's Event",
      spent: [onPod('a'), onPod('b')],
      left: { pods: POD_EVENTS_PER_NODE - 2, node: true },
    },
    {
      name: 'spends the Event on the node apart from the pods',
      spent: [onNode()],
      left: { pods: POD_EVENTS_PER_NODE, node: false },
    },
    {
      name: 'spends nothing for Events of other reasons',
      spent: [onPod('a', 'EvictedStuckPod'), onNode('SandboxCreationDegraded'), onNode('IoPressureHigh')],
      left: FULL,
    },
    {
      name: 'keeps what was spent until just before the window has passed',
      spent: [onPod('a'), onNode()],
      after: EVENT_WINDOW_MS - 1,
      left: { pods: POD_EVENTS_PER_NODE - 1, node: false },
    },
    {
      name: 'gives it all back once the window has passed',
      spent: [onPod('a'), onNode()],
      after: EVENT_WINDOW_MS,
      left: FULL,
    },
  ];
  for (const c of cases)
    it(c.name, () => {
      const { clock, budget } = aBudget();
      budget.spend('n1', c.spent);
      clock.advance(c.after ?? 0);
      expect(budget.left('n1')).to.deep.equal(c.left);
    });

  it('gives back each pod Event as it leaves the window, not all at once', () => {
    const { clock, budget } = aBudget();
    budget.spend('n1', [onPod('a')]);
    clock.advance(60_000);
    budget.spend('n1', [onPod('b'), onPod('c')]);
    clock.advance(EVENT_WINDOW_MS - 60_000);
    expect(budget.left('n1')).to.deep.equal({ pods: POD_EVENTS_PER_NODE - 2, node: true });
    clock.advance(60_000);
    expect(budget.left('n1')).to.deep.equal({ pods: POD_EVENTS_PER_NODE, node: true });
  });

  it('counts the Event on the node from the last one sent', () => {
    const { clock, budget } = aBudget();
    budget.spend('n1', [onNode()]);
    clock.advance(EVENT_WINDOW_MS - 1);
    budget.spend('n1', [onNode()]);
    clock.advance(1);
    expect(budget.left('n1').node).to.equal(false);
    clock.advance(EVENT_WINDOW_MS - 1);
    expect(budget.left('n1').node).to.equal(true);
  });

  it("keeps each node's budget apart", () => {
    const { budget } = aBudget();
    budget.spend('n1', [onPod('a'), onPod('b'), onNode()]);
    expect(budget.left('n2')).to.deep.equal(FULL);
    expect(budget.left('n1')).to.deep.equal({ pods: POD_EVENTS_PER_NODE - 2, node: false });
  });

  it('forgets a node that is gone, with all it spent', () => {
    const { budget } = aBudget();
    budget.spend('n1', [onPod('a'), onNode()]);
    budget.spend('n2', [onPod('b')]);
    budget.forget('n1');
    expect(budget.left('n1')).to.deep.equal(FULL);
    expect(budget.left('n2')).to.deep.equal({ pods: POD_EVENTS_PER_NODE - 1, node: true });
  });
});
