// The agent's hand on a pod's disk IO (issue 44): a limit on one device, written into the pod's cgroup (v2 io.max,
// v1 blkio.throttle.*_device), and lifted by putting back exactly what the files held, key by key, only where they
// still hold what was written. A lower limit someone else set is theirs: it is kept and never raised, and never
// counted as ours. The parsers are pure and throw ProcParseError, as the readers' do; IoLimiter does the file IO
// through CgroupFiles, which tests give a kernel's semantics over a crafted tree.
import { readFileSync, writeFileSync } from 'node:fs';
import type { CgroupVersion } from './cgroups.js';
import { ProcParseError } from './proc.js';

export const IO_LIMIT_KEYS = ['rbps', 'wbps', 'riops', 'wiops'] as const;
export type IoLimitKey = (typeof IO_LIMIT_KEYS)[number];
/** A cgroup's limit on one device, key by key: bytes or operations per second, or "max" (none). */
export type IoLimitValue = number | 'max';
/** Limits by key; a key left out is one this says nothing about. */
export type IoLimit = Partial<Record<IoLimitKey, IoLimitValue>>;

/** cgroup v1 keeps each key in a file of its own, "MAJ:MIN value" per limited device; writing 0 removes the line. */
export const V1_THROTTLE_FILES: Readonly<Record<IoLimitKey, string>> = {
  rbps: 'blkio.throttle.read_bps_device',
  wbps: 'blkio.throttle.write_bps_device',
  riops: 'blkio.throttle.read_iops_device',
  wiops: 'blkio.throttle.write_iops_device',
};

const DEVICE = /^\d+:\d+$/;
const IO_MAX_LINE = /^(\d+:\d+)((?: (?:rbps|wbps|riops|wiops)=(?:max|\d+))+)$/;
const THROTTLE_LINE = /^(\d+:\d+) (\d+)$/;

const lines = (text: string, file: string): string[] => {
  if (text === '') return [];
  if (!text.endsWith('\n')) throw new ProcParseError(file, 'the last line is cut short (no newline)');
  return text.slice(0, -1).split('\n');
};

const limitNumber = (digits: string, file: string, line: number): number => {
  const value = Number(digits);
  if (!Number.isSafeInteger(value)) throw new ProcParseError(file, `line ${line}: ${digits} is out of range`);
  return value;
};

/**
 * cgroup v2 io.max: "8:0 rbps=max wbps=1048576 riops=max wiops=max" per device that has a limit; a device with none
 * has no line. Each device's four keys, "max" where unlimited.
 */
export function parseIoMax(text: string, file = 'io.max'): Map<string, Required<IoLimit>> {
  const devices = new Map<string, Required<IoLimit>>();
  lines(text, file).forEach((line, i) => {
    const [, device = '', pairs = ''] = IO_MAX_LINE.exec(line) ?? [];
    if (!pairs || devices.has(device))
      throw new ProcParseError(
        file,
        `line ${i + 1} is not one "MAJ:MIN rbps=… wbps=… riops=… wiops=…": ${JSON.stringify(line)}`,
      );
    const limit: Required<IoLimit> = { rbps: 'max', wbps: 'max', riops: 'max', wiops: 'max' };
    for (const pair of pairs.trim().split(' ')) {
      const [key, value] = pair.split('=') as [IoLimitKey, string];
      limit[key] = value === 'max' ? 'max' : limitNumber(value, file, i + 1);
    }
    devices.set(device, limit);
  });
  return devices;
}

/** A cgroup v1 blkio.throttle.*_device file: "8:0 1048576" per device that has a limit. */
export function parseThrottleDevice(text: string, file: string): Map<string, number> {
  const devices = new Map<string, number>();
  lines(text, file).forEach((line, i) => {
    const [, device = '', value = ''] = THROTTLE_LINE.exec(line) ?? [];
    if (!value || devices.has(device))
      throw new ProcParseError(file, `line ${i + 1} is not one "MAJ:MIN value": ${JSON.stringify(line)}`);
    devices.set(device, limitNumber(value, file, i + 1));
  });
  return devices;
}

const below = (a: IoLimitValue, b: IoLimitValue) => a !== 'max' && (b === 'max' || a < b);

/**
 * What to write for `want` over what the cgroup `held`, key by key: a wanted value only where it is below what is
 * held. A key held lower already (someone's limit, or none wanted) is not written.
 */
