// PURE: the one-minute window over which the policy's rates are counted (maxEvictionsPerMinute,
// maxPodStartsPerMinute). The moments are kept in the policy's status, so a restart cannot reset a rate.

export const RATE_WINDOW_MS = 60_000;

/** The moments still inside the window at `now`, oldest first (a reserved moment may lie ahead of now). */
export function inWindow(moments: readonly Date[], now: Date): Date[] {
  const start = now.getTime() - RATE_WINDOW_MS;
  return moments.filter((t) => t.getTime() > start).sort((a, b) => a.getTime() - b.getTime());
}

/** How many more the rate allows at `now`. */
export function budgetLeft(limit: number, moments: readonly Date[], now: Date): number {
  return Math.max(0, limit - inWindow(moments, now).length);
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
