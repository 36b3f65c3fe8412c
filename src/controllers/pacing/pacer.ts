import type { Actuator } from '../../actuation/actuator.js';
import {
  MAX_POD_STARTS_PER_MINUTE,
  type SandboxPolicySpec,
  type SandboxPolicyStatus,
} from '../../api/v1alpha1/index.js';
import type { GatedPodView } from '../../detection/index.js';
import { BoundedMap } from '../../runtime/bounded-map.js';
import type { Clock } from '../../runtime/clock.js';
import type { Logger } from '../../observability/log.js';
import {
  decideGateReleases,
  type PacingPolicy,
  type ReleaseDecision,
  type ReleaseReason,
} from '../../policy/pacing.js';
import { RATE_WINDOW_MS, RateBudget } from '../../policy/rate-window.js';
import type { ClusterCache } from '../../ports/cluster.js';
import type { EventRecorder } from '../../ports/writes.js';
import type { Expectations } from '../../runtime/expectations.js';
import type { Failures } from '../failures.js';
import { isFrozenPolicy } from '../node-assignment.js';

/** How long a pass may take to lift its share of gates: what a reservation is stamped ahead by. */
const LIFT_ALLOWANCE_MS = 10_000;

const RELEASED = 'released';

/** What a pass decided about its gated pods. */
export interface PacingPlan {
  policy: string;
  /** What the webhook reads for the policy; undefined when it paces nothing. */
  publication: PacingPolicy | undefined;
  gated: GatedPodView[];
  decision: ReleaseDecision<GatedPodView> | undefined;
  /** Releases that spend the rate (in turn): reserved in status before any is lifted. */
  paced: number;
  /** The policy's gate release log as it stands before the pass. */
  kept: string[];
  maxPodStartsPerMinute: number;
  maxGateSeconds: number;
}

export interface PacingOutcome {
  gated: number;
  recentReleases: string[];
  nextAt?: Date;
}

export interface PacerHooks {
  /** A gate lifted after the pod waited this long. */
  onGateReleased?(waitSeconds: number, reason: ReleaseReason): void;
}

/**
 * Pod-start pacing: publishes whether the webhook gates for a policy now, and lifts the gates of the pods it gated at
 * the set rate (oldest first), all at once when the pressure is gone, and anyway after maxGateSeconds. It also lifts
 * the gates a gone or invalid policy left: a gate never strands a pod. Lifting a gate only gives back, so it is done
 * for real even in a dry run (the actuator it is given is the real one). It owns the gates lifted that the cache may
 * still show (in the expectations) and which gated pods were told why they wait (a PodStartHeld Event).
 */
export class Pacer {
  /** The gate release log in the policy's status: reserved before lifting, written again as lifted. */
  private readonly budget = new RateBudget(MAX_POD_STARTS_PER_MINUTE);
  private readonly announced = new Set<string>();
  /** Per policy, the namespace its last paced release went to: the turn goes on from there. */
  private readonly lastNamespace = new BoundedMap<string, string>(1_000);
  /** What the pacing webhook reads, by policy: only a valid policy that paces has one. */
  private readonly published = new Map<string, PacingPolicy>();

  constructor(
    private readonly deps: {
      cache: ClusterCache;
      expectations: Expectations;
      recorder: EventRecorder;
      lifter: Actuator;
      logger: Logger;
      clock: Clock;
      hooks?: PacerHooks;
    },
  ) {}

  plan(input: {
    policy: string;
    spec: SandboxPolicySpec;
    status: SandboxPolicyStatus | undefined;
    dryRun: boolean;
    /** The policy's IoPressureHigh nodes, fenced as this pass leaves them (none: no pressure). */
    saturated: PacingPolicy['saturated'];
    now: Date;
  }): PacingPlan {
    const { policy, spec, now } = input;
    const pace = spec.remediation.throttleRollouts?.pacePodStarts;
    const pressure = pace !== undefined && input.saturated.length > 0;
    const publication: PacingPolicy | undefined = pace && {
      name: policy,
      namespaceSelector: pace.namespaceSelector,
      gating: pressure && !input.dryRun && !spec.safety.paused,
      dryRun: input.dryRun || spec.safety.paused,
      saturated: input.saturated,
    };
    const kept = this.budget.kept(input.status?.recentGateReleases, now);
    // Ours only: those of a policy that is gone or invalid are lifted by the orphan sweep.
    const gated = this.gated().filter((p) => p.policy === policy);
    const limits = {
      maxPodStartsPerMinute: pace?.maxPodStartsPerMinute ?? 1,
      maxGateSeconds: pace?.maxGateSeconds ?? 0,
    };
    const decision =
      gated.length === 0
        ? undefined
        : decideGateReleases({
            gated,
            pressure: pressure && !input.dryRun,
            ...limits,
            recentReleases: kept.map((t) => new Date(t)),
            now,
            lastNamespace: this.lastNamespace.get(policy),
          });
    const paced = decision?.releases.filter((r) => r.reason === 'Paced').length ?? 0;
    return { policy, publication, gated, decision, paced, kept, ...limits };
  }

  /**
   * The gate release log to write before lifting: the rate is spent in status first, as evictions are. Each is
   * stamped LIFT_ALLOWANCE_MS ahead, by when the lifts will have been done: a process that dies before it writes
   * when they really were (act's log) leaves its successor a window that ends no earlier than theirs would.
   */
  reservation(plan: PacingPlan, now: Date): string[] | undefined {
    // From when it is written, not from the pass: a decision may wait for its apply.
    const by = new Date(this.deps.clock.now() + LIFT_ALLOWANCE_MS);
    return this.budget.reserve(plan.kept, now, plan.paced, by);
  }

  /** What the pacing webhook reads: each pacing policy and whether it gates now. */
  publications(): PacingPolicy[] {
    return [...this.published.values()];
  }