export function planLimit(held: IoLimit, want: IoLimit): IoLimit {
  const write: IoLimit = {};
  for (const key of IO_LIMIT_KEYS) {
    const wanted = want[key];
    if (wanted !== undefined && below(wanted, held[key] ?? 'max')) write[key] = wanted;
  }
  return write;
}

/** What a limit wrote on one device of one cgroup: the keys and values written, and what each held before. */
export interface LimitRecord {
  device: string;
  written: IoLimit;
  before: IoLimit;
  /**
   * A step reported ahead of its write: what the limit it replaces wrote, still in force (and ours) until the step's
   * writes land. A lift takes a key holding either value for ours.
   */
  replacing?: IoLimit;
}

/**
 * Lifting a limit: each key written goes back to what it held before, where it still holds what was written (or, a
 * step reported ahead of its write, what the limit it replaced wrote); a key that holds anything else is left as found
 * (`changed`): someone changed it since, or a write reported ahead never landed (it then holds what it held before,
 * and there is nothing to put back). A lift only ever raises a limit or removes it: we write a key only below
 * what it held, so a record whose `before` is not above what it wrote is none of ours (a forged or corrupt report,
 * read back by a restarted agent), and its key is left as found too.
 */
export function planLift(now: IoLimit, record: LimitRecord): { restore: IoLimit; changed: IoLimitKey[] } {
  const restore: IoLimit = {};
  const changed: IoLimitKey[] = [];
  for (const key of IO_LIMIT_KEYS) {
    const ours = [record.written[key], record.replacing?.[key]].filter((v) => v !== undefined);
    if (ours.length === 0) continue;
    const before = record.before[key] ?? 'max';
    const held = now[key] ?? 'max';
    if (ours.includes(held) && below(held, before)) restore[key] = before;
    else changed.push(key);
  }
  return { restore, changed };
}

/** The files of a cgroup tree, read and written whole: one write(2) each, as cgroupfs takes one line a write. */
export interface CgroupFiles {
  read(path: string): string;
  write(path: string, line: string): void;
}

export const KERNEL_CGROUP_FILES: CgroupFiles = {
  read: (path) => readFileSync(path, 'utf8'),
  write: (path, line) => {
    writeFileSync(path, line);
  },
};

/** What lifting a limit did: the keys put back, those someone changed since (left as found), or the cgroup gone. */
export interface LiftResult {
  restored: IoLimitKey[];
  changed: IoLimitKey[];
  /** The cgroup is gone (the pod left the node): nothing to put back. */
  gone: boolean;
}

/**
 * A write of a limit failed part of the way (cgroup v1 writes a file a key): `record` is what is in force of ours now,
 * the keys whose writes landed and those not yet rewritten, so nothing of ours is forgotten.
 */
export class IoLimitWriteError extends Error {
  constructor(
    readonly record: LimitRecord,
    cause: unknown,
  ) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.name = 'IoLimitWriteError';
  }
}

/** The part of a record on these keys. */
function only(record: LimitRecord, keys: readonly string[]): LimitRecord {
  const part: LimitRecord = { device: record.device, written: {}, before: {} };
  for (const key of IO_LIMIT_KEYS) {
    const written = record.written[key];
    if (!keys.includes(key) || written === undefined) continue;
    part.written[key] = written;
    part.before[key] = record.before[key] ?? 'max';
  }
  return part;
}

/** Ours of `record` on these keys, as the files hold them now (what was written, or what a step replaces). */
function held(now: IoLimit, record: LimitRecord, keys: readonly IoLimitKey[]): LimitRecord {
  const part: LimitRecord = { device: record.device, written: {}, before: {} };
  for (const key of keys) {
    part.written[key] = now[key] ?? 'max';
    part.before[key] = record.before[key] ?? 'max';
  }
  return part;
}

/** The record but for one key. */
const without = (record: LimitRecord, key: IoLimitKey): LimitRecord =>
  only(
    record,
    IO_LIMIT_KEYS.filter((k) => k !== key),
  );

const ALL_MAX: Readonly<Required<IoLimit>> = { rbps: 'max', wbps: 'max', riops: 'max', wiops: 'max' };

/** Sets and lifts limits on one device of a cgroup (a pod's directory in the io or blkio hierarchy). */
export class IoLimiter {
  constructor(private readonly files: CgroupFiles = KERNEL_CGROUP_FILES) {}

  /** The same, writing nothing: what it would do, worked out on the files as they are. */
  dry(): IoLimiter {
    return new IoLimiter({ read: (path) => this.files.read(path), write: () => undefined });
  }

