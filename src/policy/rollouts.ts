// PURE: decides which Deployments to pause and resume so rollouts do not keep a saturated disk saturated. Every
// rule about rollouts is here; the actuator only patches spec.paused with our stamps.

import type { PauseReason, RolloutStamps } from '../api/v1alpha1/index.js';

export type { PauseReason, RolloutStamps };

export interface DeploymentFacts {
  namespace: string;
  name: string;
  /** spec.paused as it stands (in a dry run, as it would). */
  paused: boolean;
  /** The rollout is not complete: new replicas not all updated and available, or a spec not yet observed. */
  rollingOut: boolean;
  /** When its current rollout started (its newest ReplicaSet's creation), for ordering. */
  startedAt: Date;
  stamps?: RolloutStamps;
  /** The user resumed a Deployment we had paused: left alone until then. */
  handsOffUntil?: Date;
  /** Nodes the policy remediates where pods of this Deployment are stuck from an IO cause. */
  feeds: readonly string[];
  /** Paused by a real run, seen by a dry run: held exactly as it is (a dry run cannot resume it). */
  frozen?: boolean;
}

export interface RolloutInput {
  policy: string;
  throttle: { pauseDeployments: boolean; maxConcurrentRollouts: number } | undefined;
  /** Every Deployment in the policy's scope. */
  deployments: readonly DeploymentFacts[];
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
  /** Deployments paused by us once the actions are done, in queue order (oldest rollout first). */
  pausedAfter: { target: string; reason: PauseReason; feeds: readonly string[] }[];
}

export const deploymentTarget = (d: Pick<DeploymentFacts, 'namespace' | 'name'>) =>
  `deployment/${d.namespace}/${d.name}`;

const byStart = (a: DeploymentFacts, b: DeploymentFacts) =>
  (a.stamps?.startedAt ?? a.startedAt).getTime() - (b.stamps?.startedAt ?? b.startedAt).getTime() ||
  deploymentTarget(a).localeCompare(deploymentTarget(b));

/**
 * While the policy's nodes are under pressure: pause what feeds a remediated node, and let at most
 * maxConcurrentRollouts progress, queueing the rest in the order they started. When the pressure is gone,
 * resume everything we paused. A Deployment the user paused is never touched; one we paused that the user resumed
 * is let go and left alone for cooldownSeconds.
 */
