import { NODE_CONDITION_REASONS } from '../../api/v1alpha1/index.js';
import type { Logger } from '../../observability/log.js';
import { describeError } from '../../ports/errors.js';
import type { ControllerHooks as RuntimeHooks } from '../../runtime/controller.js';
import type { OperatorMetrics } from '../../observability/metrics.js';
import type { DetectionStatus } from '../../status/health-status.js';
import type { ControllerHooks } from './wiring.js';

/** What the controllers tell, as the operator's metrics; it owns the stuck-pod series it has set, by node. */
export class MetricsHooks {
  private readonly stuckSeries = new Map<string, Set<string>>();

  constructor(private readonly metrics: OperatorMetrics) {}

  hooks(): ControllerHooks {
    const { metrics } = this;
    return {
      onPolicyStatus: (policy, status) => {
        metrics.gatedPods.set({ policy }, status.gatedPods ?? 0);
        for (const reason of ['FeedsSaturatedNode', 'RolloutQueued'] as const)
          metrics.throttledRollouts.set(
            { policy, reason },
            (status.throttledRollouts ?? []).filter((r) => r.reason === reason).length,
          );
      },
      onGateReleased: (waitSeconds) => {
        metrics.gateWaitSeconds.observe(waitSeconds);
      },
      onAction: (action, result, dryRun) => {
        metrics.actions.inc({ action, result, dry_run: String(dryRun) });
      },
      onBlocked: (guard) => {
        metrics.actionsBlocked.inc({ guard });
      },
      onIoLimit: (policy, action) => {
        metrics.ioLimits.inc({ policy, action });
      },
      onIgnoredEvent: (reason) => {
        metrics.ignoredEvents.inc({ reason });
      },
      onPass: ({ full, observed, deferred }) => {
        const pass = full ? 'full' : 'incremental';
        metrics.passes.inc({ pass });
        metrics.nodesObserved.inc({ pass }, observed);
        metrics.healthReportsWaiting.set(deferred ?? 0);
      },
      onReport: (waitedMs, urgent) => {
        const urgency = urgent ? 'urgent' : 'routine';
        metrics.healthReports.inc({ urgency });
        metrics.healthReportWait.observe({ urgency }, waitedMs / 1000);
      },
      onFencedReport: (applied) => {
        metrics.fencedHealthReports.inc({ outcome: applied ? 'landed' : 'refused' }); // the label's values are the metric's API
      },
      onNodeCondition: (policy, status, reason) => {
        metrics.nodeConditionTransitions.inc({ policy, status, reason });
        if (reason === NODE_CONDITION_REASONS.remediationExhausted) metrics.escalations.inc({ policy });
      },
      onPolicyGone: (policy) => {
        this.forgetPolicy(policy);
      },
      onNodeStatus: (_policy, node, status) => {
        this.recordStuck(node, status);
      },
    };
  }

  /** A deleted node's stuck-pod series would otherwise stay on /metrics (and in alerts) until a restart. */
  forgetNode(node: string): void {
    for (const cause of this.stuckSeries.get(node) ?? []) this.metrics.stuckPods.remove({ node, cause });
    this.stuckSeries.delete(node);
  }

  /** A deleted policy's gauges would otherwise show its last figures until a restart; its counters stay, as counters do. */
  forgetPolicy(policy: string): void {
    this.metrics.gatedPods.remove({ policy });
    for (const reason of ['FeedsSaturatedNode', 'RolloutQueued'] as const)
      this.metrics.throttledRollouts.remove({ policy, reason });
  }

  private recordStuck(node: string, status: DetectionStatus): void {
    const { stuckPods } = this.metrics;
    const previous = this.stuckSeries.get(node) ?? new Set<string>();
    const current = new Set<string>(status.causes.map((c) => c.cause));
    for (const cause of previous) if (!current.has(cause)) stuckPods.remove({ node, cause });
    for (const { cause, count } of status.causes) stuckPods.set({ node, cause }, count);
    this.stuckSeries.set(node, current);
  }
}

/** What each controller's failure is logged as. */
const FAILED = {
  policy: 'Failed to reconcile SandboxPolicy',
  apply: 'Failed to apply a decision of a SandboxPolicy',
  sweep: 'Failed to sweep for orphans',
  leases: 'Failed to keep the node leases',
};

/**
 * A controller's reconciles, as metrics and logs: the reconcile metrics count policy passes (as they did before the
 * sweep and the apply had queues of their own), and the failures of a policy's passes and of its applies (a failed
 * write used to fail the pass); every failure is logged, with its retry.
 */
export function reconcileHooks(
  { metrics, logger }: { metrics: OperatorMetrics; logger: Logger },
  what: keyof typeof FAILED,
): RuntimeHooks<string> {
  const policy = what === 'policy';
  return {
    onSuccess: (_key, ms) => {
      if (!policy) return;
      metrics.reconciles.inc({ result: 'success' });
      metrics.reconcileSeconds.observe(ms / 1000);
    },
    onError: (key, err, retryInMs) => {
      if (policy || what === 'apply')
        metrics.reconciles.inc({ result: retryInMs === undefined ? 'terminal' : 'error' });
      logger.warn(FAILED[what], {
        ...(policy || what === 'apply' ? { policy: key } : {}),
        error: describeError(err),
        ...(retryInMs !== undefined ? { retryInMs: Math.round(retryInMs) } : {}),
      });
    },
  };
}
