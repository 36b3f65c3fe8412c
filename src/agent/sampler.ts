import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  isKworker,
  parseDiskstats,
  parsePressure,
  parseStat,
  parseTaskStat,
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

async function readPart<T>(
  procRoot: string,
  file: string,
  parse: (text: string, file: string) => T,
  problems: string[],
) {
  try {
    return parse(await readFile(join(procRoot, file), 'utf8'), file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    problems.push(code === 'ENOENT' ? `${file}: missing (unknown)` : (err as Error).message);
    return undefined;
  }
}

/** Reads /proc under procRoot (the host's /proc mounted into the agent's pod, or /proc itself). */
export async function takeSample(
  procRoot: string,
  now: () => number = () => performance.now(),
): Promise<RawSample> {
  const problems: string[] = [];
  const [pressure, disks, stat] = await Promise.all([
    readPart(procRoot, 'pressure/io', parsePressure, problems),
    readPart(procRoot, 'diskstats', parseDiskstats, problems),
    readPart(procRoot, 'stat', parseStat, problems),
  ]);
  const tasks: TaskSample[] = [];
  let entries: string[] = [];
  let tasksKnown = true;
  try {
    entries = (await readdir(procRoot)).filter((name) => /^\d+$/.test(name));
  } catch (err) {
    tasksKnown = false;
    problems.push(`${procRoot}: ${(err as Error).message}`);
  }
  await Promise.all(
    entries.map(async (pid) => {
      let task: TaskStat;
      try {
        task = parseTaskStat(await readFile(join(procRoot, pid, 'stat'), 'utf8'), `${pid}/stat`);
      } catch {
        return; // the task exited between readdir and read, or is not readable: not evidence either way
      }
      if (task.state !== 'D' && !isKworker(task.comm)) return;
      const sample: TaskSample = { ...task };
      if (task.state === 'D') {
        const wchan = await readFile(join(procRoot, pid, 'wchan'), 'utf8').catch(() => '');
        if (wchan && wchan !== '0') sample.wchan = wchan.trim();
      }
      tasks.push(sample);
    }),
  );
  const sample: RawSample = { at: now(), tasks, tasksKnown, problems };
  if (pressure) sample.pressure = pressure;
  if (disks) sample.disks = disks;
  if (stat) sample.stat = stat;
  return sample;
}
