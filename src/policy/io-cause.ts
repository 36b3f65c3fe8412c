// PURE: who does a saturated device's IO, from the attribution in the node's reading, and the remedy that follows
// (DESIGN.md, "Who does the IO, and which remedy follows"): a culprit pod is moved; the runtime's own IO (image pulls,
// unpacking) calls for fewer rollouts at once and paced pod starts, and no pod is moved; with nothing attributable,
// the node is cordoned and its stuck pods evicted, no more.
import type { IoAttribution, IoCause, IoConsumer } from '../api/v1alpha1/index.js';

export interface IoCauseDecision {
  cause: IoCause;
  /** The evidence, and the remedy it calls for, in words for status and Events. */
  message: string;
  /** The pods whose share of the device reaches minSharePercent, biggest first (cause Pod). */
  culprits: IoConsumer[];
}

/** What a consumer is called in status: namespace/name once resolved, else its UID; the runtime; the rest. */
export function consumerName(consumer: IoConsumer): string {
  if (consumer.kind === 'Runtime') return 'the container runtime';
  if (consumer.kind === 'System') return 'the rest (system, writeback)';
  if (consumer.namespace && consumer.name) return `${consumer.namespace}/${consumer.name}`;
  return `pod ${consumer.podUid ?? '(unknown)'}`;
}

/** The top consumer and its share, for kubectl get: "shop/db-0 64%". */
export function topConsumer(attribution: IoAttribution | undefined): string | undefined {
  const top = [...(attribution?.consumers ?? [])]
    .filter((c) => c.sharePercent !== undefined)
    .sort((a, b) => (b.sharePercent ?? 0) - (a.sharePercent ?? 0))[0];
  if (!top || top.sharePercent === undefined) return undefined;
  const name =
    top.kind === 'Pod'
      ? top.namespace && top.name
        ? `${top.namespace}/${top.name}`
        : (top.podUid ?? 'pod')
      : top.kind.toLowerCase();
  return `${name} ${Math.round(top.sharePercent)}%`;
}

const percent = (n: number | undefined) => `${Math.round(n ?? 0)}%`;

/**
 * The cause from the attribution. A pod is a culprit at minSharePercent or more; the runtime is the cause when its own
 * share reaches it and no pod's is larger. Low confidence (cgroup v1) hides writeback in the rest, so it can miss a
 * culprit, never invent one: a measured share is real IO of that cgroup. A source that measures no shares (the
 * kubelet Summary's pressure alone) can name victims, not a cause.
 */
export function decideIoCause(
  attribution: IoAttribution | undefined,
  minSharePercent: number,
): IoCauseDecision {
  if (!attribution)
    return {
      cause: 'Unknown',
      message:
        "No attribution of the device's IO: the reading does not say who does it (see the agent's --cgroup-root, or the source).",
      culprits: [],
    };
  const consumers = attribution.consumers;
  const measured = consumers.some((c) => c.sharePercent !== undefined);
  const device = attribution.device ?? 'the device';
  const trust = `${attribution.confidence} confidence: ${attribution.confidenceReason}`;
  if (!measured)
    return {
      cause: 'Unknown',
      message: `The source measures no pod's share of the IO (${trust}); it can tell victims, not culprits.`,
      culprits: [],
    };
  const share = (c: IoConsumer) => c.sharePercent ?? 0;
  const pods = consumers.filter((c) => c.kind === 'Pod').sort((a, b) => share(b) - share(a));
  const culprits = pods.filter((c) => share(c) >= minSharePercent);
  const runtime = consumers.find((c) => c.kind === 'Runtime');
  if (runtime && share(runtime) >= minSharePercent && share(runtime) >= share(pods[0] ?? runtime))
    return {
      cause: 'Runtime',
      message: `The container runtime does ${percent(runtime.sharePercent)} of ${device}'s IO (image pulls and unpacking): rollouts are throttled and pod starts paced where the policy allows it, and no pod is moved (${trust}).`,
      culprits: [],
    };
  const top = culprits[0];
  if (top)
    return {
      cause: 'Pod',
      message: `${culprits.map((c) => `${consumerName(c)} does ${percent(c.sharePercent)}`).join(', ')} of ${device}'s IO: the culprit${culprits.length > 1 ? 's are' : ' is'} moved where migrateWorkloads allows it (${trust}).`,
      culprits,
    };
  const largest = [...consumers].sort((a, b) => share(b) - share(a))[0];
  const biggest = largest ? ` (the largest: ${consumerName(largest)}, ${percent(largest.sharePercent)})` : '';
  return {
    cause: 'Unattributed',
    message: `Neither a pod nor the runtime does ${minSharePercent}% of ${device}'s IO${biggest}: cordon and evict only (${trust}).`,
    culprits: [],
  };
}
