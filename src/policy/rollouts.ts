// PURE: decides which rollouts to hold and let go so they do not keep a saturated disk saturated, for every kind at
// once (Deployments, StatefulSets, DaemonSets, Argo Rollouts): each kind's hold is read into the same facts. Every
// rule about rollouts is here (the policy-wide guard, shared with remediation, is in guards.ts); how each kind is
// held and restored is the throttler's change, with our stamps.

import type { PauseReason, RolloutKind, RolloutStamps } from '../api/v1alpha1/index.js';
import { guardPolicy } from './guards.js';

export type { PauseReason, RolloutStamps };

export interface RolloutFacts {
  kind: RolloutKind;
  namespace: string;
  name: string;
  /** Held as its kind holds (spec.paused, a partition, OnDelete), as it stands (in a dry run, as it would). */
  paused: boolean;
  /** The rollout is not complete: new replicas not all updated and available, or a spec not yet observed. */
  rollingOut: boolean;
  /** When its current rollout started (its newest ReplicaSet's creation), for ordering. */
  startedAt: Date;
  stamps?: RolloutStamps;
  /** The user resumed one we held: left alone until then. */
  handsOffUntil?: Date;
  /** Saturated nodes (IO pressure proven, cordoned or not) where its pods are stuck from an IO cause. */
  feeds: readonly string[];
  /**
   * Saturated nodes its new pods could land on (feeds among them): it has pods stuck there, runs pods there and the
   * node is not fenced against them, or is a DaemonSet whose pods cover the node. None: it is never held nor counted.
   */
  reaches: readonly string[];
  /** Paused by a real run, seen by a dry run: held exactly as it is (a dry run cannot resume it). */
  frozen?: boolean;
  /** Whether it runs pods on some saturated node could not be read: one of ours is not let go on that ground. */
  reachUnknown?: boolean;
  /** Past its own progress deadline (Progressing=False): it holds no slot, but is still held if it feeds a node. */
  stalled?: boolean;
  /**
   * A StatefulSet with no pod left to update, only waiting for updated pods to become ready: a hold would change
   * nothing, so none is made (it still holds a slot for the progress deadline).
   */
  settling?: boolean;
}

export interface RolloutInput {
  policy: string;
  throttle: { pauseDeployments: boolean; maxConcurrentRollouts: number } | undefined;
  /** Every rollout in the policy's scope, of every kind. */
  rollouts: readonly RolloutFacts[];
  /** Some node of the policy is IoPressureHigh or being remediated. */
  pressure: boolean;
  now: Date;
  cacheReady: boolean;
  paused: boolean;
  cooldownSeconds: number;
}

export type RolloutAction =
  | { kind: 'PauseRollout'; target: string; reason: PauseReason; message: string; stamps: RolloutStamps }
  | { kind: 'ResumeRollout'; target: string; reason: string; message: string }
  /** The user resumed one we paused: drop our stamp and keep our hands off for cooldownSeconds. */
  | {
      kind: 'ReleaseRollout';
      target: string;
      reason: 'ResumedByOthers';
      message: string;
      handsOffUntil: Date;
    };

export interface RolloutDecision {
  actions: RolloutAction[];
  blocked: { target: string; guard: 'CacheNotSynced' | 'Paused'; message: string }[];
  /** Rollouts held by us once the actions are done, in queue order (oldest rollout first), every kind together. */
  pausedAfter: { target: string; reason: PauseReason; feeds: readonly string[] }[];
}

/** kind/namespace/name, the kind in lower case as kubectl names it: deployment/shop/web, statefulset/shop/db. */
export const rolloutTarget = (d: Pick<RolloutFacts, 'kind' | 'namespace' | 'name'>) =>
  `${d.kind.toLowerCase()}/${d.namespace}/${d.name}`;

const byStart = (a: RolloutFacts, b: RolloutFacts) =>
  (a.stamps?.startedAt ?? a.startedAt).getTime() - (b.stamps?.startedAt ?? b.startedAt).getTime() ||
  rolloutTarget(a).localeCompare(rolloutTarget(b));

