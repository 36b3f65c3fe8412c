import { expect } from 'chai';
import { copyFile, readFile, rm, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { stringify } from 'yaml';
import { AgentProcess } from '../support/agent-process.js';
import { Cleanup, createNamespace, eventually, kubectl, uniqueName } from '../support/cluster.js';
import { readManifests, REPO_ROOT } from '../support/manifests.js';
import {
  dashboardExpressions,
  exportedMetricNames,
  findObject,
  kustomize,
  metricNamesIn,
  prometheusOperatorCrds,
  promtool,
  ruleGroupsOf,
  scratchDir,
  type KubeObject,
  type RuleGroup,
} from '../support/monitoring-config.js';
import { freePort } from '../support/monitoring.js';
import { useOperator } from '../support/operator-process.js';
import { ProcRoot } from '../support/proc-root.js';

const CONFIG = join(REPO_ROOT, 'config', 'prometheus');
const ALERTS = [
  'SandboxRemediatorNodeSaturated',
  'SandboxRemediatorAgentStale',
  'SandboxRemediatorRemediationBlocked',
  'SandboxRemediatorStorm',
  'SandboxRemediatorNoLeader',
  'SandboxRemediatorNotReady',
];
const log = (msg: string) => {
  console.error(`      [monitoring] ${msg}`);
};

/** The rule file `promtool test rules` reads: annotations dropped (it compares their text verbatim). */
async function writeTestRules(
  dir: string,
  groups: RuleGroup[],
  replace?: { alert: string; expr: string },
): Promise<void> {
  const plain = groups.map((g) => ({
    ...g,
    rules: g.rules.map(({ annotations: _, ...rule }) =>
      replace && rule.alert === replace.alert ? { ...rule, expr: replace.expr } : rule,
    ),
  }));
  await writeFile(join(dir, 'rules.yaml'), stringify({ groups: plain }));
  await copyFile(join(CONFIG, 'tests', 'alerts.yaml'), join(dir, 'alerts.yaml'));
}

const labelsMatch = (selector: Record<string, string>, labels: Record<string, string> = {}) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);

