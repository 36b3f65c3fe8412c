// Upgrading the CRDs of a Helm release, as docs/operations.md says: Helm installs a chart's crds/ once and never
// upgrades them, so the upgrade applies the new chart's CRDs by server-side apply first. Helm created them (its field
// manager owns every field), so the apply must take those fields over (--force-conflicts), or the apiserver refuses
// it. From the CRDs of an earlier release (0.1.0, before status.reportId: test/fixtures/crds-before-report-id) to
// today's: every SandboxPolicy and SandboxHealth keeps what it had, and status.reportId, pruned before, is kept.
import { expect } from 'chai';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { applyCrds } from '../support/operator-process.js';
import {
  Cleanup,
  createNamespace,
  establishCrds,
  eventually,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import { CHART_DIR, helm } from '../support/helm.js';
import { REPO_ROOT } from '../support/manifests.js';

const CRDS = ['sandboxpolicies.sandbox.remediator.io', 'sandboxhealths.sandbox.remediator.io'];
const OLD_CRDS = join(REPO_ROOT, 'test', 'fixtures', 'crds-before-report-id');

interface Stored {
  metadata: { name: string; managedFields?: { manager: string }[] };
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
}

async function get(kind: string, name: string): Promise<Stored> {
  const got = await kubectl(['get', kind, name, '-o', 'json', '--show-managed-fields']);
  expect(got.code, got.stderr).to.equal(0);
  return JSON.parse(got.stdout) as Stored;
}

async function patchStatus(kind: string, name: string, status: Record<string, unknown>): Promise<void> {
  const patched = await kubectl([
    'patch',
    kind,
    name,
    '--subresource=status',
    '--type=merge',
    '-p',
    JSON.stringify({ status }),
  ]);
  expect(patched.code, patched.stderr).to.equal(0);
}

describe('upgrading the CRDs of a Helm release from an earlier version', function () {
  this.timeout(180_000);
  const cleanup = new Cleanup();
  const work = mkdtempSync(join(tmpdir(), 'crd-upgrade-'));
  const release = uniqueName('crds');
  const policy = uniqueName('upgrade');
  const node = uniqueName('upgrade-node');
  let namespace = '';

  before(async function () {
    this.timeout(180_000);
    namespace = await createNamespace(cleanup, 'it-crd-upgrade');
    // The earlier release's CRDs, as Helm installs a chart's crds/: none may exist, or Helm leaves them as they are.
    const deleted = await kubectl([
      'delete',
      '-f',
      join(REPO_ROOT, 'crds'),
      '--ignore-not-found',
      '--wait',
      '--timeout=60s',
    ]);
    expect(deleted.code, deleted.stderr).to.equal(0);
    // Today's, whatever happens: the tests after this one need them.
    cleanup.add(() => applyCrds(), 'last');
    const chart = join(work, 'chart');
    cpSync(OLD_CRDS, join(chart, 'crds'), { recursive: true });
    writeFileSync(
      join(chart, 'Chart.yaml'),
      'apiVersion: v2\nname: sandbox-remediator\nversion: 0.1.0\nappVersion: 0.1.0\n',
    );
    const installed = await helm(['install', release, chart, '-n', namespace, '--wait']);
    expect(installed.code, installed.stderr).to.equal(0);
    cleanup.add(() => helm(['uninstall', release, '-n', namespace]));
    await establishCrds(CRDS);
  });
  after(async function () {
    this.timeout(120_000);
    await kubectl(['delete', 'sandboxpolicy', policy, '--ignore-not-found']);
    await kubectl(['delete', 'sandboxhealth', node, '--ignore-not-found']);
    await cleanup.run();
    rmSync(work, { recursive: true, force: true });
  });

  it('keeps every policy and report, and status.reportId once the new CRDs are applied with --force-conflicts', async () => {
    for (const crd of CRDS) {
      const managers = (await get('crd', crd)).metadata.managedFields?.map((f) => f.manager);
      expect(managers, `${crd} created by Helm`).to.include('helm');
    }
    // Objects as an earlier operator left them: a policy, a node's report with its status.
    const created = await kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'sandbox.remediator.io/v1alpha1',
        kind: 'SandboxPolicy',
        metadata: { name: policy },
        spec: { safety: { dryRun: true }, nodeSelector: { matchLabels: { pool: 'upgrade' } } },
      }) +
        '\n---\n' +
        JSON.stringify({
          apiVersion: 'sandbox.remediator.io/v1alpha1',
          kind: 'SandboxHealth',
          metadata: { name: node },
          spec: { nodeName: node },
        }),
    );
    expect(created.code, created.stderr).to.equal(0);
    await patchStatus('sandboxhealth', node, { state: 'Healthy', stuckPodCount: 0, policy });
    await patchStatus('sandboxhealth', node, { reportId: 'before-the-upgrade' });
    const before = { policy: await get('sandboxpolicy', policy), health: await get('sandboxhealth', node) };
    expect(before.health.status?.reportId, 'the earlier CRD prunes it').to.equal(undefined);
    expect(before.health.status?.state).to.equal('Healthy');

    // helm show crds prints the new chart's CRDs (a release's chart: helm show crds oci://... --version).
    const shown = await helm(['show', 'crds', CHART_DIR]);
    expect(shown.code, shown.stderr).to.equal(0);
    // It joins the chart's files as they are: each begins a document of its own, or the second overwrites the first.
    const documents = parseAllDocuments(shown.stdout).map((d) => d.toJS() as Stored | null);
    expect(documents.filter((d) => d !== null).map((d) => d.metadata.name)).to.have.members(CRDS);
    const refused = await kubectl(['apply', '--server-side', '-f', '-'], shown.stdout);
    expect(refused.code, 'without --force-conflicts, Helm owns the fields').to.not.equal(0);
    expect(refused.stderr)
      .to.match(/conflict/i)
      .and.to.contain('"helm"');
    const applied = await kubectl(['apply', '--server-side', '--force-conflicts', '-f', '-'], shown.stdout);
    expect(applied.code, applied.stderr).to.equal(0);
    await establishCrds(CRDS);

    const after = { policy: await get('sandboxpolicy', policy), health: await get('sandboxhealth', node) };
    expect(after.policy.metadata.name).to.equal(policy);
    expect(after.policy.spec, 'the policy as it was').to.deep.equal(before.policy.spec);
    expect(after.health.spec).to.deep.equal(before.health.spec);
    expect(after.health.status, 'the report as it was').to.deep.equal(before.health.status);
    // The apiserver serves a CRD's new schema a moment after the apply returns (established already, from before).
    await eventually(
      'status.reportId kept by the new CRD',
      async () => {
        await patchStatus('sandboxhealth', node, { reportId: 'after-the-upgrade' });
        return (await get('sandboxhealth', node)).status?.reportId === 'after-the-upgrade';
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
    // The release upgrades on (here the same chart: the CRD step is what this tests): Helm leaves CRDs alone on an
    // upgrade, so what was applied stands.
    const upgraded = await helm(['upgrade', release, join(work, 'chart'), '-n', namespace]);
    expect(upgraded.code, upgraded.stderr).to.equal(0);
    const schema = JSON.stringify(await get('crd', CRDS[1]!));
    expect(schema).to.contain('reportId');
  });
});
