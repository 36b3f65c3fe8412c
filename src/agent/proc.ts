// Pure parsers for the /proc files the node agent reads. Each throws ProcParseError, naming the file and the
// line, on content it cannot trust; the sampler turns that into "unknown", never into zero.

export class ProcParseError extends Error {
  constructor(
    readonly file: string,
    detail: string,
  ) {
    super(`${file}: ${detail}`);
    this.name = 'ProcParseError';
  }
}

export interface PressureLine {
  avg10: number;
  avg60: number;
  avg300: number;
  /** Total stall time in microseconds. */
  total: number;
}

export interface Pressure {
  some?: PressureLine;
  full?: PressureLine;
}

/** A count as procfs prints it: decimal digits, few enough for a double to hold exactly (not 2^64 - 1). */
const count = (text: string | undefined): number | undefined => {
  if (text === undefined || !/^\d+$/.test(text)) return undefined;
  const n = Number(text);
  return Number.isSafeInteger(n) ? n : undefined;
};

/** A PSI average as the kernel prints it ("%lu.%02lu"): not 1e3, 0x10, -0 or Infinity, which Number() accepts. */
const decimal = (text: string | undefined): number | undefined =>
  text !== undefined && /^\d+(\.\d+)?$/.test(text) ? Number(text) : undefined;

/** procfs separates fields with spaces (and tabs): any other whitespace is inside a field, and makes it bad. */
const FIELDS = /[ \t]+/;

/** The lines of a procfs file, which ends each with a newline: text after the last one is a line cut short. */
function lines(text: string, file: string): string[] {
  const all = text.split('\n');
  if (all.pop() !== '') throw new ProcParseError(file, `line ${all.length + 1} is cut short (no newline)`);
  return all;
}

/** /proc/pressure/io: "some avg10=0.44 avg60=0.10 avg300=0.10 total=14547076" and a "full" line. */
export function parsePressure(text: string, file = 'pressure/io'): Pressure {
  const result: Pressure = {};
  for (const [index, raw] of lines(text, file).entries()) {
    const line = raw.trim();
    if (line === '') continue;
    const [kind, ...pairs] = line.split(FIELDS);
    // The file has one "some" and one "full" line; any other line is one broken in two, or a repeat.
    if ((kind !== 'some' && kind !== 'full') || result[kind]) {
      throw new ProcParseError(
        file,
        `line ${index + 1} is not one "some" or "full" line: ${JSON.stringify(line)}`,
      );
    }
    const values = new Map<string, number | undefined>();
    // Every field is key=value, each key a word, once: a field without "=", or with nothing before it, is the end of a
    // value split off it ("total=1\t=4587130", fast-check's counterexample).
    const wellFormed = pairs.every((pair) => {
      const [key = '', value, ...more] = pair.split('=');
      if (!/^\w+$/.test(key) || value === undefined || more.length > 0 || values.has(key)) return false;
      values.set(key, decimal(value));
      return true;
    });
    const [avg10, avg60, avg300, total] = ['avg10', 'avg60', 'avg300', 'total'].map((key) => values.get(key));
    if (
      !wellFormed ||
      avg10 === undefined ||
      avg60 === undefined ||
      avg300 === undefined ||
      total === undefined
    ) {
      throw new ProcParseError(
        file,
        `line ${index + 1} is not "${kind} avg10=… avg60=… avg300=… total=…": ${JSON.stringify(line)}`,
      );
    }
    if ([avg10, avg60, avg300].some((v) => v > 100) || !Number.isSafeInteger(total)) {
      throw new ProcParseError(file, `line ${index + 1} has values out of range: ${JSON.stringify(line)}`);
    }
    result[kind] = { avg10, avg60, avg300, total };
  }
  if (!result.some) throw new ProcParseError(file, 'no "some" line');
  return result;
}

export interface DiskStat {
  name: string;
  major: number;
  minor: number;
  /** Reads completed (after merging). */
  reads: number;
  /** 512-byte sectors read, whatever the device's own sector size. */
  sectorsRead: number;
  /** Milliseconds spent reading. */
  readTicks: number;
  writes: number;
  sectorsWritten: number;
  writeTicks: number;
  inFlight: number;
  /** Milliseconds with IO in flight (io_ticks): busy time. */
  ioTicks: number;
}

