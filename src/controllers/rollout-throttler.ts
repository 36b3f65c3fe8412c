import type { Actuator, DeploymentChange } from '../actuation/actuator.js';
import {
  matchesSelector,
  rolloutStampAnnotations,
  type RolloutStamps,
  type SandboxPolicySpec,
  type SandboxPolicyStatus,
} from '../api/v1alpha1/index.js';
import { isIoCause, type DeploymentView, type PodView } from '../detection/index.js';
import {
  decideRollouts,
  deploymentTarget,
  type RolloutAction,
  type RolloutDecision,
} from '../policy/rollouts.js';
import type { ClusterCache, PolicyObject } from '../ports/cluster.js';
import type { EventRecorder } from '../ports/writes.js';
import type { Expectations } from '../runtime/expectations.js';
import { DRY_RUN_PREFIX, ROLLOUT_WORDS } from '../status/remediation-status.js';
import type { ActionLog } from './action-log.js';
import type { Failures } from './failures.js';
import type { NodeObservation } from './observe-nodes.js';
import { observeRollouts } from './observe-rollouts.js';

export type ThrottledRollout = NonNullable<SandboxPolicyStatus['throttledRollouts']>[number];

/** What a pass decided about rollouts, with what it needs to carry it out. */
export interface RolloutPlan {
  decision: RolloutDecision;
  byTarget: ReadonlyMap<string, DeploymentView>;
  /** The version each Deployment was decided on. */
  versions: ReadonlyMap<string, string | undefined>;
  /** A dry run's pauses, kept in the policy's status since nothing was written to the Deployments. */
  simulated: ReadonlyMap<string, RolloutStamps>;
  dryRun: boolean;
}

export interface RolloutOutcome {
  /** Per node, the Deployments paused because their pods were stuck there (RolloutsThrottled). */
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
  cacheReady: boolean;
}

/** The change that carries out a rollout action (or, for the orphan sweep, resumes one we paused). */
export function deploymentChange(
  d: DeploymentView,
  action: Pick<RolloutAction, 'kind'> & { stamps?: RolloutStamps; handsOffUntil?: Date },
  version: string | undefined,
): DeploymentChange {
  const change: DeploymentChange = {
    namespace: d.namespace,
    name: d.name,
    annotations:
      action.kind === 'PauseRollout'
        ? rolloutStampAnnotations(action.stamps)
        : rolloutStampAnnotations(
            undefined,
            action.kind === 'ReleaseRollout' ? action.handsOffUntil : undefined,
          ),
  };
  if (version) change.resourceVersion = version;
  if (action.kind === 'PauseRollout') change.paused = true;
  if (action.kind === 'ResumeRollout' && d.paused) change.paused = false;
  return change;
}

/**
 * Pauses and resumes Deployments so that rollouts do not keep a saturated disk saturated (decideRollouts decides),
 * and says so: an Event on each Deployment, the throttled list for the policy's status, and per node the Deployments
 * paused because their pods were stuck there. It owns when each Deployment was first seen rolling out.
 */
export class RolloutThrottler {
  /** When each Deployment was first seen rolling out at its generation, for the queue's order. */
  private readonly rolloutSeen = new Map<string, Date>();

  constructor(
    private readonly deps: {
      cache: ClusterCache;
      expectations: Expectations;
      recorder: EventRecorder;
      actions: ActionLog;
      /** Where the operator runs: its own Deployments are never throttled. */
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
        simulated.set(entry.deployment, {
          policy: policy.name,
          since: new Date(entry.since),
          reason: entry.reason,
          startedAt: new Date(entry.since),
        });
    // Ours are always considered (to be resumed), others only in scope and not held by another policy.
    const candidates = [...cache.deployments()].filter((d) =>
      d.stamps ? d.stamps.policy === policy.name : throttle !== undefined && this.inScope(d, spec),
    );
    if (candidates.length === 0 && simulated.size === 0) return undefined;
    const key = (d: DeploymentView) => `${d.namespace}/${d.name}`;
    // Changes are made on the versions decided on: a Deployment changed meanwhile answers 409, not our pause.
    const versions = new Map(
      candidates.map((d) => [deploymentTarget(d), cache.observedVersion('Deployment', key(d))]),
    );
    const unsettled = candidates.some(
      (d) => !expectations.isSettled(`Deployment/${key(d)}`, cache.observedVersion('Deployment', key(d))),
    );
    const stuckOnSaturated = new Map<string, PodView[]>();
    for (const o of input.observations)
      if (input.saturated.has(o.node.name))
        stuckOnSaturated.set(
          o.node.name,
          o.findings.stuckPods.filter((p) => p.cause !== 'Unknown' && isIoCause(p.cause)).map((p) => p.pod),
        );
    const deployments = observeRollouts({
      deployments: candidates,
      stuckOnSaturated,
      simulated,
      dryRun,
      startedAt: (d) => this.rolloutStart(d, now),
    });
    const decision = decideRollouts({
      policy: policy.name,
      throttle,
      deployments,
      pressure: input.saturated.size > 0,
      now,
      cacheReady: input.cacheReady && !unsettled,
      paused: spec.safety.paused,
      cooldownSeconds: spec.safety.cooldownSeconds,
    });
    return {
      decision,
      byTarget: new Map(candidates.map((d) => [deploymentTarget(d), d])),
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
      const key = `${d.namespace}/${d.name}`;
      try {
        const change = deploymentChange(d, action, plan.versions.get(action.target));
        expectations.expect(`Deployment/${key}`, await actuator.patchDeployment(change));
      } catch (err) {
        failed.add(action.target);
        if (action.kind === 'PauseRollout') pauseFailed = true;
        failures.add(`patch of deployment/${key}`, err);
        continue;
      }
      this.deps.actions.recordRollout(policy, action, key, actuator.dryRun);
      const simulated = actuator.dryRun && action.kind !== 'ReleaseRollout';
      await recorder.record({
        target: { kind: 'Deployment', namespace: d.namespace, name: d.name, uid: d.uid },
        type: 'Normal',
        reason: ROLLOUT_WORDS[action.kind].event,
        message: `${simulated ? DRY_RUN_PREFIX : ''}${action.message}`,
      });
    }
    return outcome(plan, failed, now);
  }

  private inScope(d: DeploymentView, spec: SandboxPolicySpec): boolean {
    if (d.namespace === 'kube-system' || d.namespace === this.deps.operatorNamespace) return false;
    const selector = spec.remediation.throttleRollouts?.namespaceSelector;
    if (!selector) return true;
    const labels = this.deps.cache.namespaceLabels(d.namespace);
    return labels !== undefined && matchesSelector(selector, labels);
  }

  /** When a Deployment's current rollout started: first seen rolling out at this generation (our stamp keeps it). */
  private rolloutStart(d: DeploymentView, now: Date): Date {
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
  const listed = stillPaused.map((p): ThrottledRollout => {
    const d = plan.byTarget.get(p.target);
    const real = d?.stamps !== undefined;
    const name = p.target.slice('deployment/'.length);
    const since = d?.stamps?.since ?? plan.simulated.get(name)?.since ?? now;
    return {
      deployment: name,
      reason: p.reason,
      ...(p.feeds.length > 0 ? { feeds: p.feeds.slice(0, 20) } : {}),
      since: since.toISOString(),
      dryRun: plan.dryRun && !real,
    };
  });
  return { throttling, listed };
}
