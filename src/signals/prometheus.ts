import { z } from 'zod';
import type { IoReadingStatus } from '../api/v1alpha1/index.js';
import { describeError } from '../kube/errors.js';
import { MAX_RESPONSE_BYTES, readBounded } from '../runtime/bounded-read.js';
import { firstIssue, parseJson } from './answer.js';
import type { IoSource, SourceProblem } from './types.js';

export interface PrometheusSettings {
  url: string;
  nodeLabel: string;
  nodeLabelRegex: string;
  queryTimeoutSeconds: number;
}

/** node_exporter series, as rates over the last minute, in percent where they are shares of time. */
export const QUERIES = {
  psiSomeAvg10Percent: 'rate(node_pressure_io_waiting_seconds_total[1m]) * 100',
  psiFullAvg10Percent: 'rate(node_pressure_io_stalled_seconds_total[1m]) * 100',
  diskBusyPercent:
    'max without (device) (rate(node_disk_io_time_seconds_total{device!~"^(loop|ram|zram|sr|fd).*"}[1m])) * 100',
  blockedProcesses: 'node_procs_blocked',
} as const;

type Field = keyof typeof QUERIES;

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
    this.readings = next;
    this.problems = problems;
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
