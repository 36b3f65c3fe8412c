// Argo Rollouts for real: its controller, built from the Go module proxy (hack/cluster/build.sh argo-rollouts, about
// 15 minutes cold on 2 cores, hence make test-argo and not make test), rolls a Rollout out onto kwok nodes; the
// operator pauses it by spec.paused while its new pod is stuck on a saturated node, and resets only spec.paused after
// the recovery, and the controller finishes the rollout.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { expect } from 'chai';
import { ARGO_ROLLOUTS } from '../../src/kube/actuator.js';
import { loadKubeConfig } from '../../src/kube/client.js';
import { apiStatus } from '../../src/kube/errors.js';
import { operatorWrites, resourceOf } from '../support/audit.js';
import { Cleanup, eventually, hack, kubectl, KUBECONFIG } from '../support/cluster.js';
import { REPO_ROOT } from '../support/manifests.js';
import { freePort } from '../support/monitoring.js';
import { saturablePool } from '../support/saturable-pool.js';
import { applyCrds, applyRbac, startAsServiceAccount } from '../support/operator-process.js';
import { getPolicyStatus } from '../support/resources.js';
import { createToken, writeTokenKubeconfig } from '../support/tokens.js';
import { eventsWithReasonAtLeast, startIncident } from '../support/workloads.js';

