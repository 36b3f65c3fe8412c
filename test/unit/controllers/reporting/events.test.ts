// recordEvent alone: every transition is recorded as an Event, the ones an SRE follows are logged too, and an Event
// the API would not take is logged, never thrown.
import { expect } from 'chai';
import { recordEvent } from '../../../../src/controllers/reporting/events.js';
import type { Logger } from '../../../../src/observability/log.js';
import type { EventRecorder, Transition } from '../../../../src/ports/writes.js';

interface Line {
  level: 'error' | 'warn' | 'info' | 'debug';
  message: string;
  fields: Record<string, unknown> | undefined;
}

function aWorld(fail?: unknown) {
  const lines: Line[] = [];
  const at = (level: Line['level']) => (message: string, fields?: Record<string, unknown>) => {
    lines.push({ level, message, fields });
  };
  const logger: Logger = { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') };
  const recorded: Transition[] = [];
  const recorder: EventRecorder = {
    record: async (transition) => {
      recorded.push(transition);
      await Promise.resolve(); // answered later, as the API does
      // eslint-disable-next-line @typescript-eslint/only-throw-error -- a recorder may reject with anything
      if (fail !== undefined) throw fail;
    },
  };
  return { lines, recorded, deps: { logger, recorder } };
}

const pod = { kind: 'Pod' as const, namespace: 'shop', name: 'web-1', uid: 'u1' };
const node = { kind: 'Node' as const, name: 'n1', uid: 'uid-n1' };
const transition = (reason: string, target: Transition['target'] = node): Transition => ({
  target,
  type: 'Warning',
  reason,
  message: `${reason} said`,
});

describe('recordEvent', () => {
  const logged: { name: string; transition: Transition; message: string; pod?: string }[] = [
    {
      name: 'logs a stuck pod with its name',
      transition: transition('SandboxCreationStuck', pod),
      message: 'Detected stuck Pod',
      pod: 'shop/web-1',
    },
    {
      name: 'logs the node turning degraded',
      transition: transition('SandboxCreationDegraded'),
      message: 'Changed Node state',
    },
    {
      name: "logs the node's IO pressure turning high",
      transition: transition('IoPressureHigh'),
      message: 'Changed Node state',
    },
    {
      name: 'logs the node recovering',
      transition: transition('SandboxCreationRecovered'),
      message: 'Changed Node state',
    },
    {
      name: "logs the node's IO pressure recovering",
      transition: transition('IoPressureRecovered'),
      message: 'Changed Node state',
    },
    {
      name: "logs a node's stuck-pod Event, naming no pod",
      transition: transition('SandboxCreationStuck'),
      message: 'Detected stuck Pod',
    },
  ];
  for (const c of logged)
    it(`${c.name}, and records it`, async () => {
      const { lines, recorded, deps } = aWorld();
      await recordEvent(deps, 'p', 'n1', c.transition);
      expect(recorded).to.deep.equal([c.transition]);
      expect(lines).to.deep.equal([
        {
          level: 'info',
          message: c.message,
          fields: {
            policy: 'p',
            node: 'n1',
            ...(c.pod ? { pod: c.pod } : {}),
            reason: c.transition.reason,
            message: c.transition.message,
          },
        },
      ]);
    });

  for (const reason of [
    'Cordoned',
    'EvictedStuckPod',
    'RemediationBlocked',
    'RecoveryPending',
    'SandboxCreationStuckOnIo',
  ])
    it(`records a ${reason} Event without logging it`, async () => {
      const { lines, recorded, deps } = aWorld();
      await recordEvent(deps, 'p', 'n1', transition(reason));
      expect(recorded.map((t) => t.reason)).to.deep.equal([reason]);
      expect(lines).to.deep.equal([]);
    });

  const failures: { name: string; err: unknown; error: string }[] = [
    { name: 'an Error', err: new Error('events is forbidden'), error: 'events is forbidden' },
    { name: 'anything else thrown', err: 'connection reset', error: 'connection reset' },
  ];
  for (const c of failures)
    it(`logs an Event the API did not take (${c.name}) and goes on`, async () => {
      const { lines, deps } = aWorld(c.err);
      await recordEvent(deps, 'p', 'n1', transition('Cordoned'));
      expect(lines).to.deep.equal([
        {
          level: 'warn',
          message: 'Failed to record an Event',
          fields: { policy: 'p', node: 'n1', reason: 'Cordoned', error: c.error },
        },
      ]);
    });

  it('logs a followed transition before its Event fails, then the failure', async () => {
    const { lines, deps } = aWorld(new Error('timeout'));
    await recordEvent(deps, 'p', 'n1', transition('IoPressureHigh'));
    expect(lines.map((l) => [l.level, l.message])).to.deep.equal([
      ['info', 'Changed Node state'],
      ['warn', 'Failed to record an Event'],
    ]);
  });
});
