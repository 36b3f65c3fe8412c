// What the controllers tell, as the operator's metrics (read back from its prom-client registry): each hook's series,
// the stuck-pod series dropped with their cause or their node, and each controller's reconciles as metrics and logs.
import { expect } from 'chai';
import type { MetricValueWithName } from 'prom-client';
import type { SandboxPolicyStatus } from '../../../../src/api/v1alpha1/index.js';
import { MetricsHooks, reconcileHooks } from '../../../../src/controllers/manager/metrics-hooks.js';
import type { Logger } from '../../../../src/observability/log.js';
import { OperatorMetrics } from '../../../../src/observability/metrics.js';
import type { DetectionStatus } from '../../../../src/status/health-status.js';

type Labels = Record<string, string | number>;
interface Sample {
  name: string;
  labels: Labels;
  value: number;
}

/** Every sample of a metric as the registry serves it (a histogram's _bucket, _sum and _count among them). */
async function samples(metrics: OperatorMetrics, name: string): Promise<Sample[]> {
  const metric = metrics.registry.getSingleMetric(name);
  if (!metric) throw new Error(`no metric ${name} in the registry`);
  const { values } = await metric.get();
  return values.map((v: MetricValueWithName<string>) => ({
    name: v.metricName ?? name,
    labels: v.labels as Labels,
    value: v.value,
  }));
}

/** The value of the one sample named so with exactly these labels; undefined when there is none. */
async function valueOf(
  metrics: OperatorMetrics,
  name: string,
  labels: Labels = {},
  sample = name,
): Promise<number | undefined> {
  const matching = (await samples(metrics, name)).filter(
    (s) => s.name === sample && JSON.stringify(sorted(s.labels)) === JSON.stringify(sorted(labels)),
  );
  if (matching.length > 1) throw new Error(`${matching.length} samples of ${sample} match`);
  return matching[0]?.value;
}
const sorted = (labels: Labels) =>
  Object.fromEntries(Object.entries(labels).sort(([a], [b]) => a.localeCompare(b)));

const P = 'sandbox_remediator_';

function aWorld() {
  const metrics = new OperatorMetrics(false);
  const owner = new MetricsHooks(metrics);
  return { metrics, owner, hooks: owner.hooks() };
}

const detection = (causes: DetectionStatus['causes']): DetectionStatus => ({
  policy: 'p',
  state: 'Degraded',
  stuckPodCount: causes.reduce((n, c) => n + c.count, 0),
  stuckPods: [],
  causes,
  ioEvidence: 'IoSuspected',
  conditions: [],
});

/** n1 with 3 pods stuck on NameReserved and 1 on Network. */
const stuckOnN1 = (hooks: ReturnType<MetricsHooks['hooks']>) => {
  hooks.onNodeStatus?.(
    'p',
    'n1',
    detection([
      { cause: 'NameReserved', count: 3 },
      { cause: 'Network', count: 1 },
    ]),
  );
};

