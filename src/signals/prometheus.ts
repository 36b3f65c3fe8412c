import { z } from 'zod';
import type { IoReadingStatus } from '../api/v1alpha1/index.js';
import { describeError } from '../ports/errors.js';
import { MAX_RESPONSE_BYTES, readBounded } from '../runtime/bounded-read.js';
import { httpGet, type HttpGet } from './http-get.js';
import { firstIssue, parseJson } from './answer.js';
import { isQuiet } from './material-change.js';
import {
  attributionOf,
  type DeviceMeasure,
  type NodeIo,
  type PodDevice,
  type PodMeasure,
} from './prometheus-attribution.js';
import type { IoSource, SourceProblem } from './types.js';

export interface PrometheusSettings {
  url: string;
  nodeLabel: string;
  nodeLabelRegex: string;
  queryTimeoutSeconds: number;
  /** Label matchers added to every node_exporter series read (spec: seriesSelector). */
  seriesSelector?: string | undefined;
  /** Label matchers added to every cAdvisor series read (spec: cadvisorSeriesSelector). */
  cadvisorSeriesSelector?: string | undefined;
}

/** What a query is sent with: a CA to trust (PEM) for https, a bearer token; read anew before each poll. */
export interface PrometheusCredentials {
  ca?: string;
  bearerToken?: string;
}

/** The matchers of a selector without its braces or a trailing comma: `job="x"` from `{job="x",}`. */
export const matchersOf = (selector: string | undefined): string =>
  (selector ?? '').trim().replace(/^\{/, '').replace(/\}$/, '').trim().replace(/,$/, '');

/** A series selector: the metric's own matchers and the policy's. */
const series = (name: string, ...matchers: string[]) => {
  const all = matchers.filter((m) => m !== '');
  return all.length === 0 ? name : `${name}{${all.join(',')}}`;
};

/** The block devices node_exporter reports that are not disks. */
const NOT_A_DISK = 'device!~"^(loop|ram|zram|sr|fd).*"';

/** node_exporter series, as rates over the last minute, in percent where they are shares of time. */
export function nodeQueries(selector?: string) {
  const only = matchersOf(selector);
  return {
    psiSomeAvg10Percent: `rate(${series('node_pressure_io_waiting_seconds_total', only)}[1m]) * 100`,
    psiFullAvg10Percent: `rate(${series('node_pressure_io_stalled_seconds_total', only)}[1m]) * 100`,
    diskBusyPercent: `max without (device) (rate(${series('node_disk_io_time_seconds_total', NOT_A_DISK, only)}[1m])) * 100`,
    blockedProcesses: series('node_procs_blocked', only),
  } as const;
}
export const QUERIES = nodeQueries();

type Field = keyof typeof QUERIES;

// Attribution, asked only while a node is not quiet. cAdvisor (kubelet's /metrics/cadvisor) says /dev/sda where
// node_exporter says sda. Its two byte families are the same blkio counters (fs_*, blkio_device_usage; a scrape
// config may drop either), tagged alike: a max, never a sum, takes one, and the pod's cgroup over its sandbox's.
const podCounters = (only: string): Record<PodMeasure, string> => ({
  readBytes: series('container_fs_reads_bytes_total', 'pod!=""', only),
  writeBytes: series('container_fs_writes_bytes_total', 'pod!=""', only),
  readOps: series('container_fs_reads_total', 'pod!=""', only),
  writeOps: series('container_fs_writes_total', 'pod!=""', only),
});
const blkio = (operation: string, only: string) =>
  series('container_blkio_device_usage_total', 'pod!=""', `operation="${operation}"`, only);
