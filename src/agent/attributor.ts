import type { IoAttribution, IoReadingStatus } from '../api/v1alpha1/index.js';
import { isQuiet } from '../signals/material-change.js';
import { computeAttribution, type AttributionSample, type AttributionSettings } from './attribution.js';
import { CgroupReader } from './cgroups.js';
import { FileBuffer } from './file-buffer.js';
import { isPartitionOf, parseMountinfo, type DiskStat, type Mount } from './proc.js';
import type { RawSample } from './sampler.js';

export interface AttributorOptions extends AttributionSettings {
  cgroupRoot: string;
  procRoot: string;
  /** The runtime's cgroup relative to the hierarchy's root; undefined: found by name. */
  runtimeCgroup?: string;
  /** The agent's sampling interval: the cgroup tree is read at most this often. */
  intervalMs: number;
  /** Monotonic milliseconds; given (tests), it also measures what a read cost, in place of the process's CPU time. */
  now?: () => number;
}

/**
 * The process's CPU time in milliseconds: what a read costs, for a budget that is a share of a core. Wall time
 * counts the time the agent waited for a core as its own: on this busy 2-core machine a 100-pod tree whose read
 * costs 7.5 ms of CPU (1.5 s of spacing) was read only every 4.3 s (bench/agent-attribution.ts, timed by wall).
 */
const cpuMs = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
};

/** Mounts change rarely (and the host's mountinfo holds every pod's volumes): read it once a minute at most. */
const MOUNTS_MAX_AGE_MS = 60_000;

/**
 * The share of a core the cgroup reads may take on average: half a percent (the DaemonSet requests 1 % for the
 * whole agent). A read costs about 50-60 us of CPU a pod under --jitless (two files; bench/agent-attribution.ts,
 * 2026-12-02): a little over the 5 ms of a 1 s tick at 100 pods, so they are read on every second tick; 1,000 every
 * 10-15 s, and a node of 5,000 every 30 s, the longest wait (0.7-0.9 % of a core then).
 */
const READ_SHARE = 0.005;
const MAX_READ_SPACING_MS = 30_000;

/** How long after a read that cost `readMs` of CPU the next may start. */
export function readSpacingMs(readMs: number, intervalMs: number): number {
  return Math.min(Math.max(readMs / READ_SHARE, intervalMs), Math.max(MAX_READ_SPACING_MS, intervalMs));
}

/** Devices stacked on disks (dm, md): their IO is the disks' too, so a disk under them is the one to count. */
const STACKED = /^(dm-|md)\d/;

/**
 * The filesystem of the device: the one mounted from it or from one of its partitions with the shortest mount
 * point ("/" before "/boot/efi"). A dm device over it cannot be told without /sys: then none is found.
 */
export function filesystemOn(device: DiskStat, disks: DiskStat[], mounts: Mount[]): string | undefined {
  const numbers = new Set(
    disks
      .filter((d) => d.name === device.name || isPartitionOf(d.name, device.name))
      .map((d) => `${d.major}:${d.minor}`),
  );
  return mounts
    .filter((m) => numbers.has(m.device))
    .sort((a, b) => a.mountPoint.length - b.mountPoint.length)[0]?.fsType;
}

/**
 * Attribution over time: reads the cgroup tree in the ticks whose reading is not quiet (an idle node pays nothing
 * for it and publishes none), no more often than its cost allows (readSpacingMs), keeps the last look with the
 * diskstats read beside it, and turns two looks into an attribution, which stands until the next.
 */
export class Attributor {
  private readonly cgroups: CgroupReader;
  private readonly files = new FileBuffer();
  private previous: AttributionSample | undefined;
  private latest: { attribution: IoAttribution; at: number } | undefined;
  private nextReadAt = -Infinity;
  private problems: string[] = [];
  private spacingMs: number;
  private mounts: { at: number; list?: Mount[]; problem?: string } | undefined;
  private readonly now: () => number;
  private readonly cpuNow: () => number;

  constructor(private readonly options: AttributorOptions) {
    this.now = options.now ?? (() => performance.now());
    this.cpuNow = options.now ?? cpuMs;
    this.cgroups = new CgroupReader(options.cgroupRoot, options.runtimeCgroup, this.now);
    this.spacingMs = options.intervalMs;
  }

  /** Two looks further apart than this are not compared, and an attribution older than this is not given. */
  private get maxAgeMs(): number {
    return Math.max(3 * this.options.intervalMs, 2 * this.spacingMs);
  }

  /** The attribution of this tick, if any, and the problems of the last read for it (none while quiet). */
  attribute(
    proc: RawSample,
    reading: IoReadingStatus,
    published: IoAttribution | undefined,
  ): { attribution?: IoAttribution; problems: string[] } {
    if (isQuiet(reading) || !proc.disks) {
      this.latest = undefined;
      this.problems = [];
      if (!proc.disks) this.previous = undefined; // no denominator now, and none to compare the next look with
      return { problems: [] };
    }
    const started = this.now();
    // The last read's problems stand until the next read: a tick that reads nothing must not look like a recovery,
    // or the agent would log the same problems again after every read.
    let problems = this.problems;
    if (started >= this.nextReadAt) {
      const cpuStarted = this.cpuNow();
      const cgroups = this.cgroups.sample();
      this.spacingMs = readSpacingMs(this.cpuNow() - cpuStarted, this.options.intervalMs);
      this.nextReadAt = started + this.spacingMs;
      problems = [...cgroups.problems];
      const current: AttributionSample = { disks: proc.disks, disksAt: proc.at, cgroups };
      const attribution = this.compare(this.previous, current, reading, published, problems);
      this.problems = problems;
      this.previous = current;
      if (attribution) this.latest = { attribution, at: started };
    }
    const latest = this.latest && started - this.latest.at <= this.maxAgeMs ? this.latest : undefined;
    return latest ? { attribution: latest.attribution, problems } : { problems };
  }

  private compare(
    previous: AttributionSample | undefined,
    current: AttributionSample,
    reading: IoReadingStatus,
    published: IoAttribution | undefined,
    problems: string[],
  ): IoAttribution | undefined {
    const name = reading.devices?.find((d) => !STACKED.test(d.name))?.name;
    const disk = current.disks.find((d) => d.name === name);
    if (!previous || !disk || current.disksAt - previous.disksAt > this.maxAgeMs) return undefined;
    const mounts = this.readMounts();
    if (mounts.problem) problems.push(mounts.problem);
    const filesystem = mounts.list && filesystemOn(disk, current.disks, mounts.list);
    return computeAttribution(previous, current, {
      device: disk.name,
      culpritSharePercent: this.options.culpritSharePercent,
      victimPsiPercent: this.options.victimPsiPercent,
      ...(filesystem ? { filesystem } : {}),
      ...(published ? { published } : {}),
    });
  }

  /** The host's mounts, from its init's mountinfo (the agent's own shows the container's). */
  private readMounts(): { list?: Mount[]; problem?: string } {
    const at = this.now();
    if (this.mounts && at - this.mounts.at < MOUNTS_MAX_AGE_MS) return this.mounts;
    const file = '1/mountinfo';
    try {
      this.mounts = { at, list: parseMountinfo(this.files.text(`${this.options.procRoot}/${file}`), file) };
    } catch (err) {
      const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
      this.mounts = {
        at,
        problem: missing ? `${file}: missing (filesystem unknown)` : (err as Error).message,
      };
    }
    return this.mounts;
  }
}
