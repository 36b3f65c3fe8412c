// hack/generate-chart.ts: the chart follows config/, and a config/ it cannot follow is an error, not a silent gap.
// Each case edits a copy of config/ (and the chart) in a temporary directory.
import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import { planChart } from '../../../hack/chart/plan.js';
import { CHART } from '../../../hack/chart/render.js';
import { REPO_ROOT } from '../../support/manifests.js';

/** A checkout with what the generator reads: config/, package.json, prettier's settings and the chart. */
function copyOfRepo(): string {
  const dir = mkdtempSync(join(tmpdir(), 'generate-chart-'));
  for (const path of ['config', 'package.json', '.prettierrc.json', 'charts'])
    cpSync(join(REPO_ROOT, path), join(dir, path), { recursive: true });
  return dir;
}

const edit = (root: string, file: string, change: (text: string) => string) => {
  const path = join(root, file);
  const before = readFileSync(path, 'utf8');
  const after = change(before);
  expect(after, `the edit of ${file} changed nothing`).to.not.equal(before);
  writeFileSync(path, after);
};

function check(root: string): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      join(REPO_ROOT, 'node_modules', '.bin', 'tsx'),
      [join(REPO_ROOT, 'hack', 'generate-chart.ts'), '--check', '--root', root],
      (err, _stdout, stderr) => {
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stderr });
      },
    );
  });
}

describe('the Helm chart generator (hack/generate-chart.ts)', function () {
  this.timeout(30_000);
  let root = '';
  beforeEach(() => {
    root = copyOfRepo();
  });
  afterEach(() => {
    rmSync(root, { recursive: true, force: true });
  });

  it('finds the committed chart up to date with config/', async () => {
    const plan = await planChart(REPO_ROOT);
    expect(plan.write.size).to.be.greaterThan(15);
    const stale = [...plan.write].filter(
      ([path, text]) => readFileSync(join(REPO_ROOT, path), 'utf8') !== text,
    );
    expect(stale.map(([path]) => path)).to.deep.equal([]);
    expect(plan.remove).to.deep.equal([]);
  });

  it('carries a rule added to config/rbac into the chart, and --check fails on the drift until regenerated', async () => {
    edit(root, 'config/rbac/operator-role.yaml', (t) =>
      t.replace(
        '  - apiGroups: [apps]',
        "  - apiGroups: ['']\n    resources: [nodes/status]\n    verbs: [patch]\n  - apiGroups: [apps]",
      ),
    );
    const template = `${CHART}/templates/rbac/operator-role.yaml`;
    expect((await planChart(root)).write.get(template)).to.contain('resources: [ nodes/status ]');
    const drift = await check(root);
    expect(drift.code).to.equal(1);
    expect(drift.stderr).to.contain(`${template} is stale`);
  });

  it('makes a template of a new file in a kustomization, and removes it with the file', async () => {
    writeFileSync(
      join(root, 'config/rbac/lease-role.yaml'),
      'apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: sandbox-remediator-node-leases\n  namespace: medik8s-leases\nrules: []\n',
    );
    edit(root, 'config/rbac/kustomization.yaml', (t) => `${t}  - lease-role.yaml\n`);
    const added = (await planChart(root)).write.get(`${CHART}/templates/rbac/lease-role.yaml`);
    expect(added).to.contain('namespace: medik8s-leases'); // a namespace that is neither the operator's nor the agent's
    expect(added).to.contain('{{- include "sandbox-remediator.labels" . | nindent 4 }}');
    for (const [path, text] of (await planChart(root)).write) {
      mkdirSync(join(root, path, '..'), { recursive: true });
      writeFileSync(join(root, path), text);
    }
    edit(root, 'config/rbac/kustomization.yaml', (t) => t.replace('  - lease-role.yaml\n', ''));
    expect((await planChart(root)).remove).to.deep.equal([`${CHART}/templates/rbac/lease-role.yaml`]);
  });

  it("takes the defaults in values.yaml from config/ (replicas, resources, the agent's tolerations)", async () => {
    edit(root, 'config/manager/manager.yaml', (t) => t.replace('replicas: 2', 'replicas: 3'));
    edit(root, 'config/agent/daemonset.yaml', (t) =>
      t.replace('tolerations: [{ operator: Exists }]', 'tolerations: [{ key: dedicated, operator: Exists }]'),
    );
    const values = parse((await planChart(root)).write.get(`${CHART}/values.yaml`) ?? '') as {
      operator: { replicas: number; resources: unknown };
      agent: { tolerations: unknown };
    };
    expect(values.operator.replicas).to.equal(3);
    expect(values.operator.resources).to.deep.equal({
      requests: { cpu: '50m', memory: '128Mi' },
      limits: { memory: '512Mi' },
    });
    expect(values.agent.tolerations).to.deep.equal([{ key: 'dedicated', operator: 'Exists' }]);
  });

  it("escapes what is not Helm's: the alerts' {{ $labels.node }} stays Prometheus'", async () => {
    const rule =
      (await planChart(REPO_ROOT)).write.get(`${CHART}/templates/prometheus/prometheusrule.yaml`) ?? '';
    expect(rule).to.contain('{{`{{`}} $labels.node }}');
    expect(rule).to.not.match(/[^`]\{\{ \$labels/);
  });

  const refusals: [what: string, file: string, change: (t: string) => string, error: RegExp][] = [
    [
      'a flag it templates gone from the Deployment',
      'config/manager/manager.yaml',
      (t) => t.replace('--leader-elect, ', ''),
      /no --leader-elect argument/,
    ],
    [
      'a kustomize feature it does not apply',
      'config/rbac/kustomization.yaml',
      (t) => `${t}namePrefix: x-\n`,
      /uses namePrefix/,
    ],
    [
      'the cgroup mount moved away from --cgroup-root',
      'config/agent/daemonset.yaml',
      (t) => t.replace('mountPath: /host/sys/fs/cgroup,', 'mountPath: /cgroup,'),
      /--cgroup-root/,
    ],
    [
      'a kind in config/prometheus no value turns on',
      'config/prometheus/services.yaml',
      (t) => t.replaceAll('kind: Service\n', 'kind: Endpoints\n'),
      /Endpoints, which no monitoring value/,
    ],
  ];
  for (const [what, file, change, error] of refusals)
    it(`refuses ${what}`, async () => {
      edit(root, file, change);
      let thrown: unknown;
      await planChart(root).catch((err: unknown) => (thrown = err));
      expect(String(thrown)).to.match(error);
    });

  it('refuses a folder of config/ that is neither in the chart nor left out of it', async () => {
    mkdirSync(join(root, 'config/extras'));
    let thrown: unknown;
    await planChart(root).catch((err: unknown) => (thrown = err));
    expect(String(thrown)).to.match(/config\/extras: neither in the chart nor left out/);
  });
});
