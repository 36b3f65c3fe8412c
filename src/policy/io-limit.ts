// PURE: the in-place remedy for a culprit pod (issue 44): while its node is IoPressureHigh with sandboxes stuck from
// an IO cause, the culprit's IO on the saturated device is limited, from a fraction of what it does now, stepped down
// after each sustainSeconds the pressure outlasts, to a floor that keeps the pod working (a share of what it did, and
// never under an absolute minimum); at the floor with the node still saturated, the pod is exhausted and the next
// remedy the policy allows (migration) may take it. A limit is lifted when the pod no longer wants more than it (its
// rates under the cap and its own pressure low, for recoverySeconds), when the pod or the policy is gone, when it is
// labelled no-limit, or after maxLimitSeconds. A pod is limited again no sooner than cooldownSeconds after a lift.
// What the limit is in files, and putting them back, is the agent's (agent/io-limits.ts).
import type { IoState } from './node-facts.js';

/** Bytes and operations per second, read and written: io.max's keys. */
export interface IoRates {
  rbps: number;
  wbps: number;
  riops: number;
  wiops: number;
}

export interface LimitIoSettings {
  /** A pod's measured share of the device's IO that makes it a culprit (as measuredIo uses it). */
  minSharePercent: number;
  /** The first limit: this percentage of what the pod does when it is set. */
  startPercent: number;
  /** Each step down: this percentage of the limit before it. */
  stepPercent: number;
  /**
   * No limit goes below a pod's floor, set with its first limit: per key the larger of `percent` of what the pod did
   * then and the absolute minimum (bytes or operations per second), what keeps any pod working (its probes, its log,
   * a database's fsyncs).
   */
  floor: { bytesPerSecond: number; opsPerSecond: number; percent: number };
  cooldownSeconds: number;
  maxLimitSeconds: number;
  /** The node's pressure: how long a limit is given to work before the next step, and the pod's quiet before a lift. */
  sustainSeconds: number;
  recoverySeconds: number;
  /** A pod's own IO pressure (cgroup v2 io.pressure some avg10) at or over this wants more than its limit. */
  podPsiPercent: number;
}

/** A limit in force on one pod, as the operator recorded it. */
export interface PodLimit {
  uid: string;
  namespace: string;
  name: string;
  /** The saturated device, MAJ:MIN. */
  device: string;
  limit: IoRates;
  /** The lowest it steps down to (LimitIoSettings.floor, from what the pod did when first limited). */
  floor: IoRates;
  /** When it was first set, and last set or stepped. */
  since: Date;
  changedAt: Date;
  /** Since when the pod has wanted no more than its limit; absent while it does. */
  quietSince?: Date;
  /** At the floor with the node still saturated: handed to the next remedy. */
  exhausted?: true;
}

/** A pod the node's reading measures, as the limit needs it. */
export interface MeasuredPodIo {
  uid: string;
  namespace: string;
  name: string;
  sharePercent: number;
  rates: IoRates;
  /** cgroup v2 only. */
  psiPercent?: number;
  /** Labelled sandbox.remediator.io/no-limit=true, or the operator's own: never limited. */
  exempt: boolean;
}

export interface LimitInput {
  settings: LimitIoSettings;
  now: Date;
  /** The policy is there, valid and not paused: false lifts every limit. */
  active: boolean;
  /** The node's IoPressureHigh, and whether sandboxes are stuck on it from an IO cause. */
  io: IoState;
  ioStuck: boolean;
  /** The saturated device (MAJ:MIN) the reading attributes; no limit is set without one (absent or empty). */
  device?: string;
  /** The pods the reading measures now; a limited pod missing here has left the node (or is no longer measured). */
  pods: readonly MeasuredPodIo[];
  /** Running pods on the node by UID: a limited pod not among them is gone. */
  running: ReadonlySet<string>;
  limits: readonly PodLimit[];
  /** When each pod's last limit was lifted, by UID (for the cooldown). */
  liftedAt: ReadonlyMap<string, Date>;
  /** How many more limits may be set or stepped now (the remedy's own rate). */
  budget: number;
  /**
   * The limited pods (by UID) whose limit the agent's report does not show applied as wanted: not yet in force, so
   * it is neither stepped nor found exhausted (a step is never taken on a limit that did not work yet).
   */
  unverified?: ReadonlySet<string>;
  /**
   * The limited pods (by UID) whose stamps the apiserver refused lately: their limit cannot follow a step (none is
   * asked for unstamped), so one due for a step is exhausted where it is.
   */
  unsteppable?: ReadonlySet<string>;
  /** The most limits the node may hold (its SandboxHealth's list is bounded): a culprit past it is held (Full). */
  maxLimits?: number;
}

export type LiftReason = 'NoLongerNeeded' | 'PodGone' | 'PolicyGone' | 'MaxDuration' | 'Exempted';

export type LimitDecision =
  | { kind: 'Set'; pod: PodLimit; from: IoRates }
  | { kind: 'Step'; pod: PodLimit; before: IoRates }
  | { kind: 'Lift'; pod: PodLimit; reason: LiftReason }
  /** At its floor with the node still saturated, or due for a step its stamps cannot follow (refused). */
  | { kind: 'Exhausted'; pod: PodLimit; why: 'Floor' | 'StampsRefused' }
  | { kind: 'Held'; uid: string; why: 'Cooldown' | 'Rate' | 'Exempt' | 'NoDevice' | 'Full' };

