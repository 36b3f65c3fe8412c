import { KEY_PREFIX } from './meta.js';

/**
 * Ownership stamps: the annotations the operator writes on a Node it changed. Undo reads these and nothing
 * else, so it survives restarts, leader changes and a deleted SandboxHealth; what carries no stamp is not ours.
 */
export const STAMP = {
  policy: `${KEY_PREFIX}remediated-by`,
  since: `${KEY_PREFIX}remediated-since`,
  reason: `${KEY_PREFIX}remediation-reason`,
  cordoned: `${KEY_PREFIX}cordoned`,
  taint: `${KEY_PREFIX}taint`,
  /** The uid of the Node the stamps were written on: copied onto another object, they are not ours there. */
  uid: `${KEY_PREFIX}remediated-uid`,
  /** The keys of other managers' fencing taints (NoSchedule, NoExecute) on the node when we fenced it. */
  taintsBefore: `${KEY_PREFIX}taints-before`,
} as const;

export interface Taint {
  key: string;
  value?: string;
  effect: string;
}

export interface NodeStamps {
  policy: string;
  since: Date;
  reason: string;
  /** We set spec.unschedulable. */
  cordoned: boolean;
  /** The taint we added. */
  taint?: Taint;
  /**
   * Other managers' fencing taint keys on the node when we first fenced it; a fencing taint not among them was added
   * after our fence, by someone else, and our undo waits while it stands. Absent on stamps written before it was kept.
   */
  taintsBefore?: string[];
}

export function formatTaint(taint: Taint): string {
  return `${taint.key}=${taint.value ?? ''}:${taint.effect}`;
}

export function parseTaint(text: string): Taint | undefined {
  const match = /^([^=:]+)=([^:]*):(NoSchedule|PreferNoSchedule|NoExecute)$/.exec(text);
  if (!match) return undefined;
  const [, key = '', value = '', effect = ''] = match;
  return value === '' ? { key, effect } : { key, value, effect };
}

export const sameTaint = (a: Taint, b: Taint) =>
  a.key === b.key && (a.value ?? '') === (b.value ?? '') && a.effect === b.effect;

/**
 * Whether stamps name this object: they name its uid, or (written before uids were stamped) none. Stamps that name
 * another uid were copied from another object, with a manifest or a backup, and are not ours.
 */
const stampedOn = (stampedUid: string | undefined, uid: string): boolean =>
  stampedUid === undefined || stampedUid === uid;

/** Our stamps from a Node's annotations, or undefined when the node carries none (it is not ours). */
export function readStamps(
  annotations: Readonly<Record<string, string>>,
  uid: string,
): NodeStamps | undefined {
  const policy = annotations[STAMP.policy];
  if (!policy || !stampedOn(annotations[STAMP.uid], uid)) return undefined;
  const since = new Date(annotations[STAMP.since] ?? '');
  const stamps: NodeStamps = {
    policy,
    // A mangled time must not hold a cooldown forever: it counts as long ago.
    since: Number.isNaN(since.getTime()) ? new Date(0) : since,
    reason: annotations[STAMP.reason] ?? '',
    cordoned: annotations[STAMP.cordoned] === 'true',
  };
  const taintText = annotations[STAMP.taint];
  const taint = taintText ? parseTaint(taintText) : undefined;
  if (taint) stamps.taint = taint;
  const before = annotations[STAMP.taintsBefore];
  if (before !== undefined) stamps.taintsBefore = before === '' ? [] : before.split(',');
  return stamps;
}

/** The annotation values that record `stamps` on the object `uid`; null removes a key (merge-patch semantics). */
export function stampAnnotations(stamps: NodeStamps | undefined, uid: string): Record<string, string | null> {
  if (!stamps) return Object.fromEntries(Object.values(STAMP).map((key) => [key, null]));
  return {
    [STAMP.policy]: stamps.policy,
    [STAMP.since]: stamps.since.toISOString(),
    [STAMP.reason]: stamps.reason.slice(0, 1024),
    [STAMP.cordoned]: stamps.cordoned ? 'true' : null,
    [STAMP.taint]: stamps.taint ? formatTaint(stamps.taint) : null,
    [STAMP.uid]: uid,
    [STAMP.taintsBefore]: stamps.taintsBefore ? stamps.taintsBefore.join(',') : null,
  };
}

