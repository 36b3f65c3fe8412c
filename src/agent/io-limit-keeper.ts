// The agent's IO limits across rounds (spec.remediation.limitIo): each answer to its publish carries the limits the
// operator wants (the SandboxHealth's spec.ioLimits) and the agent's own last report (status.ioLimits). A restarted
// agent takes what it applied from that report, so it lifts exactly what it wrote before; after that its own memory
// is the truth, and the report is written again until it says the same. A round writes a report only when what is
// applied, what was done, or --allow-io-limits changed: a node with no limit wanted and none applied writes nothing.
import {
  MAX_IO_LIMIT_RESULTS,
  MAX_RESULT_MESSAGE,
  type AppliedIoLimitStatus,
  type IoLimitRates,
  type IoLimitReport,
  type IoLimitsAnswer,
} from '../api/v1alpha1/index.js';
import {
  recordKey,
  type AppliedIoLimit,
  type IoLimitOutcome,
  type IoLimitSync,
  type WantedIoLimit,
} from './io-limit-sync.js';
import { IO_LIMIT_KEYS, type IoLimit } from './io-limits.js';

/** Only the keys given (the API's optional keys may hold undefined; the files' never do). */
function rates(limit: IoLimitRates): IoLimit {
  const out: IoLimit = {};
  for (const key of IO_LIMIT_KEYS) {
    const value = limit[key];
    if (value !== undefined) out[key] = value;
  }
  return out;
}

const toStatus = (a: AppliedIoLimit): AppliedIoLimitStatus => ({
  podUid: a.podUid,
  device: a.device,
  cgroupVersion: a.version,
  cgroup: a.cgroup,
  wanted: rates(a.wanted),
  written: rates(a.written),
  before: rates(a.before),
  ...(a.replacing ? { replacing: rates(a.replacing) } : {}),
});

const fromStatus = (a: AppliedIoLimitStatus): AppliedIoLimit => ({
  podUid: a.podUid,
  device: a.device,
  version: a.cgroupVersion,
  cgroup: a.cgroup,
  wanted: rates(a.wanted),
  written: rates(a.written),
  before: rates(a.before),
  ...(a.replacing ? { replacing: rates(a.replacing) } : {}),
});

/** Whether two reports say the same, observedTime apart. */
function sameReport(a: IoLimitReport | undefined, b: IoLimitReport): boolean {
  if (!a) return false;
  const body = (r: IoLimitReport) =>
    JSON.stringify([r.allowed, r.applied ?? [], r.results ?? []].map((x) => canonical(x)));
  return body(a) === body(b);
}

/** JSON with object keys sorted: the API gives back a report's keys in its own order. */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === 'object')
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, canonical((value as Record<string, unknown>)[k])]),
    );
  return value;
}

/** A round's step: a report to store before any file is written (then carryOut()), or what the round did. */
export type IoLimitStep =
  { ahead: IoLimitReport } | { ahead?: undefined; report?: IoLimitReport; outcomes: IoLimitOutcome[] };

export class IoLimitKeeper {
  /** What this agent applied; undefined until the first answer gives back its last report. */
  private applied: AppliedIoLimit[] | undefined;
  /** The last report written, or read back. */
  private reported: IoLimitReport | undefined;
  /** How many limits the last answer wanted. */
  private wantedCount = 0;
  /** What the last round that did anything did: a report says it until another round does something. */
  private results: IoLimitReport['results'];
  /** The limits wanted by the round whose report ahead waits to be stored, and the records that report names. */
  private pending: { wanted: WantedIoLimit[]; reported: Set<string> } | undefined;

  constructor(
    private readonly sync: Pick<IoLimitSync, 'sync' | 'ahead'>,
    private readonly allowed: boolean,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Whether any limit is applied or wanted: the agent then publishes on its short heartbeat, to lift in time. */
  get active(): boolean {
    return (this.applied?.length ?? 0) > 0 || this.wantedCount > 0;
  }

  /**
   * One round on a publish's answer. A limit to be set or stepped is reported first (`ahead`: store it, then
   * carryOut()), so that whatever this agent writes is in a stored report before it is in a file; lifts alone are
   * written at once (a lift reported late is found put back). Else the cgroups are brought to what is wanted, and the
   * report to write is returned if it changed.
   */
  round(answer: IoLimitsAnswer): IoLimitStep {
    this.wantedCount = answer.wanted.length;
    this.pending = undefined;
    if (this.applied === undefined) {
      this.applied = (answer.report?.applied ?? []).map(fromStatus);
      this.reported = answer.report;
      this.results = answer.report?.results;
    }
    if (answer.wanted.length === 0 && this.applied.length === 0 && !this.reported) return { outcomes: [] };
    const wanted = answer.wanted.map((w) => ({ podUid: w.podUid, device: w.device, limit: rates(w.limit) }));
    const ahead = this.sync.ahead(wanted, this.applied);
    // Nothing to set or step: nothing is written but in the records reported already (a cgroup that appeared since
    // the look ahead waits for the next round's).
    if (!ahead) return this.carry(wanted, new Set(this.applied.map(recordKey)));
    this.pending = { wanted, reported: new Set(ahead.map(recordKey)) };
    // Its results are the last round's: it keeps that round's time, so no result reads as an answer to a newer limit.
    return { ahead: this.reportOf(ahead, this.reported?.observedTime) };
  }

  /** The round whose report ahead was stored: its writes, and the report of what they did. */
  carryOut(): IoLimitStep {
    const pending = this.pending;
    this.pending = undefined;
    return pending ? this.carry(pending.wanted, pending.reported) : { outcomes: [] };
  }

  /** The report was written. */
  written(report: IoLimitReport): void {
    this.reported = report;
  }

  private carry(wanted: WantedIoLimit[], reported: ReadonlySet<string>): IoLimitStep {
    const { applied, outcomes } = this.sync.sync(wanted, this.applied ?? [], reported);
    this.applied = applied;
    // As many as the report holds, each message as long as it may be.
    if (outcomes.length > 0)
      this.results = outcomes
        .slice(0, MAX_IO_LIMIT_RESULTS)
        .map((o) => ({ ...o, message: o.message.slice(0, MAX_RESULT_MESSAGE) }));
    const report = this.reportOf(applied);
    return sameReport(this.reported, report) ? { outcomes } : { report, outcomes };
  }

  private reportOf(applied: readonly AppliedIoLimit[], observedTime?: string): IoLimitReport {
    return {
      allowed: this.allowed,
      observedTime: observedTime ?? this.now().toISOString(),
      ...(applied.length > 0 ? { applied: applied.map(toStatus) } : {}),
      ...(this.results ? { results: this.results } : {}),
    };
  }
}
