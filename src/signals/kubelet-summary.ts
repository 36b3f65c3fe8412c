import type { IoReadingStatus } from '../api/v1alpha1/index.js';
import { apiStatus, describeError } from '../kube/errors.js';
import type { IoSource, SourceProblem } from './types.js';

/** Summary fetches in flight at once: a thousand nodes must not become a thousand concurrent proxy requests. */
export const SUMMARY_CONCURRENCY = 8;

/** The part of the kubelet Summary API (stats/summary) this reads: node.io.psi (kubelet PSI, 1.33+). */
interface Summary {
  node?: {
    io?: { time?: string; psi?: { some?: { avg10?: number; avg60?: number }; full?: { avg10?: number } } };
  };
}

/** Reads PSI from each node's kubelet Summary API; the fetcher goes through the apiserver's node proxy. */
export class KubeletSummarySource implements IoSource {
  readonly kind = 'kubeletSummary';
  readonly pollMs = 10_000;
  private readings = new Map<string, IoReadingStatus>();
  private problems = new Map<string, SourceProblem>();

  constructor(
    private readonly fetchSummary: (nodeName: string) => Promise<unknown>,
    private readonly now: () => Date = () => new Date(),
    /** Called when a node's fetch starts failing or fails differently (once per transition, not per poll). */
    private readonly onError: (nodeName: string, err: unknown) => void = () => undefined,
    /** Called when a node's fetch works again after failing. */
    private readonly onRecovered: (nodeName: string) => void = () => undefined,
    private readonly concurrency = SUMMARY_CONCURRENCY,
  ) {}

  async refresh(nodeNames: readonly string[]): Promise<void> {
    const next = new Map<string, IoReadingStatus>();
    const problems = new Map<string, SourceProblem>();
    await forEachLimited(nodeNames, this.concurrency, async (node) => {
      try {
        const reading = readingFromSummary((await this.fetchSummary(node)) as Summary, this.now());
        if (reading) next.set(node, reading);
        if (this.problems.has(node)) this.onRecovered(node);
      } catch (err) {
        const problem = problemOf(err); // unknown for this node, not zero
        problems.set(node, problem);
        if (this.problems.get(node)?.reason !== problem.reason) this.onError(node, err);
      }
    });
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

/** Why a Summary could not be read, as a status reason an SRE can act on. */
function problemOf(err: unknown): SourceProblem {
  const code = apiStatus(err)?.code;
  if (code === 403)
    return {
      reason: 'SourceForbidden',
      message: `the operator may not read the kubelet Summary API (RBAC: grant get on nodes/proxy): ${describeError(err)}`,
    };
  return { reason: 'SourceUnavailable', message: `the kubelet Summary API failed: ${describeError(err)}` };
}

/** Runs fn over items with at most `limit` calls in flight. */
export async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++] as T;
      await fn(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

export function readingFromSummary(summary: Summary, now: Date): IoReadingStatus | undefined {
  const psi = summary.node?.io?.psi;
  const some = psi?.some;
  if (typeof some?.avg10 !== 'number') return undefined;
  const observed = summary.node?.io?.time ? new Date(summary.node.io.time) : now;
  const reading: IoReadingStatus = {
    source: 'kubeletSummary',
    observedTime: (Number.isNaN(observed.getTime()) ? now : observed).toISOString(),
    psiSomeAvg10Percent: some.avg10,
  };
  if (typeof some.avg60 === 'number') reading.psiSomeAvg60Percent = some.avg60;
  if (typeof psi?.full?.avg10 === 'number') reading.psiFullAvg10Percent = psi.full.avg10;
  return reading;
}