/** A rollout we hold, and why. */
interface Paused {
  d: RolloutFacts;
  reason: PauseReason;
}

/** What one pass over the policy's rollouts has decided so far. */
interface RolloutPass {
  readonly input: RolloutInput;
  readonly actions: RolloutAction[];
  readonly blocked: RolloutDecision['blocked'];
  /** Ours, as the cluster has them, that this pass may change; the user's own pauses are not in any list here. */
  readonly ours: Map<string, RolloutFacts>;
  /** Paused by us once the actions are done. */
  readonly pausedNow: Map<string, Paused>;
}

/**
 * While the policy's nodes are under pressure: pause what feeds a saturated node, and let at most
 * maxConcurrentRollouts of those that could land on one progress, queueing the rest in the order they started;
 * rollouts that could land on none are never held nor counted. When the pressure is gone,
 * resume everything we paused. One its owner paused is never touched; one we paused that the user resumed
 * is let go and left alone for cooldownSeconds.
 */
export function decideRollouts(input: RolloutInput): RolloutDecision {
  const pass: RolloutPass = { input, actions: [], blocked: [], ours: new Map(), pausedNow: new Map() };
  sortOurPauses(pass);
  const held = guardPolicy(input.cacheReady, input.paused);
  if (held) {
    // Nothing new, and nothing undone, while held; what stands is reported as it is.
    for (const d of pass.ours.values()) pass.blocked.push({ target: rolloutTarget(d), ...held });
  } else if (!input.throttle) resumeAll(pass, 'throttleRollouts is no longer set');
  else if (!input.pressure) resumeAll(pass, 'no node of the policy is under IO pressure');
  else throttleRollouts(pass, input.throttle);
  return { actions: pass.actions, blocked: pass.blocked, pausedAfter: listed(pass.pausedNow) };
}

/** What we paused, as the cluster has it: frozen by a dry run, resumed by someone else, or ours to change. */
function sortOurPauses(pass: RolloutPass): void {
  for (const d of pass.input.rollouts) {
    if (!d.stamps) continue;
    const target = rolloutTarget(d);
    if (d.frozen) {
      pass.pausedNow.set(target, { d, reason: d.stamps.reason });
    } else if (!d.paused) {
      letGo(pass, d);
    } else {
      pass.ours.set(target, d);
      pass.pausedNow.set(target, { d, reason: d.stamps.reason });
    }
  }
}

/** Resumed by someone else: let go rather than fight them. */
function letGo(pass: RolloutPass, d: RolloutFacts): void {
  const { now, cooldownSeconds } = pass.input;
  pass.actions.push({
    kind: 'ReleaseRollout',
    target: rolloutTarget(d),
    reason: 'ResumedByOthers',
    message: `Someone else resumed it; dropped our stamp and leave it alone for ${cooldownSeconds}s.`,
    handsOffUntil: new Date(now.getTime() + cooldownSeconds * 1000),
  });
}

/** Under pressure: pause feeders, then let at most maxConcurrentRollouts progress, the oldest first. */
function throttleRollouts(pass: RolloutPass, throttle: NonNullable<RolloutInput['throttle']>): void {
  // What feeds the fire stops first.
  if (throttle.pauseDeployments) pauseFeeders(pass);
  requeueFormerFeeders(pass);
  const room = queueBeyondLimit(pass, throttle.maxConcurrentRollouts);
  advanceQueue(pass, throttle.maxConcurrentRollouts, room);
}

function resume(pass: RolloutPass, d: RolloutFacts, reason: string, message: string): void {
  pass.actions.push({ kind: 'ResumeRollout', target: rolloutTarget(d), reason, message });
  pass.pausedNow.delete(rolloutTarget(d));
}

