import { closeSync, openSync, readdirSync, readSync } from 'node:fs';
import { join } from 'node:path';
import {
  isKworker,
  parseDiskstats,
  parsePressure,
  parseStat,
  parseTaskStat,
  parseWchan,
  ProcParseError,
  type DiskStat,
  type Pressure,
  type StatInfo,
  type TaskStat,
} from './proc.js';

export interface TaskSample extends TaskStat {
  wchan?: string;
}

/** One look at /proc. A part that could not be read or trusted is undefined, with the reason in problems. */
export interface RawSample {
  /** Monotonic milliseconds. */
  at: number;
  pressure?: Pressure;
  disks?: DiskStat[];
  stat?: StatInfo;
  /** Tasks in D state, and kworker threads (for their CPU use). */
  tasks: TaskSample[];
  /** Whether the task list could be read at all (otherwise D state is unknown). */
  tasksKnown: boolean;
  problems: string[];
}

const OPEN_PAREN = 0x28;
const CLOSE_PAREN = 0x29;
const D_STATE = 0x44;
const isLetter = (byte: number) => (byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x7a;
const KWORKER = Buffer.from('kworker');
/** The runtime daemons, whose other threads are read too (containerd, cri-o, dockerd, cri-dockerd). */
const DAEMON = /^(containerd|crio|dockerd|cri-dockerd)$/;
/** Their first letters: any other task skips the decode of its name. */
const DAEMON_INITIALS = new Set([0x63, 0x64]);

/**
 * Reads /proc under a root (the host's /proc mounted into the agent's pod, or /proc itself), once a second, for
 * as little CPU as it can: synchronous reads into one reused buffer, and a task's stat is decoded into a string
 * only when the task is in D state or a kworker (a few of the hundreds on a node). Synchronous is right here:
 * procfs answers from kernel memory, never from a disk, so even on a saturated node a read does not wait on the
 * IO it measures; and /proc/PID/stat and wchan take no lock of the task's memory map (cmdline and environ do,
 * and are not read). What it saves: fs/promises made four thread-pool round trips and a promise chain per file,
 * per task, per second; that was most of the agent's CPU after prom-client's (docs/adr/0011-lean-agent.md).
 */
export class ProcReader {
  private buffer = Buffer.allocUnsafe(16 * 1024);

  constructor(
    private readonly procRoot: string,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * Reads a whole file into the buffer (procfs files have no size to go by); returns its length. `shortReadEnds`:
   * the file is one record (PID/stat, PID/wchan), which procfs returns whole to one read that has room for it.
   */
  private read(path: string, shortReadEnds = false): number {
    const fd = openSync(path, 'r');
    try {
      let length = 0;
      for (;;) {
        if (length === this.buffer.length) {
          const bigger = Buffer.allocUnsafe(this.buffer.length * 2);
          this.buffer.copy(bigger, 0, 0, length);
          this.buffer = bigger;
        }
        const room = this.buffer.length - length;
        const n = readSync(fd, this.buffer, length, room, null);
        length += n;
        // For a task's files a short read is the end, and saves the read that would return 0 (a quarter of the
        // agent's system calls). Not for the node's files: diskstats is a seq_file that hands out about a page per
        // read, so on a node with more than ~40 devices a short read is not the end, and the rest went unread.
        if (n === 0 || (shortReadEnds && n < room)) return length;
      }
    } finally {
      closeSync(fd);
    }
  }

  private text(path: string, shortReadEnds = false): string {
    const length = this.read(path, shortReadEnds); // first: the read may replace the buffer with a bigger one
    return this.buffer.toString('utf8', 0, length);
  }

  private part<T>(file: string, parse: (text: string, file: string) => T, problems: string[]): T | undefined {
    try {
      return parse(this.text(join(this.procRoot, file)), file);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      problems.push(code === 'ENOENT' ? `${file}: missing (unknown)` : (err as Error).message);
      return undefined;
    }
  }

  /**
   * Appends task `pid` to `out` when it is in D state or a kworker, and, for a runtime daemon, each of its other
   * threads in D state (`dir` is /proc/PID, or /proc/PID/task/TID for a thread). Nothing for a task gone. Throws
   * ProcParseError for a stat that reads but cannot be parsed: that task might be in D state.
   *
   * Why threads: containerd is a Go program, and the goroutine that waits on a saturated disk blocks one of its
   * threads while the thread-group leader sleeps in a futex. /proc/PID/stat tells only the leader's state: a real
   * node's containerd stuck in an fsync showed nothing in D state until its threads were read (the lab, issue 15).
   * Only the daemons' threads are read (a few dozen), not the shims' (about ten each, one shim per pod): reading
   * those too made sample() about 6 times slower on a crafted 100-pod node (bench/sampler-threads.ts), and what a
   * shim or runc init waits on in this incident (a mount) blocks its leader, which is read.
   */
  private task(pid: string, out: TaskSample[], dir = `${this.procRoot}/${pid}`, thread = false): void {
    let length: number;
    try {
      length = this.read(`${dir}/stat`, true);
    } catch {
      return; // the task exited between readdir and read, or is not readable: not evidence either way
    }
    const open = this.buffer.indexOf(OPEN_PAREN);
    const close = length > 0 ? this.buffer.lastIndexOf(CLOSE_PAREN, length - 1) : -1;
    // The state letter, within this file: past its end the buffer still holds an earlier, longer one.
    const state = close >= open && open >= 0 && close + 2 < length ? this.buffer[close + 2] : undefined;
    const file = () => `${dir.slice(this.procRoot.length + 1)}/stat`; // only for the errors: no string per task
    if (state === undefined || !isLetter(state)) throw new ProcParseError(file(), 'no "(comm) state"');
    const dState = state === D_STATE;
    const kworker =
      close - open > KWORKER.length &&
      this.buffer.compare(KWORKER, 0, KWORKER.length, open + 1, open + 1 + KWORKER.length) === 0;
    const initial = close - open > 1 ? this.buffer[open + 1] : undefined;
    const daemon =
      !thread &&
      initial !== undefined &&
      DAEMON_INITIALS.has(initial) &&
      DAEMON.test(this.buffer.toString('utf8', open + 1, close));
    if (dState || kworker) {
      const task: TaskSample = parseTaskStat(this.buffer.toString('utf8', 0, length), file());
      if (task.state === 'D') {
        let wchan: string | undefined;
        try {
          wchan = parseWchan(this.text(`${dir}/wchan`, true));
        } catch {
          // not readable (another user's task, without CAP_SYS_PTRACE): no wchan
        }
        if (wchan) task.wchan = wchan;
      }
      if (task.state === 'D' || (!thread && isKworker(task.comm))) out.push(task);
    }
    if (!daemon) return;
    let tids: string[];
    try {
      tids = readdirSync(`${dir}/task`);
    } catch {
      return; // the process exited
    }
    for (const tid of tids) {
      if (tid !== pid && /^\d+$/.test(tid)) this.task(tid, out, `${this.procRoot}/${pid}/task/${tid}`, true);
    }
  }

  sample(): RawSample {
    const problems: string[] = [];
    const pressure = this.part('pressure/io', parsePressure, problems);
    const disks = this.part('diskstats', parseDiskstats, problems);
    const stat = this.part('stat', parseStat, problems);
    const tasks: TaskSample[] = [];
    let tasksKnown = true;
    let entries: string[] = [];
    try {
      entries = readdirSync(this.procRoot);
    } catch (err) {
      tasksKnown = false;
      problems.push(`${this.procRoot}: ${(err as Error).message}`);
    }
    for (const name of entries) {
      if (!/^\d+$/.test(name)) continue;
      try {
        this.task(name, tasks);
      } catch (err) {
        // A task whose stat cannot be parsed may be in D state or a kworker: the list is unknown, not short.
        tasksKnown = false;
        problems.push((err as Error).message);
        break;
      }
    }
    const sample: RawSample = { at: this.now(), tasks, tasksKnown, problems };
    if (pressure) sample.pressure = pressure;
    if (disks) sample.disks = disks;
    if (stat) sample.stat = stat;
    return sample;
  }
}
