import { expect } from 'chai';
import fc from 'fast-check';
import {
  SandboxPolicySpecSchema,
  toApiTime,
  type NodeStamps,
  type OwnNodeCondition,
  type SandboxPolicySpecInput,
} from '../../../src/api/v1alpha1/index.js';
import type { CandidatePod, IoState, NodeFacts } from '../../../src/policy/node-facts.js';
import {
  CONDITION_REFRESH_MS,
  decideNodeCondition,
  type NodeConditionInput,
} from '../../../src/policy/node-condition.js';
import { secondsAfter, T0 } from '../../support/builders.js';

const NOW = secondsAfter(T0, 3_600);
const ago = (seconds: number) => secondsAfter(NOW, -seconds);
const stuck = (name: string, controllerKind = 'ReplicaSet'): CandidatePod => ({
  namespace: 'default',
  name,
  uid: `uid-${name}`,
  controllerKind,
});
const spec = (input: SandboxPolicySpecInput = {}) => SandboxPolicySpecSchema.parse(input);
const facts = (over: Partial<NodeFacts> = {}): NodeFacts => ({
  name: 'n1',
  ready: true,
  controlPlane: false,
  unschedulable: false,
  taints: [],
  degradedByIo: false,
  io: 'Low',
  ioCause: 'Unknown',
  ioStuckPods: [],
  ioHeavyPods: [],
  migrated: 0,
  ...over,
});
const saturated = (over: Partial<NodeFacts> = {}) =>
  facts({ degradedByIo: true, io: 'High', ioStuckPods: [stuck('web-1')], ...over });
const cordoned = (sinceSecondsAgo: number): NodeStamps => ({
  policy: 'p',
  since: ago(sinceSecondsAgo),
  reason: 'stuck',
  cordoned: true,
});
const input = (over: Partial<NodeConditionInput> = {}): NodeConditionInput => ({
  policy: 'p',
  spec: spec(),
  facts: saturated(),
  current: undefined,
  stampsAfter: undefined,
  evidence: 'psi 55% over 40%.',
  now: NOW,
  ...over,
});
const trueSince = (seconds: number, over: Partial<OwnNodeCondition> = {}): OwnNodeCondition => ({
  status: 'True',
  reason: 'IoSaturated',
  message: 'earlier',
  lastTransitionTime: toApiTime(ago(seconds)),
  lastHeartbeatTime: toApiTime(ago(seconds)),
  ...over,
});
const setOf = (decision: ReturnType<typeof decideNodeCondition>) => {
  if (!decision || !('set' in decision)) throw new Error(`expected a set, got ${JSON.stringify(decision)}`);
  return decision.set;
};

