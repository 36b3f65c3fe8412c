// The pure steps of a pass (src/controllers/apply/pass.ts): when it looks again after acting, what each node's reports
// say of its remediation before and after acting (each block told once), and the policy's status.
import { expect } from 'chai';
import {
  validateSandboxPolicySpec,
  type NodeStamps,
  type SandboxPolicyStatus,
} from '../../../../src/api/v1alpha1/index.js';
import {
  followUpWait,
  policyStatusOf,
  remediationBeforeActing,
  remediationOf,
  setRemediation,
  type Done,
  type Pass,
  type Plan,
  type Remediation,
  type Seen,
} from '../../../../src/controllers/apply/pass.js';
import {
  PolicyMemory,
  type NodeObservation,
  type RemediationParts,
} from '../../../../src/controllers/policy-memory.js';
import type { Action, BlockedAction, Guard } from '../../../../src/policy/actions.js';
import type { NodeFacts } from '../../../../src/policy/node-facts.js';
import type { ActionResult } from '../../../../src/status/remediation-status.js';
import { secondsAfter, T0 } from '../../../support/builders.js';
import { aNode } from '../../../support/memory-cluster.js';

const validation = validateSandboxPolicySpec({});
if (!validation.valid) throw new Error(JSON.stringify(validation.problems));
const SPEC = validation.spec;
const STAMPS: NodeStamps = { policy: 'p', since: T0, taintsBefore: [], reason: 'stuck', cordoned: true };
const TAINT = { key: 'sandbox.remediator.io/io-saturated', effect: 'NoSchedule' };
const HELD = 'deployment/shop/web';
const POD = { namespace: 'default', name: 'web', uid: 'uid-web' };
const act = (kind: Action['kind'], reason = 'SandboxCreationStuckOnIo'): Action =>
  ({ kind, node: 'n1', target: 'node/n1', reason, message: 'm', pod: POD }) as Action;
const result = (kind: Action['kind'], outcome: ActionResult['outcome'], reason?: string): ActionResult => ({
  action: act(kind, reason),
  outcome,
});
const block = (guard: Guard, o: Partial<BlockedAction> = {}): BlockedAction => ({
  ...{ kind: 'Cordon', node: 'n1', target: 'node/n1', guard, message: `held by ${guard}` },
  ...o,
});
const PARTS: RemediationParts = {
  ...{ blocked: [], stampsAfter: STAMPS, unschedulable: true, throttling: [], notTriggered: undefined },
  ...{ simulated: false, dryRun: false },
};
const FACTS: NodeFacts = {
  ...{ name: 'n1', ready: true, controlPlane: false, unschedulable: false, taints: [], degradedByIo: true },
  ...{ io: 'High', ioCause: 'Unknown', ioStuckPods: [], ioHeavyPods: [], migrated: 0 },
};

/** A node as a pass sees it: degraded or not, with the blocks its stored status holds. */
const observation = (name: string, o: { degraded?: boolean; stored?: BlockedAction[] } = {}) =>
  ({
    node: aNode(name),
    findings: { degraded: o.degraded ?? false },
    previous: o.stored && { blocked: o.stored.map((b) => ({ ...b, since: T0.toISOString() })) },
  }) as unknown as NodeObservation;

interface World {
  /** What n1's reports said (over PARTS), if they said anything yet. */
  old?: Partial<RemediationParts>;
  observed?: boolean;
  degraded?: boolean;
  stored?: BlockedAction[];
  decided?: boolean;
  actions?: Action[];
  blocked?: BlockedAction[];
  stampsAfter?: NodeStamps | undefined;
  facts?: Partial<NodeFacts>;
  dryRun?: boolean;
  status?: Partial<SandboxPolicyStatus>;
  done?: Partial<Done>;
}

