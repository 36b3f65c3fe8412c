import type { IoReadingStatus } from '../api/v1alpha1/index.js';
import type { IoSource } from './types.js';

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
interface VectorResponse {
  status: string;
  error?: string;
  data?: { resultType: string; result: { metric: Record<string, string>; value: [number, string] }[] };
}

/**
 * Reads IO pressure from node_exporter metrics through the Prometheus HTTP API. The node is the first capture
 * group of nodeLabelRegex applied to the nodeLabel label (instance="node-1:9100" -> node-1 by default).
 * PSI from Prometheus is a one-minute rate, not the kernel's avg10: close, smoother.
 */
export class PrometheusSource implements IoSource {
  readonly kind = 'prometheus';
  readonly pollMs = 10_000;
  private readings = new Map<string, IoReadingStatus>();
  private readonly nodeRegex: RegExp;

  constructor(
    private readonly settings: PrometheusSettings,
    private readonly fetchFn: typeof fetch = fetch,
    private readonly now: () => Date = () => new Date(),
  ) {
    this.nodeRegex = new RegExp(settings.nodeLabelRegex);
  }

  private nodeOf(metric: Record<string, string>): string | undefined {
    const value = metric[this.settings.nodeLabel];
    return value === undefined ? undefined : this.nodeRegex.exec(value)?.[1];
  }

  private async query(promql: string): Promise<VectorResponse['data']> {
    const url = new URL('/api/v1/query', this.settings.url);
    url.searchParams.set('query', promql);
    const res = await this.fetchFn(url, {
      signal: AbortSignal.timeout(this.settings.queryTimeoutSeconds * 1000),
    });
    const body = (await res.json()) as VectorResponse;
    if (!res.ok || body.status !== 'success')
      throw new Error(`Prometheus query failed (HTTP ${res.status}): ${body.error ?? res.statusText}`);
    return body.data;
  }

  async refresh(nodeNames: readonly string[]): Promise<void> {
    const wanted = new Set(nodeNames);
    const next = new Map<string, IoReadingStatus>();
    const observedTime = this.now().toISOString();
    const results = await Promise.all(
      (Object.entries(QUERIES) as [Field, string][]).map(
        async ([field, q]) => [field, await this.query(q)] as const,
      ),
    );
    for (const [field, data] of results) {
      for (const series of data?.result ?? []) {
        const node = this.nodeOf(series.metric);
        const value = Number(series.value[1]);
        if (!node || !wanted.has(node) || !Number.isFinite(value)) continue;
        const reading = next.get(node) ?? { source: 'prometheus', observedTime };
        const rounded =
          field === 'blockedProcesses'
            ? Math.round(value)
            : Math.min(100, Math.max(0, Number(value.toFixed(1))));
        const current = reading[field];
        reading[field] = current === undefined ? rounded : Math.max(current, rounded);
        next.set(node, reading);
      }
    }
    this.readings = next;
  }

  read(nodeName: string): IoReadingStatus | undefined {
    return this.readings.get(nodeName);
  }
}