describe('decideNodeCondition', () => {
  it('turns True, IoSaturated, when sandboxes are stuck for an IO cause and the IO is proven', () => {
    const set = setOf(decideNodeCondition(input()));
    expect(set).to.include({
      status: 'True',
      reason: 'IoSaturated',
      lastTransitionTime: toApiTime(NOW),
      lastHeartbeatTime: toApiTime(NOW),
    });
    expect(set.message).to.equal(
      '1 pod stuck creating their sandbox for an IO cause; IO pressure proven (policy p). psi 55% over 40%.',
    );
  });

  it('writes nothing on a node without proof, and never a first False (node-problem-detector #304)', () => {
    for (const io of ['Rising', 'Unknown', 'Recovering', 'Low'] as IoState[])
      expect(decideNodeCondition(input({ facts: saturated({ io }) })), io).to.equal(undefined);
    expect(decideNodeCondition(input({ facts: saturated({ degradedByIo: false }) }))).to.equal(undefined);
    expect(decideNodeCondition(input({ facts: facts({ quietSince: ago(600) }) }))).to.equal(undefined);
    // A False someone left stays as it is: only a True of the incident turns False.
    const stale = { ...trueSince(900), status: 'False', reason: 'Recovered' };
    expect(decideNodeCondition(input({ facts: facts({ quietSince: ago(600) }), current: stale }))).to.equal(
      undefined,
    );
  });

  it('stays True with its lastTransitionTime after the stuck pods moved, until the node has recovered', () => {
    const current = trueSince(300);
    const moved = facts({ io: 'High', quietSince: ago(200) });
    const held = setOf(decideNodeCondition(input({ facts: moved, current })));
    expect(held).to.include({ status: 'True', lastTransitionTime: current.lastTransitionTime });
    expect(held.message).to.match(/^0 pods stuck/);
    for (const io of ['Recovering', 'Unknown', 'Rising'] as IoState[]) {
      const decision = decideNodeCondition(input({ facts: facts({ io, quietSince: ago(200) }), current }));
      expect(setOf(decision).status, io).to.equal('True');
    }
    const recovered = setOf(
      decideNodeCondition(input({ facts: facts({ io: 'Low', quietSince: ago(200) }), current })),
    );
    expect(recovered).to.include({
      status: 'False',
      reason: 'Recovered',
      lastTransitionTime: toApiTime(NOW),
      message: 'Recovered: IO pressure and stuck pods gone (policy p).',
    });
  });

  it('refreshes a changed message at most once a minute while status and reason hold', () => {
    const fresh = trueSince(300, { lastHeartbeatTime: toApiTime(ago(CONDITION_REFRESH_MS / 1000 - 1)) });
    expect(decideNodeCondition(input({ current: fresh }))).to.equal(undefined);
    const due = trueSince(300, { lastHeartbeatTime: toApiTime(ago(CONDITION_REFRESH_MS / 1000)) });
    expect(setOf(decideNodeCondition(input({ current: due })))).to.include({
      lastTransitionTime: due.lastTransitionTime,
      lastHeartbeatTime: toApiTime(NOW),
    });
    const same = setOf(decideNodeCondition(input()));
    expect(
      decideNodeCondition(input({ current: { ...same, lastHeartbeatTime: toApiTime(ago(3600)) } })),
    ).to.equal(undefined);
  });

  it('escalates to RemediationExhausted afterSeconds after the fence, with nothing movable left, and keeps it', () => {
    const escalating = spec({ remediation: { escalation: { afterSeconds: 900 } } });
    const emptied = facts({ io: 'High', quietSince: ago(100) });
    const at = (seconds: number, over: Partial<NodeConditionInput> = {}) =>
      decideNodeCondition(
        input({
          spec: escalating,
          facts: emptied,
          current: trueSince(1000),
          stampsAfter: cordoned(seconds),
          ...over,
        }),
      );
    expect(setOf(at(899)).reason).to.equal('IoSaturated');
    const exhausted = setOf(at(900));
    expect(exhausted).to.include({ status: 'True', reason: 'RemediationExhausted' });
    expect(exhausted.lastTransitionTime, 'a new reason is no new transition').to.equal(
      trueSince(1000).lastTransitionTime,
    );
    // The fence's time, which holds, rather than minutes that would change the message every minute.
    expect(exhausted.message).to.match(
      new RegExp(
        `^Still IO-saturated since policy p fenced the node at ${toApiTime(ago(900))}, with what it may move moved;`,
      ),
    );
    // A pod it may still move holds the escalation; one it never moves (a DaemonSet's) does not.
    expect(setOf(at(900, { facts: { ...emptied, ioStuckPods: [stuck('web-2')] } })).reason).to.equal(
      'IoSaturated',
    );
    expect(
      setOf(at(900, { facts: { ...emptied, ioStuckPods: [stuck('ds-1', 'DaemonSet')] } })).reason,
    ).to.equal('RemediationExhausted');
    // Not without our fence, nor without escalation configured.
    expect(setOf(at(900, { stampsAfter: { ...cordoned(900), cordoned: false } })).reason).to.equal(
      'IoSaturated',
    );
    expect(setOf(at(900, { spec: spec() })).reason).to.equal('IoSaturated');
    // Once exhausted, it stays so for the rest of the incident, even as the pressure eases.
    const current = trueSince(1000, { reason: 'RemediationExhausted', message: 'm' });
    expect(setOf(at(950, { current, facts: { ...emptied, io: 'Recovering' } })).reason).to.equal(
      'RemediationExhausted',
    );
  });

  it('removes the condition when the policy writes none, or the node is a control-plane node', () => {
    const off = spec({ remediation: { nodeCondition: false } });
    expect(decideNodeCondition(input({ spec: off, current: trueSince(60) }))).to.deep.equal({ remove: true });
    expect(decideNodeCondition(input({ spec: off }))).to.equal(undefined);
    expect(
      decideNodeCondition(input({ facts: saturated({ controlPlane: true }), current: trueSince(60) })),
    ).to.deep.equal({ remove: true });
  });

  it('never moves lastTransitionTime while the status holds, over any sequence of facts (property)', () => {
    const step = fc.record({
      degradedByIo: fc.boolean(),
      io: fc.constantFrom<IoState>('High', 'Rising', 'Recovering', 'Low', 'Unknown'),
      stuck: fc.nat(3),
      quiet: fc.boolean(),
      seconds: fc.integer({ min: 1, max: 400 }),
    });
    fc.assert(
      fc.property(fc.array(step, { maxLength: 30 }), (steps) => {
        let current: OwnNodeCondition | undefined;
        let now = NOW.getTime();
        let wasTrue = false;
        for (const s of steps) {
          now += s.seconds * 1000;
          const f = facts({
            degradedByIo: s.degradedByIo,
            io: s.io,
            ioStuckPods: Array.from({ length: s.stuck }, (_, i) => stuck(`p${i}`)),
            ...(s.quiet && !s.degradedByIo ? { quietSince: new Date(now - 60_000) } : {}),
          });
          const decision = decideNodeCondition(input({ facts: f, current, now: new Date(now) }));
          if (!decision) continue;
          const set = setOf(decision);
          if (current && current.status === set.status)
            expect(set.lastTransitionTime).to.equal(current.lastTransitionTime);
          if (set.status === 'False') expect(wasTrue, 'a False only after a True').to.equal(true);
          wasTrue ||= set.status === 'True';
          current = set;
        }
      }),
    );
  });
});
