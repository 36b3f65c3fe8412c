import type { IoReadingStatus } from '../api/v1alpha1/index.js';

/** A level a signal enters at `enter` and leaves only below `exit` (exit < enter): hysteresis. */
export interface Band {
  enter: number;
  exit: number;
}

/**
 * Bands per signal, ascending. Their edges sit at the default policy thresholds (PSI some 40 %, full 20 %, disk
 * busy 90 %, 8 blocked tasks) and often enough between them that a policy with other thresholds sees a crossing
 * within one band, or at the next heartbeat. An idle node's noise (PSI under 5 %, a few blocked or D-state tasks,
 * a disk busy for a moment) stays in the lowest band and publishes nothing.
 */
export const BANDS = {
  psi: [
    { enter: 5, exit: 3 },
    { enter: 10, exit: 7 },
    { enter: 20, exit: 16 },
    { enter: 30, exit: 25 },
    { enter: 40, exit: 35 },
    { enter: 50, exit: 45 },
    { enter: 60, exit: 55 },
    { enter: 80, exit: 72 },
  ],
  diskBusy: [
    { enter: 50, exit: 35 },
    { enter: 75, exit: 65 },
    { enter: 90, exit: 82 },
  ],
  tasks: [
    { enter: 4, exit: 2 },
    { enter: 8, exit: 5 },
    { enter: 16, exit: 12 },
    { enter: 32, exit: 24 },
  ],
} as const satisfies Record<string, readonly Band[]>;

/** The level of `value` without history: how many bands it has entered. */
export function levelOf(value: number, bands: readonly Band[]): number {
  return bands.filter((b) => value >= b.enter).length;
}

/** The level of `value` coming from level `from`: up on entering a band, down only on leaving below its exit. */
export function nextLevel(value: number, from: number, bands: readonly Band[]): number {
  let level = from;
  while (level < bands.length && value >= (bands[level]?.enter ?? Infinity)) level++;
  while (level > 0 && value < (bands[level - 1]?.exit ?? -Infinity)) level--;
  return level;
}

const SIGNALS: [(r: IoReadingStatus) => number | undefined, readonly Band[]][] = [
  [(r) => r.psiSomeAvg10Percent, BANDS.psi],
  [(r) => r.psiFullAvg10Percent, BANDS.psi],
  [(r) => r.diskBusyPercent, BANDS.diskBusy],
  [(r) => r.blockedProcesses, BANDS.tasks],
  [(r) => r.dStateTasks?.length, BANDS.tasks],
];

/**
 * Whether a new reading is worth a write over the last published one: a signal became known or unknown, a node
 * condition turned, or a value moved into another band (entering at a band's edge, leaving only past its exit). The published value stands for the
 * level it was published at, so no state is kept beyond the published reading. Pure.
 */
export function isMaterialChange(published: IoReadingStatus | undefined, next: IoReadingStatus): boolean {
  if (!published) return true;
  if (published.conditionTrue !== next.conditionTrue) return true;
  return SIGNALS.some(([read, bands]) => {
    const was = read(published);
    const now = read(next);
    if (was === undefined || now === undefined) return (was === undefined) !== (now === undefined);
    const from = levelOf(was, bands);
    return nextLevel(now, from, bands) !== from;
  });
}
