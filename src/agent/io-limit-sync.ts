// The agent's side of the in-place remedy (issue 44), level-based like a Pod's spec and status: given the limits
// the operator wants for this node's pods and the limits this agent applied (its report, which a restarted agent
// reads back), it sets, steps and lifts until the cgroups hold what is wanted, and says what it did to each. It
// finds each pod's cgroup under its own node's tree, so it limits only pods bound to its node; on cgroup v1, where
// blkio.throttle binds only its own cgroup's tasks, it writes the limit in the pod's cgroup and each below it. Without
// --allow-io-limits it sets nothing and says so for every limit wanted; it still lifts what it applied before (a
// lift only puts back what the files held), so a limit is never left in force by turning writing off. A limit
// someone changed while it is wanted is theirs: not written again.
import { readdirSync } from 'node:fs';
import { MAX_CGROUPS_PER_LIMIT } from '../api/v1alpha1/index.js';
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
  /** The cgroup written, relative to the hierarchy: the pod's, or on v1 one below it. */
  cgroup: string;
}

export type IoLimitResult =
  'Set' | 'Stepped' | 'Lifted' | 'LeftAsFound' | 'PodGone' | 'NoCgroup' | 'Refused' | 'Failed';

export interface IoLimitOutcome {
  podUid: string;
  /** The device of the limit it is about (sync tags each): a pod may be limited on two. */
  device?: string;
  result: IoLimitResult;
  message: string;
}

/** The outcomes said about one limit, each tagged with its device. */
const onDevice = (device: string, outcomes: readonly IoLimitOutcome[]) =>
  outcomes.map((o) => ({ ...o, device }));

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
const limitKey = (limit: { podUid: string; device: string }) => `${limit.podUid} ${limit.device}`;
/** A record's key: on v1 a limit is written in more than one cgroup. */
export const recordKey = (record: Pick<AppliedIoLimit, 'podUid' | 'device' | 'cgroup'>) =>
  `${limitKey(record)} ${record.cgroup}`;

const describe = (limit: IoLimit) =>
  Object.entries(limit)
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(' ');

const failure = (err: unknown) => (err instanceof Error ? err.message : String(err));
const isGone = (err: unknown): boolean =>
  (err as NodeJS.ErrnoException).code === 'ENOENT' || (err instanceof IoLimitWriteError && isGone(err.cause));

/** Whether a record is of the pod's own cgroup on this node, or on v1 of one below it. */
function isPodsOwn(record: AppliedIoLimit, version: CgroupVersion, pod: string | undefined): boolean {
  if (record.version !== version || pod === undefined) return false;
  if (record.cgroup === pod) return true;
  if (version !== 'v1') return false;
  const below = record.cgroup.startsWith(`${pod}/`) ? record.cgroup.slice(pod.length + 1).split('/') : [];
  return below.length > 0 && below.every((part) => part !== '' && part !== '.' && part !== '..');
}

/**
 * The cgroups a pod's limit is written in, the pod's first. On v2 its own: io.max binds everything below it. On v1
 * blkio.throttle is flat (a limit binds only the tasks of its own cgroup), and kubelet runs each container in a
 * cgroup below the pod's: the limit goes in each, so that each container is held to it. At most
 * MAX_CGROUPS_PER_LIMIT, nearest first; `unlimited`: how many found below them are past that bound.
 */
function limitCgroups(
  hierarchy: string,
  version: CgroupVersion,
  pod: string,
): { cgroups: string[]; unlimited: number } {
  const cgroups = [pod];
  let unlimited = 0;
  if (version === 'v2') return { cgroups, unlimited };
  for (let i = 0; i < cgroups.length; i++) {
    let below: string[];
    try {
      below = readdirSync(`${hierarchy}/${cgroups[i]}`, { withFileTypes: true })
        .filter((entry) => entry.isDirectory())
        .map((entry) => `${cgroups[i]}/${entry.name}`)
        .sort();
    } catch {
      below = []; // gone since: nothing below it to limit
    }
    const room = MAX_CGROUPS_PER_LIMIT - cgroups.length;
    cgroups.push(...below.slice(0, room));
    unlimited += Math.max(0, below.length - room);
  }
  return { cgroups, unlimited };
}

