import { z } from 'zod';
import {
  IoAttributionSchema,
  IoReadingSchema,
  type IoAttribution,
  type IoReadingStatus,
} from '../api/v1alpha1/index.js';
import { apiStatus, describeError } from '../ports/errors.js';
import { forEachLimit } from '../runtime/limit.js';
import { firstIssue } from './answer.js';
import { podRole } from './io-shares.js';
import { isQuiet } from './material-change.js';
import type { IoSource, SourceProblem } from './types.js';

/** Summary fetches in flight at once: a thousand nodes must not become a thousand concurrent proxy requests. */
export const SUMMARY_CONCURRENCY = 8;

/**
 * The part of the kubelet Summary API (stats/summary) this reads: node.io.psi (kubelet PSI, 1.33+). Older kubelets
 * have no node.io (no reading, no problem); anything else that does not fit is not a Summary to read numbers from.
 * pods is read apart (PodsSchema): a pod that does not fit costs the attribution, not the node's reading.
 */
const SummarySchema = z.object({
  pods: z.unknown().optional(),
  node: z
    .object({
      io: z
        .object({
          time: z.iso.datetime({ offset: true }).optional(),
          psi: z
            .object({
              some: z.object({ avg10: z.number(), avg60: z.number().optional() }),
              full: z.object({ avg10: z.number().optional() }).optional(),
            })
            .optional(),
        })
        .optional(),
    })
    .optional(),
});

/** Each pod's IO pressure (pods[].io.psi, KubeletPSI, 1.34+, cgroup v2 only), where the kubelet reports it. */
const PodsSchema = z.array(
  z.object({
    podRef: z.object({ name: z.string(), namespace: z.string(), uid: z.string() }),
    io: z.object({ psi: z.object({ some: z.object({ avg10: z.number() }) }).optional() }).optional(),
  }),
);

const TOP_PODS = 5;
const REASON =
  "The kubelet Summary has each pod's IO pressure but no IO bytes: it can tell victims, not culprits.";

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
    await forEachLimit(nodeNames, this.concurrency, async (node) => {
      try {
        const reading = readingFromSummary(await this.fetchSummary(node), this.now());
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

/** The reading in a Summary, undefined when it has none; throws when the Summary is not one or its PSI impossible. */
export function readingFromSummary(answer: unknown, now: Date): IoReadingStatus | undefined {
  const parsed = SummarySchema.safeParse(answer);
  if (!parsed.success) throw new Error(`the Summary has an unexpected shape: ${firstIssue(parsed.error)}`);
  const io = parsed.data.node?.io;
  const psi = io?.psi;
  if (!psi) return undefined;
  const reading: IoReadingStatus = {
    source: 'kubeletSummary',
    observedTime: (io.time ? new Date(io.time) : now).toISOString(),
    psiSomeAvg10Percent: psi.some.avg10,
  };
  if (psi.some.avg60 !== undefined) reading.psiSomeAvg60Percent = psi.some.avg60;
  if (psi.full?.avg10 !== undefined) reading.psiFullAvg10Percent = psi.full.avg10;
  // The status's own bounds (PSI is a share of time, 0-100): what the API would refuse is not a reading.
  const valid = IoReadingSchema.safeParse(reading);
  if (!valid.success) throw new Error(`the Summary's PSI cannot be real: ${firstIssue(valid.error)}`);
  // An idle node's pods are not worth naming; a busy one's are, by how much each waits on IO.
  const attribution = isQuiet(reading) ? undefined : attributionFromPods(parsed.data.pods);
  if (attribution) reading.attribution = attribution;
  return reading;
}

/**
 * The pods by their own IO pressure, most first: victims and bystanders, no shares (the Summary has no IO bytes).
 * Undefined when no pod has io.psi (kubelets before 1.34, KubeletPSI off, cgroup v1) or one cannot be real.
 */
export function attributionFromPods(pods: unknown): IoAttribution | undefined {
  const parsed = PodsSchema.safeParse(pods);
  if (!parsed.success) return undefined;
  const measured = parsed.data.flatMap(({ podRef, io }) =>
    io?.psi ? [{ ...podRef, avg10: io.psi.some.avg10 }] : [],
  );
  if (measured.length === 0) return undefined;
  measured.sort((a, b) => b.avg10 - a.avg10);
  const attribution: IoAttribution = {
    cgroupVersion: 'v2', // the kernel has pressure per cgroup on v2 only
    confidence: 'Low',
    confidenceReason: REASON,
    podsMeasured: measured.length,
    consumers: measured.slice(0, TOP_PODS).map(({ uid, namespace, name, avg10 }) => ({
      kind: 'Pod',
      podUid: uid,
      namespace,
      name,
      psiSomeAvg10Percent: avg10,
      role: podRole(0, avg10, undefined), // no shares: a victim or a bystander
    })),
  };
  return IoAttributionSchema.safeParse(attribution).success ? attribution : undefined;
}
