import type { IoReadingStatus } from '../api/v1alpha1/index.js';
import { isKworker, isRuntimeTask, isWholeDisk } from './proc.js';
import type { RawSample } from './sampler.js';

const round = (n: number, digits = 1) => Number(n.toFixed(digits));
const clampPercent = (n: number) => Math.min(100, Math.max(0, n));

export const MAX_LISTED = 32;

/**
 * The IO reading between two samples. Pure. PSI and procs_blocked need one sample; disk busy and kworker CPU
 * need two (they are rates). Whatever is missing stays undefined: unknown, never 0. Loop devices count as disks
 * only with `disks.loop`.
 */
export function computeReading(
  previous: RawSample | undefined,
  current: RawSample,
  observedTime: Date,
  clockTicksPerSecond = 100,
  disks: { loop?: boolean } = {},
): IoReadingStatus {
  const reading: IoReadingStatus = { source: 'agent', observedTime: observedTime.toISOString() };
  const some = current.pressure?.some;
  const full = current.pressure?.full;
  if (some) {
    reading.psiSomeAvg10Percent = some.avg10;
    reading.psiSomeAvg60Percent = some.avg60;
  }
  if (full) reading.psiFullAvg10Percent = full.avg10;
  if (current.stat?.procsBlocked !== undefined) reading.blockedProcesses = current.stat.procsBlocked;

  const elapsedMs = previous ? current.at - previous.at : 0;
  if (previous?.disks && current.disks && elapsedMs > 0) {
    const before = new Map(previous.disks.map((d) => [d.name, d]));
    const devices = current.disks
      .filter((d) => isWholeDisk(d.name, disks))
      .flatMap((d) => {
        const b = before.get(d.name);
        if (!b || d.ioTicks < b.ioTicks) return []; // new device or counter reset: no rate this time
        const [reads, writes, readTicks, writeTicks] = [
          d.reads - b.reads,
          d.writes - b.writes,
          d.readTicks - b.readTicks,
          d.writeTicks - b.writeTicks,
        ];
        const device: NonNullable<IoReadingStatus['devices']>[number] = {
          name: d.name,
          busyPercent: round(clampPercent(((d.ioTicks - b.ioTicks) / elapsedMs) * 100)),
          inFlight: d.inFlight,
        };
        // Each counter forward: one that went back (reset) would mix its old and new life into the average.
        if (reads >= 0 && writes >= 0 && readTicks >= 0 && writeTicks >= 0 && reads + writes > 0)
          device.awaitMs = round((readTicks + writeTicks) / (reads + writes), 2);
        return [device];
      })
      .sort((a, b) => b.busyPercent - a.busyPercent || a.name.localeCompare(b.name));
    const busiest = devices[0];
    if (busiest) {
      reading.devices = devices.slice(0, MAX_LISTED);
      reading.diskBusyPercent = busiest.busyPercent;
    }
  }

  const dState = current.tasks
    .filter((t) => t.state === 'D')
    .map((t) => {
      const task: NonNullable<IoReadingStatus['dStateTasks']>[number] = {
        pid: t.pid,
        comm: t.comm,
        runtime: isRuntimeTask(t.comm),
      };
      if (t.wchan) task.wchan = t.wchan;
      return task;
    })
    .sort((a, b) => Number(b.runtime) - Number(a.runtime) || a.pid - b.pid);
  if (current.tasksKnown) reading.dStateTasks = dState.slice(0, MAX_LISTED);

  // Both task lists known: a list that could not be read has no kworkers, and their CPU would read as 0.
  if (previous?.tasksKnown && current.tasksKnown && elapsedMs > 0) {
    const before = new Map(
      previous.tasks.filter((t) => isKworker(t.comm)).map((t) => [t.pid, t.utime + t.stime]),
    );
    let ticks = 0;
    for (const task of current.tasks) {
      const was = before.get(task.pid);
      if (was !== undefined && isKworker(task.comm)) ticks += Math.max(0, task.utime + task.stime - was);
    }
    reading.kworkerCpuPercent = round((ticks / clockTicksPerSecond / (elapsedMs / 1000)) * 100);
  }
  return reading;
}