/** Ownership stamps on a rollout the operator holds (rollout throttling): a Deployment, StatefulSet, DaemonSet or Rollout. */
export const ROLLOUT_STAMP = {
  policy: `${KEY_PREFIX}paused-by`,
  since: `${KEY_PREFIX}paused-since`,
  reason: `${KEY_PREFIX}pause-reason`,
  startedAt: `${KEY_PREFIX}rollout-started`,
  /** StatefulSet and DaemonSet: spec.updateStrategy as it was before the hold (JSON; `{}` when unset), restored exactly. */
  heldStrategy: `${KEY_PREFIX}held-update-strategy`,
  /** StatefulSet: the partition the hold set; another value means its owner changed it meanwhile. */
  heldPartition: `${KEY_PREFIX}held-partition`,
  /** Not a claim: the user resumed one we paused, and we keep our hands off until then. */
  handsOffUntil: `${KEY_PREFIX}hands-off-until`,
  /** The uid of the object the stamps were written on (see STAMP.uid). */
  uid: `${KEY_PREFIX}paused-uid`,
} as const;

/** A StatefulSet's or DaemonSet's spec.updateStrategy, as the API has it. */
export interface UpdateStrategy {
  type?: string;
  rollingUpdate?: Record<string, unknown>;
}

/** What a StatefulSet or DaemonSet hold replaced, read from its stamps. */
export interface HeldStrategy {
  /** spec.updateStrategy before the hold. */
  strategy: UpdateStrategy;
  /** StatefulSet: the partition the hold set. */
  partition?: number;
}

/** The held strategy from a rollout's annotations; undefined when there is none, or it does not parse. */
export function readHeldStrategy(annotations: Readonly<Record<string, string>>): HeldStrategy | undefined {
  const text = annotations[ROLLOUT_STAMP.heldStrategy];
  if (text === undefined) return undefined;
  let strategy: unknown;
  try {
    strategy = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof strategy !== 'object' || strategy === null || Array.isArray(strategy)) return undefined;
  const held: HeldStrategy = { strategy: strategy };
  const partition = Number(annotations[ROLLOUT_STAMP.heldPartition]);
  if (annotations[ROLLOUT_STAMP.heldPartition] !== undefined && Number.isInteger(partition))
    held.partition = partition;
  return held;
}

/** The annotations recording a hold's strategy (null removes them). */
export function heldStrategyAnnotations(held: HeldStrategy | undefined): Record<string, string | null> {
  return {
    [ROLLOUT_STAMP.heldStrategy]: held ? JSON.stringify(held.strategy) : null,
    [ROLLOUT_STAMP.heldPartition]: held?.partition !== undefined ? String(held.partition) : null,
  };
}

export const PAUSE_REASONS = ['FeedsSaturatedNode', 'RolloutQueued'] as const;

/** The kinds of rollout the operator holds; Rollout is Argo Rollouts' argoproj.io/v1alpha1 Rollout. */
export const ROLLOUT_KINDS = ['Deployment', 'StatefulSet', 'DaemonSet', 'Rollout'] as const;
export type RolloutKind = (typeof ROLLOUT_KINDS)[number];
export const isRolloutKind = (kind: string): kind is RolloutKind =>
  (ROLLOUT_KINDS as readonly string[]).includes(kind);
export type PauseReason = (typeof PAUSE_REASONS)[number];

export interface RolloutStamps {
  policy: string;
  since: Date;
  reason: PauseReason;
  /** When its rollout started, for the queue's order. */
  startedAt: Date;
}

const dateOr = (text: string | undefined, fallback: Date) => {
  const date = new Date(text ?? '');
  return Number.isNaN(date.getTime()) ? fallback : date;
};

