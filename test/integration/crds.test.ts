import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { readManifests, REPO_ROOT } from '../support/manifests.js';
import { Cleanup, eventually, kubectl, uniqueName } from '../support/cluster.js';
import { applyCrds } from '../support/operator-process.js';

const fixture = (name: string) =>
  readFileSync(join(REPO_ROOT, 'test/fixtures/invalid-policies', name), 'utf8');
const renamed = (yamlText: string, name: string) => yamlText.replace(/^ {2}name: .*$/m, `  name: ${name}`);

describe('CRDs on the real apiserver', function () {
  const cleanup = new Cleanup();
  after(() => cleanup.run());

  before(async function () {
    this.timeout(120_000);
    await applyCrds();
  });

  it('accepts every sample, applying the schema defaults', async () => {
    for (const { file, object } of readManifests('config/samples')) {
      const name = uniqueName(object.metadata.name);
      const text = stringify({
        ...object,
        metadata: { name },
        ...(object.kind === 'SandboxHealth' ? { spec: { nodeName: name } } : {}),
      });
      const created = await kubectl(['create', '-f', '-'], text);
      expect(created.code, `${file}: ${created.stderr}`).to.equal(0);
      const resource = object.kind === 'SandboxPolicy' ? 'sandboxpolicy' : 'sandboxhealth';
      cleanup.add(() => kubectl(['delete', resource, name, '--ignore-not-found']));
    }
    const name = uniqueName('defaults');
    const created = await kubectl(
      ['create', '-f', '-'],
      renamed(readFileSync(join(REPO_ROOT, 'config/samples/sandboxpolicy-minimal.yaml'), 'utf8'), name),
    );
    expect(created.code, created.stderr).to.equal(0);
    cleanup.add(() => kubectl(['delete', 'sandboxpolicy', name]));
    const got = await kubectl(['get', 'sandboxpolicy', name, '-o', 'json']);
    const spec = (JSON.parse(got.stdout) as { spec: Record<string, Record<string, unknown>> }).spec;
    expect(spec.detection).to.deep.equal({ stuckThresholdSeconds: 180, minStuckPods: 1 });
    expect(spec.safety).to.include({ maxUnhealthyNodes: '20%', maxEvictionsPerMinute: 10, dryRun: false });
    expect(spec.remediation).to.include({ cordon: true, evictStuckPods: true });
  });

  const refusals: { file: string; field: string }[] = [
    { file: 'negative-threshold.yaml', field: 'spec.detection.stuckThresholdSeconds' },
    { file: 'unknown-remediation-field.yaml', field: 'spec.remediation.rebootNode' },
    { file: 'storm-over-100-percent.yaml', field: 'spec.safety.maxUnhealthyNodes' },
  ];
  for (const { file, field } of refusals) {
    it(`refuses ${file} at kubectl apply, naming ${field}`, async () => {
      const result = await kubectl(['apply', '-f', '-'], renamed(fixture(file), uniqueName('invalid')));
      expect(result.code).to.not.equal(0);
      expect(result.stderr).to.contain(field);
    });
  }

  it('accepts what only the operator can judge (it reports it in status)', async () => {
    const name = uniqueName('cross-field');
    const result = await kubectl(['create', '-f', '-'], renamed(fixture('cross-field.yaml'), name));
    expect(result.code, result.stderr).to.equal(0);
    cleanup.add(() => kubectl(['delete', 'sandboxpolicy', name]));
  });

  it('refuses a SandboxHealth not named after its node', async () => {
    const text = stringify({
      apiVersion: 'sandbox.remediator.io/v1alpha1',
      kind: 'SandboxHealth',
      metadata: { name: uniqueName('a') },
      spec: { nodeName: 'b' },
    });
    const result = await kubectl(['create', '-f', '-'], text);
    expect(result.code).to.not.equal(0);
    expect(result.stderr).to.contain('metadata.name must equal spec.nodeName');
  });

  it('shows the printer columns in kubectl get', async () => {
    const name = uniqueName('cols');
    await kubectl(
      ['create', '-f', '-'],
      stringify({
        apiVersion: 'sandbox.remediator.io/v1alpha1',
        kind: 'SandboxHealth',
        metadata: { name },
        spec: { nodeName: name },
      }),
    );
    cleanup.add(() => kubectl(['delete', 'sandboxhealth', name]));
    const status = {
      status: {
        state: 'Degraded',
        stuckPodCount: 2,
        ioReading: {
          source: 'agent',
          observedTime: new Date().toISOString(),
          psiSomeAvg10Percent: 42.5,
          diskBusyPercent: 97,
        },
        lastAction: 'Cordon',
      },
    };
    const patched = await kubectl([
      'patch',
      'sandboxhealth',
      name,
      '--subresource=status',
      '--type=merge',
      '-p',
      JSON.stringify(status),
    ]);
    expect(patched.code, patched.stderr).to.equal(0);
    const health = await kubectl(['get', 'sandboxhealth', name]);
    expect(health.stdout.split('\n')[0]).to.match(
      /^NAME\s+STATE\s+STUCK\s+IO-PSI\s+DISK-BUSY\s+TOP IO\s+IO-LIMITED\s+ACTION\s+AGE$/,
    );
    expect(health.stdout).to.match(new RegExp(`${name}\\s+Degraded\\s+2\\s+42.5\\s+97\\s+Cordon`));
    const short = await kubectl(['get', 'sbh', name, '-o', 'wide']);
    expect(short.stdout.split('\n')[0]).to.match(/EVIDENCE\s+POLICY/);
    const policies = await kubectl(['get', 'sandboxpolicies']);
    expect(policies.stdout.split('\n')[0]).to.match(
      /^NAME\s+VALID\s+NODES\s+DEGRADED\s+REMEDIATING\s+DRY-RUN\s+AGE$/,
    );
  });

  it('documents every field for kubectl explain', async () => {
    const explained = await eventually('kubectl explain to know the new kind', async () => {
      const result = await kubectl(['explain', 'sandboxpolicy.spec']);
      return result.code === 0 ? result.stdout : undefined;
    });
    for (const field of ['detection', 'ioPressure', 'remediation', 'safety', 'nodeSelector'])
      expect(explained).to.contain(field);
    const safety = await kubectl(['explain', 'sandboxpolicy.spec.safety.maxUnhealthyNodes']);
    expect(safety.stdout).to.contain('Storm limit');
    const recursive = await kubectl(['explain', 'sandboxhealth.status', '--recursive']);
    expect(recursive.stdout).to.contain('stuckPods');
  });
});
