// PURE: who does the saturated device's IO, from two looks at the cgroup tree and at /proc/diskstats (the agent's
// iotop; docs/adr/0018-io-attribution.md). Whatever cannot be known stays out: a cgroup without a rate this time
// is left out, and its IO is in System with the rest; a device that did no IO has no shares to split.
import type { IoAttribution, IoConsumer } from '../api/v1alpha1/index.js';
import { NO_IO, type IoCounters } from './cgroup-files.js';
import type { CgroupIo, CgroupSample } from './cgroups.js';
import type { DiskStat } from './proc.js';
import { podRole, scaleShares, shareOf, splitHundred, type RoleThresholds } from '../signals/io-shares.js';

/** diskstats and the cgroup tree, read in the same tick: rates over the same interval. */
export interface AttributionSample {
  disks: DiskStat[];
  /** Monotonic milliseconds when diskstats was read. */
  disksAt: number;
  cgroups: CgroupSample;
}

/** A pod with culpritSharePercent of the device or more is a Culprit; one waiting victimPsiPercent, a Victim. */
export type AttributionSettings = RoleThresholds;

export interface AttributionContext extends AttributionSettings {
  /** The saturated device's name in diskstats. */
  device: string;
  filesystem?: string;
  /** The last attribution published: a role holds until its figure leaves it clearly (hysteresis). */
  published?: IoAttribution;
}

export const MAX_PODS_LISTED = 5;
/** cgroup v2 charges writeback to the cgroup that dirtied the pages on these filesystems. */
const WRITEBACK_CHARGED = new Set(['ext4', 'xfs', 'btrfs']);

interface Rate {
  readBytes: number;
  writeBytes: number;
  /** Reads and writes: a share is of both together. */
  ops: number;
  /** Apart, as io.max limits them (riops, wiops). */
  readOps: number;
  writeOps: number;
}

/** Per second between two counters; undefined when one went back (the cgroup was recreated): it starts again. */
function rate(before: IoCounters, after: IoCounters, ms: number): Rate | undefined {
  const read = after.readBytes - before.readBytes;
  const write = after.writeBytes - before.writeBytes;
  const reads = after.reads - before.reads;
  const writes = after.writes - before.writes;
  if (read < 0 || write < 0 || reads < 0 || writes < 0) return undefined;
  return {
    readBytes: (read * 1000) / ms,
    writeBytes: (write * 1000) / ms,
    ops: ((reads + writes) * 1000) / ms,
    readOps: (reads * 1000) / ms,
    writeOps: (writes * 1000) / ms,
  };
}

const sectors = (d: DiskStat): IoCounters => ({
  readBytes: d.sectorsRead * 512,
  writeBytes: d.sectorsWritten * 512,
  reads: d.reads,
  writes: d.writes,
});

export interface Confidence {
  confidence: IoAttribution['confidence'];
  confidenceReason: string;
}

/** How much to trust the split, the first rule that applies deciding. */
export function judgeConfidence(facts: {
  version: 'v1' | 'v2';
  device: string;
  filesystem: string | undefined;
  podsFound: number;
  podsRead: number;
  runtimeFound: boolean;
  /** v1: whether any cgroup has counters for the device at all. */
  countedOnDevice: boolean;
}): Confidence {
  const { version, device, filesystem, podsFound, podsRead } = facts;
  const judged = (confidence: Confidence['confidence'], reason: string): Confidence => ({
    confidence,
    confidenceReason: reason.length > 256 ? `${reason.slice(0, 255)}…` : reason,
  });
  if (version === 'v1')
    return judged(
      'Low',
      `cgroup v1: buffered writeback is charged to the flusher, not to the pod that wrote, and shows as System${
        facts.countedOnDevice
          ? ''
          : `; no pod or runtime cgroup has counters for ${device}: none did IO on it, or the kernel counts v1 IO only once a blkio.throttle limit was set on the device`
      }`,
    );
  if (podsRead < podsFound)
    return judged(
      'Low',
      `${podsFound - podsRead} of ${podsFound} pod cgroups unreadable: their IO shows as System`,
    );
  if (!facts.runtimeFound)
    return judged(
      'Medium',
      'no container runtime cgroup found: its IO (image pulls, unpacking) shows as System',
    );
  if (filesystem && WRITEBACK_CHARGED.has(filesystem))
    return judged('High', `cgroup v2 with ${filesystem}: writeback is charged to the cgroup that wrote`);
  return judged(
    'Medium',
    filesystem
      ? `cgroup v2 with ${filesystem}, which may charge writeback to the flusher (System), not the cgroup that wrote`
      : `cgroup v2, no filesystem found on ${device}: writeback may be charged to the flusher (System)`,
  );
}

