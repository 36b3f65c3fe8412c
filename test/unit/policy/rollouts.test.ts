import { expect } from 'chai';
import fc from 'fast-check';
import {
  decideRollouts,
  type RolloutFacts,
  type RolloutInput,
  type RolloutStamps,
} from '../../../src/policy/rollouts.js';

const NOW = new Date('2026-11-30T12:00:00Z');
const ago = (s: number) => new Date(NOW.getTime() - s * 1000);

/** A Deployment whose new pods could land on the saturated node n1 (and wherever it feeds), unless told otherwise. */
function deployment(name: string, overrides: Partial<RolloutFacts> = {}): RolloutFacts {
  const feeds = overrides.feeds ?? [];
  return {
    kind: 'Deployment',
    namespace: 'shop',
    name,
    paused: false,
    rollingOut: true,
    startedAt: ago(60),
    feeds,
    reaches: [...new Set(['n1', ...feeds])].sort(),
    ...overrides,
  };
}
/** Its new pods can land on no saturated node. */
const elsewhere: Partial<RolloutFacts> = { reaches: [] };
const ours = (reason: RolloutStamps['reason'], startedAt = ago(60)): Partial<RolloutFacts> => ({
  paused: true,
  stamps: { policy: 'p', since: ago(30), reason, startedAt },
});

function decide(deployments: RolloutFacts[], overrides: Partial<RolloutInput> = {}) {
  const decision = decideRollouts({
    policy: 'p',
    throttle: { pauseDeployments: true, maxConcurrentRollouts: 1 },
    rollouts: deployments,
    pressure: true,
    now: NOW,
    cacheReady: true,
    paused: false,
    cooldownSeconds: 300,
    ...overrides,
  });
  return {
    actions: decision.actions.map((a) => `${a.kind} ${a.target.replace('deployment/shop/', '')} ${a.reason}`),
    blocked: decision.blocked.map((b) => `${b.target.replace('deployment/shop/', '')} ${b.guard}`),
    paused: decision.pausedAfter.map((p) => `${p.target.replace('deployment/shop/', '')} ${p.reason}`),
  };
}