/** One node, n1, of policy p: its memory, the pass, what it saw, planned and did. */
function world(w: World = {}) {
  const memory = new PolicyMemory('uid-p');
  if (w.old) memory.state('n1').remediation = { ...PARTS, ...w.old };
  const policy = { name: 'p', uid: 'uid-p', generation: 2, createdAt: T0, spec: {}, status: w.status };
  const overlaps = [{ node: 'n3', ownedBy: 'q' }];
  const owned = ['n1', 'n2'];
  const pass = { policy, spec: SPEC, memory, dryRun: w.dryRun ?? false, now: T0, owned, overlaps };
  const observed = new Set(w.observed === false ? [] : ['n1']);
  const seen: Seen = { full: false, observed, unsettled: 0, source: undefined };
  const actions = w.actions ?? [];
  const stampsAfter = new Map([['n1', 'stampsAfter' in w ? w.stampsAfter : STAMPS]]);
  const storm = { detected: true, unhealthy: 4, limit: 3 };
  const plan = {
    observations: [observation('n1', w)],
    facts: new Map([['n1', { ...FACTS, ...w.facts }]]),
    remediation: w.decided === false ? undefined : { actions, blocked: w.blocked ?? [], storm, stampsAfter },
    actions,
    evictions: { evictions: [], left: 0 },
  } as unknown as Plan;
  const done: Done = {
    ...{ results: new Map(), blocked: [], failedNodes: new Set(), evictedAt: [], reserved: undefined },
    ...{ rollouts: { throttling: new Map(), listed: [] }, pacing: { gated: 0, recentReleases: [] } },
    ...w.done,
  };
  return { memory, pass: pass as unknown as Pass, seen, plan, done };
}

/** What a node's reports say of its remediation, in short: 'blocked [Cooldown], stamped, unschedulable'. */
const said = (p: RemediationParts) =>
  [
    `blocked [${p.blocked.map((b) => b.guard).join(' ')}]`,
    p.stampsAfter ? 'stamped' : 'unstamped',
    ...(p.unschedulable ? ['unschedulable'] : []),
    ...(p.throttling.length > 0 ? [`holds [${p.throttling.join(' ')}]`] : []),
    ...(p.notTriggered ? [p.notTriggered.reason] : []),
    ...(p.simulated ? ['simulated'] : []),
  ].join(', ');
const summary = (r: Remediation) => ({
  nodes: Object.fromEntries(
    [...r.nodes].map(([n, { parts, results }]) => [n, `${said(parts)}; ${results.length} done`]),
  ),
  touched: r.touched,
  degraded: r.degraded,
  remediating: r.remediating,
});