/** /proc/diskstats: at least the 14 classic columns per line (major minor name + 11 counters). */
export function parseDiskstats(text: string, file = 'diskstats'): DiskStat[] {
  const disks: DiskStat[] = [];
  const names = new Set<string>();
  let width: number | undefined;
  for (const [index, raw] of lines(text, file).entries()) {
    const line = raw.trim();
    if (line === '') continue;
    const fields = line.split(FIELDS);
    const [major, minor, name = ''] = fields;
    const numbers = fields.slice(3, 14).map(count);
    if (
      fields.length < 14 ||
      count(major) === undefined ||
      count(minor) === undefined ||
      numbers.some((n) => n === undefined)
    ) {
      throw new ProcParseError(
        file,
        `line ${index + 1} has fewer than 14 numeric columns: ${JSON.stringify(line)}`,
      );
    }
    // The kernel writes every line with the same columns and a device name that starts with a letter: a line
    // with one more or one less, or a number for a name, has its counters shifted; a device listed twice has two
    // readings, neither to trust.
    width ??= fields.length;
    if (fields.length !== width || !/^[A-Za-z]/.test(name) || names.has(name)) {
      throw new ProcParseError(
        file,
        `line ${index + 1} has ${fields.length} columns where the first has ${width}, a bad or repeated name: ${JSON.stringify(line)}`,
      );
    }
    names.add(name);
    const at = (i: number) => numbers[i] ?? 0; // checked above: all eleven are numbers
    disks.push({
      name,
      major: Number(major),
      minor: Number(minor),
      reads: at(0),
      sectorsRead: at(2),
      readTicks: at(3),
      writes: at(4),
      sectorsWritten: at(6),
      writeTicks: at(7),
      inFlight: at(8),
      ioTicks: at(9),
    });
  }
  return disks;
}

/**
 * Whole block devices worth judging: not ram, zram, optical or floppy devices, not partitions, and not loop devices
 * unless asked (their IO is the disk's under them too; on a node whose runtime sits on a loop-mounted image, as the
 * lab's does, the loop device is the disk that fills).
 */
export function isWholeDisk(name: string, options: { loop?: boolean } = {}): boolean {
  if (/^loop\d*/.test(name)) return options.loop === true;
  if (/^(ram|zram|sr|fd)\d*/.test(name)) return false;
  if (/^(sd|vd|xvd|hd)[a-z]+\d+$/.test(name)) return false; // sda1, vdb2
  if (/^(nvme\d+n\d+|mmcblk\d+)p\d+$/.test(name)) return false; // nvme0n1p1, mmcblk0p2
  return true;
}

/** The partitions of a whole disk, by diskstats' names: sda1 of sda, nvme0n1p2 of nvme0n1, mmcblk0p1 of mmcblk0. */
export function isPartitionOf(name: string, disk: string): boolean {
  if (!name.startsWith(disk) || name === disk) return false;
  return (/\d$/.test(disk) ? /^p\d+$/ : /^\d+$/).test(name.slice(disk.length));
}

export interface Mount {
  /** MAJ:MIN of the device the filesystem is mounted from (0:N for those with none: tmpfs, overlay, proc). */
  device: string;
  mountPoint: string;
  fsType: string;
}

/**
 * /proc/PID/mountinfo: "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue". The
 * optional fields vary in number, hence the " - " separator; the mount point escapes spaces as \040.
 */
export function parseMountinfo(text: string, file = '1/mountinfo'): Mount[] {
  return lines(text, file).flatMap((line, index) => {
    if (line === '') return [];
    const fields = line.split(' ');
    const dash = fields.indexOf('-', 6);
    const [, , device = '', , mountPoint = '', , ...rest] = fields;
    const fsType = dash > 0 ? fields[dash + 1] : undefined;
    if (!/^\d+:\d+$/.test(device) || !mountPoint.startsWith('/') || !fsType || rest.length < 3)
      throw new ProcParseError(file, `line ${index + 1} is not a mount: ${JSON.stringify(line)}`);
    return [{ device, mountPoint: mountPoint.replace(/\\040/g, ' '), fsType }];
  });
}