describe('monitoring config (config/prometheus)', function () {
  let objects: KubeObject[] = [];
  let groups: RuleGroup[] = [];
  let dashboard: unknown;

  before(async function () {
    this.timeout(60_000);
    objects = await kustomize('config/prometheus');
    groups = ruleGroupsOf(findObject(objects, 'PrometheusRule'));
    dashboard = JSON.parse(await readFile(join(CONFIG, 'dashboard.json'), 'utf8'));
  });

  describe('the manifests', () => {
    it('build into metrics Services, ServiceMonitors, a PrometheusRule and a dashboard ConfigMap; config/default has none of them', async function () {
      this.timeout(60_000);
      const kinds = objects.map((o) => `${o.kind}/${o.metadata.name}`).sort();
      expect(kinds).to.deep.equal([
        'ConfigMap/sandbox-remediator-dashboard',
        'PrometheusRule/sandbox-remediator',
        'Service/sandbox-remediator-agent-metrics',
        'Service/sandbox-remediator-operator-metrics',
        'ServiceMonitor/sandbox-remediator-agent',
        'ServiceMonitor/sandbox-remediator-operator',
      ]);
      const configMap = findObject(objects, 'ConfigMap');
      expect(configMap.metadata.labels).to.include({ grafana_dashboard: '1' });
      expect(JSON.parse(configMap.data?.['sandbox-remediator.json'] ?? 'null')).to.deep.equal(dashboard);

      const standard = await kustomize('config/default');
      expect(standard.length).to.be.greaterThan(0);
      expect(standard.filter((o) => o.apiVersion.startsWith('monitoring.coreos.com/'))).to.deep.equal([]);
    });

    it("select the operator's and the agent's pods by their metrics port, in the namespace each runs in", () => {
      const workloads = [
        ...readManifests('config/manager').filter((m) => m.object.kind === 'Deployment'),
        ...readManifests('config/agent').filter((m) => m.object.kind === 'DaemonSet'),
      ];
      expect(workloads).to.have.length(2);
      const services = objects.filter((o) => o.kind === 'Service');
      const monitors = objects.filter((o) => o.kind === 'ServiceMonitor');
      for (const { file, object } of workloads) {
        const workload = object as unknown as {
          metadata: { name: string; namespace: string };
          spec: {
            template: {
              metadata: { labels: Record<string, string> };
              spec: { containers: { ports?: { name?: string; containerPort: number }[] }[] };
            };
          };
        };
        const where = `${file} (${workload.metadata.namespace}/${workload.metadata.name})`;
        const podLabels = workload.spec.template.metadata.labels;
        const metricsPort = workload.spec.template.spec.containers
          .flatMap((c) => c.ports ?? [])
          .find((p) => p.name === 'metrics');
        expect(metricsPort, `${where} names a container port "metrics"`).to.not.equal(undefined);

        const selecting = services.filter((s) => {
          const spec = s.spec as { selector: Record<string, string> };
          return (
            s.metadata.namespace === workload.metadata.namespace && labelsMatch(spec.selector, podLabels)
          );
        });
        expect(selecting, `exactly one Service in config/prometheus selects ${where}`).to.have.length(1);
        const service = selecting[0]!;
        const ports = (service.spec as { ports: { name: string; port: number; targetPort: string }[] }).ports;
        expect(ports).to.deep.equal([
          { name: 'metrics', port: metricsPort!.containerPort, targetPort: 'metrics' },
        ]);

        const scraping = monitors.filter((m) => {
          const spec = m.spec as { selector: { matchLabels: Record<string, string> } };
          return (
            m.metadata.namespace === service.metadata.namespace &&
            labelsMatch(spec.selector.matchLabels, service.metadata.labels)
          );
        });
        expect(scraping, `exactly one ServiceMonitor scrapes ${service.metadata.name}`).to.have.length(1);
        const endpoints = (scraping[0]!.spec as { endpoints: { port: string; path: string }[] }).endpoints;
        expect(endpoints.map((e) => [e.port, e.path])).to.deep.equal([['metrics', '/metrics']]);
      }
    });

    it('give every alert a severity, a for, a summary and a description that says what to check', () => {
      const rules = groups.flatMap((g) => g.rules);
      expect(rules.map((r) => r.alert)).to.have.members(ALERTS);
      for (const rule of rules) {
        expect(['warning', 'critical'], `${rule.alert} severity`).to.include(rule.labels?.severity);
        expect(rule.for, `${rule.alert} for`).to.match(/^\d+m$/);
        expect(rule.annotations?.summary, `${rule.alert} summary`).to.be.a('string').and.not.be.empty;
        expect(rule.annotations?.description, `${rule.alert} description`).to.match(/`kubectl [^`]+`/);
      }
    });
  });

  describe('the rules under promtool', () => {
    let dir = '';
    before(async () => {
      dir = await scratchDir('promrules-');
    });
    after(async () => {
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it('pass `promtool check rules`', async () => {
      const file = join(dir, 'check.yaml');
      await writeFile(file, stringify({ groups }));
      const checked = await promtool(['check', 'rules', file]);
      expect(checked.code, checked.stdout + checked.stderr).to.equal(0);
      expect(checked.stdout).to.contain(`SUCCESS: ${ALERTS.length} rules found`);
    });

    it('pass the unit tests in config/prometheus/tests/alerts.yaml', async () => {
      await writeTestRules(dir, groups);
      const tested = await promtool(['test', 'rules', 'alerts.yaml'], dir);
      expect(tested.code, tested.stdout + tested.stderr).to.equal(0);
      expect(tested.stdout).to.contain('SUCCESS');
    });

    it('fail those unit tests when the stale-agent, storm or no-leader alert never fires, or always does', async function () {
      this.timeout(60_000);
      for (const alert of [
        'SandboxRemediatorAgentStale',
        'SandboxRemediatorStorm',
        'SandboxRemediatorNoLeader',
      ])
        for (const expr of ['vector(1) == 0', 'vector(1)']) {
          await writeTestRules(dir, groups, { alert, expr });
          const tested = await promtool(['test', 'rules', 'alerts.yaml'], dir);
          expect(tested.code, `${alert} as ${expr}: ${tested.stdout}`).to.not.equal(0);
          expect(tested.stdout + tested.stderr).to.contain(`alertname: ${alert}`);
        }
    });
  });

  describe('the PromQL name extractor', () => {
    const tricky = [
      'sum by (node, cause) (rate(sandbox_remediator_stuck_podz{cause=~"NameReserved|x", node!="$node"}[5m] offset 1h))',
      '/ on (node) group_left (policy) max without (instance) (sandbox_remediator_degraded_nodes)',
      '> bool 1e3 unless absent(sandbox_remediator_leader == 1)',
      'or histogram_quantile(0.9, sum by (le) (rate(sandbox_remediator_reconcile_duration_seconds_bucket[$__rate_interval])))',
      'or label_replace(vector(0x1f), "node", "$1", "instance", "(.*)") or {__name__="sandbox_remediator_ready"}',
      'or sum(sandbox_remediator_gated_pods)by(policy) or time() - sandbox_remediator_agent_last_publish_timestamp_seconds>120',
    ].join('\n');

    it('finds the metric names, and only them, past functions, keywords, labels, strings and Grafana variables', () => {
      expect([...metricNamesIn(tricky)].sort()).to.deep.equal([
        'sandbox_remediator_agent_last_publish_timestamp_seconds',
        'sandbox_remediator_degraded_nodes',
        'sandbox_remediator_gated_pods',
        'sandbox_remediator_leader',
        'sandbox_remediator_ready',
        'sandbox_remediator_reconcile_duration_seconds_bucket',
        'sandbox_remediator_stuck_podz',
      ]);
      expect([
        ...metricNamesIn('label_values(sandbox_remediator_agent_procs_blocked{a="b"}, node)'),
      ]).to.deep.equal(['sandbox_remediator_agent_procs_blocked']);
      expect([...metricNamesIn('label_values(node)')]).to.deep.equal([]);
    });

    it('reads exported names from # TYPE lines, with the series a histogram adds, so a misspelt name stands out', () => {
      const exposition = [
        '# HELP sandbox_remediator_stuck_pods Pods stuck.',
        '# TYPE sandbox_remediator_stuck_pods gauge',
        '# TYPE sandbox_remediator_reconcile_duration_seconds histogram',
        'sandbox_remediator_reconcile_duration_seconds_bucket{le="+Inf"} 0',
        '# TYPE sandbox_remediator_degraded_nodes gauge',
        '# TYPE sandbox_remediator_leader gauge',
        'sandbox_remediator_leader 1',
        '# TYPE sandbox_remediator_ready gauge',
        '# TYPE sandbox_remediator_gated_pods gauge',
        '# TYPE sandbox_remediator_agent_last_publish_timestamp_seconds gauge',
      ].join('\n');
      const exported = exportedMetricNames(exposition);
      expect(exported).to.include('sandbox_remediator_reconcile_duration_seconds_count');
      expect([...metricNamesIn(tricky)].filter((n) => !exported.has(n))).to.deep.equal([
        'sandbox_remediator_stuck_podz',
      ]);
    });
  });

  describe('the metric names against the real operator and agent', function () {
    // --dry-run: it reconciles whatever policies other tests left on the shared cluster and must change nothing.
    const operator = useOperator(['--dry-run']);
    const agent = new AgentProcess();
    const proc = new ProcRoot();
    let agentMetrics = '';

    before(async function () {
      this.timeout(60_000);
      const port = await freePort();
      agent.start(uniqueName('it-mon-node'), [
        `--proc-root=${await proc.create()}`,
        '--interval-seconds=1',
        `--metrics-bind-address=127.0.0.1:${port}`,
      ]);
      // After two samples every gauge has a value, though # TYPE alone would do.
      agentMetrics = await eventually(
        'the agent to serve /metrics after two samples',
        async () => {
          const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
          return /^sandbox_remediator_agent_sample_duration_seconds_count [2-9]/m.test(text) && text;
        },
        { timeoutMs: 30_000, intervalMs: 500 },
      ).catch((err: unknown) => {
        throw new Error(`${String(err)}\nagent output:\n${agent.output.slice(-2000)}`);
      });
    });
    after(async () => {
      const code = await agent.stop();
      await proc.remove();
      if (code !== 0) throw new Error(`agent exited with ${code}:\n${agent.output.slice(-2000)}`);
    });

    it('export every metric name that an alert or a dashboard panel uses', async () => {
      const operatorMetrics = (await operator.get('/metrics', operator.metricsPort)).text;
      const exported = new Set([
        ...exportedMetricNames(operatorMetrics),
        ...exportedMetricNames(agentMetrics),
      ]);
      expect(exported)
        .to.include('sandbox_remediator_leader')
        .and.include('sandbox_remediator_agent_procs_blocked');

      const usedBy = new Map<string, string[]>();
      const use = (where: string, expr: string) => {
        for (const name of metricNamesIn(expr)) usedBy.set(name, [...(usedBy.get(name) ?? []), where]);
      };
      for (const rule of groups.flatMap((g) => g.rules)) use(`alert ${rule.alert ?? rule.record}`, rule.expr);
      const expressions = dashboardExpressions(dashboard);
      expect(expressions.length).to.be.greaterThan(20);
      for (const expr of expressions) use('dashboard', expr);
      // Without these the check would pass on an extractor that finds nothing.
      expect([...usedBy.keys()]).to.include.members([
        'sandbox_remediator_leader',
        'sandbox_remediator_ready',
        'sandbox_remediator_agent_last_publish_timestamp_seconds',
        'sandbox_remediator_reconcile_duration_seconds_bucket',
        'process_resident_memory_bytes',
      ]);
      log(`${usedBy.size} metric names used; operator and agent export ${exported.size}`);

      const missing = [...usedBy]
        .filter(([name]) => !exported.has(name))
        .map(([n, w]) => `${n} (${w.join(', ')})`);
      expect(missing, 'used but exported by neither process').to.deep.equal([]);
    });
  });

  describe('the manifests against the Prometheus Operator CRDs (server-side dry run)', function () {
    const cleanup = new Cleanup();
    const created: string[] = [];

    before(async function () {
      this.timeout(300_000);
      const files = await prometheusOperatorCrds();
      // monitoring.coreos.com_servicemonitors.yaml defines servicemonitors.monitoring.coreos.com
      const names = files.map((f) => basename(f, '.yaml').split('_').reverse().join('.'));
      for (const [i, name] of names.entries()) {
        if ((await kubectl(['get', 'crd', name])).code === 0) continue; // someone else's: leave it be
        const applied = await kubectl(['apply', '--server-side', '-f', files[i]!]);
        expect(applied.code, applied.stderr).to.equal(0);
        created.push(name);
      }
      const established = await kubectl([
        'wait',
        '--for=condition=Established',
        '--timeout=60s',
        ...names.map((n) => `crd/${n}`),
      ]);
      expect(established.code, established.stderr).to.equal(0);
    });

    after(async function () {
      this.timeout(60_000);
      await cleanup.run();
      if (created.length > 0) await kubectl(['delete', 'crd', '--wait=false', ...created]);
    });

    const inNamespace = (namespace: string, list: KubeObject[]) =>
      list.map((o) => stringify({ ...o, metadata: { ...o.metadata, namespace } })).join('---\n');

    it('accepts every object of config/prometheus', async () => {
      const namespace = await createNamespace(cleanup, 'it-mon');
      const result = await kubectl(
        ['apply', '--server-side', '--dry-run=server', '--field-manager=monitoring-config-test', '-f', '-'],
        inNamespace(namespace, objects),
      );
      expect(result.code, result.stderr).to.equal(0);
      for (const o of objects)
        expect(result.stdout).to.match(new RegExp(`${o.kind.toLowerCase()}[^ ]*/${o.metadata.name} `, 'i'));
    });

    it('and refuses a misspelt ServiceMonitor field, so the check can fail', async () => {
      const namespace = await createNamespace(cleanup, 'it-mon');
      const monitor = findObject(objects, 'ServiceMonitor', 'sandbox-remediator-operator');
      const misspelt = {
        ...monitor,
        spec: { ...(monitor.spec as object), endpoints: [{ prot: 'metrics', path: '/metrics' }] },
      };
      const result = await kubectl(
        ['apply', '--server-side', '--dry-run=server', '--field-manager=monitoring-config-test', '-f', '-'],
        inNamespace(namespace, [misspelt]),
      );
      expect(result.code).to.not.equal(0);
      expect(result.stderr).to.contain('prot');
    });
  });
});
