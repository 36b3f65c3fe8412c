import type { IoReadingStatus } from '../api/v1alpha1/index.js';
import type { IoSource } from './types.js';

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

  constructor(
    private readonly fetchSummary: (nodeName: string) => Promise<unknown>,
    private readonly now: () => Date = () => new Date(),
    private readonly onError: (nodeName: string, err: unknown) => void = () => undefined,
  ) {}

  async refresh(nodeNames: readonly string[]): Promise<void> {
    const next = new Map<string, IoReadingStatus>();
    await Promise.all(
      nodeNames.map(async (node) => {
        try {
          const reading = readingFromSummary((await this.fetchSummary(node)) as Summary, this.now());
          if (reading) next.set(node, reading);
        } catch (err) {
          this.onError(node, err); // unknown for this node, not zero
        }
      }),
    );
    this.readings = next;
  }

  read(nodeName: string): IoReadingStatus | undefined {
    return this.readings.get(nodeName);
  }
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
