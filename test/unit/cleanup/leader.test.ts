// Whether an operator leads, read once from its leader Lease: held while renewed within its duration (plus the allowance
// for clocks that disagree), not once released or expired; and the refusal names the Lease, its holder and the way on.
import { expect } from 'chai';
import {
  LEADER_CLOCK_SKEW_MS,
  leaderRefusal,
  leaderState,
  type LeaderRecord,
} from '../../../src/cleanup/leader.js';

const NOW = new Date('2026-12-01T12:00:00.000Z');
const ago = (ms: number) => new Date(NOW.getTime() - ms).toISOString();
const lease = (record: Partial<LeaderRecord>): LeaderRecord => ({
  holderIdentity: 'operator-7f9c',
  leaseDurationSeconds: 15,
  ...record,
});

describe('leaderState', () => {
  const table: { name: string; record: LeaderRecord | undefined; want: ReturnType<typeof leaderState> }[] = [
    { name: 'no Lease', record: undefined, want: { held: false, why: 'no Lease' } },
    {
      name: 'released (a leader that stopped gracefully)',
      record: lease({ holderIdentity: '', renewTime: ago(0) }),
      want: { held: false, why: 'released' },
    },
    {
      name: 'renewed 2 s ago',
      record: lease({ renewTime: ago(2_000) }),
      want: { held: true, holder: 'operator-7f9c', renewedSecondsAgo: 2, durationSeconds: 15 },
    },
    {
      name: 'past its duration, within the clock allowance',
      record: lease({ renewTime: ago(15_000 + LEADER_CLOCK_SKEW_MS) }),
      want: { held: true, holder: 'operator-7f9c', renewedSecondsAgo: 25, durationSeconds: 15 },
    },
    {
      name: 'past its duration and the allowance',
      record: lease({ renewTime: ago(15_000 + LEADER_CLOCK_SKEW_MS + 1_000) }),
      want: { held: false, why: 'expired: last renewed 26 s ago by operator-7f9c' },
    },
    {
      name: 'renewed ahead of this clock (it runs behind): held, 0 s ago',
      record: lease({ renewTime: ago(-5_000) }),
      want: { held: true, holder: 'operator-7f9c', renewedSecondsAgo: 0, durationSeconds: 15 },
    },
    {
      name: 'only acquired, never renewed: from its acquireTime',
      record: lease({ acquireTime: ago(60_000) }),
      want: { held: false, why: 'expired: last renewed 60 s ago by operator-7f9c' },
    },
    {
      name: 'a holder and no time at all: held, nothing says it stopped',
      record: lease({}),
      want: { held: true, holder: 'operator-7f9c', durationSeconds: 15 },
    },
  ];
  for (const c of table)
    it(c.name, () => {
      expect(leaderState(c.record, NOW)).to.deep.equal(c.want);
    });

  it('refuses naming the Lease, its holder, how fresh it is and the ways on', () => {
    const text = leaderRefusal('sandbox-remediator-system/sandbox-remediator-operator', {
      held: true,
      holder: 'operator-7f9c',
      renewedSecondsAgo: 2,
      durationSeconds: 15,
    });
    expect(text).to.equal(
      "the operator's leader Lease sandbox-remediator-system/sandbox-remediator-operator is held by operator-7f9c " +
        '(renewed 2 s ago, lease 15 s): an operator that leads would redo what cleanup undoes. Stop it first ' +
        '(scale its Deployment to 0; the agents stay, to lift IO limits), wait until the Lease expires, then run cleanup again; ' +
        '--force runs it anyway.',
    );
  });
});