interface Measured {
  uid: string;
  rate: Rate;
  share: number;
  psi?: number;
}

const figures = (r: Rate) => ({
  readBytesPerSecond: Math.round(r.readBytes),
  writeBytesPerSecond: Math.round(r.writeBytes),
  opsPerSecond: Math.round(r.ops * 10) / 10,
  readOpsPerSecond: Math.round(r.readOps * 10) / 10,
  writeOpsPerSecond: Math.round(r.writeOps * 10) / 10,
});

/** The device's rate and every cgroup's on it, shares scaled to add up to 100 at most. */
interface Split {
  device: Rate;
  pods: Measured[];
  runtime?: { rate: Rate; share: number };
}

function split(previous: AttributionSample, current: AttributionSample, disk: DiskStat, device: Rate): Split {
  const ms = current.cgroups.at - previous.cgroups.at;
  const number = `${disk.major}:${disk.minor}`;
  // Only this device's line: a dm device stacked on it has its own, and its remapped IO is in this one already.
  const measure = (now: CgroupIo, was: CgroupIo | undefined) =>
    was && rate(was.counters.get(number) ?? NO_IO, now.counters.get(number) ?? NO_IO, ms);
  const whole = { bytes: device.readBytes + device.writeBytes, ops: device.ops };
  const share = (r: Rate) => shareOf({ bytes: r.readBytes + r.writeBytes, ops: r.ops }, whole);
  const pods: Measured[] = [];
  for (const [uid, io] of current.cgroups.pods) {
    const r = measure(io, previous.cgroups.pods.get(uid));
    if (!r) continue;
    const pod: Measured = { uid, rate: r, share: share(r) };
    if (io.psiSomeAvg10 !== undefined) pod.psi = io.psiSomeAvg10;
    pods.push(pod);
  }
  const { runtime } = current.cgroups;
  const was = previous.cgroups.runtime;
  const runtimeRate = runtime && was?.path === runtime.path ? measure(runtime, was) : undefined;
  const result: Split = { device, pods };
  if (runtimeRate) result.runtime = { rate: runtimeRate, share: share(runtimeRate) };
  const scaled = scaleShares([...pods.map((p) => p.share), result.runtime?.share ?? 0]);
  pods.forEach((p, i) => (p.share = scaled[i] ?? 0));
  if (result.runtime) result.runtime.share = scaled.at(-1) ?? 0;
  return result;
}

/**
 * The top five pods (those with a share, and those waiting on IO), the runtime and System, whose shares add up to
 * exactly 100. A device that did no IO has nothing to share: only the pods waiting on IO are listed, with no share.
 */
