// `sandbox-remediator diagnose` as an SRE runs it, during a real remediation on the local cluster: a node whose pods
// are stuck on a reserved sandbox name (the incident injector), whose IO pressure the node agent proves from a crafted
// /proc (with a runc task in D state in do_mount), cordoned by the operator, a Deployment's stuck pods evicted and a
// bare pod left stuck (no controller would recreate it). The CLI runs as its own process, as a user would run it.
import { Ajv2020 } from 'ajv/dist/2020.js';
import { expect } from 'chai';
import { spawn, spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ClusterOverview, NodeDiagnosis } from '../../src/diagnose/schema.js';
import { AgentProcess } from '../support/agent-process.js';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  KUBECONFIG,
  podBoundTo,
  resolveKubectl,
  uniqueName,
} from '../support/cluster.js';
import { REPO_ROOT } from '../support/manifests.js';
import { useOperator } from '../support/operator-process.js';
import { FAST_IO, ProcRoot } from '../support/proc-root.js';
import { applyPolicy, getHealth } from '../support/resources.js';
import { createSpreadDeployment, isRunning, podsOf, readNode, startIncident } from '../support/workloads.js';

const log = (msg: string) => {
  console.error(`      [diagnose] ${msg}`);
};

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** `sandbox-remediator diagnose ARGS` through tsx, against the local cluster, outside c8's measurement. */
async function diagnose(args: string[]): Promise<Run> {
  const started = Date.now();
  const tsx = join(REPO_ROOT, 'node_modules', 'tsx', 'dist', 'esm', 'index.mjs');
  const child = spawn(
    process.execPath,
    ['--import', tsx, join(REPO_ROOT, 'src', 'main.ts'), 'diagnose', `--kubeconfig=${KUBECONFIG}`, ...args],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NODE_V8_COVERAGE: '' } },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, stdout, stderr, ms: Date.now() - started };
}

/** A runc task stuck in D state in do_mount, as /proc/PID/{stat,wchan} show one: the agent lists it. */
async function addStuckRuncTask(procRoot: string, pid: number): Promise<void> {
  const dir = join(procRoot, String(pid));
  await mkdir(dir);
  const fields = ['1', String(pid), String(pid), '0', '-1', '4194560', '100', '0', '0', '0', '12', '3'];
  await writeFile(join(dir, 'stat'), `${pid} (runc:[2:INIT]) D ${fields.join(' ')} 0 0 20 0 1 0 1000 0 0\n`);
  await writeFile(join(dir, 'wchan'), 'do_mount');
}