export interface LimitPlan {
  decisions: LimitDecision[];
  /** The limits in force after the plan, as they are to be recorded. */
  limits: PodLimit[];
}

const KEYS = ['rbps', 'wbps', 'riops', 'wiops'] as const;
/** A rate this close to its cap is held by it: the pod wants more. */
const AT_CAP = 0.9;

/** `percent` of each rate, never under the floor. */
function scaled(rates: IoRates, percent: number, floor: IoRates): IoRates {
  const out = { ...rates };
  for (const key of KEYS) out[key] = Math.max(floor[key], Math.floor((rates[key] * percent) / 100));
  return out;
}

/** A pod's floor, from what it does when first limited. */
function floorFor(rates: IoRates, s: LimitIoSettings): IoRates {
  const out = { ...rates };
  for (const key of KEYS) {
    const minimum = key === 'rbps' || key === 'wbps' ? s.floor.bytesPerSecond : s.floor.opsPerSecond;
    out[key] = Math.max(minimum, Math.floor((rates[key] * s.floor.percent) / 100));
  }
  return out;
}

const atFloor = (pod: PodLimit) => KEYS.every((k) => pod.limit[k] <= pod.floor[k]);
const seconds = (from: Date, to: Date) => (to.getTime() - from.getTime()) / 1000;

/** Whether a limited pod wants no more than its limit: every rate clear of its cap, and its own pressure low. */
function wantsNoMore(pod: MeasuredPodIo, limit: IoRates, s: LimitIoSettings): boolean {
  if (pod.psiPercent !== undefined && pod.psiPercent >= s.podPsiPercent) return false;
  return KEYS.every((k) => pod.rates[k] < limit[k] * AT_CAP);
}

/** The limits of one node's pods for this pass: each limit in force first (lift, step, keep), then new culprits. */
export function decideLimits(input: LimitInput): LimitPlan {
  const { settings: s, now } = input;
  const decisions: LimitDecision[] = [];
  const limits: PodLimit[] = [];
  let budget = input.budget;
  const measured = new Map(input.pods.map((p) => [p.uid, p]));
  const saturated = input.io === 'High' && input.ioStuck;
  for (const held of input.limits) {
    const pod = measured.get(held.uid);
    const lift = (reason: LiftReason) => decisions.push({ kind: 'Lift', pod: held, reason });
    if (!input.active) lift('PolicyGone');
    else if (!input.running.has(held.uid)) lift('PodGone');
    else if (seconds(held.since, now) >= s.maxLimitSeconds) lift('MaxDuration');
    else if (pod?.exempt)
      lift('Exempted'); // labelled no-limit since
    else {
      const quiet = pod !== undefined && !saturated && wantsNoMore(pod, held.limit, s);
      const next: PodLimit = { ...held };
      if (!quiet) delete next.quietSince;
      else next.quietSince ??= now;
      if (next.quietSince && seconds(next.quietSince, now) >= s.recoverySeconds) {
        lift('NoLongerNeeded');
        continue;
      }
      // Stepped only while the device it limits is the one saturated.
      const due =
        saturated &&
        input.device === held.device &&
        seconds(held.changedAt, now) >= s.sustainSeconds &&
        !held.exhausted &&
        !input.unverified?.has(held.uid);
      const refused = input.unsteppable?.has(held.uid) === true;
      if (due && (atFloor(held) || refused)) {
        next.exhausted = true;
        decisions.push({ kind: 'Exhausted', pod: next, why: refused ? 'StampsRefused' : 'Floor' });
      } else if (due && budget > 0) {
        budget--;
        next.limit = scaled(held.limit, s.stepPercent, held.floor);
        next.changedAt = now;
        decisions.push({ kind: 'Step', pod: next, before: held.limit });
      } else if (due) decisions.push({ kind: 'Held', uid: held.uid, why: 'Rate' });
      limits.push(next);
    }
  }
  if (!input.active || !saturated) return { decisions, limits };
  const limited = new Set(input.limits.map((l) => l.uid));
  const culprits = input.pods
    .filter((p) => !limited.has(p.uid) && input.running.has(p.uid) && p.sharePercent >= s.minSharePercent)
    .sort((a, b) => b.sharePercent - a.sharePercent || a.uid.localeCompare(b.uid));
  for (const pod of culprits) {
    const lifted = input.liftedAt.get(pod.uid);
    const why = pod.exempt
      ? 'Exempt'
      : !input.device
        ? 'NoDevice'
        : lifted && seconds(lifted, now) < s.cooldownSeconds
          ? 'Cooldown'
          : budget <= 0
            ? 'Rate'
            : limits.length >= (input.maxLimits ?? Infinity)
              ? 'Full'
              : undefined;
    if (why || !input.device) {
      decisions.push({ kind: 'Held', uid: pod.uid, why: why ?? 'NoDevice' });
      continue;
    }
    budget--;
    const { uid, namespace, name } = pod;
    const floor = floorFor(pod.rates, s);
    const set: PodLimit = {
      uid,
      namespace,
      name,
      device: input.device,
      limit: scaled(pod.rates, s.startPercent, floor),
      floor,
      since: now,
      changedAt: now,
    };
    decisions.push({ kind: 'Set', pod: set, from: pod.rates });
    limits.push(set);
  }
  return { decisions, limits };
}
