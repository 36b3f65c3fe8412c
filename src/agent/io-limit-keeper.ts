// The agent's IO limits across rounds (spec.remediation.limitIo): each answer to its publish carries the limits the
// operator wants (the SandboxHealth's spec.ioLimits) and the agent's own last report (status.ioLimits). A restarted
// agent takes what it applied from that report, so it lifts exactly what it wrote before; after that its own memory
// is the truth, and the report is written again until it says the same. A round writes a report only when what is
// applied, what was done, or --allow-io-limits changed: a node with no limit wanted and none applied writes nothing.
import type {
  AppliedIoLimitStatus,
  IoLimitRates,
  IoLimitReport,
  IoLimitsAnswer,
} from '../api/v1alpha1/index.js';
import type { AppliedIoLimit, IoLimitOutcome, IoLimitSync } from './io-limit-sync.js';
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
});

const fromStatus = (a: AppliedIoLimitStatus): AppliedIoLimit => ({
  podUid: a.podUid,
  device: a.device,
  version: a.cgroupVersion,
  cgroup: a.cgroup,
  wanted: rates(a.wanted),
  written: rates(a.written),
  before: rates(a.before),
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

export class IoLimitKeeper {
  /** What this agent applied; undefined until the first answer gives back its last report. */
  private applied: AppliedIoLimit[] | undefined;
  /** The last report written, or read back. */
  private reported: IoLimitReport | undefined;
  /** How many limits the last answer wanted. */
  private wantedCount = 0;
  /** What the last round that did anything did: a report says it until another round does something. */
  private results: IoLimitReport['results'];

  constructor(
    private readonly sync: Pick<IoLimitSync, 'sync'>,
    private readonly allowed: boolean,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Whether any limit is applied or wanted: the agent then publishes on its short heartbeat, to lift in time. */
  get active(): boolean {
    return (this.applied?.length ?? 0) > 0 || this.wantedCount > 0;
  }

  /** One round on a publish's answer: the cgroups brought to what is wanted; the report to write, if it changed. */
  round(answer: IoLimitsAnswer): { report?: IoLimitReport; outcomes: IoLimitOutcome[] } {
    this.wantedCount = answer.wanted.length;
    if (this.applied === undefined) {
      this.applied = (answer.report?.applied ?? []).map(fromStatus);
      this.reported = answer.report;
      this.results = answer.report?.results;
    }
    if (answer.wanted.length === 0 && this.applied.length === 0 && !this.reported) return { outcomes: [] };
    const { applied, outcomes } = this.sync.sync(
      answer.wanted.map((w) => ({ podUid: w.podUid, device: w.device, limit: rates(w.limit) })),
      this.applied,
    );
    this.applied = applied;
    if (outcomes.length > 0) this.results = outcomes.map((o) => ({ ...o }));
    const report: IoLimitReport = {
      allowed: this.allowed,
      observedTime: this.now().toISOString(),
      ...(applied.length > 0 ? { applied: applied.map(toStatus) } : {}),
      ...(this.results ? { results: this.results } : {}),
    };
    return sameReport(this.reported, report) ? { outcomes } : { report, outcomes };
  }

  /** The report was written. */
  written(report: IoLimitReport): void {
    this.reported = report;
  }
}
