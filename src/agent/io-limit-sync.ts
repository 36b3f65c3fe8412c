// The agent's side of the in-place remedy (issue 44), level-based like a Pod's spec and status: given the limits
// the operator wants for this node's pods and the limits this agent applied (its report, which a restarted agent
// reads back), it sets, steps and lifts until the cgroups hold what is wanted, and says what it did to each. It
// finds each pod's cgroup under its own node's tree, so it limits only pods bound to its node. Without
// --allow-io-limits it sets nothing and says so for every limit wanted; it still lifts what it applied before (a
// lift only puts back what the files held), so a limit is never left in force by turning writing off. A limit
// someone changed while it is wanted is theirs: not written again.
import { findPodCgroup, ioHierarchy, type CgroupVersion } from './cgroups.js';
import { IO_LIMIT_KEYS, IoLimiter, IoLimitWriteError, type IoLimit, type LimitRecord } from './io-limits.js';

/** A limit the operator wants on one pod's device. */
export interface WantedIoLimit {
  podUid: string;
  /** MAJ:MIN. */
  device: string;
  limit: IoLimit;
}

/** A limit this agent applied: where, what it wrote, and what the files held before (what a lift puts back). */
export interface AppliedIoLimit extends LimitRecord {
  podUid: string;
  /** What the operator wanted when it was written (written holds only the keys below what was held). */
  wanted: IoLimit;
  version: CgroupVersion;
  /** The pod's cgroup, relative to the hierarchy. */
  cgroup: string;
}

export type IoLimitResult =
  'Set' | 'Stepped' | 'Lifted' | 'LeftAsFound' | 'PodGone' | 'NoCgroup' | 'Refused' | 'Failed';

export interface IoLimitOutcome {
  podUid: string;
  result: IoLimitResult;
  message: string;
}

export interface IoLimitSyncResult {
  applied: AppliedIoLimit[];
  outcomes: IoLimitOutcome[];
}

const sameLimit = (a: IoLimit, b: IoLimit) => IO_LIMIT_KEYS.every((k) => a[k] === b[k]);
const sameRecord = (a: AppliedIoLimit, b: AppliedIoLimit) =>
  a.cgroup === b.cgroup &&
  a.version === b.version &&
  sameLimit(a.written, b.written) &&
  sameLimit(a.before, b.before) &&
  sameLimit(a.replacing ?? {}, b.replacing ?? {});

/** A limit's key: a pod may be limited on more than one device. */
const keyOf = (limit: { podUid: string; device: string }) => `${limit.podUid} ${limit.device}`;

const describe = (limit: IoLimit) =>
  Object.entries(limit)
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(' ');

const failure = (err: unknown) => (err instanceof Error ? err.message : String(err));
const isGone = (err: unknown): boolean =>
  (err as NodeJS.ErrnoException).code === 'ENOENT' || (err instanceof IoLimitWriteError && isGone(err.cause));

/** Whether a record is of the pod's own cgroup on this node. */
const isPodsOwn = (record: AppliedIoLimit, version: CgroupVersion, cgroup: string | undefined) =>
  record.version === version && record.cgroup === cgroup;

export class IoLimitSync {
  constructor(
    /** The host's cgroup root as the agent mounts it. */
    private readonly root: string,
    /** --allow-io-limits: without it nothing is written. */
    private readonly allowed: boolean,
    private readonly limiter = new IoLimiter(),
  ) {}

  /**
   * The limits this round's sets and steps will leave, worked out without writing: what a report written ahead of the
   * writes names, so that an agent restarted before its report of them still knows them for ours. Each limit to be
   * set or stepped as it will be, with what the limit it replaces wrote (`replacing`, still in force until the step
   * lands) and what that one held before; every other limit applied as it is (one to be lifted is ours until it is).
   * Undefined when no limit is to be set or stepped.
   */
  ahead(wanted: readonly WantedIoLimit[], applied: readonly AppliedIoLimit[]): AppliedIoLimit[] | undefined {
    if (!this.allowed) return undefined;
    const planned = new IoLimitSync(this.root, true, this.limiter.dry()).sync(wanted, applied).applied;
    const records = new Map(applied.map((a) => [keyOf(a), a]));
    let changes = false;
    for (const next of planned) {
      const was = records.get(keyOf(next));
      if (was && sameRecord(was, next)) continue;
      changes = true;
      records.set(
        keyOf(next),
        was?.cgroup === next.cgroup
          ? {
              ...next,
              before: { ...was.before, ...next.before },
              replacing: { ...was.replacing, ...was.written },
            }
          : next,
      );
    }
    return changes ? [...records.values()] : undefined;
  }

