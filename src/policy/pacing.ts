// PURE: which new pods the webhook gates, and which gated pods the operator releases when. A gate we set never
// strands a pod: it is lifted at the set rate, at once when the pressure is gone, and anyway after maxGateSeconds.
import { matchesSelector, type LabelSelector } from '../api/v1alpha1/index.js';
import { mayLandOn, type NodeLike, type Placement } from './node-affinity.js';
import { budgetLeft, nextFreeAt } from './rate-window.js';

/** What the webhook knows of a policy that paces pod starts. */
export interface PacingPolicy {
  name: string;
  namespaceSelector: LabelSelector;
  /** Some node of the policy is IoPressureHigh, and the policy is neither paused nor a dry run. */
  gating: boolean;
  dryRun: boolean;
  /** Its IoPressureHigh nodes, fenced as they stand: a new pod is gated only if it could land on one of them. */
  saturated: readonly (NodeLike & { unschedulable: boolean })[];
}

/** Never paced, whatever a selector says. */
export const UNPACED_NAMESPACES: ReadonlySet<string> = new Set(['kube-system']);

/**
 * The policy whose gate a new pod gets, or undefined (no gate). The first of the policies, in the order given,
 * whose selector takes the namespace; a dry-run policy answers too, so its decision can be counted.
 */
export function pacingFor(
  namespace: string,
  namespaceLabels: Readonly<Record<string, string>> | undefined,
  policies: readonly PacingPolicy[],
  operatorNamespace: string | undefined,
  placement: Placement = {},
): PacingPolicy | undefined {
  if (UNPACED_NAMESPACES.has(namespace) || namespace === operatorNamespace || !namespaceLabels)
    return undefined;
  // A pod whose nodeSelector, affinity or tolerations keep it off every saturated, unfenced node is never gated: its
  // start does not touch a saturated disk.
  return policies.find(
    (p) =>
      (p.gating || p.dryRun) &&
      matchesSelector(p.namespaceSelector, namespaceLabels) &&
      p.saturated.some((node) => mayLandOn(placement, node)),
  );
}

export interface GatedPod {
  namespace: string;
  name: string;
  uid: string;
  gatedAt: Date;
}

export type ReleaseReason = 'PressureGone' | 'Paced' | 'WaitedTooLong';

export interface ReleaseInput<P extends GatedPod = GatedPod> {
  /** The policy's gated pods. */
  gated: readonly P[];
  /** Pacing is on and some node of the policy is IoPressureHigh. */
  pressure: boolean;
  maxPodStartsPerMinute: number;
  maxGateSeconds: number;
  /** When gates were lifted recently (only the last 60 s count). */
  recentReleases: readonly Date[];
  now: Date;
  /** The namespace the last paced release went to: the turn goes on from the next one, pass after pass. */
  lastNamespace?: string | undefined;
}

export interface ReleaseDecision<P extends GatedPod = GatedPod> {
  releases: { pod: P; reason: ReleaseReason }[];
  /** When to look again: the next gate the rate allows, or the next pod to outwait maxGateSeconds. */
  nextAt?: Date;
}

export function decideGateReleases<P extends GatedPod>(input: ReleaseInput<P>): ReleaseDecision<P> {
  const { now } = input;
  const oldestFirst = [...input.gated].sort(
    (a, b) =>
      a.gatedAt.getTime() - b.gatedAt.getTime() ||
      `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`),
  );
  if (!input.pressure)
    return { releases: oldestFirst.map((pod) => ({ pod, reason: 'PressureGone' as const })) };

  const releases: ReleaseDecision<P>['releases'] = [];
  const limitMs = input.maxGateSeconds * 1000;
  const waiting: P[] = [];
  for (const pod of oldestFirst) {
    if (now.getTime() - pod.gatedAt.getTime() >= limitMs) releases.push({ pod, reason: 'WaitedTooLong' });
    else waiting.push(pod);
  }
  const budget = budgetLeft(input.maxPodStartsPerMinute, input.recentReleases, now);
  const paced = byNamespaceInTurn(waiting, input.lastNamespace).slice(0, budget);
  waiting.splice(0, waiting.length, ...waiting.filter((p) => !paced.includes(p)));
  for (const pod of paced) releases.push({ pod, reason: 'Paced' });
  const candidates: number[] = [];
  if (waiting.length > 0) {
    // The next gate the rate allows, once this pass's are spent.
    const free = nextFreeAt(input.maxPodStartsPerMinute, input.recentReleases, now, paced.length);
    if (free) candidates.push(free.getTime());
    candidates.push(...waiting.map((p) => p.gatedAt.getTime() + limitMs));
  }
  const next = Math.min(...candidates);
  return Number.isFinite(next) ? { releases, nextAt: new Date(next) } : { releases };
}

/**
 * Pods in the order the rate releases them: namespaces take turns, each its oldest first, the namespace with the
 * oldest pod first, or the one after `after` (the last released to: a pass that may lift one gate goes on with the
 * next namespace); so one namespace creating pods in bulk cannot use up maxPodStartsPerMinute for all the others.
 */
export function byNamespaceInTurn<P extends GatedPod>(oldestFirst: readonly P[], after?: string): P[] {
  const byNamespace = new Map<string, P[]>();
  for (const pod of oldestFirst) {
    const queue = byNamespace.get(pod.namespace);
    if (queue) queue.push(pod);
    else byNamespace.set(pod.namespace, [pod]);
  }
  const namespaces = [...byNamespace.keys()];
  const next = after === undefined ? 0 : namespaces.indexOf(after) + 1;
  const queues = [...namespaces.slice(next), ...namespaces.slice(0, next)].map(
    (n) => byNamespace.get(n) ?? [],
  );
  const order: P[] = [];
  for (let round = 0; order.length < oldestFirst.length; round++)
    for (const queue of queues) {
      const pod = queue[round];
      if (pod) order.push(pod);
    }
  return order;
}
