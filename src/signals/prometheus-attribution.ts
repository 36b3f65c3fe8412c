// PURE: who does a node's disk IO, from Prometheus' answers (cAdvisor's per-container counters and node_exporter's
// disks, 1-minute rates): the busiest disk only, the top five pods and System, by the one rule of shares
// (io-shares.ts). The queries and the reading of the answers are in prometheus.ts.
import { IoAttributionSchema, type IoAttribution, type IoConsumer } from '../api/v1alpha1/index.js';
import { podRole, scaleShares, shareOf, splitHundred, type IoRate } from './io-shares.js';

export type PodMeasure = 'readBytes' | 'writeBytes' | 'readOps' | 'writeOps';
export type DeviceMeasure = 'busy' | PodMeasure;
const POD_MEASURES: readonly PodMeasure[] = ['readBytes', 'writeBytes', 'readOps', 'writeOps'];

const TOP_PODS = 5;
const REASON =
  "cAdvisor's per-container counters via Prometheus, 1-minute rates: on cgroup v1 buffered writeback is charged to the flusher, not the pod; the runtime's own IO counts as System.";
const EVERY_DISK = ' Every disk counted: the busiest one, or the series device, is unknown.';

export type Rates<M extends string> = Partial<Record<M, number>>;
/** A pod on one device: its own cgroup's counters (container="") and the sum of its containers'. */
export type PodDevice = { own: Rates<PodMeasure>; containers: Rates<PodMeasure> };
/** One node's answers: disks by name, pods by namespace/name and device (cAdvisor's, less /dev/). */
export type NodeIo = {
  disks: Map<string, Rates<DeviceMeasure>>;
  pods: Map<string, Map<string, PodDevice>>;
  podsMeasured?: number;
  bad?: true;
};
type PodIo = { key: string; read: number; write: number; ops?: number; share?: number };

/** A device mapper or md device, stacked on the disks: its IO is theirs too. */
const isStacked = (device: string) => /^(dm-|md)\d|^mapper\//.test(device);

/** The busiest disk by busy time, a whole disk before a device stacked on it. */
function busiestDisk(disks: Map<string, Rates<DeviceMeasure>>): string | undefined {
  const busy = [...disks].filter(([, r]) => r.busy !== undefined);
  const whole = busy.filter(([device]) => !isStacked(device));
  return (whole.length > 0 ? whole : busy).sort(([, a], [, b]) => (b.busy ?? 0) - (a.busy ?? 0))[0]?.[0];
}

const sum = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);
/** Undefined when any is: a total of which a part is unknown is unknown. */
const total = (values: readonly (number | undefined)[]) =>
  values.every((v) => v !== undefined) ? sum(values) : undefined;

/**
 * A pod's IO on the counted devices. Its own cgroup holds its containers' IO where the counters are hierarchical
 * (v2, v1's _recursive files), and next to nothing where they are not (v1's throttle files with older runc): the
 * larger of the two, never their sum, so that no pod is counted twice.
 */
function podIo(key: string, devices: Map<string, PodDevice>, counts: (d: string) => boolean): PodIo[] {
  const rates: Rates<PodMeasure> = {};
  for (const [device, { own, containers }] of devices)
    for (const m of counts(device) ? POD_MEASURES : [])
      if (own[m] !== undefined || containers[m] !== undefined)
        rates[m] = (rates[m] ?? 0) + Math.max(own[m] ?? 0, containers[m] ?? 0);
  if (rates.readBytes === undefined && rates.writeBytes === undefined) return [];
  const io: PodIo = { key, read: rates.readBytes ?? 0, write: rates.writeBytes ?? 0 };
  if (rates.readOps !== undefined || rates.writeOps !== undefined)
    io.ops = (rates.readOps ?? 0) + (rates.writeOps ?? 0);
  return [io];
}

/**
 * Each pod's share of the counted devices (io-shares.ts: the larger of bytes and operations, scaled to 100 at
 * most). The device's totals are at least the pods' sum: cAdvisor and node_exporter are scraped at other moments.
 * False when nothing moved: no shares to tell.
 */