/** Our pause stamps from a rollout's annotations, or undefined when we did not pause it. */
export function readRolloutStamps(
  annotations: Readonly<Record<string, string>>,
  uid: string,
): RolloutStamps | undefined {
  const policy = annotations[ROLLOUT_STAMP.policy];
  if (!policy || !stampedOn(annotations[ROLLOUT_STAMP.uid], uid)) return undefined;
  const reason = annotations[ROLLOUT_STAMP.reason];
  const since = dateOr(annotations[ROLLOUT_STAMP.since], new Date(0));
  return {
    policy,
    since,
    reason: reason === 'FeedsSaturatedNode' ? 'FeedsSaturatedNode' : 'RolloutQueued',
    startedAt: dateOr(annotations[ROLLOUT_STAMP.startedAt], since),
  };
}

/** The annotations recording `stamps` on the object `uid` (null removes), and optionally a hands-off time. */
export function rolloutStampAnnotations(
  stamps: RolloutStamps | undefined,
  uid: string,
  handsOffUntil?: Date,
): Record<string, string | null> {
  const marks: Record<string, string | null> = stamps
    ? {
        [ROLLOUT_STAMP.policy]: stamps.policy,
        [ROLLOUT_STAMP.since]: stamps.since.toISOString(),
        [ROLLOUT_STAMP.reason]: stamps.reason,
        [ROLLOUT_STAMP.startedAt]: stamps.startedAt.toISOString(),
        [ROLLOUT_STAMP.uid]: uid,
      }
    : {
        [ROLLOUT_STAMP.policy]: null,
        [ROLLOUT_STAMP.since]: null,
        [ROLLOUT_STAMP.reason]: null,
        [ROLLOUT_STAMP.startedAt]: null,
        [ROLLOUT_STAMP.uid]: null,
      };
  if (handsOffUntil) marks[ROLLOUT_STAMP.handsOffUntil] = handsOffUntil.toISOString();
  return marks;
}

/** The scheduling gate the pacing webhook adds, and the annotations that say whose it is and since when. */
export const PACING_GATE = `${KEY_PREFIX}paced`;
export const PACING_STAMP = {
  policy: `${KEY_PREFIX}gated-by`,
  since: `${KEY_PREFIX}gated-at`,
} as const;

/**
 * The annotations on a pod whose IO the operator limits in place (limitIo): whose limit, what it is (io.max's keys by
 * device), and since when. They mirror the node's SandboxHealth (spec.ioLimits, what the operator wants; the agent's
 * report, what the files held before), so the pod's owner sees it in kubectl describe, and cleanup finds every pod
 * limited even where that SandboxHealth is gone.
 */
export const IO_LIMIT_STAMP = {
  policy: `${KEY_PREFIX}io-limited-by`,
  limit: `${KEY_PREFIX}io-limit`,
  since: `${KEY_PREFIX}io-limited-since`,
  /** The uid of the pod the stamps were written on (see STAMP.uid). */
  uid: `${KEY_PREFIX}io-limited-uid`,
} as const;

/** The limited pods' stamps: the annotation values, null removing a key (merge-patch semantics). */
export type IoLimitStampAnnotations = Record<
  (typeof IO_LIMIT_STAMP)[keyof typeof IO_LIMIT_STAMP],
  string | null
>;

/** The stamps off: every key removed. */
export const IO_LIMIT_UNSTAMPED: IoLimitStampAnnotations = {
  [IO_LIMIT_STAMP.policy]: null,
  [IO_LIMIT_STAMP.limit]: null,
  [IO_LIMIT_STAMP.since]: null,
  [IO_LIMIT_STAMP.uid]: null,
};

/**
 * Whether a pod's annotations hold our IO-limit stamps for it: they always name its uid (stamps naming another, or
 * none, were copied or made by someone else: not ours).
 */
export const ioLimitStamped = (annotations: Readonly<Record<string, string>>, uid: string): boolean =>
  annotations[IO_LIMIT_STAMP.policy] !== undefined && annotations[IO_LIMIT_STAMP.uid] === uid;