describe('decideRollouts', () => {
  const rows: {
    name: string;
    rollouts: RolloutFacts[];
    input?: Partial<RolloutInput>;
    actions: string[];
    paused?: string[];
    blocked?: string[];
  }[] = [
    {
      name: 'pauses a rolling-out Deployment whose pods are stuck on a remediated node',
      rollouts: [deployment('web', { feeds: ['n1'] })],
      actions: ['PauseRollout web FeedsSaturatedNode'],
      paused: ['web FeedsSaturatedNode'],
    },
    {
      name: 'pauses nothing that is not rolling out, or that the user paused',
      rollouts: [
        deployment('done', { rollingOut: false, feeds: ['n1'] }),
        deployment('mine', { paused: true, feeds: ['n1'] }),
      ],
      actions: [],
    },
    {
      name: 'with pauseDeployments false only the concurrency limit applies',
      rollouts: [deployment('web', { feeds: ['n1'] })],
      input: { throttle: { pauseDeployments: false, maxConcurrentRollouts: 1 } },
      actions: [],
    },
    {
      name: 'queues the newest rollouts beyond maxConcurrentRollouts',
      rollouts: [
        deployment('a', { startedAt: ago(30) }),
        deployment('b', { startedAt: ago(20) }),
        deployment('c', { startedAt: ago(10) }),
      ],
      actions: ['PauseRollout c RolloutQueued', 'PauseRollout b RolloutQueued'],
      paused: ['b RolloutQueued', 'c RolloutQueued'],
    },
    {
      name: 'resumes the oldest queued rollout when the running one completes',
      rollouts: [
        deployment('a', { rollingOut: false, startedAt: ago(30) }),
        deployment('c', { ...ours('RolloutQueued', ago(10)) }),
        deployment('b', { ...ours('RolloutQueued', ago(20)) }),
      ],
      actions: ['ResumeRollout b QueueAdvanced'],
      paused: ['c RolloutQueued'],
    },
    {
      name: 'keeps the queue while one is still progressing',
      rollouts: [deployment('a', { startedAt: ago(30) }), deployment('b', { ...ours('RolloutQueued') })],
      actions: [],
      paused: ['b RolloutQueued'],
    },
    {
      name: 'a paused feeder whose pods no longer feed a node waits its turn in the queue',
      rollouts: [
        deployment('a', { startedAt: ago(90) }),
        deployment('web', { ...ours('FeedsSaturatedNode') }),
      ],
      actions: [],
      paused: ['web RolloutQueued'],
    },
    {
      name: 'a paused feeder still feeding stays paused even with room',
      rollouts: [deployment('web', { ...ours('FeedsSaturatedNode'), feeds: ['n1'] })],
      actions: [],
      paused: ['web FeedsSaturatedNode'],
    },
    {
      name: 'resumes everything it paused, oldest first, when the pressure is gone',
      rollouts: [
        deployment('b', { ...ours('RolloutQueued', ago(20)) }),
        deployment('a', { ...ours('FeedsSaturatedNode', ago(40)), feeds: ['n1'] }),
        deployment('user', { paused: true }),
      ],
      input: { pressure: false },
      actions: ['ResumeRollout a PressureGone', 'ResumeRollout b PressureGone'],
      paused: [],
    },
    {
      name: 'resumes what it paused when throttleRollouts is removed from the policy',
      rollouts: [deployment('b', { ...ours('RolloutQueued') })],
      input: { throttle: undefined },
      actions: ['ResumeRollout b PressureGone'],
      paused: [],
    },
    {
      name: 'lets go of one the user resumed, and neither pauses nor queues it during the cooldown',
      rollouts: [
        deployment('a', { startedAt: ago(90) }),
        deployment('web', {
          stamps: { policy: 'p', since: ago(5), reason: 'FeedsSaturatedNode', startedAt: ago(60) },
        }),
      ],
      actions: ['ReleaseRollout web ResumedByOthers'],
      paused: [],
    },
    {
      name: 'leaves alone a Deployment within its hands-off time, but counts it as progressing',
      rollouts: [
        deployment('web', {
          feeds: ['n1'],
          handsOffUntil: new Date(NOW.getTime() + 1000),
          startedAt: ago(90),
        }),
        deployment('b', { startedAt: ago(10) }),
      ],
      actions: ['PauseRollout b RolloutQueued'],
      paused: ['b RolloutQueued'],
    },
    {
      name: 'never holds nor counts a rollout whose pods can land on no saturated node',
      rollouts: [
        deployment('elsewhere-old', { ...elsewhere, startedAt: ago(300) }),
        deployment('web', { startedAt: ago(90) }),
        deployment('b', { startedAt: ago(10) }),
        deployment('elsewhere-new', { ...elsewhere, startedAt: ago(5) }),
      ],
      actions: ['PauseRollout b RolloutQueued'],
      paused: ['b RolloutQueued'],
    },
    {
      name: 'holds a stalled rollout that feeds the node, and gives a stalled one no slot',
      rollouts: [
        deployment('stalled-feeder', { feeds: ['n1'], stalled: true, startedAt: ago(300) }),
        deployment('stalled', { stalled: true, startedAt: ago(200) }),
        deployment('web', { startedAt: ago(90) }),
      ],
      actions: ['PauseRollout stalled-feeder FeedsSaturatedNode'],
      paused: ['stalled-feeder FeedsSaturatedNode'],
    },
    {
      name: 'keeps what it holds when whether its pods run on a saturated node could not be read',
      rollouts: [
        deployment('web', { startedAt: ago(90) }),
        deployment('b', { ...ours('RolloutQueued'), ...elsewhere, reachUnknown: true }),
      ],
      actions: [],
      paused: ['b RolloutQueued'],
    },
    {
      name: 'resumes one it queued at once when its pods can no longer land on a saturated node',
      rollouts: [
        deployment('web', { startedAt: ago(90) }),
        deployment('b', { ...ours('RolloutQueued'), ...elsewhere }),
        deployment('c', { ...ours('FeedsSaturatedNode'), ...elsewhere }),
      ],
      actions: ['ResumeRollout b ReachesNoSaturatedNode', 'ResumeRollout c ReachesNoSaturatedNode'],
      paused: [],
    },
    {
      name: 'CacheNotSynced: pauses and resumes nothing, and reports what it holds',
      rollouts: [deployment('web', { feeds: ['n1'] }), deployment('b', { ...ours('RolloutQueued') })],
      input: { cacheReady: false, pressure: false },
      actions: [],
      blocked: ['b CacheNotSynced'],
      paused: ['b RolloutQueued'],
    },
    {
      name: 'Paused policy: pauses and resumes nothing',
      rollouts: [deployment('web', { feeds: ['n1'] }), deployment('b', { ...ours('RolloutQueued') })],
      input: { paused: true, pressure: false },
      actions: [],
      blocked: ['b Paused'],
      paused: ['b RolloutQueued'],
    },
  ];
  for (const row of rows) {
    it(row.name, () => {
      const result = decide(row.rollouts, row.input);
      expect(result.actions, 'actions').to.deep.equal(row.actions);
      expect(result.blocked, 'blocked').to.deep.equal(row.blocked ?? []);
      if (row.paused) expect(result.paused, 'paused after').to.deep.equal(row.paused);
    });
  }

  it('property: never touches a Deployment the user paused, never lets more than the limit progress anew, pauses before it advances the queue', () => {
    const facts = fc.record({
      paused: fc.boolean(),
      rollingOut: fc.boolean(),
      ours: fc.option(fc.constantFrom('FeedsSaturatedNode' as const, 'RolloutQueued' as const), {
        nil: undefined,
      }),
      feeds: fc.boolean(),
      reaches: fc.boolean(),
      startedAgo: fc.integer({ min: 0, max: 600 }),
    });
    fc.assert(
      fc.property(
        fc.array(facts, { maxLength: 10 }),
        fc.integer({ min: 1, max: 4 }),
        fc.boolean(),
        (list, max, pressure) => {
          const deployments = list.map((f, i) =>
            deployment(`d${i}`, {
              paused: f.paused || f.ours !== undefined,
              rollingOut: f.rollingOut,
              startedAt: ago(f.startedAgo),
              feeds: f.feeds ? ['n1'] : [],
              // A rollout stuck on a node reaches it.
              reaches: f.feeds || f.reaches ? ['n1'] : [],
              ...(f.ours
                ? { stamps: { policy: 'p', since: ago(1), reason: f.ours, startedAt: ago(f.startedAgo) } }
                : {}),
            }),
          );
          const decision = decideRollouts({
            policy: 'p',
            throttle: { pauseDeployments: true, maxConcurrentRollouts: max },
            rollouts: deployments,
            pressure,
            now: NOW,
            cacheReady: true,
            paused: false,
            cooldownSeconds: 60,
          });
          // Every pause comes before every QueueAdvanced resume: the reconciler holds those resumes back when a pause
          // of the same pass is refused (the room they go into was to be made by it).
          const lastPause = decision.actions.findLastIndex((a) => a.kind === 'PauseRollout');
          const firstQueued = decision.actions.findIndex(
            (a) => a.kind === 'ResumeRollout' && a.reason === 'QueueAdvanced',
          );
          if (lastPause >= 0 && firstQueued >= 0) expect(lastPause, 'pauses first').to.be.below(firstQueued);
          const byTarget = new Map(deployments.map((d) => [`deployment/${d.namespace}/${d.name}`, d]));
          for (const action of decision.actions) {
            const d = byTarget.get(action.target)!;
            // The user's own pause (paused, no stamp) is never resumed or released.
            expect(d.paused && !d.stamps, `${action.kind} ${action.target}`).to.equal(false);
            if (action.kind === 'ResumeRollout')
              expect(d.stamps, 'resumes only what we paused').to.not.equal(undefined);
          }
          const pausedAfter = new Set(decision.pausedAfter.map((p) => p.target));
          const resumed = new Set(
            decision.actions.filter((a) => a.kind === 'ResumeRollout').map((a) => a.target),
          );
          // A rollout whose pods can land on no saturated node is never held, and held no longer once it is ours.
          for (const d of deployments.filter((x) => x.reaches.length === 0)) {
            const t = `deployment/${d.namespace}/${d.name}`;
            expect(pausedAfter.has(t), `${t} held`).to.equal(false);
            expect(decision.actions.some((a) => a.kind === 'PauseRollout' && a.target === t)).to.equal(false);
          }
          const progressing = deployments.filter((d) => {
            const t = `deployment/${d.namespace}/${d.name}`;
            return (
              d.reaches.length > 0 && d.rollingOut && ((!d.paused && !pausedAfter.has(t)) || resumed.has(t))
            );
          });
          const progressingBefore = deployments.filter(
            (d) => d.reaches.length > 0 && d.rollingOut && !d.paused,
          ).length;
          // Resuming never takes the count over the limit (the user's own unpaused rollouts may already be over it).
          if (pressure && resumed.size > 0) expect(progressing.length).to.be.at.most(max);
          if (pressure) expect(progressing.length).to.be.at.most(Math.max(max, progressingBefore));
        },
      ),
      { numRuns: 500 },
    );
  });
});