const deviceCounters = (only: string): Record<DeviceMeasure, string> => ({
  busy: series('node_disk_io_time_seconds_total', NOT_A_DISK, only),
  readBytes: series('node_disk_read_bytes_total', NOT_A_DISK, only),
  writeBytes: series('node_disk_written_bytes_total', NOT_A_DISK, only),
  readOps: series('node_disk_reads_completed_total', NOT_A_DISK, only),
  writeOps: series('node_disk_writes_completed_total', NOT_A_DISK, only),
});
const POD_COUNTERS = podCounters('');
const DEVICE_COUNTERS = deviceCounters('');
/** Every pod series cAdvisor has: how many pods it measured, whether they did IO in the minute or not. */
const podSeries = (only: string) =>
  series('', '__name__=~"container_(fs_(reads|writes)_bytes|blkio_device_usage)_total"', 'pod!=""', only);

/** Each counter as a one-minute rate with a `measure` label saying which it is: one query answers for all. */
const tagged = (counters: Record<string, string>) =>
  Object.entries(counters)
    .map(([measure, series]) => `label_replace(rate(${series}[1m]), "measure", "${measure}", "", "")`)
    .join(' or ');

/**
 * The two attribution queries, grouped by the node label n (undefined when n is no label name to group by). Pods:
 * per container (container="" is the pod's own cgroup), only what moved, so that a large cluster's answer stays
 * small, and how many pods were measured per node. Devices: each disk's busy time and IO. The policy's selectors
 * narrow the cAdvisor and the node_exporter series.
 */
export function attributionQueries(
  n: string,
  selectors: { node?: string | undefined; cadvisor?: string | undefined } = {},
): { pods: string; devices: string } | undefined {
  if (!/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(n)) return undefined;
  const pods = matchersOf(selectors.cadvisor);
  const counted = `count by (${n}) (count by (${n}, namespace, pod) (${podSeries(pods)}))`;
  return {
    pods: `(max by (${n}, namespace, pod, container, device, measure) (${tagged(podCounters(pods))} or ${tagged({ readBytes: blkio('Read', pods), writeBytes: blkio('Write', pods) })}) > 0) or label_replace(${counted}, "measure", "pods", "", "")`,
    devices: `max by (${n}, device, measure) (${tagged(deviceCounters(matchersOf(selectors.node)))})`,
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

  private readonly queries: ReturnType<typeof nodeQueries>;
  private credentials: PrometheusCredentials = {};

  constructor(
    private readonly settings: PrometheusSettings,
    private readonly get: HttpGet = httpGet,
    private readonly now: () => Date = () => new Date(),
    private readonly maxResponseBytes = MAX_RESPONSE_BYTES,
    /** Reads the CA and the token the policy names (none by default). */
    private readonly readCredentials: () => Promise<PrometheusCredentials> = () => Promise.resolve({}),
  ) {
    this.nodeRegex = new RegExp(settings.nodeLabelRegex);
    this.queries = nodeQueries(settings.seriesSelector);
  }

  private nodeOf(metric: Record<string, string>): string | undefined {
    const value = metric[this.settings.nodeLabel];
    return value === undefined ? undefined : this.nodeRegex.exec(value)?.[1];
  }

  private async query(promql: string): Promise<Vector> {
    const url = new URL('/api/v1/query', this.settings.url);
    url.searchParams.set('query', promql);
    // The signal also ends the body: a server that sends its headers and then trickles is cut off all the same.
    const { ca, bearerToken } = this.credentials;
    const res = await this.get(url, {
      signal: AbortSignal.timeout(this.settings.queryTimeoutSeconds * 1000),
      headers: bearerToken === undefined ? {} : { authorization: `Bearer ${bearerToken}` },
      ...(ca === undefined ? {} : { ca }),
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
      this.credentials = await this.readCredentials();
      results = await Promise.all(
        (Object.entries(this.queries) as [Field, string][]).map(
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
    const q = attributionQueries(this.settings.nodeLabel, {
      node: this.settings.seriesSelector,
      cadvisor: this.settings.cadvisorSeriesSelector,
    });
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
const isMeasure = <M extends string>(counters: Record<M, string>, m: string | undefined): m is M =>
  m !== undefined && Object.hasOwn(counters, m);
const entry = <K, V>(map: Map<K, V>, key: K, make: () => NoInfer<V>): V =>
  map.get(key) ?? (map.set(key, make()).get(key) as V);
