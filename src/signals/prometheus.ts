import { z } from 'zod';
import {
  IoAttributionSchema,
  type IoAttribution,
  type IoConsumer,
  type IoReadingStatus,
} from '../api/v1alpha1/index.js';
import { describeError } from '../kube/errors.js';
import { MAX_RESPONSE_BYTES, readBounded } from '../runtime/bounded-read.js';
import { firstIssue, parseJson } from './answer.js';
import { podRole, scaleShares, shareOf, splitHundred, type IoRate } from './io-shares.js';
import { isQuiet } from './material-change.js';
import type { IoSource, SourceProblem } from './types.js';

export interface PrometheusSettings {
  url: string;
  nodeLabel: string;
  nodeLabelRegex: string;
  queryTimeoutSeconds: number;
}

/** The block devices node_exporter reports that are not disks. */
const NOT_A_DISK = 'device!~"^(loop|ram|zram|sr|fd).*"';

/** node_exporter series, as rates over the last minute, in percent where they are shares of time. */
export const QUERIES = {
  psiSomeAvg10Percent: 'rate(node_pressure_io_waiting_seconds_total[1m]) * 100',
  psiFullAvg10Percent: 'rate(node_pressure_io_stalled_seconds_total[1m]) * 100',
  diskBusyPercent: `max without (device) (rate(node_disk_io_time_seconds_total{${NOT_A_DISK}}[1m])) * 100`,
  blockedProcesses: 'node_procs_blocked',
} as const;

type Field = keyof typeof QUERIES;

// Attribution, asked only while a node is not quiet. cAdvisor (kubelet's /metrics/cadvisor) says /dev/sda where
// node_exporter says sda. Its two byte families are the same blkio counters (fs_*, blkio_device_usage; a scrape
// config may drop either), tagged alike: a max, never a sum, takes one, and the pod's cgroup over its sandbox's.
const POD_COUNTERS = {
  readBytes: 'container_fs_reads_bytes_total{pod!=""}',
  writeBytes: 'container_fs_writes_bytes_total{pod!=""}',
  readOps: 'container_fs_reads_total{pod!=""}',
  writeOps: 'container_fs_writes_total{pod!=""}',
};
const blkio = (operation: string) => `container_blkio_device_usage_total{pod!="",operation="${operation}"}`;
const DEVICE_COUNTERS = {
  busy: `node_disk_io_time_seconds_total{${NOT_A_DISK}}`,
  readBytes: `node_disk_read_bytes_total{${NOT_A_DISK}}`,
  writeBytes: `node_disk_written_bytes_total{${NOT_A_DISK}}`,
  readOps: `node_disk_reads_completed_total{${NOT_A_DISK}}`,
  writeOps: `node_disk_writes_completed_total{${NOT_A_DISK}}`,
};
type PodMeasure = keyof typeof POD_COUNTERS;
type DeviceMeasure = keyof typeof DEVICE_COUNTERS;
/** Every pod series cAdvisor has: how many pods it measured, whether they did IO in the minute or not. */
const POD_SERIES = '{__name__=~"container_(fs_(reads|writes)_bytes|blkio_device_usage)_total",pod!=""}';

/** Each counter as a one-minute rate with a `measure` label saying which it is: one query answers for all. */
const tagged = (counters: Record<string, string>) =>
  Object.entries(counters)
    .map(([measure, series]) => `label_replace(rate(${series}[1m]), "measure", "${measure}", "", "")`)
    .join(' or ');

/**
 * The two attribution queries, grouped by the node label n (undefined when n is no label name to group by). Pods:
 * per container (container="" is the pod's own cgroup), only what moved, so that a large cluster's answer stays
 * small, and how many pods were measured per node. Devices: each disk's busy time and IO.
 */
export function attributionQueries(n: string): { pods: string; devices: string } | undefined {
  if (!/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(n)) return undefined;
  const counted = `count by (${n}) (count by (${n}, namespace, pod) (${POD_SERIES}))`;
  return {
    pods: `(max by (${n}, namespace, pod, container, device, measure) (${tagged(POD_COUNTERS)} or ${tagged({ readBytes: blkio('Read'), writeBytes: blkio('Write') })}) > 0) or label_replace(${counted}, "measure", "pods", "", "")`,
    devices: `max by (${n}, device, measure) (${tagged(DEVICE_COUNTERS)})`,
  };
}