  /** One round: lifts what is no longer wanted, then sets or steps what is; the limits applied after it. */
  sync(wanted: readonly WantedIoLimit[], applied: readonly AppliedIoLimit[]): IoLimitSyncResult {
    const outcomes: IoLimitOutcome[] = [];
    const byKey = new Map(wanted.map((w) => [keyOf(w), w])); // the last of a pod's device wanted twice
    const after: AppliedIoLimit[] = [];
    const previous = new Map<string, AppliedIoLimit>();
    for (const record of applied) {
      if (byKey.has(keyOf(record))) previous.set(keyOf(record), record);
      else this.lift(record, after, outcomes);
    }
    for (const want of byKey.values()) {
      const record = previous.get(keyOf(want));
      if (record && sameLimit(record.wanted, want.limit)) after.push(record);
      else if (!this.allowed) {
        if (record) after.push(record);
        outcomes.push({
          podUid: want.podUid,
          result: 'Refused',
          message: 'this agent runs without --allow-io-limits: it sets no limit',
        });
      } else this.apply(want, record, after, outcomes);
    }
    return { applied: after, outcomes };
  }

  private apply(
    want: WantedIoLimit,
    ours: AppliedIoLimit | undefined,
    after: AppliedIoLimit[],
    outcomes: IoLimitOutcome[],
  ): void {
    const { podUid } = want;
    const tree = ioHierarchy(this.root);
    // Always the pod's own cgroup on this node, never a path a report names.
    const cgroup = tree && findPodCgroup(tree.hierarchy, podUid);
    const record = ours && tree && isPodsOwn(ours, tree.version, cgroup) ? ours : undefined;
    if (!tree || !cgroup) {
      if (record) after.push(record);
      outcomes.push({ podUid, result: 'NoCgroup', message: `no cgroup of pod ${podUid} under ${this.root}` });
      return;
    }
    try {
      const done = this.limiter.apply(
        `${tree.hierarchy}/${cgroup}`,
        tree.version,
        want.device,
        want.limit,
        record,
      );
      after.push({ ...done, podUid, version: tree.version, cgroup, wanted: want.limit });
      outcomes.push({
        podUid,
        result: record ? 'Stepped' : 'Set',
        message: `${want.device} ${describe(done.written) || 'nothing lower than what was held'} (held before: ${describe(done.before) || 'nothing of ours'})`,
      });
    } catch (err) {
      // What landed before the failure is in force: kept, wanted again next round (nothing wanted is ever {}).
      if (err instanceof IoLimitWriteError && Object.keys(err.record.written).length > 0)
        after.push({ ...err.record, podUid, version: tree.version, cgroup, wanted: {} });
      else if (record) after.push(record);
      outcomes.push({ podUid, result: isGone(err) ? 'PodGone' : 'Failed', message: failure(err) });
    }
  }

  private lift(record: AppliedIoLimit, after: AppliedIoLimit[], outcomes: IoLimitOutcome[]): void {
    const { podUid } = record;
    const tree = ioHierarchy(this.root);
    try {
      if (!tree) throw new Error(`no cgroup hierarchy under ${this.root}`);
      const cgroup = findPodCgroup(tree.hierarchy, podUid);
      if (!cgroup) {
        outcomes.push({ podUid, result: 'PodGone', message: 'its cgroup is gone: nothing to put back' });
        return;
      }
      // A record (read back from a report) naming another cgroup than the pod's own is none of ours: no file is
      // written for it, so a forged report cannot have a lift write elsewhere.
      if (!isPodsOwn(record, tree.version, cgroup)) {
        outcomes.push({
          podUid,
          result: 'LeftAsFound',
          message: `the record names ${record.version} cgroup ${record.cgroup}, not the pod's own ${tree.version} ${cgroup}: none of ours, nothing put back`,
        });
        return;
      }
      const lifted = this.limiter.lift(`${tree.hierarchy}/${record.cgroup}`, record.version, record);
      const changed = lifted.changed.join(', ');
      outcomes.push(
        lifted.gone
          ? { podUid, result: 'PodGone', message: 'its cgroup is gone: nothing to put back' }
          : changed
            ? {
                podUid,
                result: 'LeftAsFound',
                message: `${changed} no longer held our limit (changed by someone since, or never written): left as found; ${lifted.restored.join(', ') || 'nothing else'} put back`,
              }
            : { podUid, result: 'Lifted', message: `${record.device} ${describe(record.before)} put back` },
      );
    } catch (err) {
      // Tried again next round: a limit is never forgotten while it may still be in force (what was put back goes).
      const left = err instanceof IoLimitWriteError ? err.record : record;
      if (Object.keys(left.written).length > 0) after.push({ ...record, ...left });
      outcomes.push({ podUid, result: 'Failed', message: failure(err) });
    }
  }
}
