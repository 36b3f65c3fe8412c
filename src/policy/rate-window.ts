// PURE: the one-minute window over which the policy's rates are counted (maxEvictionsPerMinute,
// maxPodStartsPerMinute). The moments are kept in the policy's status, so a restart cannot reset a rate.

export const RATE_WINDOW_MS = 60_000;

/** Whether a moment is in the window that ends now. */
export const inRateWindow = (at: Date | undefined, now: Date): boolean =>
  at !== undefined && now.getTime() - at.getTime() < RATE_WINDOW_MS;

/** The moments still inside the window at `now`, oldest first (a reserved moment may lie ahead of now). */
export function inWindow(moments: readonly Date[], now: Date): Date[] {
  const start = now.getTime() - RATE_WINDOW_MS;
  return moments.filter((t) => t.getTime() > start).sort((a, b) => a.getTime() - b.getTime());
}

/** How many more the rate allows at `now`. */
export function budgetLeft(limit: number, moments: readonly Date[], now: Date): number {
  return Math.max(0, limit - inWindow(moments, now).length);
}

/** The part of a minute's budget kept for nodes with no eviction yet, while the window is fresh: a third. */
const fullReserve = (limit: number) => Math.floor(limit / 3);

/**
 * The part of a minute's budget kept for nodes that have had no eviction yet: a third of the limit (no reserve for
 * limits below 3) while the window's first eviction is fresh, shrinking evenly to none as it ages out, rounded to the
 * nearest (rounded down, a limit of 3 kept its one for a millisecond). Nodes saturated moments after others still get
 * their first eviction at once, and a node alone gets the whole budget within the minute.
 */
export function firstEvictionReserve(limit: number, moments: readonly Date[], now: Date): number {
  const oldest = inWindow(moments, now)[0];
  const age = oldest ? Math.max(0, now.getTime() - oldest.getTime()) : 0;
  // In whole numbers, exact to the millisecond: reserve * (window - age) / window, halves rounded up.
  const remaining = Math.max(0, RATE_WINDOW_MS - age);
  return Math.floor((2 * fullReserve(limit) * remaining + RATE_WINDOW_MS) / (2 * RATE_WINDOW_MS));
}

/** When the reserve has shrunk below `left` (the budget left), so a node with an eviction already may take one. */
export function reserveShrinksAt(limit: number, moments: readonly Date[], now: Date, left: number): Date {
  if (firstEvictionReserve(limit, moments, now) < left) return now;
  const reserve = fullReserve(limit);
  const oldest = inWindow(moments, now)[0] ?? now;
  // floor((2r(w - age) + w) / 2w) < left  <=>  2r(w - age) + w < 2 left w  <=>  age > w (2r - 2 left + 1) / 2r.
  const age =
    Math.floor((RATE_WINDOW_MS * Math.max(0, 2 * reserve - 2 * left + 1)) / Math.max(1, 2 * reserve)) + 1;
  return new Date(Math.max(now.getTime(), oldest.getTime() + age));
}

/**
 * When the rate next allows one more, once `planned` more are spent at `now`: the moment the window has given back
 * enough of them. Undefined when nothing is spent (the rate allows one at once).
 */
export function nextFreeAt(
  limit: number,
  moments: readonly Date[],
  now: Date,
  planned = 0,
): Date | undefined {
  const used = [...inWindow(moments, now), ...Array.from({ length: planned }, () => now)].sort(
    (a, b) => a.getTime() - b.getTime(),
  );
  const freeing = used[Math.max(0, used.length - limit)];
  return freeing && used.length >= limit ? new Date(freeing.getTime() + RATE_WINDOW_MS) : undefined;
}

/** A log as status keeps it (RFC 3339 strings): the entries still in the window, then `added`, the newest `max`. */
export function rateLog(
  previous: readonly string[] | undefined,
  now: Date,
  added: readonly Date[],
  max: number,
): string[] {
  const start = now.getTime() - RATE_WINDOW_MS;
  const kept = (previous ?? []).filter((t) => new Date(t).getTime() > start);
  return [...kept, ...added.map((t) => t.toISOString())].slice(-max);
}

/**
 * One rate's log in the policy's status (recentEvictions, recentGateReleases): what is spent is reserved in status
 * before it is spent, each moment stamped with when it will have been spent at the latest, then written again with
 * when it was. The evictor and the pacer each own one, with its own cap on the moments kept.
 */
export class RateBudget {
  /** @param max the most moments the log keeps (at least the largest limit a policy may set). */
  constructor(readonly max: number) {}

  /** The log's moments still in the window at `now`. */
  kept(previous: readonly string[] | undefined, now: Date): string[] {
    return rateLog(previous, now, [], this.max);
  }

  /** The log to write before spending `count`, each stamped `by`; undefined when nothing is to be spent. */
  reserve(previous: readonly string[] | undefined, now: Date, count: number, by: Date): string[] | undefined {
    return count === 0
      ? undefined
      : rateLog(
          previous,
          now,
          Array.from({ length: count }, () => by),
          this.max,
        );
  }

  /** The log once spent: each at the moment it was (oldest first). */
  spent(previous: readonly string[] | undefined, now: Date, at: readonly Date[]): string[] {
    return rateLog(
      previous,
      now,
      [...at].sort((a, b) => a.getTime() - b.getTime()),
      this.max,
    );
  }
}