/** One outcome of a kind for a pod's limit, however many cgroups it took. */
function mergeByKind(outcomes: readonly IoLimitOutcome[]): IoLimitOutcome[] {
  const kinds = new Map<string, { outcome: IoLimitOutcome; more: number }>();
  for (const outcome of outcomes) {
    const kind = kinds.get(outcome.result);
    if (kind) kind.more++;
    else kinds.set(outcome.result, { outcome, more: 0 });
  }
  return [...kinds.values()].map(({ outcome, more }) =>
    more === 0
      ? outcome
      : {
          ...outcome,
          message: `${outcome.message}; the same in ${more} other cgroup(s) of the pod (on v1 blkio.throttle binds only its own cgroup's tasks)`,
        },
  );
}

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
   * A record to be set or stepped keeps the `wanted` it had (a new one wants nothing yet): a report ahead never says a
   * limit is applied as wanted, so neither the operator nor this agent, restarted before the writes, takes it for done.
   * Undefined when no limit is to be set or stepped.
   */
  ahead(wanted: readonly WantedIoLimit[], applied: readonly AppliedIoLimit[]): AppliedIoLimit[] | undefined {
    if (!this.allowed) return undefined;
    const planned = new IoLimitSync(this.root, true, this.limiter.dry()).sync(wanted, applied).applied;
    const records = new Map(applied.map((a) => [recordKey(a), a]));
    let changes = false;
    for (const next of planned) {
      const was = records.get(recordKey(next));
      if (was && sameRecord(was, next)) continue;
      changes = true;
      records.set(
        recordKey(next),
        was
          ? {
              ...next,
              wanted: was.wanted,
              before: { ...was.before, ...next.before },
              replacing: { ...was.replacing, ...was.written },
            }
          : { ...next, wanted: {} },
      );
    }
    return changes ? [...records.values()] : undefined;
  }

  /**
   * One round: lifts what is no longer wanted, then sets or steps what is; the limits applied after it. With
   * `reported`, the keys of the records a stored report names, a limit is set only in a cgroup among them: one that
   * appeared since that report (a container started) waits for the next round's report ahead.
   */
  sync(
    wanted: readonly WantedIoLimit[],
    applied: readonly AppliedIoLimit[],
    reported?: ReadonlySet<string>,
  ): IoLimitSyncResult {
    const outcomes: IoLimitOutcome[] = [];
    const byKey = new Map(wanted.map((w) => [limitKey(w), w])); // the last of a pod's device wanted twice
    const after: AppliedIoLimit[] = [];
    const previous = new Map<string, AppliedIoLimit[]>();
    const unwanted = new Map<string, AppliedIoLimit[]>();
    for (const record of applied) {
      const into = byKey.has(limitKey(record)) ? previous : unwanted;
      into.set(limitKey(record), [...(into.get(limitKey(record)) ?? []), record]);
    }
    for (const records of unwanted.values()) {
      const said: IoLimitOutcome[] = [];
      for (const record of records) this.lift(record, after, said);
      outcomes.push(...onDevice(records[0]?.device ?? '', mergeByKind(said)));
    }
    for (const want of byKey.values()) {
      const records = previous.get(limitKey(want)) ?? [];
      const unchanged = records.length > 0 && records.every((r) => sameLimit(r.wanted, want.limit));
      const said: IoLimitOutcome[] = [];
      if (this.allowed) this.apply(want, records, { unchanged, reported }, after, said);
      else {
        after.push(...records);
        if (!unchanged)
          said.push({
            podUid: want.podUid,
            result: 'Refused',
            message: 'this agent runs without --allow-io-limits: it sets no limit',
          });
      }
      outcomes.push(...onDevice(want.device, said));
    }
    return { applied: after, outcomes };
  }

  /** Sets or steps a limit in each of the pod's cgroups that does not hold it yet (a container's is new on v1). */
  private apply(
    want: WantedIoLimit,
    records: readonly AppliedIoLimit[],
    { unchanged, reported }: { unchanged: boolean; reported: ReadonlySet<string> | undefined },
    after: AppliedIoLimit[],
    outcomes: IoLimitOutcome[],
  ): void {
    const { podUid, device } = want;
    const tree = ioHierarchy(this.root);
    // Always the pod's own cgroups on this node, never a path a report names.
    const pod = tree && findPodCgroup(tree.hierarchy, podUid);
    if (!tree || !pod) {
      after.push(...records);
      if (!unchanged)
        outcomes.push({
          podUid,
          result: 'NoCgroup',
          message: `no cgroup of pod ${podUid} under ${this.root}`,
        });
      return;
    }
    // A record naming a cgroup that is not the pod's own is not carried on (a forged report read back).
    const own = new Map(records.filter((r) => isPodsOwn(r, tree.version, pod)).map((r) => [r.cgroup, r]));
    const { cgroups, unlimited } = limitCgroups(tree.hierarchy, tree.version, pod);
    // A container's cgroup gone (or past the bound): its record goes, put back where it is still there.
    for (const [cgroup, record] of own) if (!cgroups.includes(cgroup)) this.lift(record, after, []);
    const said: IoLimitOutcome[] = [];
    for (const cgroup of cgroups) {
      const record = own.get(cgroup);
      if (record && sameLimit(record.wanted, want.limit)) after.push(record);
      else if (!record && reported && !reported.has(recordKey({ podUid, device, cgroup }))) continue;
      else {
        const outcome = this.applyIn(want, tree.hierarchy, tree.version, cgroup, record, after);
        // A container's cgroup gone since it was listed: the container went, not the pod.
        if (outcome.result !== 'PodGone' || cgroup === pod) said.push(outcome);
      }
    }
    // Tasks in a cgroup past the bound are not held: the limit is not in force for the whole pod, and that is said.
    if (unlimited > 0 && (!unchanged || said.length > 0))
      said.push({
        podUid,
        result: 'Failed',
        message: `at least ${unlimited} cgroup(s) below the pod past the ${MAX_CGROUPS_PER_LIMIT} a limit is written in are not limited (on v1 blkio.throttle binds only its own cgroup's tasks)`,
      });
    outcomes.push(...mergeByKind(said));
  }

  private applyIn(
    want: WantedIoLimit,
    hierarchy: string,
    version: CgroupVersion,
    cgroup: string,
    record: AppliedIoLimit | undefined,
    after: AppliedIoLimit[],
  ): IoLimitOutcome {
    const { podUid } = want;
    try {
      const done = this.limiter.apply(`${hierarchy}/${cgroup}`, version, want.device, want.limit, record);
      after.push({ ...done, podUid, version, cgroup, wanted: want.limit });
      return {
        podUid,
        // A record that wants nothing (reported ahead, or a write that failed) never held a limit as wanted: a Set.
        result: record && Object.keys(record.wanted).length > 0 ? 'Stepped' : 'Set',
        message: `${want.device} ${describe(done.written) || 'nothing lower than what was held'} (held before: ${describe(done.before) || 'nothing of ours'})`,
      };
    } catch (err) {
      // What landed before the failure is in force: kept, wanted again next round (nothing wanted is ever {}).
      if (err instanceof IoLimitWriteError && Object.keys(err.record.written).length > 0)
        after.push({ ...err.record, podUid, version, cgroup, wanted: {} });
      else if (record) after.push(record);
      // A first write that landed nothing: a record of nothing (a lift puts nothing back), so that the limit does not
      // read as applied while this cgroup, perhaps the one whose tasks do the IO, is not limited.
      else if (!isGone(err))
        after.push({ podUid, device: want.device, version, cgroup, wanted: {}, written: {}, before: {} });
      return { podUid, result: isGone(err) ? 'PodGone' : 'Failed', message: failure(err) };
    }
  }

  private lift(record: AppliedIoLimit, after: AppliedIoLimit[], outcomes: IoLimitOutcome[]): void {
    const { podUid } = record;
    const tree = ioHierarchy(this.root);
    try {
      if (!tree) throw new Error(`no cgroup hierarchy under ${this.root}`);
      const pod = findPodCgroup(tree.hierarchy, podUid);
      if (!pod) {
        outcomes.push({ podUid, result: 'PodGone', message: 'its cgroup is gone: nothing to put back' });
        return;
      }
      // A record (read back from a report) naming a cgroup that is not the pod's own, nor below it, is none of ours:
      // no file is written for it, so a forged report cannot have a lift write elsewhere.
      if (!isPodsOwn(record, tree.version, pod)) {
        outcomes.push({
          podUid,
          result: 'LeftAsFound',
          message: `the record names ${record.version} cgroup ${record.cgroup}, not the pod's own ${tree.version} ${pod}: none of ours, nothing put back`,
        });
        return;
      }
      const lifted = this.limiter.lift(`${tree.hierarchy}/${record.cgroup}`, record.version, record);
      const changed = lifted.changed.join(', ');
      // A container's cgroup gone, the pod's still there: the container went, with its limit; the pod did not.
      if (lifted.gone && record.cgroup !== pod) return;
      outcomes.push(
        lifted.gone
          ? { podUid, result: 'PodGone', message: 'its cgroup is gone: nothing to put back' }
          : changed
            ? {
                podUid,
                result: 'LeftAsFound',
                message: `${changed} no longer held our limit (changed by someone since, or never written): left as found; ${lifted.restored.join(', ') || 'nothing else'} put back`,
              }
            : {
                podUid,
                result: 'Lifted',
                message: `${record.device} ${describe(record.before) || 'nothing of ours'} put back`,
              },
      );
    } catch (err) {
      // Tried again next round: a limit is never forgotten while it may still be in force (what was put back goes).
      const left = err instanceof IoLimitWriteError ? err.record : record;
      if (Object.keys(left.written).length > 0) after.push({ ...record, ...left });
      outcomes.push({ podUid, result: 'Failed', message: failure(err) });
    }
  }
}
