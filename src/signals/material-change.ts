import type { IoReadingStatus } from '../api/v1alpha1/index.js';

export interface ChangeBounds {
  psiPoints: number;
  diskBusyPoints: number;
  blocked: number;
}

export const DEFAULT_CHANGE_BOUNDS: ChangeBounds = { psiPoints: 5, diskBusyPoints: 10, blocked: 2 };

/** Whether a new reading differs enough from the last published one to be worth a write. Pure. */
export function isMaterialChange(
  published: IoReadingStatus | undefined,
  next: IoReadingStatus,
  bounds: ChangeBounds = DEFAULT_CHANGE_BOUNDS,
): boolean {
  if (!published) return true;
  const moved = (a: number | undefined, b: number | undefined, limit: number) =>
    (a === undefined) !== (b === undefined) ||
    (a !== undefined && b !== undefined && Math.abs(a - b) >= limit);
  return (
    moved(published.psiSomeAvg10Percent, next.psiSomeAvg10Percent, bounds.psiPoints) ||
    moved(published.psiFullAvg10Percent, next.psiFullAvg10Percent, bounds.psiPoints) ||
    moved(published.diskBusyPercent, next.diskBusyPercent, bounds.diskBusyPoints) ||
    moved(published.blockedProcesses, next.blockedProcesses, bounds.blocked) ||
    (published.dStateTasks?.length ?? -1) !== (next.dStateTasks?.length ?? -1)
  );
}
