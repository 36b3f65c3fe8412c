import type { Actuator } from '../../actuation/actuator.js';
import {
  matchesSelector,
  type NodeStamps,
  type RolloutStamps,
  type SandboxPolicySpec,
  type SandboxPolicyStatus,
} from '../../api/v1alpha1/index.js';
import { isIoCause, workloadKey, type PodView, type WorkloadView } from '../../detection/index.js';
import { decideRollouts, rolloutTarget, type RolloutDecision } from '../../policy/rollouts.js';
import type { ClusterCache, PolicyObject } from '../../ports/cluster.js';
import type { EventRecorder } from '../../ports/writes.js';
import type { Expectations } from '../../runtime/expectations.js';
import { DRY_RUN_PREFIX, ROLLOUT_WORDS } from '../../status/remediation-status.js';
import type { ActionLog } from '../action-log.js';
import type { Failures } from '../failures.js';
import type { NodeObservation } from '../policy-memory.js';
import { observeRollouts, saturatedPlacements, withStuckUpdates } from './observe.js';
import { workloadChange } from '../../actuation/workload-change.js';

export type ThrottledRollout = NonNullable<SandboxPolicyStatus['throttledRollouts']>[number];

/** What a pass decided about rollouts, with what it needs to carry it out. */
export interface RolloutPlan {
  decision: RolloutDecision;
  byTarget: ReadonlyMap<string, WorkloadView>;
  /** The version each rollout was decided on. */
  versions: ReadonlyMap<string, string | undefined>;
  /** A dry run's holds, by workloadKey, kept in the policy's status since nothing was written to the workloads. */
  simulated: ReadonlyMap<string, RolloutStamps>;
  dryRun: boolean;
}

export interface RolloutOutcome {
  /** Per node, the rollouts held because their pods were stuck there (RolloutsThrottled). */
  throttling: Map<string, string[]>;
  /** What the policy's status lists as throttled. */
  listed: ThrottledRollout[];
}

export interface RolloutPlanInput {
  policy: PolicyObject;
  spec: SandboxPolicySpec;
  dryRun: boolean;
  now: Date;
  observations: readonly NodeObservation[];
  /** Nodes whose IO pressure is proven (IoPressureHigh) or that are under the policy's remediation. */
  saturated: ReadonlySet<string>;
  /** Our stamps on each node once this pass's decision is done: the fence a rollout's new pods meet there. */
  stampsAfter: (node: string) => NodeStamps | undefined;
  cacheReady: boolean;
}

/**
 * Holds and lets go of rollouts of every kind so that they do not keep a saturated disk saturated (decideRollouts
 * decides, rollout-changes says how each kind is held), and says so: an Event on each, the throttled list for the
 * policy's status, and per node the rollouts held because their pods were stuck there. It owns when each was first
 * seen rolling out.
 */
export class RolloutThrottler {
  /** When each rollout was first seen rolling out at its generation, for the queue's order. */
  private readonly rolloutSeen = new Map<string, Date>();

  constructor(
    private readonly deps: {
      cache: ClusterCache;
      expectations: Expectations;
      recorder: EventRecorder;
      actions: ActionLog;
      /** Where the operator runs: its own rollouts are never throttled. */
      operatorNamespace?: string | undefined;
    },
  ) {}

  plan(input: RolloutPlanInput): RolloutPlan | undefined {
    const { cache, expectations } = this.deps;
    const { policy, spec, dryRun, now } = input;
    const throttle = spec.remediation.throttleRollouts;
    const simulated = new Map<string, RolloutStamps>();
    for (const entry of policy.status?.throttledRollouts ?? [])
      if (entry.dryRun)
        simulated.set(`${entry.kind ?? 'Deployment'}/${entry.name ?? entry.deployment ?? ''}`, {
          policy: policy.name,
          since: new Date(entry.since),
          reason: entry.reason,
          startedAt: new Date(entry.since),
        });
    // Ours are always considered (to be released), others only in scope and not held by another policy.
    const candidates = [...cache.workloads()].filter((w) =>
      w.stamps ? w.stamps.policy === policy.name : throttle !== undefined && this.inScope(w, spec),
    );
    if (candidates.length === 0 && simulated.size === 0) return undefined;
    const version = (w: WorkloadView) => cache.observedVersion(w.kind, `${w.namespace}/${w.name}`);
    // Changes are made on the versions decided on: a workload changed meanwhile answers 409, not our hold.
    const versions = new Map(candidates.map((w) => [rolloutTarget(w), version(w)]));
    const unsettled = candidates.some((w) => !expectations.isSettled(workloadKey(w), version(w)));
    const stuckOnSaturated = new Map<string, PodView[]>();
    for (const o of input.observations)
      if (input.saturated.has(o.node.name))
        stuckOnSaturated.set(
          o.node.name,
          o.findings.stuckPods.filter((p) => isIoCause(p.cause)).map((p) => p.pod),
        );
    const runningOn = new Map(input.observations.map((o) => [o.node.name, o.runningRollouts]));
    const rollouts = observeRollouts({
      workloads: candidates,
      stuckOnSaturated,
      saturated: saturatedPlacements(input.observations, input.saturated, input.stampsAfter),
      runningOn: (node) => runningOn.get(node),
      simulated,
      dryRun,
      startedAt: (d) => this.rolloutStart(d, now),
      now,
    });
    const decision = decideRollouts({
      policy: policy.name,
      throttle,
      rollouts,
      pressure: input.saturated.size > 0,
      now,
      cacheReady: input.cacheReady && !unsettled,
      paused: spec.safety.paused,
      cooldownSeconds: spec.safety.cooldownSeconds,
    });
    const stuck = [...stuckOnSaturated.values()].flat();
    return {
      decision,
      byTarget: new Map(candidates.map((w) => [rolloutTarget(w), withStuckUpdates(w, stuck)])),
      versions,
      simulated,
      dryRun,
    };
  }

