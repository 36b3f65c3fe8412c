import {
  consumerId,
  type IoAttribution,
  type IoConsumer,
  type IoReadingStatus,
} from '../api/v1alpha1/index.js';

/** A level a signal enters at `enter` and leaves only below `exit` (exit < enter): hysteresis. */
export interface Band {
  enter: number;
  exit: number;
}

/**
 * Bands per signal, ascending. Each default policy threshold (PSI some 40 %, full 20 %, disk busy 90 %, 8 blocked
 * tasks) is an edge, so a default policy sees a crossing at once; a policy with other thresholds sees it at the next
 * edge or heartbeat. Leaving a band takes a clear drop (exit well under enter): a node under pressure reads noisy,
 * and each publish is a write, and another reconcile. So that a value published over a threshold is never taken for
 * current long after it fell, the agent republishes any reading above the lowest band on a short heartbeat
 * (--pressured-heartbeat-seconds, 10): a verdict rests on a value at most that old. An idle node's noise (PSI under
 * 10 %, a few blocked or D-state tasks, a disk busy for a moment) stays in the lowest band and is written only on the
 * long heartbeat.
 */
export const BANDS = {
  psi: [
    { enter: 10, exit: 5 },
    { enter: 20, exit: 14 },
    { enter: 40, exit: 30 },
    { enter: 70, exit: 50 },
  ],
  diskBusy: [
    { enter: 50, exit: 30 },
    { enter: 90, exit: 75 },
  ],
  tasks: [
    { enter: 4, exit: 2 },
    { enter: 8, exit: 4 },
    { enter: 16, exit: 10 },
    { enter: 32, exit: 20 },
  ],
  /** The top pod's, the runtime's and System's share of the saturated device (the attribution). */
  share: [
    { enter: 25, exit: 20 },
    { enter: 50, exit: 40 },
    { enter: 75, exit: 65 },
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
  return (
    SIGNALS.some(([read, bands]) => {
      const was = read(published);
      const now = read(next);
      if (was === undefined || now === undefined) return (was === undefined) !== (now === undefined);
      const from = levelOf(was, bands);
      return nextLevel(now, from, bands) !== from;
    }) || isAttributionChange(published.attribution, next.attribution)
  );
}

/** Another pod takes the top only by this many points more: two pods near 30 % each would swap on every sample. */
const TOP_POD_MARGIN = 5;

const pods = (a: IoAttribution) => a.consumers.filter((c) => c.kind === 'Pod');
const podKey = consumerId;
const topPod = (a: IoAttribution): IoConsumer | undefined =>
  pods(a).reduce<IoConsumer | undefined>(
    (top, c) => (!top || (c.sharePercent ?? 0) > (top.sharePercent ?? 0) ? c : top),
    undefined,
  );
const SHARES: ((a: IoAttribution) => number | undefined)[] = [
  (a) => topPod(a)?.sharePercent,
  (a) => a.consumers.find((c) => c.kind === 'Runtime')?.sharePercent,
  (a) => a.consumers.find((c) => c.kind === 'System')?.sharePercent,
];

/**
 * Whether the attribution changed enough to write: it became known, a new pod took the top (by a clear margin), a
 * listed pod's role changed (the agent gives roles hysteresis) or a Culprit came or went, or the top pod's, the runtime's or System's share moved
 * into another band. Not its going: attribution goes when the reading turns quiet, which isQuiet says without
 * hysteresis; the other signals' bands decide when that is written, and the heartbeat writes it in any case.
 */
export function isAttributionChange(
  published: IoAttribution | undefined,
  next: IoAttribution | undefined,
): boolean {
  if (!next) return false;
  if (!published) return true;
  const wasTop = topPod(published);
  const top = topPod(next);
  if ((wasTop && podKey(wasTop)) !== (top && podKey(top))) {
    const old = wasTop && pods(next).find((c) => podKey(c) === podKey(wasTop));
    if (!old || !top || (top.sharePercent ?? 0) >= (old.sharePercent ?? 0) + TOP_POD_MARGIN) return true;
  }
  const roles = (a: IoAttribution) => new Map(pods(a).map((c) => [podKey(c), c.role]));
  const [was, now] = [roles(published), roles(next)];
  // A role changed on a pod listed both times; or a Culprit came or went, which the list's edge never decides (a
  // culprit has at least a fifth of the device, so at most five are). Not a Victim or Bystander coming onto the list
  // or leaving it: the fifth place changes hands between pods of similar, small shares at every look.
  for (const key of new Set([...was.keys(), ...now.keys()])) {
    const [before, after] = [was.get(key), now.get(key)];
    if (before && after ? before !== after : (before ?? after) === 'Culprit') return true;
  }
  return SHARES.some((read) => {
    const from = levelOf(read(published) ?? 0, BANDS.share);
    return nextLevel(read(next) ?? 0, from, BANDS.share) !== from;
  });
}

/**
 * Whether every known signal of the reading sits in the lowest band (no pressure anywhere) and no node condition
 * reports pressure: an idle node, whose reading may wait for the long heartbeat. Anything above idle is
 * republished on the short one, so the value behind a verdict is never older than that.
 */
export function isQuiet(reading: IoReadingStatus | undefined): boolean {
  if (!reading || reading.conditionTrue === true) return false;
  return SIGNALS.every(([read, bands]) => {
    const value = read(reading);
    return value === undefined || levelOf(value, bands) === 0;
  });
}
