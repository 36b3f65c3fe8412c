// Pure parsers for the /proc files the node agent reads. Each throws ProcParseError, naming the file and the
// line, on content it cannot trust; the sampler turns that into "unknown", never into zero.

export class ProcParseError extends Error {
  constructor(file: string, detail: string) {
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

const finite = (text: string | undefined): number | undefined => {
  if (text === undefined || text.trim() === '') return undefined;
  const n = Number(text);
  return Number.isFinite(n) ? n : undefined;
};

/** /proc/pressure/io: "some avg10=0.44 avg60=0.10 avg300=0.10 total=14547076" and a "full" line. */
export function parsePressure(text: string, file = 'pressure/io'): Pressure {
  const result: Pressure = {};
  for (const [index, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line === '') continue;
    const [kind, ...pairs] = line.split(/\s+/);
    if (kind !== 'some' && kind !== 'full') continue;
    const values: Record<string, number | undefined> = {};
    for (const pair of pairs) {
      const [key, value] = pair.split('=');
      if (key) values[key] = finite(value);
    }
    const { avg10, avg60, avg300, total } = values;
    if (avg10 === undefined || avg60 === undefined || avg300 === undefined || total === undefined) {
      throw new ProcParseError(
        file,
        `line ${index + 1} is not "${kind} avg10=… avg60=… avg300=… total=…": ${JSON.stringify(line)}`,
      );
    }
    if ([avg10, avg60, avg300].some((v) => v < 0 || v > 100) || total < 0) {
      throw new ProcParseError(file, `line ${index + 1} has values out of range: ${JSON.stringify(line)}`);
    }
    result[kind] = { avg10, avg60, avg300, total };
  }
  if (!result.some) throw new ProcParseError(file, 'no "some" line');
  return result;
}

export interface DiskStat {
  name: string;
  reads: number;
  /** Milliseconds spent reading. */
  readTicks: number;
  writes: number;
  writeTicks: number;
  inFlight: number;
  /** Milliseconds with IO in flight (io_ticks): busy time. */
  ioTicks: number;
}

/** /proc/diskstats: at least the 14 classic columns per line (major minor name + 11 counters). */
export function parseDiskstats(text: string, file = 'diskstats'): DiskStat[] {
  const disks: DiskStat[] = [];
  for (const [index, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line === '') continue;
    const fields = line.split(/\s+/);
    const name = fields[2];
    const numbers = fields.slice(3, 14).map(finite);
    if (!name || fields.length < 14 || numbers.some((n) => n === undefined || n < 0)) {
      throw new ProcParseError(
        file,
        `line ${index + 1} has fewer than 14 numeric columns: ${JSON.stringify(line)}`,
      );
    }
    const at = (i: number) => numbers[i] ?? 0; // checked above: all eleven are numbers
    disks.push({
      name,
      reads: at(0),
      readTicks: at(3),
      writes: at(4),
      writeTicks: at(7),
      inFlight: at(8),
      ioTicks: at(9),
    });
  }
  return disks;
}

/** Whole block devices worth judging: not loop, ram, zram, optical or floppy devices, and not partitions. */
export function isWholeDisk(name: string): boolean {
  if (/^(loop|ram|zram|sr|fd)\d*/.test(name)) return false;
  if (/^(sd|vd|xvd|hd)[a-z]+\d+$/.test(name)) return false; // sda1, vdb2
  if (/^(nvme\d+n\d+|mmcblk\d+)p\d+$/.test(name)) return false; // nvme0n1p1, mmcblk0p2
  return true;
}

export interface StatInfo {
  procsBlocked?: number;
  procsRunning?: number;
}

/** The procs_blocked and procs_running lines of /proc/stat. */
export function parseStat(text: string, file = 'stat'): StatInfo {
  const info: StatInfo = {};
  for (const line of text.split('\n')) {
    // The intr and softirq lines hold thousands of numbers on a big node: split only the two lines wanted.
    if (!line.trimStart().startsWith('procs_')) continue;
    const [key, value] = line.trim().split(/\s+/);
    if (key !== 'procs_blocked' && key !== 'procs_running') continue;
    const n = finite(value);
    if (n === undefined || n < 0 || !Number.isInteger(n))
      throw new ProcParseError(file, `bad ${key} line: ${JSON.stringify(line)}`);
    if (key === 'procs_blocked') info.procsBlocked = n;
    else info.procsRunning = n;
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
  const pid = finite(text.slice(0, open));
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
  const state = rest[0];
  const utime = finite(rest[11]);
  const stime = finite(rest[12]);
  if (pid === undefined || !state || utime === undefined || stime === undefined) {
    throw new ProcParseError(file, 'fewer fields than pid (comm) state … utime stime');
  }
  return { pid, comm: text.slice(open + 1, close), state, utime, stime };
}

const RUNTIME = /^(runc|runc:\[.*\]|containerd|containerd-shim.*|conmon|crio|dockerd|crun)$/;

/** Whether a task belongs to the container runtime (runc init shows as "runc:[2:INIT]"). */
export function isRuntimeTask(comm: string): boolean {
  return RUNTIME.test(comm);
}

export const isKworker = (comm: string) => comm.startsWith('kworker');
