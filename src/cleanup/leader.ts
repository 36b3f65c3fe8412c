// PURE: whether an operator leads now, read once from its leader-election Lease. The cleanup undoes what a leader
// would redo on its next pass, so it refuses while one may be leading.

/** The part of the operator's leader Lease that says whether it leads (kube/leader-election's LeaseRecord). */
export interface LeaderRecord {
  holderIdentity: string;
  leaseDurationSeconds: number;
  renewTime?: string;
  acquireTime?: string;
}

export type LeaderState =
  | { held: false; why: string }
  | { held: true; holder: string; renewedSecondsAgo?: number; durationSeconds: number };

/**
 * Allowed for this clock running behind the operator's: a Lease renewed this little past its duration still counts as
 * held. A candidate measures expiry on its own clock from when it saw the record change (ADR 0010); a one-shot read
 * cannot, so it compares times of two clocks and leans to "held".
 */
export const LEADER_CLOCK_SKEW_MS = 10_000;

/**
 * Held: a holder named, renewed within leaseDurationSeconds (plus the skew allowance) by this clock. A holder with no
 * time recorded counts as held: nothing says it stopped. A released Lease (empty holder, as a leader leaves it when it
 * stops gracefully) is not.
 */
export function leaderState(record: LeaderRecord | undefined, now: Date): LeaderState {
  if (!record) return { held: false, why: 'no Lease' };
  if (record.holderIdentity === '') return { held: false, why: 'released' };
  const durationSeconds = record.leaseDurationSeconds;
  const renewed = new Date(record.renewTime ?? record.acquireTime ?? '');
  if (Number.isNaN(renewed.getTime())) return { held: true, holder: record.holderIdentity, durationSeconds };
  const ago = now.getTime() - renewed.getTime();
  if (ago > durationSeconds * 1000 + LEADER_CLOCK_SKEW_MS)
    return {
      held: false,
      why: `expired: last renewed ${Math.round(ago / 1000)} s ago by ${record.holderIdentity}`,
    };
  return {
    held: true,
    holder: record.holderIdentity,
    renewedSecondsAgo: Math.max(0, Math.round(ago / 1000)),
    durationSeconds,
  };
}

/** The refusal: which Lease, who holds it, and the ways on. */
export function leaderRefusal(lease: string, state: LeaderState & { held: true }): string {
  const renewed =
    state.renewedSecondsAgo === undefined
      ? 'no renewal time recorded'
      : `renewed ${state.renewedSecondsAgo} s ago`;
  return [
    `the operator's leader Lease ${lease} is held by ${state.holder} (${renewed}, lease ${state.durationSeconds} s):`,
    'an operator that leads would redo what cleanup undoes.',
    'Stop it first (scale its Deployment to 0; the agents stay, to lift IO limits), wait until the Lease expires, then run cleanup again;',
    '--force runs it anyway.',
  ].join(' ');
}
