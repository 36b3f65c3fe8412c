/** Whole seconds from `time` to `now`: positive in the past, negative ahead. */
export function ageSeconds(time: string | Date, now: Date): number {
  const ms = now.getTime() - (typeof time === 'string' ? Date.parse(time) : time.getTime());
  return Number.isFinite(ms) ? Math.trunc(ms / 1000) : 0;
}

/** 42s, 4m12s, 3h05m, 2d07h: two units at most, enough to compare and read at a glance. */
export function formatDuration(seconds: number): string {
  const s = Math.abs(Math.trunc(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${pad(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${pad(Math.floor(s / 60) % 60)}m`;
  return `${Math.floor(s / 86_400)}d${pad(Math.floor(s / 3600) % 24)}h`;
}

const pad = (n: number) => String(n).padStart(2, '0');

/** "4m12s ago", or "in 4m12s" for a time ahead. */
export function formatAgo(seconds: number): string {
  return seconds < 0 ? `in ${formatDuration(seconds)}` : `${formatDuration(seconds)} ago`;
}
