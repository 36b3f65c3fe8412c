// config/rbac/io-limits-admission-policy.yaml on the real apiserver: an IO limit the operator wants on a node's pod
// (SandboxHealth spec.ioLimits) is applied by the node's agent to the pod's cgroup, so whoever may add one may slow any
// pod. Acted as the people who would try: a user RBAC lets write SandboxHealth objects (an SRE, or a tenant given too
// much) may lift a limit, never add or change one; the operator's ServiceAccount may do both.
import { expect } from 'chai';
import { setTimeout as sleep } from 'node:timers/promises';
import { GROUP, VERSION, type WantedIoLimitSpec } from '../../src/api/v1alpha1/index.js';
import { Cleanup, createNodes, eventually, kubectl, uniqueName } from '../support/cluster.js';
import { deniedBy, typeCheckWarnings } from '../support/admission.js';
import { applyCrds, applyRbac } from '../support/operator-process.js';
import { applyPolicy, getHealth } from '../support/resources.js';

const POLICY = 'sandbox-remediator-io-limits';
const OPERATOR = 'system:serviceaccount:sandbox-remediator-system:sandbox-remediator-operator';
const RESOURCE = 'sandboxhealths.sandbox.remediator.io';

const limit = (podUid: string, wbps: number): WantedIoLimitSpec => ({
  podUid,
  pod: `shop/${podUid.slice(0, 4)}`,
  device: '254:0',
  limit: { wbps },
  policy: 'it-io-limits',
  since: '2026-12-06T00:00:00Z',
});
const DB = '11111111-2222-4333-8444-555555555555';
const WEB = '66666666-7777-4888-9999-000000000000';

describe('config/rbac/io-limits-admission-policy.yaml: only the operator adds or changes an IO limit', function () {
  const cleanup = new Cleanup();
  const sre = uniqueName('it-sre');
  let node = '';

  /** Replaces spec.ioLimits as `user` (a merge patch: the list whole); the exit code and stderr. */
  const setLimits = (user: string, limits: WantedIoLimitSpec[] | null) =>
    kubectl([
      'patch',
      'sandboxhealth',
      node,
      '--type=merge',
      '-p',
      JSON.stringify({ spec: { ioLimits: limits } }),
      `--as=${user}`,
    ]);
  const limitsNow = async () => (await kubectl(['get', 'sandboxhealth', node, '-o', 'json'])).stdout;
  const wanted = async () =>
    (JSON.parse(await limitsNow()) as { spec: { ioLimits?: WantedIoLimitSpec[] } }).spec.ioLimits ?? [];

  before(async function () {
    this.timeout(120_000);
    await applyCrds();
    await applyRbac();
    // RBAC lets both write SandboxHealth objects here: the policy alone tells them apart.
    for (const [name, subject] of [
      [sre, `--user=${sre}`],
      [`${sre}-operator`, '--serviceaccount=sandbox-remediator-system:sandbox-remediator-operator'],
    ] as const) {
      const role = await kubectl([
        'create',
        'clusterrole',
        name,
        '--verb=get,patch',
        `--resource=${RESOURCE}`,
      ]);
      expect(role.code, role.stderr).to.equal(0);
      cleanup.add(() => kubectl(['delete', 'clusterrole', name, '--ignore-not-found']));
      const binding = await kubectl(['create', 'clusterrolebinding', name, `--clusterrole=${name}`, subject]);
      expect(binding.code, binding.stderr).to.equal(0);
      cleanup.add(() => kubectl(['delete', 'clusterrolebinding', name, '--ignore-not-found']));
    }
    const nodes = await createNodes(cleanup, 1);
    [node = ''] = nodes.names;
    // Operators other tests run on this cluster delete a SandboxHealth no valid policy owns, but leave one whose
    // status names an invalid policy alone: hold ours with one (a prometheus source without its settings).
    const holder = uniqueName('it-io-limits-hold');
    await applyPolicy(cleanup, holder, {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': nodes.pool } },
      ioPressure: { source: 'prometheus' },
    });
    cleanup.add(() => kubectl(['delete', 'sandboxhealth', node, '--ignore-not-found']));
    const health = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'SandboxHealth',
      metadata: { name: node },
      spec: { nodeName: node },
    };
    await eventually(`SandboxHealth ${node} held`, async () => {
      await kubectl(['create', '-f', '-'], JSON.stringify(health));
      const status = JSON.stringify({ status: { policy: holder } });
      if (
        (
          await kubectl([
            'patch',
            'sandboxhealth',
            node,
            '--subresource=status',
            '--type=merge',
            '-p',
            status,
          ])
        ).code
      )
        return false;
      await sleep(500); // a deletion decided on an older view may still land: it must have stayed
      return (await getHealth(node))?.policy === holder;
    });
    // Policies load asynchronously: until the SRE's write is refused by this one, it may get through.
    await eventually(
      'the policy in force',
      async () => {
        const tried = await setLimits(sre, [limit(WEB, 65_536)]);
        if (tried.code === 0) await setLimits(OPERATOR, null);
        return tried.stderr.includes(POLICY);
      },
      { timeoutMs: 30_000 },
    );
  });
  after(async function () {
    this.timeout(60_000);
    await cleanup.run();
  });

  it('type-checks without warnings', async () => {
    expect(await typeCheckWarnings(POLICY)).to.deep.equal([]);
  });

  it('lets the operator add, step and lift limits', async () => {
    for (const limits of [[limit(DB, 4_194_304)], [limit(DB, 2_097_152), limit(WEB, 1_048_576)], null]) {
      const set = await setLimits(OPERATOR, limits);
      expect(set.code, set.stderr).to.equal(0);
      expect(await wanted()).to.deep.equal(limits ?? []);
    }
  });

  it('refuses anyone else a new limit or a changed one, naming each', async () => {
    const added = await setLimits(sre, [limit(DB, 65_536), limit(WEB, 65_536)]);
    expect(added.code).to.not.equal(0);
    expect(added.stderr).to.contain(
      deniedBy(
        POLICY,
        `only the operator may add or change IO limits (spec.ioLimits: ${DB} 254:0, ${WEB} 254:0); removing one lifts it`,
      ),
    );
    expect(await wanted()).to.deep.equal([]);
    expect((await setLimits(OPERATOR, [limit(DB, 4_194_304)])).code).to.equal(0);
    // Loosened or tightened, a changed limit is a new one: the operator's alone.
    for (const wbps of [8_388_608, 65_536]) {
      const changed = await setLimits(sre, [limit(DB, wbps)]);
      expect(changed.stderr).to.contain(`spec.ioLimits: ${DB} 254:0)`);
    }
    expect(await wanted()).to.deep.equal([limit(DB, 4_194_304)]);
  });

  it('lets a person lift a limit the operator set (removing it), and nothing else with it', async () => {
    expect((await setLimits(OPERATOR, [limit(DB, 4_194_304), limit(WEB, 1_048_576)])).code).to.equal(0);
    const lifted = await setLimits(sre, [limit(WEB, 1_048_576)]);
    expect(lifted.code, lifted.stderr).to.equal(0);
    expect(await wanted()).to.deep.equal([limit(WEB, 1_048_576)]);
    // Lifting one and adding another in one write is refused whole.
    const swapped = await setLimits(sre, [limit(DB, 1_048_576)]);
    expect(swapped.stderr).to.contain(`spec.ioLimits: ${DB} 254:0)`);
    expect(await wanted()).to.deep.equal([limit(WEB, 1_048_576)]);
    const all = await setLimits(sre, null);
    expect(all.code, all.stderr).to.equal(0);
    expect(await wanted()).to.deep.equal([]);
  });
});