/** A sample value as Prometheus writes it: a decimal number, NaN or ±Inf, always in a string. */
const SAMPLE_VALUE = /^(NaN|[+-]?Inf|[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)$/;

/** The answer to an instant query, as far as it is read: anything else is not an answer. */
const VectorAnswerSchema = z.object({
  status: z.literal('success'),
  data: z.object({
    resultType: z.literal('vector'),
    result: z.array(
      z.object({
        metric: z.record(z.string(), z.string()),
        value: z.tuple([z.number(), z.string().regex(SAMPLE_VALUE, 'not a sample value')]),
      }),
    ),
  }),
});
type Vector = z.infer<typeof VectorAnswerSchema>['data'];

const ErrorAnswerSchema = z.object({ status: z.literal('error'), error: z.string() });

/**
 * The rates are of counters that grow at most one second a second: a little over 100 % is scrape jitter and
 * extrapolation (clamped), far over it is a counter that went backwards and was taken for a reset, not pressure.
 */
const MAX_PLAUSIBLE_PERCENT = 200;
/** The kernel cannot have more tasks than PID_MAX_LIMIT (2^22). */
const MAX_PLAUSIBLE_TASKS = 4_194_304;

/**
 * Reads IO pressure from node_exporter metrics through the Prometheus HTTP API. The node is the first capture
 * group of nodeLabelRegex applied to the nodeLabel label (instance="node-1:9100" -> node-1 by default).
 * PSI from Prometheus is a one-minute rate, not the kernel's avg10: close, smoother.
 */
export class PrometheusSource implements IoSource {
  readonly kind = 'prometheus';
  readonly pollMs = 10_000;
  private readings = new Map<string, IoReadingStatus>();
  private problems = new Map<string, SourceProblem>();
  private readonly nodeRegex: RegExp;

  constructor(
    private readonly settings: PrometheusSettings,
    private readonly fetchFn: typeof fetch = fetch,
    private readonly now: () => Date = () => new Date(),
    private readonly maxResponseBytes = MAX_RESPONSE_BYTES,
  ) {
    this.nodeRegex = new RegExp(settings.nodeLabelRegex);
  }

  private nodeOf(metric: Record<string, string>): string | undefined {
    const value = metric[this.settings.nodeLabel];
    return value === undefined ? undefined : this.nodeRegex.exec(value)?.[1];
  }

  private async query(promql: string): Promise<Vector> {
    const url = new URL('/api/v1/query', this.settings.url);
    url.searchParams.set('query', promql);
    // The signal also ends the body: a server that sends its headers and then trickles is cut off all the same.
    const res = await this.fetchFn(url, {
      signal: AbortSignal.timeout(this.settings.queryTimeoutSeconds * 1000),
    });
    const text = res.body
      ? (await readBounded(res.body, this.maxResponseBytes, 'the Prometheus answer')).toString('utf8')
      : '';
    const body = parseJson(text);
    const error = ErrorAnswerSchema.safeParse(body);
    if (!res.ok || error.success)
      throw new Error(`Prometheus query failed (HTTP ${res.status}): ${error.data?.error ?? res.statusText}`);
    const answer = VectorAnswerSchema.safeParse(body);
    if (!answer.success)
      throw new Error(
        body === undefined
          ? 'Prometheus answered with something other than JSON'
          : `Prometheus answered with an unexpected shape: ${firstIssue(answer.error)}`,
      );
    return answer.data.data;
  }

  async refresh(nodeNames: readonly string[]): Promise<void> {
    const wanted = new Set(nodeNames);
    const next = new Map<string, IoReadingStatus>();
    const problems = new Map<string, SourceProblem>();
    const observedTime = this.now().toISOString();
    let results: (readonly [Field, Vector])[];
    try {
      results = await Promise.all(
        (Object.entries(QUERIES) as [Field, string][]).map(
          async ([field, q]) => [field, await this.query(q)] as const,
        ),
      );
    } catch (err) {
      // No answer is no reading: the last ones kept would be taken as current until they went stale.
      const problem = unavailable(`Prometheus could not be read: ${describeCause(err)}`);
      this.readings = new Map();
      this.problems = new Map(nodeNames.map((node) => [node, problem]));
      throw err;
    }
    for (const [field, data] of results) {
      for (const series of data.result) {
        const node = this.nodeOf(series.metric);
        const value = Number(series.value[1]);
        // NaN and ±Inf are Prometheus's own "no number here": no value, like no series.
        if (!node || !wanted.has(node) || !Number.isFinite(value)) continue;
        const rounded = plausible(field, value);
        if (rounded === undefined) {
          problems.set(
            node,
            unavailable(`Prometheus gave ${field} ${series.value[1]} for this node, which cannot be real`),
          );
          continue;
        }
        const reading = next.get(node) ?? { source: 'prometheus', observedTime };
        const current = reading[field];
        reading[field] = current === undefined ? rounded : Math.max(current, rounded);
        next.set(node, reading);
      }
    }
    // One impossible value makes the node's whole reading unknown: its other values come from the same pipeline.
    for (const node of problems.keys()) next.delete(node);
    await this.attribute(next);
    this.readings = next;
    this.problems = problems;
  }

  /** Adds who does the IO to the readings of nodes that are not quiet; a failed query leaves them without. */
  private async attribute(readings: Map<string, IoReadingStatus>): Promise<void> {
    const pressed = new Set([...readings].filter(([, r]) => !isQuiet(r)).map(([node]) => node));
    const q = attributionQueries(this.settings.nodeLabel);
    if (pressed.size === 0 || !q) return;
    const answers = await Promise.all([this.query(q.pods), this.query(q.devices)]).catch(() => undefined);
    if (!answers) return; // the attribution is unknown; the readings stand
    for (const [node, io] of this.collect(answers[0], answers[1], pressed)) {
      const [attribution, reading] = [attributionOf(io), readings.get(node)];
      if (attribution && reading) reading.attribution = attribution;
    }
  }

  /** The answers by node, for the wanted nodes; a value no real node could have makes its node's unknown. */
  private collect(pods: Vector, disks: Vector, wanted: ReadonlySet<string>): Map<string, NodeIo> {
    const nodes = new Map<string, NodeIo>();
    const read = (metric: Record<string, string>, sample: string, max = MAX_PLAUSIBLE_RATE) => {
      const node = this.nodeOf(metric);
      if (!node || !wanted.has(node)) return undefined;
      const io = entry(nodes, node, () => ({ disks: new Map(), pods: new Map() }));
      const value = Number(sample);
      if (Number.isFinite(value) && value >= 0 && value <= max) return { io, value };
      io.bad = true;
      return undefined;
    };
    for (const { metric, value } of disks.result) {
      if (!isMeasure(DEVICE_COUNTERS, metric.measure)) continue;
      const got = read(metric, value[1], metric.measure === 'busy' ? MAX_PLAUSIBLE_PERCENT / 100 : undefined);
      if (got) entry(got.io.disks, metric.device ?? '', () => ({}))[metric.measure] = got.value;
    }
    for (const { metric, value } of pods.result) {
      const { measure, namespace, pod, container = '' } = metric;
      if (measure === 'pods') {
        const got = read(metric, value[1], MAX_PLAUSIBLE_TASKS);
        if (got) got.io.podsMeasured = Math.round(got.value);
      } else if (isMeasure(POD_COUNTERS, measure) && namespace && pod && container !== 'POD') {
        // container="POD" is dockershim's sandbox (pause); containerd's has container="", like the pod's cgroup.
        const got = read(metric, value[1]);
        if (!got) continue;
        const devices = entry(got.io.pods, `${namespace}/${pod}`, () => new Map<string, PodDevice>());
        const device = (metric.device ?? '').replace(/^\/dev\//, '');
        const at = entry(devices, device, () => ({ own: {}, containers: {} }));
        const rates = container === '' ? at.own : at.containers;
        rates[measure] = (rates[measure] ?? 0) + got.value;
      }
    }
    return nodes;
  }

  read(nodeName: string): IoReadingStatus | undefined {
    return this.readings.get(nodeName);
  }

  problem(nodeName: string): SourceProblem | undefined {
    return this.problems.get(nodeName);
  }
}

/** The value as the reading holds it, or undefined when no real node could have it. */
function plausible(field: Field, value: number): number | undefined {
  if (value < 0) return undefined;
  if (field === 'blockedProcesses') {
    const tasks = Math.round(value);
    return tasks <= MAX_PLAUSIBLE_TASKS ? tasks : undefined;
  }
  return value <= MAX_PLAUSIBLE_PERCENT ? Math.min(100, Number(value.toFixed(1))) : undefined;
}

/** fetch's own errors say only "fetch failed"; what failed (ECONNREFUSED, too many redirects) is in the cause. */
function describeCause(err: unknown): string {
  const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
  return `${describeError(err)}${cause}`;
}

function unavailable(message: string): SourceProblem {
  return { reason: 'SourceUnavailable', message };
}

/** A rate no real node could have: a terabyte, or a trillion operations, a second. */
const MAX_PLAUSIBLE_RATE = 1e12;
const TOP_PODS = 5;
const REASON =
  "cAdvisor's per-container counters via Prometheus, 1-minute rates: on cgroup v1 buffered writeback is charged to the flusher, not the pod; the runtime's own IO counts as System.";
const EVERY_DISK = ' Every disk counted: the busiest one, or the series device, is unknown.';

type Rates<M extends string> = Partial<Record<M, number>>;
/** A pod on one device: its own cgroup's counters (container="") and the sum of its containers'. */
type PodDevice = { own: Rates<PodMeasure>; containers: Rates<PodMeasure> };
/** One node's answers: disks by name, pods by namespace/name and device (cAdvisor's, less /dev/). */
type NodeIo = {
  disks: Map<string, Rates<DeviceMeasure>>;
  pods: Map<string, Map<string, PodDevice>>;
  podsMeasured?: number;
  bad?: true;
};
type PodIo = { key: string; read: number; write: number; ops?: number; share?: number };

const isMeasure = <M extends string>(counters: Record<M, string>, m: string | undefined): m is M =>
  m !== undefined && Object.hasOwn(counters, m);
const entry = <K, V>(map: Map<K, V>, key: K, make: () => NoInfer<V>): V =>
  map.get(key) ?? (map.set(key, make()).get(key) as V);

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
    for (const m of counts(device) ? (Object.keys(POD_COUNTERS) as PodMeasure[]) : [])
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
function attributionOf(io: NodeIo): IoAttribution | undefined {
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