export function decideRollouts(input: RolloutInput): RolloutDecision {
  const { now, throttle } = input;
  const actions: RolloutAction[] = [];
  const blocked: RolloutDecision['blocked'] = [];
  const held = !input.cacheReady
    ? { guard: 'CacheNotSynced' as const, message: 'the cache is not synced or a watch is broken' }
    : input.paused
      ? { guard: 'Paused' as const, message: 'spec.safety.paused is true' }
      : undefined;

  // Ours, as the cluster has them; the user's own pauses are not in any list here.
  const ours = new Map<string, DeploymentFacts>();
  const frozen = new Map<string, { d: DeploymentFacts; reason: PauseReason }>();
  for (const d of input.deployments) {
    if (!d.stamps) continue;
    if (d.frozen) {
      frozen.set(deploymentTarget(d), { d, reason: d.stamps.reason });
      continue;
    }
    if (!d.paused) {
      // Resumed by someone else: let go rather than fight them.
      actions.push({
        kind: 'ReleaseRollout',
        target: deploymentTarget(d),
        reason: 'ResumedByOthers',
        message: `Someone else resumed it; dropped our stamp and leave it alone for ${input.cooldownSeconds}s.`,
        handsOffUntil: new Date(now.getTime() + input.cooldownSeconds * 1000),
      });
      continue;
    }
    ours.set(deploymentTarget(d), d);
  }
  const pausedNow = new Map<string, { d: DeploymentFacts; reason: PauseReason }>([
    ...frozen,
    ...[...ours].map(([t, d]): [string, { d: DeploymentFacts; reason: PauseReason }] => [
      t,
      { d, reason: d.stamps?.reason ?? 'RolloutQueued' },
    ]),
  ]);
  const resume = (d: DeploymentFacts, reason: string, message: string) => {
    actions.push({ kind: 'ResumeRollout', target: deploymentTarget(d), reason, message });
    pausedNow.delete(deploymentTarget(d));
  };
  const pause = (d: DeploymentFacts, reason: PauseReason, message: string) => {
    const stamps: RolloutStamps = { policy: input.policy, since: now, reason, startedAt: d.startedAt };
    actions.push({ kind: 'PauseRollout', target: deploymentTarget(d), reason, message, stamps });
    pausedNow.set(deploymentTarget(d), { d, reason });
  };

  if (held) {
    // Nothing new, and nothing undone, while held; what stands is reported as it is.
    for (const d of ours.values()) blocked.push({ target: deploymentTarget(d), ...held });
    return {
      actions: actions.filter((a) => a.kind === 'ReleaseRollout'),
      blocked,
      pausedAfter: listed(pausedNow),
    };
  }
  if (!throttle || !input.pressure) {
    const why = !throttle
      ? 'throttleRollouts is no longer set'
      : 'no node of the policy is under IO pressure';
    for (const d of [...ours.values()].sort(byStart)) resume(d, 'PressureGone', `Resumed: ${why}.`);
    return { actions, blocked, pausedAfter: listed(pausedNow) };
  }

  const free = (d: DeploymentFacts) => !d.stamps && !d.paused && !(d.handsOffUntil && now < d.handsOffUntil);
  // What feeds the fire stops first.
  if (throttle.pauseDeployments) {
    for (const d of input.deployments
      .filter((x) => free(x) && x.rollingOut && x.feeds.length > 0)
      .sort(byStart))
      pause(
        d,
        'FeedsSaturatedNode',
        `Paused: its pods are stuck creating sandboxes on IO-saturated node(s) ${d.feeds.join(', ')}.`,
      );
  }
  // A paused feeder whose pods no longer feed a remediated node may go on, within the limit below.
  for (const { d, reason } of [...pausedNow.values()])
    if (reason === 'FeedsSaturatedNode' && d.feeds.length === 0 && ours.has(deploymentTarget(d)))
      pausedNow.set(deploymentTarget(d), { d, reason: 'RolloutQueued' });

  // At most maxConcurrentRollouts progress; the newest extras wait, the oldest waiting go first.
  const progressing = input.deployments
    .filter((d) => d.rollingOut && !d.paused && !pausedNow.has(deploymentTarget(d)))
    .sort(byStart);
  let room = throttle.maxConcurrentRollouts - progressing.length;
  for (const d of progressing.slice(throttle.maxConcurrentRollouts).reverse()) {
    if (!free(d)) continue; // a Deployment we must leave alone still counts, but is not paused
    pause(
      d,
      'RolloutQueued',
      `Queued: at most ${throttle.maxConcurrentRollouts} rollout(s) at once while nodes are under IO pressure.`,
    );
    room++;
  }
  const waiting = [...pausedNow.values()]
    .filter(({ d, reason }) => reason === 'RolloutQueued' && ours.has(deploymentTarget(d)))
    .map(({ d }) => d)
    .sort(byStart);
  for (const d of waiting) {
    if (room <= 0) break;
    resume(
      d,
      'QueueAdvanced',
      `Resumed: its turn (at most ${throttle.maxConcurrentRollouts} rollout(s) at once).`,
    );
    room--;
  }
  return { actions, blocked, pausedAfter: listed(pausedNow) };
}

function listed(
  pausedNow: ReadonlyMap<string, { d: DeploymentFacts; reason: PauseReason }>,
): RolloutDecision['pausedAfter'] {
  return [...pausedNow.values()]
    .sort((a, b) => byStart(a.d, b.d))
    .map(({ d, reason }) => ({ target: deploymentTarget(d), reason, feeds: d.feeds }));
}
