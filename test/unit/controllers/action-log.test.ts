// The action log: the one log line and the one count of each node, pod and rollout action, alike in a real run and a
// dry run (which says so); letting go of a stamp someone else reverted is logged but never counted.
import { expect } from 'chai';
import { ActionLog, type ActionOutcome } from '../../../src/controllers/action-log.js';
import type { Logger } from '../../../src/observability/log.js';
import type { Action } from '../../../src/policy/actions.js';
import type { RolloutAction } from '../../../src/policy/rollouts.js';
import { T0 } from '../../support/builders.js';

interface Line {
  level: 'error' | 'warn' | 'info' | 'debug';
  message: string;
  fields: Record<string, unknown> | undefined;
}

function recording() {
  const lines: Line[] = [];
  const at = (level: Line['level']) => (message: string, fields?: Record<string, unknown>) => {
    lines.push({ level, message, fields });
  };
  const logger: Logger = { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') };
  const counted: [string, ActionOutcome, boolean][] = [];
  const log = new ActionLog(logger, {
    onAction: (kind, outcome, dryRun) => counted.push([kind, outcome, dryRun]),
  });
  return { lines, counted, log };
}

const base = { node: 'n1', target: 'node/n1', reason: 'SandboxCreationStuckOnIo', message: 'stuck' };
const pod = { namespace: 'shop', name: 'web-1', uid: 'u1' };
const taint = { key: 'sandbox.remediator.io/io-saturated', effect: 'NoSchedule' };
const podTarget = { target: 'pod/shop/web-1' };
const actionOf: Record<Action['kind'], Action> = {
  Cordon: { ...base, kind: 'Cordon' },
  Uncordon: { ...base, kind: 'Uncordon', reason: 'Recovered' },
  Taint: { ...base, kind: 'Taint', taint },
  Untaint: { ...base, kind: 'Untaint', taint, reason: 'Recovered' },
  Evict: { ...base, ...podTarget, kind: 'Evict', pod },
  Migrate: { ...base, ...podTarget, kind: 'Migrate', pod, reason: 'IoHeavyPod' },
};

describe('ActionLog.record', () => {
  const done: [Action['kind'], string][] = [
    ['Cordon', 'Cordoned Node'],
    ['Uncordon', 'Uncordoned Node'],
    ['Taint', 'Tainted Node'],
    ['Untaint', 'Untainted Node'],
    ['Evict', 'Evicted stuck Pod'],
    ['Migrate', 'Migrated IO-heavy Pod'],
  ];
  for (const [kind, words] of done)
    for (const dryRun of [false, true])
      it(`logs and counts a ${kind} done${dryRun ? ' in a dry run, saying so' : ''}`, () => {
        const { lines, counted, log } = recording();
        const action = actionOf[kind];
        log.record('p', { action, outcome: 'Succeeded' }, dryRun);
        expect(lines).to.deep.equal([
          {
            level: 'info',
            message: dryRun ? `${words} (dry run)` : words,
            fields: { policy: 'p', node: 'n1', target: action.target, reason: action.reason, dryRun },
          },
        ]);
        expect(counted).to.deep.equal([[kind, 'Succeeded', dryRun]]);
      });

  const failed: [Action['kind'], string][] = [
    ['Cordon', 'Failed to cordon'],
    ['Untaint', 'Failed to untaint'],
    ['Evict', 'Failed to evict'],
    ['Migrate', 'Failed to migrate'],
  ];
  for (const [kind, words] of failed)
    it(`warns of a failed ${kind} with the API's words, and counts it as failed`, () => {
      const { lines, counted, log } = recording();
      const action = actionOf[kind];
      log.record('p', { action, outcome: 'Failed', detail: 'Too Many Requests' }, true);
      expect(lines).to.deep.equal([
        {
          level: 'warn',
          message: words,
          fields: {
            policy: 'p',
            node: 'n1',
            target: action.target,
            reason: action.reason,
            dryRun: true,
            error: 'Too Many Requests',
          },
        },
      ]);
      expect(counted).to.deep.equal([[kind, 'Failed', true]]);
    });

  it('leaves the error out of the fields when the result has no detail', () => {
    const { lines, log } = recording();
    log.record('p', { action: actionOf.Cordon, outcome: 'Failed' }, false);
    expect(lines[0]?.fields).not.to.have.property('error');
  });

  const drops: [Action['kind'], string][] = [
    ['Uncordon', 'UncordonedByOthers'],
    ['Untaint', 'UntaintedByOthers'],
  ];
  for (const [kind, reason] of drops)
    it(`logs letting go of a stamp (${reason}) without counting it: not our action`, () => {
      const { lines, counted, log } = recording();
      const action: Action = { ...actionOf[kind], reason };
      log.record('p', { action, outcome: 'Succeeded' }, false);
      expect(lines).to.deep.equal([
        {
          level: 'info',
          message: 'Dropped our stamp: changed by someone else',
          fields: { policy: 'p', node: 'n1', target: 'node/n1', reason, dryRun: false },
        },
      ]);
      expect(counted).to.deep.equal([]);
    });

  it('logs without counting when it is given no hooks', () => {
    const lines: string[] = [];
    const logger: Logger = {
      error: () => undefined,
      warn: (message) => lines.push(message),
      info: (message) => lines.push(message),
      debug: () => undefined,
    };
    const log = new ActionLog(logger);
    log.record('p', { action: actionOf.Cordon, outcome: 'Succeeded' }, false);
    log.record('p', { action: actionOf.Taint, outcome: 'Failed' }, false);
    expect(lines).to.deep.equal(['Cordoned Node', 'Failed to taint']);
  });
});

describe('ActionLog.recordRollout', () => {
  const stamps = { policy: 'p', since: T0, reason: 'FeedsSaturatedNode' as const, startedAt: T0 };
  const target = 'deployment/shop/web';
  const cases: { action: RolloutAction; dryRun: boolean; message: string; counted: boolean }[] = [
    {
      action: { kind: 'PauseRollout', target, reason: 'FeedsSaturatedNode', message: 'held', stamps },
      dryRun: false,
      message: 'Held rollout',
      counted: true,
    },
    {
      action: { kind: 'PauseRollout', target, reason: 'RolloutQueued', message: 'held', stamps },
      dryRun: true,
      message: 'Held rollout (dry run)',
      counted: true,
    },
    {
      action: { kind: 'ResumeRollout', target, reason: 'Recovered', message: 'released' },
      dryRun: false,
      message: 'Released rollout',
      counted: true,
    },
    {
      action: { kind: 'ResumeRollout', target, reason: 'Recovered', message: 'released' },
      dryRun: true,
      message: 'Released rollout (dry run)',
      counted: true,
    },
    {
      action: {
        kind: 'ReleaseRollout',
        target,
        reason: 'ResumedByOthers',
        message: 'resumed by its owner',
        handsOffUntil: T0,
      },
      dryRun: true,
      message: 'Dropped our stamp: changed by someone else',
      counted: false,
    },
  ];
  for (const c of cases)
    it(`${c.counted ? 'logs and counts' : 'logs without counting'} a ${c.action.kind}${c.dryRun ? ' in a dry run' : ''} as "${c.message}"`, () => {
      const { lines, counted, log } = recording();
      log.recordRollout('p', c.action, c.dryRun);
      expect(lines).to.deep.equal([
        {
          level: 'info',
          message: c.message,
          fields: { policy: 'p', rollout: target, reason: c.action.reason, dryRun: c.dryRun },
        },
      ]);
      expect(counted).to.deep.equal(c.counted ? [[c.action.kind, 'Succeeded', c.dryRun]] : []);
    });
});