function listConsumers({ device, pods, runtime }: Split, context: AttributionContext): IoConsumer[] {
  const was = new Map(
    (context.published?.consumers ?? []).flatMap((c) =>
      c.kind === 'Pod' && c.podUid ? [[c.podUid, c.role] as const] : [],
    ),
  );
  const idle = device.readBytes + device.writeBytes === 0 && device.ops === 0;
  const listed = pods
    .filter((p) => (!idle && p.share > 0) || podRole(0, p.psi, was.get(p.uid), context) === 'Victim')
    .sort((a, b) => b.share - a.share || (b.psi ?? 0) - (a.psi ?? 0) || a.uid.localeCompare(b.uid))
    .slice(0, MAX_PODS_LISTED);
  const listedShare = listed.reduce((a, p) => a + p.share, 0) + (runtime?.share ?? 0);
  const shares = idle
    ? []
    : splitHundred([
        ...listed.map((p) => p.share),
        ...(runtime ? [runtime.share] : []),
        Math.max(0, 100 - listedShare),
      ]);
  const consumers = listed.map((p, i): IoConsumer => {
    const share = shares[i];
    const consumer: IoConsumer = { kind: 'Pod', podUid: p.uid, ...figures(p.rate), role: 'Bystander' };
    if (share !== undefined) consumer.sharePercent = share;
    if (p.psi !== undefined) consumer.psiSomeAvg10Percent = p.psi;
    // On the share as published: a pod shown at 25.0 % is a Culprit of a 25 % threshold.
    consumer.role = podRole(share ?? 0, p.psi, was.get(p.uid), context);
    return consumer;
  });
  if (idle) return consumers;
  const counted = [...listed.map((p) => p.rate), ...(runtime ? [runtime.rate] : [])];
  if (runtime)
    consumers.push({
      kind: 'Runtime',
      ...figures(runtime.rate),
      sharePercent: shares[listed.length] ?? 0,
      role: 'Runtime',
    });
  const rest = (pick: (r: Rate) => number) =>
    Math.max(0, pick(device) - counted.reduce((a, r) => a + pick(r), 0));
  consumers.push({
    kind: 'System',
    ...figures({
      readBytes: rest((r) => r.readBytes),
      writeBytes: rest((r) => r.writeBytes),
      ops: rest((r) => r.ops),
      readOps: rest((r) => r.readOps),
      writeOps: rest((r) => r.writeOps),
    }),
    sharePercent: shares.at(-1) ?? 0,
    role: 'System',
  });
  return consumers;
}

/**
 * The attribution between two samples, or undefined when the device has no rate (unknown, new, or reset). Each
 * cgroup's share is the larger of its share of the device's bytes and of its operations; the cgroups' sum is
 * scaled down to 100 when it exceeds the device's (a cgroup counts bios as submitted, diskstats requests as
 * completed, after merging). System is the rest: IO no cgroup was charged for, and the pods beyond the top five.
 */
export function computeAttribution(
  previous: AttributionSample,
  current: AttributionSample,
  context: AttributionContext,
): IoAttribution | undefined {
  const disk = current.disks.find((d) => d.name === context.device);
  const before = previous.disks.find((d) => d.name === context.device);
  const diskMs = current.disksAt - previous.disksAt;
  const { version, podsFound, pods, runtime, driver } = current.cgroups;
  if (!disk || !before || !version || diskMs <= 0 || current.cgroups.at <= previous.cgroups.at)
    return undefined;
  if (disk.major !== before.major || disk.minor !== before.minor) return undefined;
  const device = rate(sectors(before), sectors(disk), diskMs);
  if (!device) return undefined;
  const number = `${disk.major}:${disk.minor}`;
  const countedOnDevice =
    [...pods.values()].some((io) => io.counters.has(number)) || runtime?.counters.has(number) === true;
  const attribution: IoAttribution = {
    cgroupVersion: version,
    device: context.device,
    deviceNumber: number,
    ...judgeConfidence({
      version,
      device: context.device,
      filesystem: context.filesystem,
      podsFound,
      podsRead: pods.size,
      runtimeFound: runtime !== undefined,
      countedOnDevice,
    }),
    totalBytesPerSecond: Math.round(device.readBytes + device.writeBytes),
    totalOpsPerSecond: Math.round(device.ops * 10) / 10,
    podsMeasured: pods.size,
    consumers: listConsumers(split(previous, current, disk, device), context),
  };
  if (driver) attribution.driver = driver;
  if (context.filesystem) attribution.filesystem = context.filesystem;
  return attribution;
}
