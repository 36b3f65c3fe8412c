import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** The operator's Prometheus metrics, in their own registry (plus Node process metrics). */
export class OperatorMetrics {
  readonly registry = new Registry();
  readonly reconciles = new Counter({
    name: 'sandbox_remediator_reconcile_total',
    help: "Policy reconciles by result (success, error, terminal): each policy pass, and each failed apply of a policy's decision (a failed write).",
    labelNames: ['result'] as const,
    registers: [this.registry],
  });
  readonly reconcileSeconds = new Histogram({
    name: 'sandbox_remediator_reconcile_duration_seconds',
    help: 'Time one policy reconcile took.',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
    registers: [this.registry],
  });
  readonly informerRestarts = new Counter({
    name: 'sandbox_remediator_informer_restarts_total',
    help: 'Informer restarts after a watch error or expiry.',
    labelNames: ['informer', 'reason'] as const,
    registers: [this.registry],
  });
  readonly cachedObjects = new Gauge({
    name: 'sandbox_remediator_cached_objects',
    help: 'Objects held in each informer cache.',
    labelNames: ['informer'] as const,
    registers: [this.registry],
  });
  readonly queueDepth = new Gauge({
    name: 'sandbox_remediator_workqueue_depth',
    help: 'Keys waiting in the work queue.',
    registers: [this.registry],
  });
  readonly stuckPods = new Gauge({
    name: 'sandbox_remediator_stuck_pods',
    help: 'Pods stuck creating their sandbox, by node and cause.',
    labelNames: ['node', 'cause'] as const,
    registers: [this.registry],
  });
  readonly degradedNodes = new Gauge({
    name: 'sandbox_remediator_degraded_nodes',
    help: 'Nodes whose SandboxCreationDegraded condition is True, by policy.',
    labelNames: ['policy'] as const,
    registers: [this.registry],
  });