describe('MetricsHooks', () => {
  it("sets a policy's gated pods and its held rollouts by reason, zero for a reason none is held for", async () => {
    const { metrics, hooks } = aWorld();
    const held = (reason: 'FeedsSaturatedNode' | 'RolloutQueued', name: string) => ({
      kind: 'Deployment' as const,
      name,
      reason,
      since: '2026-11-30T10:00:00Z',
      dryRun: false,
    });
    const status: SandboxPolicyStatus = {
      gatedPods: 4,
      throttledRollouts: [held('FeedsSaturatedNode', 'shop/a'), held('FeedsSaturatedNode', 'shop/b')],
    };
    hooks.onPolicyStatus?.('p', status);
    expect(await valueOf(metrics, `${P}gated_pods`, { policy: 'p' })).to.equal(4);
    expect(
      await valueOf(metrics, `${P}throttled_rollouts`, { policy: 'p', reason: 'FeedsSaturatedNode' }),
    ).to.equal(2);
    expect(
      await valueOf(metrics, `${P}throttled_rollouts`, { policy: 'p', reason: 'RolloutQueued' }),
    ).to.equal(0);
  });

  it("drops a deleted policy's gauges, and only its own", async () => {
    const { metrics, owner, hooks } = aWorld();
    hooks.onPolicyStatus?.('p', { gatedPods: 4 });
    hooks.onPolicyStatus?.('q', { gatedPods: 1 });
    owner.forgetPolicy('p');
    expect(await valueOf(metrics, `${P}gated_pods`, { policy: 'p' })).to.equal(undefined);
    expect(
      await valueOf(metrics, `${P}throttled_rollouts`, { policy: 'p', reason: 'FeedsSaturatedNode' }),
    ).to.equal(undefined);
    expect(await valueOf(metrics, `${P}gated_pods`, { policy: 'q' })).to.equal(1);
  });

  it('sets them back to zero when the status holds none', async () => {
    const { metrics, hooks } = aWorld();
    hooks.onPolicyStatus?.('p', {
      gatedPods: 4,
      throttledRollouts: [
        { name: 'shop/q', reason: 'RolloutQueued', since: '2026-11-30T10:00:00Z', dryRun: false },
      ],
    });
    hooks.onPolicyStatus?.('p', {});
    expect(await valueOf(metrics, `${P}gated_pods`, { policy: 'p' })).to.equal(0);
    expect(
      await valueOf(metrics, `${P}throttled_rollouts`, { policy: 'p', reason: 'RolloutQueued' }),
    ).to.equal(0);
  });

  const counted: {
    name: string;
    tell: (h: ReturnType<MetricsHooks['hooks']>) => void;
    metric: string;
    labels: Labels;
  }[] = [
    {
      name: 'counts an action by kind, result and whether it was a dry run',
      tell: (h) => h.onAction?.('Cordon', 'Succeeded', true),
      metric: 'actions_total',
      labels: { action: 'Cordon', result: 'Succeeded', dry_run: 'true' },
    },
    {
      name: 'counts a failed rollout action in a real run',
      tell: (h) => h.onAction?.('PauseRollout', 'Failed', false),
      metric: 'actions_total',
      labels: { action: 'PauseRollout', result: 'Failed', dry_run: 'false' },
    },
    {
      name: 'counts an action held back, by its guard',
      tell: (h) => h.onBlocked?.('StormLimit'),
      metric: 'actions_blocked_total',
      labels: { guard: 'StormLimit' },
    },
    {
      name: 'counts an IO limit, by policy and action',
      tell: (h) => h.onIoLimit?.('p', 'Step'),
      metric: 'io_limits_total',
      labels: { policy: 'p', action: 'Step' },
    },
    {
      name: 'counts an ignored failure Event, by reason',
      tell: (h) => h.onIgnoredEvent?.('NotKubelet'),
      metric: 'failure_events_ignored_total',
      labels: { reason: 'NotKubelet' },
    },
    {
      name: 'counts a fenced report that landed',
      tell: (h) => h.onFencedReport?.(true),
      metric: 'health_reports_fenced_total',
      labels: { outcome: 'landed' },
    },
    {
      name: 'counts a fenced report that was refused',
      tell: (h) => h.onFencedReport?.(false),
      metric: 'health_reports_fenced_total',
      labels: { outcome: 'refused' },
    },
    {
      name: 'counts a change of our node condition, by policy, status and reason',
      tell: (h) => h.onNodeCondition?.('p', 'True', 'IoSaturated'),
      metric: 'node_condition_transitions_total',
      labels: { policy: 'p', status: 'True', reason: 'IoSaturated' },
    },
  ];
  for (const c of counted)
    it(c.name, async () => {
      const { metrics, hooks } = aWorld();
      c.tell(hooks);
      c.tell(hooks);
      expect(await samples(metrics, `${P}${c.metric}`)).to.deep.equal([
        { name: `${P}${c.metric}`, labels: c.labels, value: 2 },
      ]);
    });

  const conditions: { reason: string; escalations: number | undefined }[] = [
    { reason: 'RemediationExhausted', escalations: 1 },
    { reason: 'IoSaturated', escalations: undefined },
    { reason: 'Recovered', escalations: undefined },
  ];
  for (const c of conditions)
    it(`${c.escalations ? 'counts' : 'does not count'} an escalation for the reason ${c.reason}`, async () => {
      const { metrics, hooks } = aWorld();
      hooks.onNodeCondition?.('p', c.reason === 'Recovered' ? 'False' : 'True', c.reason);
      expect(await valueOf(metrics, `${P}escalations_total`, { policy: 'p' })).to.equal(c.escalations);
    });

  it('observes how long a pod waited at the gate', async () => {
    const { metrics, hooks } = aWorld();
    hooks.onGateReleased?.(12, 'Paced');
    hooks.onGateReleased?.(40, 'Paced');
    const name = `${P}gate_wait_seconds`;
    expect(await valueOf(metrics, name, {}, `${name}_count`)).to.equal(2);
    expect(await valueOf(metrics, name, {}, `${name}_sum`)).to.equal(52);
    expect(await valueOf(metrics, name, { le: 15 }, `${name}_bucket`)).to.equal(1);
  });

  const passes: { full: boolean; pass: string; deferred: number | undefined; waiting: number }[] = [
    { full: true, pass: 'full', deferred: 3, waiting: 3 },
    { full: false, pass: 'incremental', deferred: undefined, waiting: 0 },
  ];
  for (const c of passes)
    it(`counts a ${c.pass} pass and the nodes it looked at, and sets the reports waiting (${c.waiting})`, async () => {
      const { metrics, hooks } = aWorld();
      metrics.healthReportsWaiting.set(9);
      hooks.onPass?.({
        full: c.full,
        observed: 5,
        owned: 10,
        ...(c.deferred !== undefined ? { deferred: c.deferred } : {}),
      });
      hooks.onPass?.({
        full: c.full,
        observed: 2,
        owned: 10,
        ...(c.deferred !== undefined ? { deferred: c.deferred } : {}),
      });
      expect(await samples(metrics, `${P}reconcile_passes_total`)).to.deep.equal([
        { name: `${P}reconcile_passes_total`, labels: { pass: c.pass }, value: 2 },
      ]);
      expect(await samples(metrics, `${P}reconcile_nodes_observed_total`)).to.deep.equal([
        { name: `${P}reconcile_nodes_observed_total`, labels: { pass: c.pass }, value: 7 },
      ]);
      expect(await valueOf(metrics, `${P}health_reports_waiting`)).to.equal(c.waiting);
    });

  for (const urgent of [true, false])
    it(`counts a ${urgent ? 'urgent' : 'routine'} report and observes its wait in seconds`, async () => {
      const { metrics, hooks } = aWorld();
      hooks.onReport?.(250, urgent);
      const urgency = urgent ? 'urgent' : 'routine';
      const wait = `${P}health_report_wait_seconds`;
      expect(await samples(metrics, `${P}health_reports_total`)).to.deep.equal([
        { name: `${P}health_reports_total`, labels: { urgency }, value: 1 },
      ]);
      expect(await valueOf(metrics, wait, { urgency }, `${wait}_sum`)).to.equal(0.25);
      expect(await valueOf(metrics, wait, { urgency, le: 0.1 }, `${wait}_bucket`)).to.equal(0);
      expect(await valueOf(metrics, wait, { urgency, le: 0.25 }, `${wait}_bucket`)).to.equal(1);
    });

  describe('the stuck-pod series', () => {
    const stuck = async (metrics: OperatorMetrics) =>
      Object.fromEntries(
        (await samples(metrics, `${P}stuck_pods`)).map((s) => [
          `${s.labels.node}/${s.labels.cause}`,
          s.value,
        ]),
      );

    it("sets a node's stuck pods by cause", async () => {
      const { metrics, hooks } = aWorld();
      stuckOnN1(hooks);
      hooks.onNodeStatus?.('p', 'n2', detection([{ cause: 'DeadlineExceeded', count: 2 }]));
      expect(await stuck(metrics)).to.deep.equal({
        'n1/NameReserved': 3,
        'n1/Network': 1,
        'n2/DeadlineExceeded': 2,
      });
    });

    it("drops a cause no pod of the node is stuck for any more, and keeps the other nodes'", async () => {
      const { metrics, hooks } = aWorld();
      stuckOnN1(hooks);
      hooks.onNodeStatus?.('p', 'n2', detection([{ cause: 'Network', count: 1 }]));
      hooks.onNodeStatus?.('p', 'n1', detection([{ cause: 'NameReserved', count: 1 }]));
      expect(await stuck(metrics)).to.deep.equal({ 'n1/NameReserved': 1, 'n2/Network': 1 });
      hooks.onNodeStatus?.('p', 'n1', detection([]));
      expect(await stuck(metrics)).to.deep.equal({ 'n2/Network': 1 });
    });

    it('drops every series of a node that is gone, and only its own', async () => {
      const { metrics, owner, hooks } = aWorld();
      stuckOnN1(hooks);
      hooks.onNodeStatus?.('p', 'n2', detection([{ cause: 'Network', count: 1 }]));
      owner.forgetNode('n1');
      expect(await stuck(metrics)).to.deep.equal({ 'n2/Network': 1 });
      owner.forgetNode('n1');
      owner.forgetNode('never-seen');
      expect(await stuck(metrics)).to.deep.equal({ 'n2/Network': 1 });
    });

    it('sets a forgotten node afresh when it is told of again', async () => {
      const { metrics, owner, hooks } = aWorld();
      hooks.onNodeStatus?.('p', 'n1', detection([{ cause: 'NameReserved', count: 3 }]));
      owner.forgetNode('n1');
      hooks.onNodeStatus?.('p', 'n1', detection([{ cause: 'Network', count: 2 }]));
      expect(await stuck(metrics)).to.deep.equal({ 'n1/Network': 2 });
    });
  });
});