export interface StatInfo {
  procsBlocked?: number;
  procsRunning?: number;
}

/** The procs_blocked and procs_running lines of /proc/stat. */
export function parseStat(text: string, file = 'stat'): StatInfo {
  const info: StatInfo = {};
  for (const [index, line] of lines(text, file).entries()) {
    // Every line starts with its name: one that does not is the end of a line broken in two.
    if (!/^($|[a-z])/.test(line)) throw new ProcParseError(file, `line ${index + 1} has no name`);
    // The intr and softirq lines hold thousands of numbers on a big node: split only the two lines wanted.
    if (!line.startsWith('procs_')) continue;
    const [key, value, ...more] = line.trim().split(FIELDS);
    if (key !== 'procs_blocked' && key !== 'procs_running') continue;
    const field = key === 'procs_blocked' ? 'procsBlocked' : 'procsRunning';
    const n = count(value);
    // One number, on one line: a second value, or a second line for the same count, is not one to trust.
    if (n === undefined || more.length > 0 || info[field] !== undefined)
      throw new ProcParseError(file, `bad ${key} line: ${JSON.stringify(line)}`);
    info[field] = n;
  }
  return info;
}

export interface TaskStat {
  pid: number;
  comm: string;
  /** R, S, D, Z, T, I, ... */
  state: string;
  /** Clock ticks in user and kernel mode. */
  utime: number;
  stime: number;
}

/** /proc/PID/stat. The command sits in parentheses and may itself contain spaces and parentheses. */
export function parseTaskStat(text: string, file = 'PID/stat'): TaskStat {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) throw new ProcParseError(file, 'no "(comm)" field');
  // The kernel writes at most 64 bytes of comm (a kworker's name with its workqueue's): more is two lines in one.
  if (close - open - 1 > 64) throw new ProcParseError(file, 'a "(comm)" longer than 64 bytes');
  const pid = count(/^(\d+) $/.exec(text.slice(0, open))?.[1]);
  // Fields after comm: state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15).
  // Only these 13 are cut out, not the 50-odd of the line: the agent parses every kworker's stat every second.
  const rest: string[] = [];
  let at = close + 1;
  while (rest.length < 13) {
    while (at < text.length && text.charCodeAt(at) <= 32) at++;
    if (at >= text.length) break;
    const start = at;
    while (at < text.length && text.charCodeAt(at) > 32) at++;
    rest.push(text.slice(start, at));
  }
  const [state = '', ...numbers] = rest;
  const utime = count(rest[11]);
  const stime = count(rest[12]);
  // More fields follow stime in a whole line: when the text ends right after it, its last digits may be cut off.
  const whole = at < text.length;
  if (
    pid === undefined ||
    !/^[A-Za-z]$/.test(state) ||
    // A word among the numbers before utime means a field moved, and utime and stime may be others' numbers.
    !numbers.every((n) => /^-?\d+$/.test(n)) ||
    utime === undefined ||
    stime === undefined ||
    !whole
  ) {
    throw new ProcParseError(file, 'fewer fields than pid (comm) state … utime stime, or one of them is bad');
  }
  return { pid, comm: text.slice(open + 1, close), state, utime, stime };
}

/** /proc/PID/wchan: the kernel function a task sleeps in; undefined for "0" (not sleeping, or hidden) or garbage. */
export function parseWchan(text: string): string | undefined {
  const wchan = text.trim();
  // A symbol name (do_mount, folio_wait_bit_common, foo.isra.0), at most KSYM_NAME_LEN (512) characters.
  return /^[A-Za-z_][\w.]{0,511}$/.test(wchan) ? wchan : undefined;
}

const RUNTIME = /^(runc|runc:\[.*\]|containerd|containerd-shim.*|conmon|crio|dockerd|cri-dockerd|crun)$/;

/** Whether a task belongs to the container runtime (runc init shows as "runc:[2:INIT]"). */
export function isRuntimeTask(comm: string): boolean {
  return RUNTIME.test(comm);
}

export const isKworker = (comm: string) => comm.startsWith('kworker');