  /** Reads what the cgroup holds for `device` now, every key ("max" where unlimited). */
  readHeld(dir: string, version: CgroupVersion, device: string): Required<IoLimit> {
    if (!DEVICE.test(device)) throw new Error(`not a MAJ:MIN device number: ${JSON.stringify(device)}`);
    if (version === 'v2')
      return parseIoMax(this.files.read(`${dir}/io.max`), `${dir}/io.max`).get(device) ?? { ...ALL_MAX };
    const held = { ...ALL_MAX };
    for (const key of IO_LIMIT_KEYS) {
      const file = `${dir}/${V1_THROTTLE_FILES[key]}`;
      held[key] = parseThrottleDevice(this.files.read(file), file).get(device) ?? 'max';
    }
    return held;
  }

  /**
   * Limits `device` to `want`, key by key below what is held, and returns the record to lift it by. With the record
   * of a limit already set (a step down), what it wrote and still holds counts as unlimited-by-others: its `before`
   * carries on; a key someone changed since is theirs, and leaves the record. A write that fails part of the way
   * throws IoLimitWriteError with the record as it stands.
   */
  apply(
    dir: string,
    version: CgroupVersion,
    device: string,
    want: IoLimit,
    previous?: LimitRecord,
  ): LimitRecord {
    for (const key of IO_LIMIT_KEYS) {
      const value = want[key];
      if (value !== undefined && value !== 'max' && !(Number.isSafeInteger(value) && value > 0))
        throw new Error(`${key} ${value}: a limit is a positive whole number (or max)`);
    }
    const now = this.readHeld(dir, version, device);
    const ours = previous ? planLift(now, previous) : { restore: {}, changed: [] };
    // What the files would hold without our limit: the base the new one is planned over.
    const base: IoLimit = { ...now, ...ours.restore };
    const write = planLimit(base, want);
    // Keys of ours not wanted lower any more go back to what they held (a step never raises a limit of someone's).
    const back: IoLimit = {};
    for (const [key, value] of Object.entries(ours.restore) as [IoLimitKey, IoLimitValue][])
      if (write[key] === undefined) back[key] = value;
    // Ours until rewritten: the keys of the previous record that still hold what it wrote.
    let record = previous
      ? held(now, previous, Object.keys(ours.restore) as IoLimitKey[])
      : { device, written: {}, before: {} };
    this.write(
      dir,
      version,
      device,
      { ...back, ...write },
      () => record,
      (key) => {
        const value = write[key];
        record = without(record, key);
        if (value !== undefined) {
          record.written[key] = value;
          record.before[key] = base[key] ?? 'max';
        }
      },
    );
    return record;
  }

  /**
   * Lifts what `record` wrote: each key back to what it held, where it still holds what was written. A write that
   * fails part of the way throws IoLimitWriteError with the keys not yet put back.
   */
  lift(dir: string, version: CgroupVersion, record: LimitRecord): LiftResult {
    let now: Required<IoLimit>;
    try {
      now = this.readHeld(dir, version, record.device);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { restored: [], changed: [], gone: true };
      throw err;
    }
    const { restore, changed } = planLift(now, record);
    let left = held(now, record, Object.keys(restore) as IoLimitKey[]);
    this.write(
      dir,
      version,
      record.device,
      restore,
      () => left,
      (key) => {
        left = without(left, key);
      },
    );
    return { restored: Object.keys(restore) as IoLimitKey[], changed, gone: false };
  }

  /** Writes the keys of `limit`, telling `landed` of each write done; a failure throws with the record `now`. */
  private write(
    dir: string,
    version: CgroupVersion,
    device: string,
    limit: IoLimit,
    now: () => LimitRecord,
    landed: (key: IoLimitKey) => void,
  ): void {
    const entries = IO_LIMIT_KEYS.flatMap((key) => {
      const value = limit[key];
      return value === undefined ? [] : [[key, value] as const];
    });
    try {
      if (version === 'v2' && entries.length > 0) {
        // One line, the keys to change only: the kernel keeps the others as they are.
        this.files.write(`${dir}/io.max`, `${device} ${entries.map(([k, v]) => `${k}=${v}`).join(' ')}\n`);
        for (const [key] of entries) landed(key);
      }
      if (version === 'v1')
        for (const [key, value] of entries) {
          this.files.write(`${dir}/${V1_THROTTLE_FILES[key]}`, `${device} ${value === 'max' ? 0 : value}\n`);
          landed(key);
        }
    } catch (err) {
      throw new IoLimitWriteError(structuredClone(now()), err);
    }
  }
}