describe('reconcileHooks', () => {
  function recording() {
    const warnings: { message: string; fields: Record<string, unknown> | undefined }[] = [];
    const logger: Logger = {
      error: () => undefined,
      info: () => undefined,
      debug: () => undefined,
      warn: (message, fields) => warnings.push({ message, fields }),
    };
    return { warnings, logger, metrics: new OperatorMetrics(false) };
  }
  const reconciles = async (metrics: OperatorMetrics) =>
    Object.fromEntries(
      (await samples(metrics, `${P}reconcile_total`)).map((s) => [String(s.labels.result), s.value]),
    );

  const controllers: {
    what: 'policy' | 'apply' | 'sweep' | 'leases';
    message: string;
    countsSuccess: boolean;
    countsErrors: boolean;
  }[] = [
    { what: 'policy', message: 'Failed to reconcile SandboxPolicy', countsSuccess: true, countsErrors: true },
    {
      what: 'apply',
      message: 'Failed to apply a decision of a SandboxPolicy',
      countsSuccess: false,
      countsErrors: true,
    },
    { what: 'sweep', message: 'Failed to sweep for orphans', countsSuccess: false, countsErrors: false },
    { what: 'leases', message: 'Failed to keep the node leases', countsSuccess: false, countsErrors: false },
  ];
  for (const c of controllers) {
    it(`${c.countsSuccess ? 'counts and times' : 'neither counts nor times'} a ${c.what} reconcile that succeeded`, async () => {
      const { logger, metrics, warnings } = recording();
      reconcileHooks({ metrics, logger }, c.what).onSuccess?.('p', 250);
      const name = `${P}reconcile_duration_seconds`;
      expect(await reconciles(metrics)).to.deep.equal(c.countsSuccess ? { success: 1 } : {});
      expect(await valueOf(metrics, name, {}, `${name}_count`)).to.equal(c.countsSuccess ? 1 : 0);
      expect(await valueOf(metrics, name, {}, `${name}_sum`)).to.equal(c.countsSuccess ? 0.25 : 0);
      expect(warnings).to.deep.equal([]);
    });

    it(`logs a failed ${c.what} reconcile with its retry${c.countsErrors ? ', counted as an error' : ', not counted'}`, async () => {
      const { logger, metrics, warnings } = recording();
      reconcileHooks({ metrics, logger }, c.what).onError?.(
        'p',
        { code: 409, body: { message: 'conflict' } },
        1234.6,
      );
      expect(await reconciles(metrics)).to.deep.equal(c.countsErrors ? { error: 1 } : {});
      expect(warnings).to.deep.equal([
        {
          message: c.message,
          fields: {
            ...(c.what === 'policy' || c.what === 'apply' ? { policy: 'p' } : {}),
            error: 'conflict (HTTP 409)',
            retryInMs: 1235,
          },
        },
      ]);
    });

    it(`logs a ${c.what} failure that will not be retried${c.countsErrors ? ', counted as terminal' : ', not counted'}`, async () => {
      const { logger, metrics, warnings } = recording();
      reconcileHooks({ metrics, logger }, c.what).onError?.('p', new Error('invalid'), undefined);
      expect(await reconciles(metrics)).to.deep.equal(c.countsErrors ? { terminal: 1 } : {});
      expect(warnings[0]?.fields).to.deep.equal({
        ...(c.what === 'policy' || c.what === 'apply' ? { policy: 'p' } : {}),
        error: 'invalid',
      });
    });
  }
});
