// --install-crds against the real apiserver: a CRD left by an older release is brought up to date by
// server-side apply under the operator's field manager, and Established before the caches start.
import { expect } from 'chai';
import { mkdtemp, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { Cleanup, createNamespace, kubectl } from '../support/cluster.js';
import { readManifests, REPO_ROOT } from '../support/manifests.js';
import { applyCrds, OperatorProcess } from '../support/operator-process.js';
import { createToken, writeTokenKubeconfig } from '../support/tokens.js';

const POLICIES = 'sandboxpolicies.sandbox.remediator.io';
const HEALTHS = 'sandboxhealths.sandbox.remediator.io';

interface Crd {
  metadata: {
    name: string;
    managedFields?: { manager: string; operation: string; fieldsV1?: Record<string, unknown> }[];
    [field: string]: unknown;
  };
  spec: {
    versions: {
      additionalPrinterColumns?: { name: string }[];
      schema: { openAPIV3Schema: { description?: string } };
    }[];
  };
}

async function readCrd(name: string): Promise<Crd> {
  const result = await kubectl(['get', 'crd', name, '-o', 'json', '--show-managed-fields']);
  expect(result.code, result.stderr).to.equal(0);
  return JSON.parse(result.stdout) as Crd;
}

describe('--install-crds on the real apiserver', function () {
  const cleanup = new Cleanup();
  afterEach(() => cleanup.run());
  // Whatever happens, leave the CRDs as crds/ has them: the cluster is shared with the other tests.
  after(async function () {
    this.timeout(60_000);
    await applyCrds();
  });

  it('updates a CRD an older release left (server-side apply, field manager sandbox-remediator), Established before the caches start', async function () {
    this.timeout(150_000);
    await applyCrds();
    // What crds/ gives once the apiserver has defaulted it: the state the operator must restore.
    const wanted = await readCrd(POLICIES);
    const current = parse(readFileSync(join(REPO_ROOT, 'crds', `${POLICIES}.yaml`), 'utf8')) as Crd;

    // An older release's CRD: another description, no Age column. Written with a plain update first, so no
    // one's field ownership keeps the Age column; then applied by the operator's field manager with a
    // column this release dropped, as an older operator would have. Harmless to tests running meanwhile.
    const older = structuredClone(current);
    const version = older.spec.versions[0]!;
    version.schema.openAPIV3Schema.description = 'An older description.';
    version.additionalPrinterColumns = (version.additionalPrinterColumns ?? []).filter(
      (c) => c.name !== 'Age',
    );
    const replaced = await kubectl(['replace', '-f', '-'], stringify(older));
    expect(replaced.code, replaced.stderr).to.equal(0);
    version.additionalPrinterColumns.push({
      name: 'Retired',
      type: 'string',
      jsonPath: '.status.retired',
    } as { name: string });
    const applied = await kubectl(
      ['apply', '--server-side', '--force-conflicts', '--field-manager=sandbox-remediator', '-f', '-'],
      stringify(older),
    );
    expect(applied.code, applied.stderr).to.equal(0);
    const before = await readCrd(POLICIES);
    expect(before.spec.versions[0]!.schema.openAPIV3Schema.description).to.equal('An older description.');
    expect(before.spec.versions[0]!.additionalPrinterColumns!.map((c) => c.name))
      .to.include('Retired')
      .and.not.include('Age');

    const operator = new OperatorProcess();
    cleanup.add(() => operator.stop());
    // --dry-run: this process is here to install CRDs, not to act on other tests' nodes meanwhile.
    await operator.start(['--install-crds', '--dry-run']);
    const stopped = await operator.stop();
    expect(stopped, operator.tail()).to.equal(0);

    const after = await readCrd(POLICIES);
    expect(after.spec).to.deep.equal(wanted.spec);
    expect(after.spec.versions[0]!.additionalPrinterColumns!.map((c) => c.name)).to.include('Age');
    for (const name of [POLICIES, HEALTHS]) {
      const managers = (await readCrd(name)).metadata.managedFields ?? [];
      expect(
        managers.some(
          (m) => m.manager === 'sandbox-remediator' && m.operation === 'Apply' && m.fieldsV1?.['f:spec'],
        ),
        `${name} managedFields: ${JSON.stringify(managers.map((m) => [m.manager, m.operation]))}`,
      ).to.equal(true);
    }

    // Applied, then Established, then the caches: in that order in the log.
    const at = (message: string, crd?: string) =>
      operator.logs.findIndex((l) => l.message === message && (crd === undefined || l.crd === crd));
    for (const name of [POLICIES, HEALTHS]) {
      expect(at('Applied CustomResourceDefinition', name), name).to.be.at.least(0);
      expect(at('CustomResourceDefinition is Established', name)).to.be.greaterThan(
        at('Applied CustomResourceDefinition', name),
      );
      expect(at('Started controller')).to.be.greaterThan(at('CustomResourceDefinition is Established', name));
    }
  });

  it('stops with the apiserver refusal when its identity may not write CRDs (the operator role may not)', async function () {
    this.timeout(90_000);
    const operatorRole = readManifests('config/rbac').find(
      (m) => m.object.kind === 'ClusterRole' && m.object.metadata.name === 'sandbox-remediator-operator',
    )?.object as { rules: { apiGroups: string[]; resources: string[] }[] } | undefined;
    expect(operatorRole, 'config/rbac ClusterRole sandbox-remediator-operator').to.not.equal(undefined);
    expect(
      operatorRole!.rules.filter(
        (r) =>
          r.apiGroups.includes('apiextensions.k8s.io') || r.resources.includes('customresourcedefinitions'),
      ),
    ).to.deep.equal([]);

    // An identity with no RBAC at all, like the operator's ServiceAccount as far as CRDs go.
    const namespace = await createNamespace(cleanup, 'it-crds');
    const created = await kubectl(['create', 'serviceaccount', 'no-crds', '-n', namespace]);
    expect(created.code, created.stderr).to.equal(0);
    const dir = await mkdtemp(join(tmpdir(), 'install-crds-'));
    cleanup.add(() => rm(dir, { recursive: true, force: true }));
    const kubeconfig = await writeTokenKubeconfig(dir, 'no-crds', await createToken(namespace, 'no-crds'));
    const operator = new OperatorProcess();
    cleanup.add(() => operator.stop());
    await operator.start(['--install-crds', `--kubeconfig=${kubeconfig}`], { waitForStarted: false });
    const code = await operator.exited;
    expect(code, operator.tail()).to.not.equal(0);
    expect(operator.tail(40))
      .to.match(/forbidden/i)
      .and.to.contain('customresourcedefinitions');
    expect(operator.logs.some((l) => l.message === 'Started controller')).to.equal(false);
  });
});
