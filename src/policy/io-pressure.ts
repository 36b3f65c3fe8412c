// PURE: judges IO readings against a policy's thresholds, and turns a run of judgements into the
// IoPressureHigh condition with sustainSeconds before it rises and recoverySeconds before it falls.
import type { ConditionStatus, IoReadingStatus } from '../api/v1alpha1/index.js';

export interface IoThresholds {
  psiSomeAvg10Percent: number;
  psiFullAvg10Percent: number;
  diskBusyPercent: number;
  blockedProcesses: number;
}

export type IoObservation = 'Over' | 'Under' | 'Unknown';

export interface Judgement {
  observation: IoObservation;
  /**
   * Which signals reached their thresholds ("PSI some avg10 >= 40%"), or why the reading is unknown. Never the
   * values themselves: they move with every sample, end up in condition messages, and a message that changes
   * is a status write. The values are in status.ioReading.
   */
  details: string[];
  /** Why it is unknown, when the source knows better than "no reading" (SourceForbidden, SourceUnavailable, ClockSkew). */
  unknownReason?: string;
}

/**
 * How old a reading may be and still count: the policy's staleAfterSeconds, or 1.5 times the heartbeat its writer
 * promises (the node agent publishes at least that often), whichever is longer. A healthy agent's reading then never
 * looks stale between heartbeats, whatever the policy says.
 */
export function staleAfterFor(reading: IoReadingStatus | undefined, policyStaleAfterSeconds: number): number {
  return Math.max(policyStaleAfterSeconds, (reading?.heartbeatSeconds ?? 0) * 1.5);
}

/** A reading, with when the apiserver took it where that is known (the agent's, from managedFields). */
export type TimedReading = IoReadingStatus & { writtenTime?: string };

/**
 * When a reading counts from (ms): its own stamp, or, when the apiserver took it earlier than that, the apiserver's
 * time (whole seconds, so plus one). An agent whose clock runs an hour ahead then cannot make the reading it wrote
 * before it died look fresh an hour later, when the operator's clock reaches the stamp.
 */
export function readingTime(reading: TimedReading): number {
  const stamped = Date.parse(reading.observedTime);
  const written = reading.writtenTime ? Date.parse(reading.writtenTime) + 1000 : NaN;
  return Number.isFinite(written) ? Math.min(stamped, written) : stamped;
}

/**
 * Any known value at or over its threshold is Over; unknown or stale readings are Unknown, never Under.
 *
 * `limited`: pods of the node are held by IO limits of ours (the agent reports them applied). A throttled task waits
 * on IO: the kernel counts it in the node's PSI and blocked tasks, so those read the throttle as the pressure it
 * relieves (the demo's neighbour held at its floor kept PSI some at 90 % with the disk 4 % busy). While a limit is in
 * force, a reading with the disk's busy time is judged on it alone.
 */
export function judgeReading(
  reading: TimedReading | undefined,
  thresholds: IoThresholds,
  now: Date,
  policyStaleAfterSeconds: number,
  limited = false,
): Judgement {
  const staleAfterSeconds = staleAfterFor(reading, policyStaleAfterSeconds);
  if (!reading) return { observation: 'Unknown', details: ['no reading'] };
  const age = (now.getTime() - readingTime(reading)) / 1000;
  if (!Number.isFinite(age) || age > staleAfterSeconds) {
    return {
      observation: 'Unknown',
      details: [`the latest reading is older than ${staleAfterSeconds}s`],
    };
  }
  // A reading from the future says its writer's clock is ahead, by how much nobody knows: as stale as one from
  // long ago, or a skewed agent's reading would count as fresh for the whole skew after it stopped.
  if ((now.getTime() - Date.parse(reading.observedTime)) / 1000 < -staleAfterSeconds) {
    return {
      observation: 'Unknown',
      details: [
        `the latest reading is stamped more than ${staleAfterSeconds}s in the future (a clock ahead)`,
      ],
      unknownReason: 'ClockSkew',
    };
  }
  if (reading.conditionTrue !== undefined) {
    return reading.conditionTrue
      ? { observation: 'Over', details: ['the node condition reports IO pressure'] }
      : { observation: 'Under', details: [] };
  }
  const checks: [string, number | undefined, number, string][] = [
    ['PSI some avg10', reading.psiSomeAvg10Percent, thresholds.psiSomeAvg10Percent, '%'],
    ['PSI full avg10', reading.psiFullAvg10Percent, thresholds.psiFullAvg10Percent, '%'],
    ['disk busy', reading.diskBusyPercent, thresholds.diskBusyPercent, '%'],
    ['blocked tasks', reading.blockedProcesses, thresholds.blockedProcesses, ''],
  ];
  const diskOnly = limited && reading.diskBusyPercent !== undefined;
  const known = checks.filter(([name, value]) => value !== undefined && (!diskOnly || name === 'disk busy'));
  if (known.length === 0) return { observation: 'Unknown', details: ['the reading has no known value'] };
  const over = known.filter(([, value, limit]) => (value ?? 0) >= limit);
  if (over.length === 0) return { observation: 'Under', details: [] };
  const details = over.map(([name, , limit, unit]) => `${name} >= ${limit}${unit}`);
  return { observation: 'Over', details: diskOnly ? [...details, LIMITED_DETAIL] : details };
}