function assignShares(pods: PodIo[], bytes: number, ops: number | undefined): boolean {
  const device: IoRate = { bytes: Math.max(bytes, sum(pods.map((p) => p.read + p.write))) };
  if (ops !== undefined) device.ops = Math.max(ops, sum(pods.map((p) => p.ops ?? 0)));
  if (device.bytes === 0 && !device.ops) return false;
  const rate = (p: PodIo): IoRate =>
    p.ops === undefined ? { bytes: p.read + p.write } : { bytes: p.read + p.write, ops: p.ops };
  const shares = scaleShares(pods.map((p) => shareOf(rate(p), device)));
  pods.forEach((p, i) => (p.share = shares[i] ?? 0));
  return true;
}

const rounded = (value: number, digits = 0) => Number(Math.max(0, value).toFixed(digits));
const figures = (read: number, write: number, ops: number | undefined) => ({
  readBytesPerSecond: rounded(read),
  writeBytesPerSecond: rounded(write),
  ...(ops === undefined ? {} : { opsPerSecond: rounded(ops, 1) }),
});

/** The node's attribution, or undefined when its answers cannot give one (missing, or not real). */
export function attributionOf(io: NodeIo): IoAttribution | undefined {
  if (io.bad || !io.podsMeasured) return undefined;
  const named = [...io.pods.values()].some((devices) => [...devices.keys()].some((d) => d !== ''));
  const device = named ? busiestDisk(io.disks) : undefined;
  const counts = (d: string) => (device !== undefined ? d === device : !isStacked(d));
  const disks = [...io.disks].filter(([d]) => counts(d)).map(([, r]) => r);
  const [read, write] = [total(disks.map((r) => r.readBytes)), total(disks.map((r) => r.writeBytes))];
  if (disks.length === 0 || read === undefined || write === undefined) return undefined;
  const ops = total(disks.flatMap((r) => [r.readOps, r.writeOps]));
  const pods = [...io.pods].flatMap(([key, devices]) => podIo(key, devices, counts));
  const shared = assignShares(pods, read + write, ops);
  pods.sort((a, b) => (b.share ?? 0) - (a.share ?? 0) || b.read + b.write - (a.read + a.write));
  const top = pods.slice(0, TOP_PODS);
  // System: the rest of the device, the pods not listed included; the published shares add up to exactly 100.
  const listed = sum(top.map((p) => p.share ?? 0));
  const shares = shared ? splitHundred([...top.map((p) => p.share ?? 0), Math.max(0, 100 - listed)]) : [];
  const consumers: IoConsumer[] = top.map((p, i) => {
    const [namespace, name] = p.key.split('/');
    const published = shares[i];
    const share = published === undefined ? {} : { sharePercent: published };
    const role = podRole(published ?? 0, undefined, undefined);
    return { kind: 'Pod', namespace, name, ...figures(p.read, p.write, p.ops), ...share, role };
  });
  const listedOps = total(top.map((p) => p.ops));
  const systemOps = ops === undefined || listedOps === undefined ? undefined : ops - listedOps;
  consumers.push({
    kind: 'System',
    ...figures(read - sum(top.map((p) => p.read)), write - sum(top.map((p) => p.write)), systemOps),
    ...(shared ? { sharePercent: shares.at(-1) ?? 0 } : {}),
    role: 'System',
  });
  const attribution: IoAttribution = {
    ...(device === undefined ? {} : { device }),
    confidence: 'Medium',
    confidenceReason: device === undefined ? REASON + EVERY_DISK : REASON,
    totalBytesPerSecond: rounded(read + write),
    ...(ops === undefined ? {} : { totalOpsPerSecond: rounded(ops, 1) }),
    podsMeasured: Math.max(io.podsMeasured, pods.length),
    consumers,
  };
  return IoAttributionSchema.safeParse(attribution).success ? attribution : undefined;
}