const version = /ARGO_ROLLOUTS_VERSION=(\S+)/.exec(
  readFileSync(join(REPO_ROOT, 'hack', 'cluster', 'versions.env'), 'utf8'),
)![1]!;
const BIN = join(
  process.env.SANDBOX_REMEDIATOR_CACHE ?? join(homedir(), '.cache', 'sandbox-remediator'),
  'bin',
  `argo-rollouts-v${version}-loopback`,
);
const ARGO_CRDS = [
  'rollouts',
  'experiments',
  'analysisruns',
  'analysistemplates',
  'clusteranalysistemplates',
].map((r) => `${r}.argoproj.io`);
const STAMP = 'sandbox.remediator.io/paused-by';
const log = (msg: string) => {
  console.log(`      [argo] ${msg}`);
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Rollout {
  metadata?: { generation?: number; annotations?: Record<string, string> };
  spec?: { paused?: boolean; replicas?: number };
  status?: {
    phase?: string;
    currentPodHash?: string;
    stableRS?: string;
    updatedReplicas?: number;
    availableReplicas?: number;
    pauseConditions?: unknown[];
  };
}
const readRollout = async (namespace: string, name: string): Promise<Rollout> =>
  JSON.parse(
    (await kubectl(['get', 'rollout.argoproj.io', name, '-n', namespace, '-o', 'json'])).stdout,
  ) as Rollout;
const healthy = (r: Rollout) =>
  r.status?.phase === 'Healthy' &&
  r.status.currentPodHash === r.status.stableRS &&
  r.status.availableReplicas === r.spec?.replicas;

describe('Argo Rollouts on the real cluster: its controller rolls out, the operator pauses by spec.paused alone', function () {
  const cleanup = new Cleanup();
  let controller: ChildProcess | undefined;

  before(async function () {
    this.timeout(120_000);
    if (!existsSync(join(BIN, 'rollouts-controller')) || !existsSync(join(BIN, 'crds')))
      throw new Error(
        `no Argo Rollouts controller in ${BIN}: run hack/cluster/build.sh argo-rollouts (make test-argo does)`,
      );
    await applyCrds();
    await applyRbac();
    // All five of its CRDs: its controller waits for the caches of experiments and analyses before it rolls out.
    expect((await kubectl(['apply', '--server-side', '-f', join(BIN, 'crds')])).code).to.equal(0);
    await kubectl([
      'wait',
      '--for=condition=Established',
      ...ARGO_CRDS.map((c) => `crd/${c}`),
      '--timeout=60s',
    ]);
    const [metrics, healthz] = [await freePort(), await freePort()];
    controller = spawn(
      join(BIN, 'rollouts-controller'),
      [
        `--kubeconfig=${KUBECONFIG}`,
        '--leader-elect=false',
        `--metricsport=${metrics}`,
        `--healthzPort=${healthz}`,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let tail = '';
    controller.stderr?.on('data', (d: Buffer) => {
      tail = (tail + d.toString()).slice(-4000);
    });
    controller.on('exit', (code) => {
      if (code !== null && code !== 0) console.error(`      [argo] controller exited ${code}:\n${tail}`);
    });
    await eventually(
      'the Argo Rollouts controller healthy',
      async () => {
        const r = await fetch(`http://127.0.0.1:${healthz}/healthz`).catch(() => undefined);
        return r?.ok === true;
      },
      { timeoutMs: 60_000 },
    );
  });
  after(async function () {
    this.timeout(60_000);
    controller?.kill('SIGTERM');
    await cleanup.run();
    // Other test files start operators that would discover it: leave the cluster as it was.
    await kubectl(['delete', 'crd', ...ARGO_CRDS, '--ignore-not-found', '--wait=true']);
  });

  it('pauses a Rollout feeding a saturated node, holds it there, resets only spec.paused after the recovery, and the controller finishes it', async function () {
    this.timeout(300_000);
    const since = new Date();
    const dir = await mkdtemp(join(tmpdir(), 'argo-'));
    cleanup.add(() => rm(dir, { recursive: true, force: true }));
    const operator = await startAsServiceAccount(dir, 'argo');
    cleanup.add(() => operator.stop());
    expect(
      operator.logs.some((l) => l.message === 'Argo Rollouts is installed: Rollouts are throttled too'),
    ).to.equal(true);

    const [saturable] = await saturablePool(
      cleanup,
      {
        remediation: { evictStuckPods: false, throttleRollouts: { maxConcurrentRollouts: 5 } },
        safety: { maxUnhealthyNodes: 1, cooldownSeconds: 5 },
      },
      { prefix: 'it-argo' },
    );
    const { namespace, sick, policy, proc } = saturable!;

    const rollout = () => ({
      apiVersion: 'argoproj.io/v1alpha1',
      kind: 'Rollout',
      metadata: { name: 'front', namespace },
      spec: {
        replicas: 2,
        selector: { matchLabels: { app: 'front' } },
        strategy: { canary: { maxSurge: 1, maxUnavailable: 0 } },
        template: {
          metadata: { labels: { app: 'front' } },
          spec: {
            nodeSelector: { 'kubernetes.io/hostname': sick },
            terminationGracePeriodSeconds: 0,
            containers: [{ name: 'app', image: 'registry.local/app:1' }],
          },
        },
      },
    });
    const apply = (body: object) =>
      kubectl(['apply', '--server-side', '--field-manager=owner', '-f', '-'], JSON.stringify(body));
    const created = await apply(rollout());
    expect(created.code, created.stderr).to.equal(0);
    await eventually('the Rollout healthy', async () => healthy(await readRollout(namespace, 'front')), {
      timeoutMs: 90_000,
    });

    await startIncident(cleanup, sick);
    await proc.setPressure('load');
    // A new template, as a user's change makes one (a patch: its controller owns fields of the template it defaulted).
    const restarted = await kubectl([
      'patch',
      'rollout.argoproj.io',
      'front',
      '-n',
      namespace,
      '--type=merge',
      '-p',
      JSON.stringify({
        spec: { template: { metadata: { annotations: { restartedAt: new Date().toISOString() } } } },
      }),
    ]);
    expect(restarted.code, restarted.stderr).to.equal(0);
    const paused = await eventually(
      'front paused by the policy',
      async () => {
        const r = await readRollout(namespace, 'front');
        return r.spec?.paused === true && r.metadata?.annotations?.[STAMP] === policy ? r : undefined;
      },
      { timeoutMs: 90_000 },
    );
    log(`paused: phase ${paused.status?.phase}, ${paused.status?.updatedReplicas} updated`);
    expect(
      (await getPolicyStatus(policy))?.throttledRollouts?.map((r) => `${r.kind}/${r.name}`),
    ).to.deep.equal([`Rollout/${namespace}/front`]);
    const held = await readRollout(namespace, 'front');
    for (let i = 0; i < 8; i++) {
      await sleep(1000);
      const now = await readRollout(namespace, 'front');
      expect(now.status?.updatedReplicas, `second ${i}: no progress while paused`).to.equal(
        held.status?.updatedReplicas,
      );
    }

    await hack('incident', ['stop', '--node', sick]);
    await proc.setPressure('idle');
    await eventually(
      'front released',
      async () => {
        const r = await readRollout(namespace, 'front');
        return r.spec?.paused !== true && !r.metadata?.annotations?.[STAMP];
      },
      { timeoutMs: 120_000 },
    );
    await eventually(
      'the controller finished the rollout',
      async () => healthy(await readRollout(namespace, 'front')),
      {
        timeoutMs: 120_000,
      },
    );
    expect(await eventsWithReasonAtLeast(1, 'RolloutPaused', namespace, 'front')).to.have.length(1);
    expect(await eventsWithReasonAtLeast(1, 'RolloutResumed', namespace, 'front')).to.have.length(1);

    // What the operator wrote to the Rollout: spec.paused and its stamps, nothing else (no promotion, no status).
    const writes = (await operatorWrites(since)).filter((e) => resourceOf(e) === 'rollouts');
    log(
      `operator writes to rollouts: ${writes.map((e) => JSON.stringify((e.requestObject as { spec?: unknown }).spec)).join(', ')}`,
    );
    expect(writes.map((e) => e.verb)).to.deep.equal(['patch', 'patch']);
    expect(writes.map((e) => (e.requestObject as { spec?: unknown }).spec)).to.deep.equal([
      { paused: true },
      { paused: false },
    ]);

    // Those went through the operator's admission policy (config/rbac, applied above); anything else does not.
    const custom = loadKubeConfig(
      await writeTokenKubeconfig(
        dir,
        'probe',
        await createToken('sandbox-remediator-system', 'sandbox-remediator-operator'),
      ),
    ).makeApiClient(CustomObjectsApi);
    const refused = await custom
      .patchNamespacedCustomObject(
        { ...ARGO_ROLLOUTS, plural: 'rollouts', namespace, name: 'front', body: { spec: { replicas: 5 } } },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      )
      .then(
        () => 'allowed',
        (err: unknown) => apiStatus(err)?.message ?? String(err),
      );
    expect(refused).to.contain('the operator may change only spec.paused of a Rollout, not spec.replicas');
  });
});