/** Said with a judgement made on the disk alone, as a limit's throttle reads as pressure in PSI and blocked tasks. */
export const LIMITED_DETAIL = 'PSI and blocked tasks not counted while IO limits of ours hold pods back';

export interface Tracking {
  observation: IoObservation;
  since: Date;
}

export interface IoPressureDecision {
  tracking: Tracking;
  condition: { type: 'IoPressureHigh'; status: ConditionStatus; reason: string; message: string };
  /** When the condition may change next without a new reading (sustain or recovery elapsing). */
  recheckAfterMs?: number;
}

/**
 * IoPressureHigh rises after readings stay Over for sustainSeconds and falls after they stay Under for
 * recoverySeconds. Unknown readings make it Unknown, or keep it True when it was: nothing acts on, or undoes
 * because of, what is unknown.
 */
export function decideIoPressure(input: {
  previousStatus: ConditionStatus | undefined;
  previousTracking: Tracking | undefined;
  judgement: Judgement;
  now: Date;
  sustainSeconds: number;
  recoverySeconds: number;
}): IoPressureDecision {
  const { judgement, now } = input;
  const tracking: Tracking =
    input.previousTracking?.observation === judgement.observation
      ? input.previousTracking
      : { observation: judgement.observation, since: now };
  const elapsedMs = now.getTime() - tracking.since.getTime();
  const wasHigh = input.previousStatus === 'True';
  const detail = judgement.details.join('; ');
  const since = tracking.since.toISOString();

  if (judgement.observation === 'Unknown') {
    // A node known to be under pressure stays so until readings prove otherwise for recoverySeconds:
    // unknown readings neither raise nor clear the condition, so nothing is undone on what was not verified.
    const status = wasHigh ? 'True' : 'Unknown';
    const lastKnown = wasHigh ? ' Last known: over threshold.' : '';
    return {
      tracking,
      condition: {
        type: 'IoPressureHigh',
        status,
        reason: judgement.unknownReason ?? 'ReadingUnknown',
        message: `IO pressure is unknown since ${since}: ${detail}.${lastKnown}`,
      },
    };
  }
  if (judgement.observation === 'Over') {
    const sustainMs = input.sustainSeconds * 1000;
    if (wasHigh || elapsedMs >= sustainMs) {
      return {
        tracking,
        condition: {
          type: 'IoPressureHigh',
          status: 'True',
          reason: 'ThresholdSustained',
          message: `Over threshold since ${since}: ${detail}.`,
        },
      };
    }
    return {
      tracking,
      condition: {
        type: 'IoPressureHigh',
        status: 'False',
        reason: 'ThresholdNotSustained',
        message: `Over threshold since ${since}, not yet for ${input.sustainSeconds}s: ${detail}.`,
      },
      recheckAfterMs: sustainMs - elapsedMs,
    };
  }
  const recoveryMs = input.recoverySeconds * 1000;
  if (!wasHigh) {
    return {
      tracking,
      condition: {
        type: 'IoPressureHigh',
        status: 'False',
        reason: 'BelowThresholds',
        message: 'Every known reading is below its threshold.',
      },
    };
  }
  if (elapsedMs >= recoveryMs) {
    return {
      tracking,
      condition: {
        type: 'IoPressureHigh',
        status: 'False',
        reason: 'Recovered',
        message: `Below every threshold since ${since} (${input.recoverySeconds}s).`,
      },
    };
  }
  return {
    tracking,
    condition: {
      type: 'IoPressureHigh',
      status: 'True',
      reason: 'RecoveryPending',
      message: `Below every threshold since ${since}; recovered after ${input.recoverySeconds}s.`,
    },
    recheckAfterMs: recoveryMs - elapsedMs,
  };
}