  async act(
    policy: string,
    plan: RolloutPlan | undefined,
    actuator: Actuator,
    failures: Failures,
    now: Date,
  ): Promise<RolloutOutcome> {
    if (!plan) return { throttling: new Map(), listed: [] };
    const { expectations, recorder } = this.deps;
    const failed = new Set<string>();
    let pauseFailed = false;
    for (const action of plan.decision.actions) {
      const d = plan.byTarget.get(action.target);
      if (!d) continue;
      // A queued rollout goes on into room that this pass's pauses were to make (decideRollouts lists pauses first):
      // with a pause refused (a 409 from the deployment controller's own write, say), it waits for the retry, or the
      // limit would be exceeded, and undone by a pause a second later.
      if (action.kind === 'ResumeRollout' && action.reason === 'QueueAdvanced' && pauseFailed) {
        failed.add(action.target);
        continue;
      }
      try {
        const change = workloadChange(d, action, plan.versions.get(action.target));
        expectations.expect(workloadKey(d), await actuator.patchWorkload(change));
      } catch (err) {
        failed.add(action.target);
        if (action.kind === 'PauseRollout') pauseFailed = true;
        failures.add(`patch of ${action.target}`, err);
        continue;
      }
      this.deps.actions.recordRollout(policy, action, actuator.dryRun);
      const simulated = actuator.dryRun && action.kind !== 'ReleaseRollout';
      await recorder.record({
        target: { kind: d.kind, namespace: d.namespace, name: d.name, uid: d.uid },
        type: 'Normal',
        reason: ROLLOUT_WORDS[action.kind].event,
        message: `${simulated ? DRY_RUN_PREFIX : ''}${action.message}`,
      });
    }
    return outcome(plan, failed, now);
  }

  private inScope(d: WorkloadView, spec: SandboxPolicySpec): boolean {
    // The operator's own namespace, not a label: any workload can carry app.kubernetes.io/name=sandbox-remediator.
    if (d.namespace === 'kube-system' || d.namespace === this.deps.operatorNamespace) return false;
    const selector = spec.remediation.throttleRollouts?.namespaceSelector;
    if (!selector) return true;
    const labels = this.deps.cache.namespaceLabels(d.namespace);
    return labels !== undefined && matchesSelector(selector, labels);
  }

  /** When a rollout started: first seen rolling out at this generation (our stamp keeps it). */
  private rolloutStart(d: WorkloadView, now: Date): Date {
    if (d.stamps) return d.stamps.startedAt;
    const key = `${d.uid}/${d.generation}`;
    let seen = this.rolloutSeen.get(key);
    if (!seen) {
      seen = d.rollingOut ? now : d.createdAt;
      this.rolloutSeen.set(key, seen);
      // Bounded: entries of Deployments long done are of no use.
      if (this.rolloutSeen.size > 10_000) this.rolloutSeen.delete(this.rolloutSeen.keys().next().value ?? '');
    }
    return seen;
  }
}

/** What stands after the pass: a failed pause is not claimed, a failed or deferred resume is still held. */
function outcome(plan: RolloutPlan, failed: ReadonlySet<string>, now: Date): RolloutOutcome {
  const stillPaused = plan.decision.pausedAfter.filter((p) => !failed.has(p.target));
  for (const action of plan.decision.actions)
    if (action.kind === 'ResumeRollout' && failed.has(action.target)) {
      const d = plan.byTarget.get(action.target);
      if (d?.stamps) stillPaused.push({ target: action.target, reason: d.stamps.reason, feeds: [] });
    }
  const throttling = new Map<string, string[]>();
  for (const p of stillPaused)
    if (p.reason === 'FeedsSaturatedNode')
      for (const node of p.feeds) throttling.set(node, [...(throttling.get(node) ?? []), p.target]);
  // Every target decided on is one of the plan's workloads.
  const listed = stillPaused.flatMap((p): ThrottledRollout[] => {
    const d = plan.byTarget.get(p.target);
    if (!d) return [];
    const since = d.stamps?.since ?? plan.simulated.get(workloadKey(d))?.since ?? now;
    return [
      {
        kind: d.kind,
        name: `${d.namespace}/${d.name}`,
        reason: p.reason,
        ...(p.feeds.length > 0 ? { feeds: p.feeds.slice(0, 20) } : {}),
        since: since.toISOString(),
        dryRun: plan.dryRun && d.stamps === undefined,
      },
    ];
  });
  return { throttling, listed };
}