  /** The policy is invalid or gone: it paces nothing. */
  withdraw(policy: string): void {
    this.published.delete(policy);
  }

  /**
   * Publishes the policy's pacing, tells newly gated pods why they wait, and lifts the gates decided; paced ones only
   * when their reservation was written (`reserved`); what spends no budget (pressure gone, waited too long) anyway.
   */
  async act(plan: PacingPlan, reserved: boolean, failures: Failures, now: Date): Promise<PacingOutcome> {
    if (plan.publication) this.published.set(plan.policy, plan.publication);
    else this.published.delete(plan.policy);
    await this.announce(plan);
    if (!plan.decision) return { gated: 0, recentReleases: plan.kept };
    let released = 0;
    // When each paced gate was lifted (after the apiserver took it): the rate's window runs from then, so that no
    // 60 s holds more lifts than the rate, however long a pass takes to lift its share.
    const lifted: Date[] = [];
    for (const { pod, reason } of plan.decision.releases) {
      if (reason === 'Paced' && !reserved) continue;
      if (!(await this.lift(pod, failures))) continue;
      if (reason === 'Paced') {
        lifted.push(new Date(this.deps.clock.now()));
        this.lastNamespace.set(plan.policy, pod.namespace);
      }
      released++;
      const waited = (now.getTime() - pod.gatedAt.getTime()) / 1000;
      this.deps.hooks?.onGateReleased?.(waited, reason);
      this.deps.logger.info('Released Pod from the pacing gate', {
        policy: plan.policy,
        pod: `${pod.namespace}/${pod.name}`,
        reason,
        waitedSeconds: Math.round(waited),
      });
      await this.deps.recorder.record({
        target: { kind: 'Pod', namespace: pod.namespace, name: pod.name, uid: pod.uid },
        type: reason === 'WaitedTooLong' ? 'Warning' : 'Normal',
        reason: 'PodStartReleased',
        message: releaseMessage(
          reason,
          Math.round(waited),
          plan.publication ? plan.maxPodStartsPerMinute : 0,
        ),
      });
    }
    // A reserved gate not lifted (the pod gone or changed) still spends the rate, as reserved, from now.
    const unlifted = reserved ? Math.max(0, plan.paced - lifted.length) : 0;
    return {
      gated: plan.gated.length - released,
      recentReleases: this.budget.spent(plan.kept, now, [
        ...Array.from({ length: unlifted }, () => now),
        ...lifted,
      ]),
      ...(plan.decision.nextAt ? { nextAt: plan.decision.nextAt } : {}),
    };
  }

  /** Lifts the gates of policies that are gone or invalid; returns whether every one was lifted. */
  async releaseOrphans(failures: Failures): Promise<boolean> {
    const { cache, recorder } = this.deps;
    let complete = true;
    for (const pod of this.gated()) {
      if (pod.policy && cache.policy(pod.policy) && !isFrozenPolicy(cache, pod.policy)) continue;
      if (!(await this.lift(pod, failures))) {
        complete = false;
        continue;
      }
      await recorder.record({
        target: { kind: 'Pod', namespace: pod.namespace, name: pod.name, uid: pod.uid },
        type: 'Normal',
        reason: 'PodStartReleased',
        message: `Released: policy ${pod.policy ?? '(none)'}, which gated it, is gone or invalid.`,
      });
    }
    return complete;
  }

  /** Gated pods, less those whose gate this process lifted and the cache still shows. */
  private gated(): GatedPodView[] {
    const all = [...this.deps.cache.gatedPods()];
    const present = new Set(all.map((p) => p.uid));
    for (const uid of this.announced) if (!present.has(uid)) this.announced.delete(uid);
    const lifted = this.deps.expectations.pendingRemovals(RELEASED, (uid) => !present.has(uid));
    return all.filter((p) => !lifted.has(p.uid));
  }

  /** A PodStartHeld Event, once, for each pod newly held at the policy's gate. */
  private async announce(plan: PacingPlan): Promise<void> {
    for (const pod of plan.gated) {
      if (this.announced.has(pod.uid)) continue;
      this.announced.add(pod.uid);
      await this.deps.recorder.record({
        target: { kind: 'Pod', namespace: pod.namespace, name: pod.name, uid: pod.uid },
        type: 'Normal',
        reason: 'PodStartHeld',
        message: `Held at the pacing gate: nodes of policy ${plan.policy} are under IO pressure; released at most ${plan.publication ? plan.maxPodStartsPerMinute : 0} a minute, and within ${plan.publication ? plan.maxGateSeconds : 0}s.`,
      });
    }
  }

  /** Lifts our gate; true when it was lifted (false: the pod is gone or changed meanwhile, looked at again later). */
  private async lift(pod: GatedPodView, failures: Failures): Promise<boolean> {
    try {
      const lifted = await this.deps.lifter.releaseGate({
        namespace: pod.namespace,
        name: pod.name,
        uid: pod.uid,
        gates: pod.gates,
      });
      if (lifted) {
        this.deps.expectations.expectRemoval(RELEASED, pod.uid, RATE_WINDOW_MS);
        this.announced.delete(pod.uid);
      }
      return lifted;
    } catch (err) {
      failures.add(`release of pod/${pod.namespace}/${pod.name}`, err);
      return false;
    }
  }
}

function releaseMessage(reason: ReleaseReason, waited: number, perMinute: number): string {
  if (reason === 'WaitedTooLong')
    return `Released after ${waited}s at the pacing gate (maxGateSeconds): a gate never strands a pod.`;
  if (reason === 'PressureGone') return `Released: the IO pressure is gone (held ${waited}s).`;
  return `Released in turn (at most ${perMinute} a minute; held ${waited}s).`;
}
