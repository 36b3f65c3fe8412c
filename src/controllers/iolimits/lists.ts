// How the limiter reads a node's lists: what the agent's report says it did not apply, and a list compared as a write
// or a refusal judges it.
import type { WantedIoLimitSpec } from '../../api/v1alpha1/index.js';
import type { PodLimit } from '../../policy/io-limit.js';
import type { LimitState } from '../../policy/io-limit-wish.js';
import type { NotAppliedState } from '../../status/io-limit-events.js';

/** A limit the agent did not apply, and why. */
export interface NotApplied {
  limit: PodLimit;
  state: NotAppliedState;
}

/** Two lists the same, entry by entry in order. */
export const sameList = (a: readonly WantedIoLimitSpec[] | undefined, b: readonly WantedIoLimitSpec[]) =>
  JSON.stringify(a ?? []) === JSON.stringify(b);

/** The limits the agent did not apply, and why: its report says so, or it has not answered for `unreportedMs`. */
export function notAppliedOf(
  limits: readonly PodLimit[],
  state: (limit: PodLimit) => LimitState | undefined,
  now: Date,
  unreportedMs: number,
): NotApplied[] {
  return limits.flatMap((limit): NotApplied[] => {
    const s = state(limit);
    if (s === 'Refused' || s === 'NoCgroup' || s === 'Failed') return [{ limit, state: s }];
    // An agent that never answers (an older one, or one wedged on the saturated node) applied nothing we know of.
    const silent = s === 'Pending' && now.getTime() - limit.changedAt.getTime() >= unreportedMs;
    return silent ? [{ limit, state: 'Unreported' }] : [];
  });
}

/**
 * A list as a refusal judges it: who is limited, not to what nor since when (a new limit carries the pass's time and
 * the rates measured then, both different on the next pass, and refused alike).
 */
export const fingerprint = (wish: readonly WantedIoLimitSpec[]) =>
  JSON.stringify(wish.map((e) => [e.podUid, e.device, e.policy, e.exhausted ?? false]));
