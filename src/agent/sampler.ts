import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { FileBuffer } from './file-buffer.js';
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
  private readonly files = new FileBuffer();

  constructor(
    private readonly procRoot: string,
    private readonly now: () => number = () => performance.now(),
  ) {}

  private part<T>(file: string, parse: (text: string, file: string) => T, problems: string[]): T | undefined {
    try {
      return parse(this.files.text(join(this.procRoot, file)), file);
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
      length = this.files.read(`${dir}/stat`, true);
    } catch {
      return; // the task exited between readdir and read, or is not readable: not evidence either way
    }
    const buffer = this.files.bytes; // after the read, which may have replaced it with a bigger one
    const open = buffer.indexOf(OPEN_PAREN);
    const close = length > 0 ? buffer.lastIndexOf(CLOSE_PAREN, length - 1) : -1;
    // The state letter, within this file: past its end the buffer still holds an earlier, longer one.
    const state = close >= open && open >= 0 && close + 2 < length ? buffer[close + 2] : undefined;
    const file = () => `${dir.slice(this.procRoot.length + 1)}/stat`; // only for the errors: no string per task
    if (state === undefined || !isLetter(state)) throw new ProcParseError(file(), 'no "(comm) state"');
    const dState = state === D_STATE;
    const kworker =
      close - open > KWORKER.length &&
      buffer.compare(KWORKER, 0, KWORKER.length, open + 1, open + 1 + KWORKER.length) === 0;
    const initial = close - open > 1 ? buffer[open + 1] : undefined;
    const daemon =
      !thread &&
      initial !== undefined &&
      DAEMON_INITIALS.has(initial) &&
      DAEMON.test(buffer.toString('utf8', open + 1, close));
    if (dState || kworker) {
      const task: TaskSample = parseTaskStat(buffer.toString('utf8', 0, length), file());
      if (task.state === 'D') {
        let wchan: string | undefined;
        try {
          wchan = parseWchan(this.files.text(`${dir}/wchan`, true));
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