function pause(pass: RolloutPass, d: RolloutFacts, reason: PauseReason, message: string): void {
  const stamps: RolloutStamps = {
    policy: pass.input.policy,
    since: pass.input.now,
    reason,
    startedAt: d.startedAt,
  };
  pass.actions.push({ kind: 'PauseRollout', target: rolloutTarget(d), reason, message, stamps });
  pass.pausedNow.set(rolloutTarget(d), { d, reason });
}

/** Neither ours, nor paused by the user, nor left alone after the user resumed it, and with pods left to update. */
const isFreeToPause = (d: RolloutFacts, now: Date) =>
  !d.stamps && !d.paused && !d.settling && !(d.handsOffUntil && now < d.handsOffUntil);

function resumeAll(pass: RolloutPass, why: string): void {
  for (const d of [...pass.ours.values()].sort(byStart)) resume(pass, d, 'PressureGone', `Resumed: ${why}.`);
}

function pauseFeeders(pass: RolloutPass): void {
  const { rollouts, now } = pass.input;
  const feeders = rollouts.filter((d) => isFreeToPause(d, now) && d.rollingOut && d.feeds.length > 0);
  for (const d of feeders.sort(byStart))
    pause(
      pass,
      d,
      'FeedsSaturatedNode',
      `Paused: its pods are stuck creating sandboxes on IO-saturated node(s) ${d.feeds.join(', ')}.`,
    );
}

/**
 * A paused feeder whose pods no longer feed a saturated node may go on, within the limit below; one of ours that
 * reaches no saturated node at all goes on at once (rollouts elsewhere are never held).
 */
function requeueFormerFeeders(pass: RolloutPass): void {
  for (const { d, reason } of [...pass.pausedNow.values()]) {
    if (!pass.ours.has(rolloutTarget(d))) continue;
    if (d.reaches.length === 0 && !d.reachUnknown)
      resume(pass, d, 'ReachesNoSaturatedNode', 'Resumed: its pods can land on no IO-saturated node.');
    else if (reason === 'FeedsSaturatedNode' && d.feeds.length === 0)
      pass.pausedNow.set(rolloutTarget(d), { d, reason: 'RolloutQueued' });
  }
}

/**
 * At most maxConcurrentRollouts progress; the newest extras wait. Returns the room left for the oldest waiting (below
 * zero when what we must leave alone already takes more).
 */
function queueBeyondLimit(pass: RolloutPass, limit: number): number {
  const { rollouts, now } = pass.input;
  // Only rollouts whose new pods could land on a saturated node count; the rest roll out as they please.
  const progressing = rollouts
    .filter(
      (d) =>
        d.reaches.length > 0 &&
        d.rollingOut &&
        !d.stalled &&
        !d.paused &&
        !pass.pausedNow.has(rolloutTarget(d)),
    )
    .sort(byStart);
  let room = limit - progressing.length;
  for (const d of progressing.slice(limit).reverse()) {
    if (!isFreeToPause(d, now)) continue; // one we must leave alone still counts, but is not paused
    pause(
      pass,
      d,
      'RolloutQueued',
      `Queued: at most ${limit} rollout(s) at once while nodes are under IO pressure.`,
    );
    room++;
  }
  return room;
}

/** The oldest waiting go first, as far as the room allows. */
function advanceQueue(pass: RolloutPass, limit: number, room: number): void {
  const waiting = [...pass.pausedNow.values()]
    .filter(({ d, reason }) => reason === 'RolloutQueued' && pass.ours.has(rolloutTarget(d)))
    .map(({ d }) => d)
    .sort(byStart);
  for (const d of waiting.slice(0, Math.max(0, room)))
    resume(pass, d, 'QueueAdvanced', `Resumed: its turn (at most ${limit} rollout(s) at once).`);
}

function listed(pausedNow: ReadonlyMap<string, Paused>): RolloutDecision['pausedAfter'] {
  return [...pausedNow.values()]
    .sort((a, b) => byStart(a.d, b.d))
    .map(({ d, reason }) => ({ target: rolloutTarget(d), reason, feeds: d.feeds }));
}
