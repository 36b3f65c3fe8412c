// The agent's side of the in-place remedy (issue 44), level-based like a Pod's spec and status: given the limits
// the operator wants for this node's pods and the limits this agent applied (its report, which a restarted agent
// reads back), it sets, steps and lifts until the cgroups hold what is wanted, and says what it did to each. It
// finds each pod's cgroup under its own node's tree, so it limits only pods bound to its node. Without
// --allow-io-limits it writes nothing and says so for every limit wanted.
import { findPodCgroup, ioHierarchy, type CgroupVersion } from './cgroups.js';
import { IoLimiter, type IoLimit, type LimitRecord } from './io-limits.js';

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

const sameLimit = (a: IoLimit, b: IoLimit) =>
  (['rbps', 'wbps', 'riops', 'wiops'] as const).every((k) => a[k] === b[k]);

const describe = (limit: IoLimit) =>
  Object.entries(limit)
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(' ');

const failure = (err: unknown) => (err instanceof Error ? err.message : String(err));

export class IoLimitSync {
  constructor(
    /** The host's cgroup root as the agent mounts it. */
    private readonly root: string,
    /** --allow-io-limits: without it nothing is written. */
    private readonly allowed: boolean,
    private readonly limiter = new IoLimiter(),
  ) {}

  /** One round: lifts what is no longer wanted, then sets or steps what is; the limits applied after it. */
  sync(wanted: readonly WantedIoLimit[], applied: readonly AppliedIoLimit[]): IoLimitSyncResult {
    const outcomes: IoLimitOutcome[] = [];
    if (!this.allowed) {
      for (const w of wanted)
        outcomes.push({
          podUid: w.podUid,
          result: 'Refused',
          message: 'this agent runs without --allow-io-limits: it writes no cgroup file',
        });
      return { applied: [...applied], outcomes };
    }
    const byPod = new Map(wanted.map((w) => [w.podUid, w]));
    const after: AppliedIoLimit[] = [];
    const previous = new Map<string, AppliedIoLimit>();
    for (const record of applied) {
      const want = byPod.get(record.podUid);
      if (want?.device === record.device) previous.set(record.podUid, record);
      else this.lift(record, after, outcomes);
    }
    for (const want of wanted) {
      const record = previous.get(want.podUid);
      if (record && sameLimit(record.wanted, want.limit)) after.push(record);
      else this.apply(want, record, after, outcomes);
    }
    return { applied: after, outcomes };
  }

  private apply(
    want: WantedIoLimit,
    record: AppliedIoLimit | undefined,
    after: AppliedIoLimit[],
    outcomes: IoLimitOutcome[],
  ): void {
    const { podUid } = want;
    const tree = ioHierarchy(this.root);
    const cgroup = tree && (record?.cgroup ?? findPodCgroup(tree.hierarchy, podUid));
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
      if (record) after.push(record);
      const gone = (err as NodeJS.ErrnoException).code === 'ENOENT';
      outcomes.push({ podUid, result: gone ? 'PodGone' : 'Failed', message: failure(err) });
    }
  }

  private lift(record: AppliedIoLimit, after: AppliedIoLimit[], outcomes: IoLimitOutcome[]): void {
    const { podUid } = record;
    const tree = ioHierarchy(this.root);
    try {
      if (!tree) throw new Error(`no cgroup hierarchy under ${this.root}`);
      const lifted = this.limiter.lift(`${tree.hierarchy}/${record.cgroup}`, record.version, record);
      const changed = lifted.changed.join(', ');
      outcomes.push(
        lifted.gone
          ? { podUid, result: 'PodGone', message: 'its cgroup is gone: nothing to put back' }
          : changed
            ? {
                podUid,
                result: 'LeftAsFound',
                message: `${changed} changed by someone else since: left as found; ${lifted.restored.join(', ') || 'nothing else'} put back`,
              }
            : { podUid, result: 'Lifted', message: `${record.device} ${describe(record.before)} put back` },
      );
    } catch (err) {
      after.push(record); // tried again next round: a limit is never forgotten while it may still be in force
      outcomes.push({ podUid, result: 'Failed', message: failure(err) });
    }
  }
}