describe('diagnose on the real cluster', function () {
  useOperator();
  const cleanup = new Cleanup();
  const schema = readFile(join(REPO_ROOT, 'schemas', 'diagnosis.schema.json'), 'utf8').then((text) =>
    new Ajv2020({ allErrors: true, strict: false, validateFormats: false }).compile(
      JSON.parse(text) as object,
    ),
  );
  let sick = '';
  let namespace = '';
  let policy = '';

  before(async function () {
    this.timeout(240_000);
    namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 4);
    sick = names[0]!;
    policy = uniqueName('it-diagnose');
    await applyPolicy(cleanup, policy, {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      detection: { stuckThresholdSeconds: 3 },
      ioPressure: FAST_IO,
      // A long cooldown: the node stays remediated while the tests read it.
      safety: { maxUnhealthyNodes: 1, cooldownSeconds: 900 },
    });
    await eventually('SandboxHealth for every pool node', async () =>
      (await Promise.all(names.map(getHealth))).every((h) => h !== undefined),
    );

    const proc = new ProcRoot();
    const dir = await proc.create();
    cleanup.add(() => proc.remove());
    await addStuckRuncTask(dir, 5151);
    const agent = new AgentProcess();
    agent.start(sick, [`--proc-root=${dir}`, '--interval-seconds=1', '--heartbeat-seconds=3']);
    cleanup.add(() => agent.stop());
    await startIncident(cleanup, sick);

    await api().core.createNamespacedPod({ namespace, body: podBoundTo('bare', sick) });
    await createSpreadDeployment(cleanup, namespace, 'web', pool, 8);
    await eventually('the bare pod and web pods stuck on the saturated node', async () => {
      const web = (await podsOf(namespace, 'web')).filter((p) => p.spec?.nodeName === sick && !isRunning(p));
      const health = await getHealth(sick);
      const bare = health?.stuckPods?.find((p) => p.name === 'bare');
      return web.length >= 1 && bare?.cause === 'NameReserved';
    });

    await proc.setPressure('load');
    await eventually(
      'the node cordoned, its web pods evicted, the bare pod held',
      async () => {
        const health = await getHealth(sick);
        const done = (kind: string) =>
          health?.actions?.some((a) => a.kind === kind && a.outcome === 'Succeeded');
        const held = health?.blocked?.some(
          (b) => b.target === `pod/${namespace}/bare` && b.guard === 'NoController',
        );
        if (done('Cordon') && done('Evict') && held && (await readNode(sick)).spec?.unschedulable === true)
          return true;
        // Said when time runs out.
        throw new Error(
          `state ${health?.state}, actions ${JSON.stringify(health?.actions?.map((a) => `${a.kind} ${a.target} ${a.outcome}`))}, blocked ${JSON.stringify(health?.blocked)}, conditions ${JSON.stringify(health?.conditions?.map((c) => `${c.type}=${c.status} ${c.reason}`))}`,
        );
      },
      { timeoutMs: 90_000 },
    );
    log(`${sick} remediated: cordoned, web pods evicted, bare pod held`);
  });
  after(async function () {
    this.timeout(60_000);
    await cleanup.run();
  });

  it('diagnose NODE -o json names the stuck pods, the evidence and what was done, and matches the published schema', async () => {
    const run = await diagnose([sick, '-o', 'json']);
    expect(run.stderr).to.equal('');
    expect(run.code).to.equal(0);
    const document = JSON.parse(run.stdout) as NodeDiagnosis;
    const validate = await schema;
    expect(validate(document), JSON.stringify(validate.errors)).to.equal(true);

    expect(document).to.include({ kind: 'NodeDiagnosis', node: sick, state: 'Remediating' });
    const bare = document.stuckPods.listed.find((p) => p.name === 'bare');
    expect(bare, JSON.stringify(document.stuckPods)).to.not.equal(undefined);
    expect(bare!.cause).to.equal('NameReserved');
    expect(bare!.reservedName).to.equal(`bare_${namespace}_${bare!.uid}_0`);
    expect(bare!.reservedFor).to.match(/^[0-9a-f]{64}$/);
    expect(bare!.latestEvent?.count).to.be.greaterThan(0);
    expect(bare!.latestEvent?.ageSeconds).to.be.lessThan(60);

    const reading = document.io.reading!;
    expect(reading.source).to.equal('agent');
    expect(reading.ageSeconds).to.be.within(-2, 15);
    expect(reading.stale).to.equal(false);
    expect(reading.over).to.include('PSI some avg10 >= 30%');
    expect(document.io.condition).to.include({ status: 'True', reason: 'ThresholdSustained' });
    expect(document.nodeEvidence.dStateTasks).to.deep.include({
      pid: 5151,
      comm: 'runc:[2:INIT]',
      wchan: 'do_mount',
      runtime: true,
    });
    expect(document.runtime?.version).to.be.a('string');

    const { done } = document;
    expect(done.unschedulable).to.equal(true);
    expect(done.cordonedByOperator).to.equal(true);
    expect(done.stamps).to.include({ 'sandbox.remediator.io/remediated-by': policy });
    expect(done.actions.map((a) => [a.kind, a.outcome])).to.deep.include.members([
      ['Cordon', 'Succeeded'],
      ['Evict', 'Succeeded'],
    ]);
    expect(done.nodeEvents.map((e) => e.reason)).to.include('Cordoned');
    expect(document.blocking).to.deep.include({
      source: 'Guard',
      name: 'NoController',
      message: `Evict pod/${namespace}/bare: a bare pod: nothing would recreate it elsewhere`,
      since: document.blocking.find((b) => b.name === 'NoController')!.since,
    });
    // The bare pod is held (NoController): nothing is evicted next; the node stays cordoned while IO is high.
    expect(document.next.at(-1)).to.deep.include({ action: 'Wait' });
    expect(document.next.at(-1)?.text).to.match(/^keeps the node cordoned while IoPressureHigh holds/);
    expect(document.policy).to.include({ name: policy, found: true, valid: true });
    expect(document.unavailable).to.deep.equal([]);
    expect(run.ms, 'it exits once it has printed').to.be.lessThan(20_000);
  });

  it('diagnose NODE prints the same as text, section by section', async () => {
    const run = await diagnose([sick]);
    expect(run.code).to.equal(0);
    const text = run.stdout;
    log(`the text output:\n${text}`);
    expect(text.split('\n')[0]).to.match(
      new RegExp(
        `^${sick}: Remediating; \\d+ pod\\(s\\) stuck \\([^)]*NameReserved \\d+[^)]*\\); IO pressure proven \\(agent, \\d+s ago\\); cordoned by policy ${policy}; \\d+ pod\\(s\\) evicted$`,
      ),
    );
    expect(text).to.match(
      new RegExp(
        `\\n  ${namespace}/bare +\\S+ +NameReserved( \\(containerd\\))? +\\d+\\+ +x\\d+, \\S+ ago\\n`,
      ),
    );
    expect(text).to.match(new RegExp(`reserved +bare_${namespace}_[0-9a-f-]{36}_0 is held by [0-9a-f]{13}…`));
    expect(text).to.match(/\nIO evidence \(agent, observed (\d+s ago|in \d+s)\)\n/);
    expect(text).to.match(/\n {4}5151 +runc:\[2:INIT\] +do_mount +yes\n/);
    expect(text).to.contain('  node: cordoned by the operator');
    expect(text).to.match(/ago +Cordon +node\/\S+ +Succeeded +SandboxCreationStuckOnIo/);
    expect(text).to.match(/\n {2}NoController +Evict pod\/\S+\/bare: a bare pod/);
  });

  it('diagnose without a node lists the remediated node', async () => {
    const text = await diagnose([]);
    expect(text.code).to.equal(0);
    expect(text.stdout).to.match(new RegExp(`\\n  ${sick} +Remediating +\\d+ +by operator +agent, `));
    const json = await diagnose(['-o', 'json']);
    const overview = JSON.parse(json.stdout) as ClusterOverview;
    const validate = await schema;
    expect(validate(overview), JSON.stringify(validate.errors)).to.equal(true);
    expect(overview.attention.find((a) => a.node === sick)).to.deep.include({
      state: 'Remediating',
      policy,
      unschedulable: true,
      cordonedByOperator: true,
    });
  });

  it('exits 1 with one line for a node that does not exist', async () => {
    const run = await diagnose(['no-such-node-here']);
    expect(run.code).to.equal(1);
    expect(run.stdout).to.equal('');
    expect(run.stderr.trimEnd().split('\n')).to.have.length(1);
    expect(run.stderr).to.match(/^diagnose: no node "no-such-node-here" and no SandboxHealth/);
  });

  it('runs as the kubectl plugin that make plugin installs', async function () {
    this.timeout(180_000);
    const pluginDir = await mkdtemp(join(tmpdir(), 'plugin-'));
    cleanup.add(() => rm(pluginDir, { recursive: true, force: true }));
    const made = spawnSync('make', ['plugin', `PLUGIN_DIR=${pluginDir}`], {
      cwd: REPO_ROOT,
      encoding: 'utf8',
    });
    expect(made.status, made.stderr).to.equal(0);
    expect(made.stdout).to.contain(`Installed ${pluginDir}/kubectl-sandbox`);
    expect(made.stdout).to.contain('is NOT on PATH');
    const plugin = spawnSync(resolveKubectl(), ['sandbox', 'diagnose', sick], {
      encoding: 'utf8',
      env: {
        ...process.env,
        KUBECONFIG,
        PATH: `${pluginDir}:${process.env.PATH ?? ''}`,
        NODE_V8_COVERAGE: '',
      },
    });
    expect(plugin.stderr).to.equal('');
    expect(plugin.status).to.equal(0);
    expect(plugin.stdout.split('\n')[0]).to.match(new RegExp(`^${sick}: Remediating;`));
  });
});
