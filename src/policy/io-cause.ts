// PURE: who does a saturated device's IO, from the attribution in the node's reading, and the remedy that follows
// (DESIGN.md, "Who does the IO, and which remedy follows"): a culprit pod is moved; the runtime's own IO (image pulls,
// unpacking) calls for fewer rollouts at once and paced pod starts, and no pod is moved; with nothing attributable,
// the node is cordoned and its stuck pods evicted, no more.
import { consumerId, type IoAttribution, type IoCause, type IoConsumer } from '../api/v1alpha1/index.js';

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

/** What the cause is judged against besides the attribution. */
export interface CauseContext {
  /** A pod with this share of the device or more is a culprit. */
  minSharePercent: number;
  /** The attributed device's busy percentage in the same reading (undefined: unknown). */
  busyPercent: number | undefined;
  /** The policy's diskBusyPercent: a device under it is not shown to be saturated. */
  busyThreshold: number;
  /** Pods (by UID, or namespace/name) that were culprits on the last look: they stay so down to HELD_SHARE of it. */
  held?: ReadonlySet<string>;
  /** The policy limits culprits in place (limitIo): said in the message, as the remedy that comes first. */
  limitsIo?: boolean;
}

/** A culprit stays one until its share falls under this fraction of minSharePercent, as the agent's roles do. */
export const HELD_SHARE = 0.8;

/**
 * The cause from the attribution. A pod is a culprit at minSharePercent or more (a culprit of the last look down to
 * HELD_SHARE of it), unless the agent calls it a Victim; the runtime is the cause when its own share reaches it and
 * no pod's is larger. Either needs the attributed device to be saturated in the same reading (busyPercent at the
 * policy's diskBusyPercent): node IO pressure from elsewhere (a network volume) makes no pod of an idle disk a
 * culprit. Low confidence (cgroup v1) hides writeback in the rest, so it can miss a culprit, never invent one: a
 * measured share is real IO of that cgroup. A source that measures no shares (the kubelet Summary's pressure alone)
 * can name victims, not a cause.
 */
export function decideIoCause(
  attribution: IoAttribution | undefined,
  context: CauseContext,
): IoCauseDecision {
  const { minSharePercent } = context;
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
  const { busyPercent, busyThreshold } = context;
  if (busyPercent === undefined || busyPercent < busyThreshold)
    return {
      cause: 'Unattributed',
      message: `${device} is ${busyPercent === undefined ? 'of unknown busy time' : `${Math.round(busyPercent)}% busy`}, under diskBusyPercent (${busyThreshold}%): who does its IO is not what saturates the node, and nobody is named the cause (${trust}).`,
      culprits: [],
    };
  const share = (c: IoConsumer) => c.sharePercent ?? 0;
  const pods = consumers.filter((c) => c.kind === 'Pod').sort((a, b) => share(b) - share(a));
  const threshold = (c: IoConsumer) => minSharePercent * (context.held?.has(consumerId(c)) ? HELD_SHARE : 1);
  const culprits = pods.filter((c) => c.role !== 'Victim' && share(c) >= threshold(c));
  const runtime = consumers.find((c) => c.kind === 'Runtime');
  if (runtime && share(runtime) >= minSharePercent && share(runtime) >= share(pods[0] ?? runtime))
    return {
      cause: 'Runtime',
      message: `The container runtime does ${percent(runtime.sharePercent)} of ${device}'s IO (image pulls and unpacking): no pod is moved; rollouts are throttled and pod starts paced where the policy says so (${trust}).`,
      culprits: [],
    };
  const top = culprits[0];
  if (top)
    return {
      cause: 'Pod',
      message: `${culprits.map((c) => `${consumerName(c)} does ${percent(c.sharePercent)}`).join(', ')} of ${device}'s IO: the culprit${culprits.length > 1 ? 's are' : ' is'} ${context.limitsIo ? 'limited in place (limitIo), and moved only if that limit is exhausted or not applied and migrateWorkloads.by measuredIo allows it' : 'moved where migrateWorkloads.by measuredIo allows it'} (${trust}).`,
      culprits,
    };
  const largest = [...consumers].sort((a, b) => share(b) - share(a))[0];
  const biggest = largest ? ` (the largest: ${consumerName(largest)}, ${percent(largest.sharePercent)})` : '';
  return {
    cause: 'Unattributed',
    message: `Neither a pod nor the runtime does ${minSharePercent}% of ${device}'s IO${biggest}: nobody is named the cause (${trust}).`,
    culprits: [],
  };
}