describe('a pass', () => {
  describe('followUpWait', () => {
    type Wait = Partial<Record<'actions' | 'blocked' | 'nextInMs' | 'left', number>> & {
      did?: ActionResult[];
      /** The blocks are the apiserver's refusal of n1's change (RefusedByApi); `elsewhere`: one more action, on n2. */
      refused?: boolean;
      elsewhere?: boolean;
    };
    const evicted = [result('Evict', 'Succeeded')];
    const failed = [result('Evict', 'Failed')];
    const cordoned = [result('Cordon', 'Succeeded')];
    const cases: Record<string, [Wait, number | undefined]> = {
      'follows nothing up when nothing was done, held back or paced': [{}, undefined],
      'follows up what it did after 5 s': [{ actions: 1 }, 5_000],
      'retries what the API held back after 5 s': [{ blocked: 1 }, 5_000],
      'looks again just after the next paced gate may be lifted': [{ nextInMs: 2_000 }, 2_001],
      'takes the next gate when it is before the follow-up': [{ actions: 1, nextInMs: 2_000 }, 2_001],
      'takes the follow-up when it is before the next gate': [{ actions: 1, nextInMs: 9_000 }, 5_000],
      'waits no less than nothing for a gate already due': [{ nextInMs: -3_000 }, 0],
      'goes on at once with evictions left over while some got through': [{ left: 2, did: evicted }, 0],
      'does not go on at once with no eviction left over': [{ actions: 1, did: evicted }, 5_000],
      'does not loop on evictions left over that a budget all refused': [{ blocked: 1, left: 2 }, 5_000],
      'does not loop on evictions left over that failed': [{ actions: 1, left: 2, did: failed }, 5_000],
      'does not loop on evictions left over when only a cordon got through': [
        { actions: 1, left: 2, did: cordoned },
        5_000,
      ],
      'does not follow up a change the apiserver refused: it is not sent again for a while': [
        { actions: 1, blocked: 1, refused: true },
        undefined,
      ],
      "follows up another node's action though one node's change was refused": [
        { actions: 1, blocked: 1, refused: true, elsewhere: true },
        5_000,
      ],
    };
    for (const [name, [w, want]] of Object.entries(cases))
      it(name, () => {
        const { pass, plan, done } = world();
        plan.actions = Array.from({ length: w.actions ?? 0 }, () => act('Cordon'));
        if (w.elsewhere) plan.actions.push({ ...act('Cordon'), node: 'n2', target: 'node/n2' });
        plan.evictions = { evictions: [], left: w.left ?? 0 };
        done.blocked = Array.from({ length: w.blocked ?? 0 }, () =>
          block(w.refused ? 'RefusedByApi' : 'DisruptionBudget'),
        );
        done.results.set('n1', w.did ?? []);
        if (w.nextInMs !== undefined) done.pacing.nextAt = new Date(T0.getTime() + w.nextInMs);
        expect(followUpWait(pass, plan, done)).to.equal(want);
      });
  });

  describe('setRemediation', () => {
    const cool = block('Cooldown');
    const storm = block('StormLimit');
    const taint = block('Cooldown', { kind: 'Taint' });
    // [the blocks the stored status held, the blocks of each round, what each round told]
    const tellings: Record<string, [BlockedAction[], BlockedAction[][], string[]]> = {
      'says a block when it is first decided': [[], [[cool]], ['Cooldown']],
      'says a standing block once, not at every pass': [[], [[cool], [cool]], ['Cooldown', '']],
      'says no block the stored status held at the first look (a restart)': [
        [cool],
        [[cool, storm]],
        ['StormLimit'],
      ],
      'reads the stored blocks at the first look only': [[cool], [[], [cool]], ['', 'Cooldown']],
      'says a block again that lifted and came back': [
        [],
        [[cool], [], [cool]],
        ['Cooldown', '', 'Cooldown'],
      ],
      'says no block again for a new message': [[], [[cool], [{ ...cool, message: 'm' }]], ['Cooldown', '']],
      'says the same guard on another kind of action': [
        [],
        [[cool], [cool, taint]],
        ['Cooldown', 'Cooldown'],
      ],
    };
    for (const [name, [stored, rounds, told]] of Object.entries(tellings))
      it(name, () => {
        const { memory } = world();
        memory.state('n1').observation = observation('n1', { stored });
        const got = rounds.map((blocked) => {
          const guards: string[] = [];
          setRemediation(memory, 'n1', { ...PARTS, blocked }, (g) => guards.push(g));
          return guards.join(' ');
        });
        expect(got).to.deep.equal(told);
      });

    it('says the first remediation of a node changed', () => {
      expect(setRemediation(new PolicyMemory('uid-p'), 'n1', PARTS, () => undefined)).to.equal(true);
    });

    const later = secondsAfter(T0, 60);
    const BEFORE: RemediationParts = { ...PARTS, blocked: [block('Cooldown', { liftsAt: T0 })] };
    const TAINTED: RemediationParts = { ...BEFORE, stampsAfter: { ...STAMPS, taint: TAINT } };
    const st = (o: Partial<NodeStamps>) => ({ stampsAfter: { ...STAMPS, ...o } });
    const bl = (o: Partial<BlockedAction>) => ({ blocked: BEFORE.blocked.map((b) => ({ ...b, ...o })) });
    // [what the reports said, what changes in them, whether that is a change]
    const changes: Record<string, [RemediationParts, Partial<RemediationParts>, boolean]> = {
      'the same, in new objects': [
        BEFORE,
        { ...st({ since: new Date(+T0) }), ...bl({ liftsAt: new Date(+T0) }) },
        false,
      ],
      'the same taint, in a new object': [TAINTED, st({ taint: { ...TAINT } }), false],
      'another taint': [TAINTED, st({ taint: { ...TAINT, effect: 'NoExecute' } }), true],
      'a taint added': [BEFORE, st({ taint: TAINT }), true],
      'stamped since another time': [BEFORE, st({ since: later }), true],
      'not cordoned': [BEFORE, st({ cordoned: false }), true],
      'another reason': [BEFORE, st({ reason: 'other' }), true],
      'other taints before': [BEFORE, st({ taintsBefore: ['maintenance'] }), true],
      'its stamps gone': [BEFORE, { stampsAfter: undefined }, true],
      'unschedulable no more': [BEFORE, { unschedulable: false }, true],
      'a rollout held for it': [BEFORE, { throttling: [HELD] }, true],
      'a new block': [BEFORE, { blocked: [...BEFORE.blocked, block('Paused')] }, true],
      "a block's message": [BEFORE, bl({ message: 'new' }), true],
      'when a block lifts': [BEFORE, bl({ liftsAt: later }), true],
      'why nothing started': [BEFORE, { notTriggered: { reason: 'NotIoCaused', message: 'm' } }, true],
      'a dry run now': [BEFORE, { dryRun: true }, true],
      'its stamps simulated': [BEFORE, { simulated: true }, true],
    };
    for (const [name, [from, change, changed]] of Object.entries(changes))
      it(`says ${changed ? 'a change, and drops' : 'no change, and keeps'} the facts memo, for ${name}`, () => {
        const { memory } = world();
        setRemediation(memory, 'n1', from, () => undefined);
        const state = memory.state('n1');
        state.facts = {} as NonNullable<typeof state.facts>;
        const after = { ...from, ...change };
        const got = setRemediation(memory, 'n1', after, () => undefined);
        expect([got, 'facts' in state]).to.deep.equal([changed, !changed]);
        expect(state.remediation, 'the new parts, either way').to.equal(after);
      });
  });

  describe('remediationBeforeActing', () => {
    const quiet = { blocked: [], stampsAfter: STAMPS };
    const cases: Record<string, [World, Record<string, string>]> = {
      'says nothing while a node settles (no decision)': [{ decided: false }, {}],
      'leaves a node with actions as it was until they are back': [{ actions: [act('Cordon')] }, {}],
      'leaves a quiet node not looked at as its reports say': [{ old: quiet, observed: false }, {}],
      'says the blocks of a node looked at at once, keeping its held rollouts': [
        { old: { throttling: [HELD] }, blocked: [block('Cooldown')] },
        { n1: `blocked [Cooldown], stamped, holds [${HELD}]` },
      ],
      'says a block newly held on a node not looked at': [
        { old: quiet, observed: false, blocked: [block('StormLimit')] },
        { n1: 'blocked [StormLimit], stamped' },
      ],
      'clears the lifted blocks of a node not looked at': [
        { old: { blocked: [block('Cooldown')] }, observed: false },
        { n1: 'blocked [], stamped' },
      ],
      'says the new stamps of a node not looked at': [
        { old: quiet, observed: false, stampsAfter: undefined },
        { n1: 'blocked [], unstamped' },
      ],
      'says why nothing started on a node degraded for another cause than IO': [
        { degraded: true, facts: { degradedByIo: false }, stampsAfter: undefined },
        { n1: 'blocked [], unstamped, NotIoCaused' },
      ],
      "marks a dry run's stamps on a node that carries none as simulated": [
        { dryRun: true },
        { n1: 'blocked [], stamped, simulated' },
      ],
    };
    for (const [name, [w, want]] of Object.entries(cases))
      it(name, () => {
        const { pass, seen, plan } = world(w);
        const got = remediationBeforeActing(pass, seen, plan);
        expect(Object.fromEntries([...got].map(([n, p]) => [n, said(p)]))).to.deep.equal(want);
      });
  });

  describe('remediationOf', () => {
    const did = (r: ActionResult) => new Map([['n1', [r]]]);
    const cases: Record<string, [World, Partial<ReturnType<typeof summary>>]> = {
      'says the stamps decided of a node cordoned, and unschedulable': [
        { actions: [act('Cordon')], done: { results: did(result('Cordon', 'Succeeded')) } },
        { nodes: { n1: 'blocked [], stamped, unschedulable; 1 done' }, touched: ['n1'], remediating: 1 },
      ],
      'keeps the stamps a node had when its patch failed: it claims nothing not written': [
        {
          actions: [act('Cordon')],
          done: { failedNodes: new Set(['n1']), results: did(result('Cordon', 'Failed')) },
        },
        { nodes: { n1: 'blocked [], unstamped; 1 done' }, touched: ['n1'], remediating: 0 },
      ],
      'leaves a quiet node not looked at as its reports say, still remediating': [
        { old: { blocked: [] }, observed: false },
        { nodes: {}, touched: [], remediating: 1 },
      ],
      'keeps what the reports said with no decision, but for the rollouts held now': [
        {
          decided: false,
          old: { blocked: [block('Cooldown')] },
          done: { rollouts: { throttling: new Map([['n1', [HELD]]]), listed: [] } },
        },
        { nodes: { n1: `blocked [Cooldown], stamped, unschedulable, holds [${HELD}]; 0 done` } },
      ],
      'says the stored blocks again with no decision and nothing said yet': [
        { decided: false, stored: [block('Paused')] },
        { nodes: { n1: 'blocked [Paused], unstamped; 0 done' } },
      ],
      'looks again at a node the API held back, and says its block': [
        { old: { blocked: [] }, observed: false, done: { blocked: [block('DisruptionBudget')] } },
        { touched: ['n1'], nodes: { n1: 'blocked [DisruptionBudget], stamped; 0 done' } },
      ],
      'counts a degraded node': [{ degraded: true }, { degraded: 1 }],
    };
    for (const [name, [w, want]] of Object.entries(cases))
      it(name, () => {
        const { pass, seen, plan, done } = world(w);
        expect(summary(remediationOf(pass, seen, plan, done))).to.deep.include(want);
      });
  });

  describe('policyStatusOf', () => {
    const evictions = ['2026-11-30T09:59:30.000Z'];
    const releases = ['2026-11-30T09:59:50.000Z'];
    const counts = { degraded: 1, remediating: 2, blockedNew: 3, recentEvictions: evictions };
    const results = new Map([
      ['n1', [result('Cordon', 'Succeeded'), result('Evict', 'Failed')]],
      ['n2', [result('Uncordon', 'Succeeded', 'UncordonedByOthers'), result('Migrate', 'Succeeded')]],
    ]);
    const cases: Record<string, [World, Partial<SandboxPolicyStatus>]> = {
      'counts the actions that succeeded over the stored count, not a stamp let go of': [
        { status: { actionCount: 4 }, done: { results } },
        { actionCount: 6 },
      ],
      'counts the new blocks over the stored count': [
        { status: { blockedActionCount: 5 } },
        { blockedActionCount: 8 },
      ],
      'says the nodes it owns, those it shares, and how many are degraded or remediating': [
        {},
        {
          matchedNodes: 2,
          overlappingNodeCount: 1,
          degradedNodes: 1,
          remediatingNodes: 2,
          observedGeneration: 2,
        },
      ],
      'says the gated pods and the logs of evictions and gate releases': [
        { done: { pacing: { gated: 4, recentReleases: releases } } },
        { gatedPods: 4, recentGateReleases: releases, recentEvictions: evictions },
      ],
    };
    for (const [name, [w, want]] of Object.entries(cases))
      it(name, () => {
        const { pass, plan, done } = world(w);
        expect(policyStatusOf(pass, plan, done, counts)).to.deep.include(want);
      });

    const stored = {
      type: 'StormDetected',
      status: 'False' as const,
      reason: 'WithinLimit',
      message: 'm',
      lastTransitionTime: '',
    };
    const storms: Record<string, [World, string]> = {
      'says the storm the decision saw': [{ status: { conditions: [stored] } }, 'True StormLimitReached'],
      'keeps the stored storm condition with no decision': [
        { decided: false, status: { conditions: [stored] } },
        'False WithinLimit',
      ],
    };
    for (const [name, [w, want]] of Object.entries(storms))
      it(name, () => {
        const { pass, plan, done } = world(w);
        const storm = policyStatusOf(pass, plan, done, counts).conditions?.find(
          (c) => c.type === 'StormDetected',
        );
        expect(`${storm?.status} ${storm?.reason}`).to.equal(want);
      });
  });
});
