// The README's health-check samples, as their own projects' CRDs read them: medik8s NodeHealthCheck and Cluster
// API MachineHealthCheck (v1beta2), built by hack/cluster/build.sh node-healthcheck cluster-api (make tools). A
// server-side dry run takes each as written, and keeps our condition in it, as the apiserver would store it.
import { expect } from 'chai';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { NODE_CONDITION_TYPE } from '../../src/api/v1alpha1/node-condition.js';
import { eventually, kubectl } from '../support/cluster.js';
import { REPO_ROOT } from '../support/manifests.js';
import { NHC_DIR } from '../support/node-healthcheck.js';

const versions = readFileSync(join(REPO_ROOT, 'hack', 'cluster', 'versions.env'), 'utf8');
const CAPI_VERSION = /^CLUSTER_API_VERSION=(\S+)$/m.exec(versions)?.[1] ?? '';
const CAPI_DIR = join(NHC_DIR, '..', `cluster-api-v${CAPI_VERSION}`);
const SAMPLES = join(REPO_ROOT, 'config', 'samples', 'health-checks');
const CRDS = {
  nhc: {
    file: join(NHC_DIR, 'crds', 'remediation.medik8s.io_nodehealthchecks.yaml'),
    name: 'nodehealthchecks.remediation.medik8s.io',
  },
  mhc: {
    file: join(CAPI_DIR, 'crds', 'cluster.x-k8s.io_machinehealthchecks.yaml'),
    name: 'machinehealthchecks.cluster.x-k8s.io',
  },
};

type Sample = { spec: Record<string, unknown> } & Record<string, unknown>;
const sample = (file: string) => parse(readFileSync(join(SAMPLES, file), 'utf8')) as Sample;

/** A server-side dry run of `object`: what the apiserver would store, or its refusal. */
async function dryRun(
  object: unknown,
): Promise<{ code: number; stored: Sample | undefined; stderr: string }> {
  const got = await kubectl(['create', '--dry-run=server', '-o', 'json', '-f', '-'], JSON.stringify(object));
  return {
    code: got.code,
    stderr: got.stderr,
    stored: got.code === 0 ? (JSON.parse(got.stdout) as Sample) : undefined,
  };
}

describe('the health-check samples against their CRDs', function () {
  this.timeout(120_000);
  before(async function () {
    for (const { file } of Object.values(CRDS))
      if (!existsSync(file))
        throw new Error(
          `no ${file}: run hack/cluster/build.sh node-healthcheck cluster-api (make tools does)`,
        );
    const applied = await kubectl(['apply', '--server-side', '-f', CRDS.nhc.file, '-f', CRDS.mhc.file]);
    expect(applied.code, applied.stderr).to.equal(0);
    await eventually(
      'both CRDs established',
      async () =>
        (
          await kubectl([
            'wait',
            '--for=condition=Established',
            '--timeout=20s',
            `crd/${CRDS.nhc.name}`,
            `crd/${CRDS.mhc.name}`,
          ])
        ).code === 0,
    );
  });
  after(async () => {
    await kubectl(['delete', 'crd', CRDS.nhc.name, CRDS.mhc.name, '--ignore-not-found']);
  });

  it('NodeHealthCheck: taken as written, with SandboxCreationDegraded True for 15m among its unhealthy conditions', async () => {
    const { code, stored, stderr } = await dryRun(sample('nodehealthcheck-sandbox.yaml'));
    expect(code, stderr).to.equal(0);
    expect(stored!.spec.unhealthyConditions).to.deep.include({
      type: NODE_CONDITION_TYPE,
      status: 'True',
      duration: '15m',
    });
    expect(stored!.spec).to.include({ minHealthy: '51%' });
  });

  it('MachineHealthCheck v1beta2: taken as written, with SandboxCreationDegraded True for 900 s among its node checks', async () => {
    const object = sample('machinehealthcheck-sandbox.yaml');
    const { code, stored, stderr } = await dryRun({
      ...object,
      metadata: { ...(object.metadata as object), namespace: 'default' },
    });
    expect(code, stderr).to.equal(0);
    const checks = stored!.spec.checks as { unhealthyNodeConditions: unknown[] };
    expect(checks.unhealthyNodeConditions).to.deep.include({
      type: NODE_CONDITION_TYPE,
      status: 'True',
      timeoutSeconds: 900,
    });
  });

  it('the dry runs can refuse: a duration NHC cannot parse, a timeout MHC does not take as a string', async () => {
    const nhc = sample('nodehealthcheck-sandbox.yaml');
    const badNhc = {
      ...nhc,
      spec: {
        ...nhc.spec,
        unhealthyConditions: [{ type: NODE_CONDITION_TYPE, status: 'True', duration: 'fifteen minutes' }],
      },
    };
    const refusedNhc = await dryRun(badNhc);
    expect(refusedNhc.code).to.not.equal(0);
    expect(refusedNhc.stderr).to.match(/duration/);
    const mhc = sample('machinehealthcheck-sandbox.yaml');
    const badMhc = {
      ...mhc,
      metadata: { ...(mhc.metadata as object), namespace: 'default' },
      spec: {
        ...mhc.spec,
        checks: {
          unhealthyNodeConditions: [{ type: NODE_CONDITION_TYPE, status: 'True', timeoutSeconds: '15m' }],
        },
      },
    };
    const refusedMhc = await dryRun(badMhc);
    expect(refusedMhc.code).to.not.equal(0);
    expect(refusedMhc.stderr).to.match(/timeoutSeconds/);
  });
});