  readonly actions = new Counter({
    name: 'sandbox_remediator_actions_total',
    help: 'Remediation actions carried out, by action (Cordon, Taint, Evict, Migrate, Uncordon, Untaint), result and whether it was a dry run.',
    labelNames: ['action', 'result', 'dry_run'] as const,
    registers: [this.registry],
  });
  readonly ioLimits = new Counter({
    name: 'sandbox_remediator_io_limits_total',
    help: "IO limits (limitIo) by action: Set, Step, Lift, Exhausted (at the floor, handed on), LiftedByOthers (a person removed one), NotApplied (the node's agent could not apply one).",
    labelNames: ['policy', 'action'] as const,
    registers: [this.registry],
  });
  readonly ignoredEvents = new Counter({
    name: 'sandbox_remediator_failure_events_ignored_total',
    help: 'Failure Events about stuck pods not counted, by reason: NotKubelet (another component wrote it) or OtherNode (the kubelet of another node, or none).',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly actionsBlocked = new Counter({
    name: 'sandbox_remediator_actions_blocked_total',
    help: 'Actions newly held back, by the guard that held them (StormLimit, EvictionRate, DisruptionBudget, ...).',
    labelNames: ['guard'] as const,
    registers: [this.registry],
  });

  readonly nodeConditionTransitions = new Counter({
    name: 'sandbox_remediator_node_condition_transitions_total',
    help: 'Changes of the SandboxCreationDegraded Node condition written by the operator, by status and reason.',
    labelNames: ['policy', 'status', 'reason'] as const,
    registers: [this.registry],
  });
  readonly escalations = new Counter({
    name: 'sandbox_remediator_escalations_total',
    help: 'Nodes given the reason RemediationExhausted: still IO-saturated escalation.afterSeconds after they were fenced and emptied.',
    labelNames: ['policy'] as const,
    registers: [this.registry],
  });

  readonly podsGated = new Counter({
    name: 'sandbox_remediator_pods_gated_total',
    help: 'New pods the pacing webhook gated (dry_run="true": would have gated).',
    labelNames: ['dry_run'] as const,
    registers: [this.registry],
  });
  readonly webhookRegistered = new Gauge({
    name: 'sandbox_remediator_webhook_registered',
    help: "1 while the acting replica's address and CA are in the pacing webhook's configuration; 0 when it is missing (pods are not gated).",
    registers: [this.registry],
  });
  readonly webhookArmedNamespaces = new Gauge({
    name: 'sandbox_remediator_webhook_armed_namespaces',
    help: 'Namespaces whose new pods the apiserver sends to the pacing webhook now (0: disarmed, no pod creation waits on the operator).',
    registers: [this.registry],
  });
  readonly webhookCertExpiry = new Gauge({
    name: 'sandbox_remediator_webhook_certificate_expiry_timestamp_seconds',
    help: 'When the certificate the pacing webhook serves expires (a generated one is renewed when a third of its lifetime is left).',
    registers: [this.registry],
  });
  readonly gateWaitSeconds = new Histogram({
    name: 'sandbox_remediator_gate_wait_seconds',
    help: 'How long pods waited at the pacing gate before it was lifted.',
    buckets: [1, 5, 15, 30, 60, 120, 300, 600, 1800],
    registers: [this.registry],
  });
  readonly blockedActions = new Gauge({
    name: 'sandbox_remediator_blocked_actions',
    help: 'Actions held back now (SandboxHealth status.blocked), by policy and guard: for as long as they are held.',
    labelNames: ['policy', 'guard'] as const,
    registers: [this.registry],
  });
  readonly stormDetected = new Gauge({
    name: 'sandbox_remediator_storm_detected',
    help: "Whether a policy's StormDetected condition is True (1): the storm limit holds all its remediation.",
    labelNames: ['policy'] as const,
    registers: [this.registry],
  });
  readonly gatedPods = new Gauge({
    name: 'sandbox_remediator_gated_pods',
    help: 'Pods held at the pacing gate, by policy.',
    labelNames: ['policy'] as const,
    registers: [this.registry],
  });
  readonly throttledRollouts = new Gauge({
    name: 'sandbox_remediator_throttled_rollouts',
    help: 'Rollouts the operator holds (every kind: Deployments, StatefulSets, DaemonSets, Argo Rollouts), by policy and reason (FeedsSaturatedNode, RolloutQueued: the queue).',
    labelNames: ['policy', 'reason'] as const,
    registers: [this.registry],
  });

  readonly leader = new Gauge({
    name: 'sandbox_remediator_leader',
    help: 'Whether this replica holds the leader Lease and acts (1) or stands by with warm caches (0).',
    registers: [this.registry],
  });
  readonly ready = new Gauge({
    name: 'sandbox_remediator_ready',
    help: 'Whether /readyz answers ready: caches synced and no informer disconnected too long.',
    registers: [this.registry],
  });
  readonly apiWrites = new Counter({
    name: 'sandbox_remediator_api_writes_total',
    help: 'Writes (any request but GET) this process sent to the apiserver, by resource (nodes, pods/eviction, sandboxhealths/status, ...) and result (the HTTP status, or error).',
    labelNames: ['resource', 'result'] as const,
    registers: [this.registry],
  });
  readonly apiHandshakes = new Counter({
    name: 'sandbox_remediator_api_tls_handshakes_total',
    help: 'TLS handshakes with the apiserver, one per new connection, by lane (requests, watches, lease) and whether the TLS session was resumed; near zero at rest, as connections are kept alive.',
    labelNames: ['lane', 'resumed'] as const,
    registers: [this.registry],
  });
  readonly apiRetries = new Counter({
    name: 'sandbox_remediator_api_retries_total',
    help: 'Replayable requests (GET, PUT) sent again on a fresh connection after a reused one was reset or, for the leader Lease, stalled; by lane and reason.',
    labelNames: ['lane', 'reason'] as const,
    registers: [this.registry],
  });

  readonly passes = new Counter({
    name: 'sandbox_remediator_reconcile_passes_total',
    help: 'Policy passes, by kind: full (every owned node: start-up, policy edit, ownership change, resync) or incremental (only the nodes that changed or came due).',
    labelNames: ['pass'] as const,
    registers: [this.registry],
  });
  readonly nodesObserved = new Counter({
    name: 'sandbox_remediator_reconcile_nodes_observed_total',
    help: 'Nodes a pass looked at again, by kind of pass: the work a change costs (one pod change costs its node only).',
    labelNames: ['pass'] as const,
    registers: [this.registry],
  });
  readonly healthReports = new Counter({
    name: 'sandbox_remediator_health_reports_total',
    help: 'SandboxHealth status writes, by urgency (urgent: news an SRE or the next decision waits for; routine: counts).',
    labelNames: ['urgency'] as const,
    registers: [this.registry],
  });
  readonly healthReportsWaiting = new Gauge({
    name: 'sandbox_remediator_health_reports_waiting',
    help: 'SandboxHealth reports asked for and waiting for their turn (one write in flight per node, or two when the second is fenced on the first; a few in all).',
    registers: [this.registry],
  });
  readonly fencedHealthReports = new Counter({
    name: 'sandbox_remediator_health_reports_fenced_total',
    help: "SandboxHealth reports sent beside their node's write in flight, fenced on its status.reportId, by outcome: landed (right after it) or refused (it arrived first; the node is looked at again once that write is back).",
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly healthReportWait = new Histogram({
    name: 'sandbox_remediator_health_report_wait_seconds',
    help: 'From a pass asking for a SandboxHealth report to its write answered, by urgency: what the pipeline adds to detection.',
    labelNames: ['urgency'] as const,
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });

  readonly eventsDropped = new Counter({
    name: 'sandbox_remediator_events_dropped_total',
    help: 'Events not recorded because more than 10,000 were waiting to be written (statuses hold the same transitions).',
    registers: [this.registry],
  });

  constructor(withProcessMetrics = true) {
    if (withProcessMetrics) collectDefaultMetrics({ register: this.registry });
  }
}
