// Faults during a live remediation on the real cluster: the control plane and the operator killed with -9 at the
// points that matter, leaders changing mid-burst. What each process wrote is counted from the apiserver's audit log
// (hack/cluster/audit-policy.yaml), not from the operator's own logs.
import { expect } from 'chai';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  alternates,
  maxEvictionsInAMinute,
  operatorWrites,
  settledSettings,
  writesPerObject,
} from '../support/audit.js';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  hack,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import {
  applyCrds,
  applyRbac,
  startAsServiceAccount,
  type OperatorProcess,
} from '../support/operator-process.js';
import { FAST_IO } from '../support/proc-root.js';
import { applyPolicy, condition, getHealth, getPolicyStatus } from '../support/resources.js';
import {
  createRolloutDeployment,
  isComplete,
  pausedBy,
  readDeployment,
  restartRollout,
} from '../support/rollouts.js';
import { SaturatedNode } from '../support/saturated-node.js';
import { createSpreadDeployment, isRunning, podsOf, readNode, stampsOf } from '../support/workloads.js';

const NAMESPACE = 'sandbox-remediator-system';
const LEASE = 'sandbox-remediator-operator';
const COMPONENTS = ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kwok'];
const log = (msg: string) => {
  console.error(`      [faults] ${msg}`);
};
const poolSelector = (pool: string) => ({ matchLabels: { 'sandbox.remediator.io/test-pool': pool } });

const component = async (action: 'kill' | 'start' | 'restart', name: string) => {
  const result = await hack('component.sh', [action, name]);
  if (result.code !== 0) throw new Error(`component.sh ${action} ${name}: ${result.stderr}`);
};

const isCordoned = async (node: string) => (await readNode(node)).spec?.unschedulable === true;

/**
 * A remediation under way on a pool of six kwok nodes: `sick` nodes with the incident (stuck pods) and an agent
 * over a crafted /proc; the first under IO pressure from the start, the others on cue. A Deployment spread over
 * the pool has pods stuck on each sick node, and rollouts of others feed the first: paused until their stuck pods
 * are evicted (with maxEvictionsPerMinute 0, until recovery).
 */
async function liveRemediation(
  cleanup: Cleanup,
  {
    sickNodes = 1,
    spread = 12,
    safety = {},
    rollouts = ['roll'],
    finalizers,
  }: {
    sickNodes?: number;
    spread?: number;
    safety?: object;
    /** Deployments whose rollout feeds the first sick node. */
    rollouts?: string[];
    /** On the spread Deployment's pods. */
    finalizers?: string[];
  },
) {
  const namespace = await createNamespace(cleanup);
  const { pool, names } = await createNodes(cleanup, 6);
  const policy = uniqueName('it-faults');
  const spec = {
    nodeSelector: poolSelector(pool),
    detection: { stuckThresholdSeconds: 3 },
    ioPressure: FAST_IO,
    safety: { maxUnhealthyNodes: sickNodes, cooldownSeconds: 5, ...safety },
    remediation: { throttleRollouts: { maxConcurrentRollouts: 5 } },
  };
  await applyPolicy(cleanup, policy, spec);
  const sick = names.slice(0, sickNodes).map((name) => new SaturatedNode(name, cleanup));
  for (const name of rollouts) {
    await createRolloutDeployment(cleanup, namespace, name, pool, sick[0]!.name);
    await eventually(`${name} available`, async () => isComplete(await readDeployment(namespace, name)), {
      timeoutMs: 60_000,
    });
  }
  for (const node of sick) await node.start();
  await createSpreadDeployment(cleanup, namespace, 'web', pool, spread, finalizers ? { finalizers } : {});
  for (const name of rollouts) await restartRollout(namespace, name);
  await eventually('stuck pods on every sick node', async () => {
    const pods = [...(await podsOf(namespace, 'web')), ...(await podsOf(namespace, 'roll'))];
    return sick.every((node) => pods.some((p) => p.spec?.nodeName === node.name && !isRunning(p)));
  });
  await sick[0]!.pressure('load');
  return { namespace, pool, names, policy, spec, sick };
}

/** Nothing of ours is left: no node cordoned or stamped, no Deployment paused or stamped. */
async function nothingLeftBehind(
  names: string[],
  namespace: string,
  deployments = ['roll'],
): Promise<boolean> {
  for (const name of names) {
    const node = await readNode(name);
    if (node.spec?.unschedulable || Object.keys(stampsOf(node)).length > 0) return false;
  }
  for (const name of deployments) {
    const d = await readDeployment(namespace, name);
    if (d.spec?.paused === true || pausedBy(d) !== undefined) return false;
  }
  return true;
}

describe('faults during a live remediation', function () {
  const cleanup = new Cleanup();
  const operators: OperatorProcess[] = [];
  let dir = '';

  before(async function () {
    this.timeout(120_000);
    await applyCrds();
    await applyRbac();
    dir = await mkdtemp(join(tmpdir(), 'faults-'));
  });
  afterEach(async function () {
    this.timeout(180_000);
    if (this.currentTest?.state === 'failed') {
      for (const o of operators) console.error(`--- operator log tail:\n${o.tail(40)}`);
      // What the operator was looking at: pods still waiting mean kwok never started them, not a stuck operator.
      const pods = await kubectl([
        'get',
        'pods',
        '-A',
        '-o',
        'custom-columns=NS:.metadata.namespace,POD:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase,WAITING:.status.containerStatuses[*].state.waiting.reason',
      ]);
      console.error(`--- pods:\n${pods.stdout}`);
      const nodes = await kubectl(['get', 'nodes', '-o', 'wide']);
      console.error(`--- nodes:\n${nodes.stdout}`);
    }
    for (const o of operators.splice(0)) await o.stop();
    // A failed test may have left a component down: the next tests need the whole control plane.
    for (const name of COMPONENTS) await component('start', name);
    await cleanup.run();
    await kubectl(['delete', 'lease', LEASE, '-n', NAMESPACE, '--ignore-not-found']);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  const startOperator = async (name: string, args: string[] = []) => {
    const operator = await startAsServiceAccount(dir, name, args);
    operators.push(operator);
    return operator;
  };

  it('converges within 10 s of the apiserver being ready after kill -9 of kube-apiserver, then of etcd, and repeats no cordon, eviction or pause', async function () {
    this.timeout(420_000);
    const since = new Date();
    const operator = await startOperator('faults-control-plane');
    const { namespace, names, sick } = await liveRemediation(cleanup, {
      sickNodes: 3,
      safety: { maxEvictionsPerMinute: 3 },
    });
    const [first, second, third] = sick as [SaturatedNode, SaturatedNode, SaturatedNode];
    await eventually(
      // The rollout is paused too, until its stuck pod is evicted: the audit log shows it below.
      'the first node cordoned, evictions under way',
      async () =>
        (await isCordoned(first.name)) &&
        ((await getHealth(first.name))?.actions?.some((a) => a.kind === 'Evict') ?? false),
      { timeoutMs: 90_000 },
    );

    // Each outage: a second node comes under pressure while the store is gone; the operator must see it and
    // cordon it as soon as the apiserver serves again.
    const outage = async (name: 'kube-apiserver' | 'etcd', node: SaturatedNode) => {
      await component('kill', name);
      log(`killed ${name} (kill -9)`);
      await node.pressure('load');
      await sleep(5000);
      await component('start', name);
      await eventually(
        'the apiserver ready',
        async () => (await kubectl(['get', '--raw=/readyz'])).code === 0,
        { timeoutMs: 60_000, intervalMs: 100 },
      );
      const ready = Date.now();
      await eventually(`${node.name} cordoned`, () => isCordoned(node.name), {
        timeoutMs: 60_000,
        intervalMs: 100,
      });
      const convergedMs = Date.now() - ready;
      log(`after kill -9 of ${name}: ${node.name} cordoned ${convergedMs} ms after the apiserver was ready`);
      return convergedMs;
    };
    const afterApiserver = await outage('kube-apiserver', second);
    const afterEtcd = await outage('etcd', third);
    expect(afterApiserver, 'converged after the apiserver restart (ms)').to.be.at.most(10_000);
    expect(afterEtcd, 'converged after the etcd restart (ms)').to.be.at.most(10_000);
    expect(operator.isRunning(), 'the operator rode out both outages').to.equal(true);

    // kwok, not the operator, is what is left behind by kill -9 of etcd: at times its pod watch never recovers, and
    // the incident's pods stay ContainerCreating once it has ended (seen with and without kept-alive connections,
    // the nodes rightly kept cordoned). A fresh kwok plays the nodes' recovery.
    await component('restart', 'kwok');
    for (const node of sick) await node.end();
    await eventually('everything undone', () => nothingLeftBehind(names, namespace), {
      timeoutMs: 120_000,
    });
    const writes = await operatorWrites(since);
    const attempts = await operatorWrites(since, { indeterminate: true });
    const cordons = settledSettings(attempts, 'nodes', 'unschedulable');
    log(`audit: node changes ${JSON.stringify(cordons)}`);
    for (const node of sick)
      expect(cordons[node.name], `${node.name}: one cordon, one uncordon`).to.deep.equal([true, false]);
    const evictions = writesPerObject(writes, 'pods/eviction');
    log(`audit: ${Object.keys(evictions).length} pods evicted`);
    expect(Object.keys(evictions).length, 'evictions happened').to.be.greaterThan(0);
    expect(
      Object.values(evictions).every((n) => n === 1),
      'no pod evicted twice',
    ).to.equal(true);
    expect(maxEvictionsInAMinute(writes), 'maxEvictionsPerMinute').to.be.at.most(3);
    const pauses = settledSettings(attempts, 'deployments', 'paused');
    log(`audit: deployment changes ${JSON.stringify(pauses)}`);
    expect(pauses.roll?.[0], 'roll paused').to.equal(true);
    for (const [name, changes] of Object.entries(pauses))
      expect(alternates(changes), `${name}: never paused twice without a resume`).to.equal(true);
  });

  it('hands over across kill -9 mid-evictions, a graceful leader change mid-burst and kill -9 before the undo: maxEvictionsPerMinute holds across leaders, nothing is done twice or left behind', async function () {
    this.timeout(420_000);
    const since = new Date();
    const a = await startOperator('faults-a', ['--leader-elect']);
    await a.waitForLog('Started controller', 60_000);
    const b = await startOperator('faults-b', ['--leader-elect']);
    // Four pods stuck on the sick node (spread 24 over 6): four to evict, two a minute. The rollout's is kept.
    const { namespace, names, policy, sick } = await liveRemediation(cleanup, {
      spread: 24,
      safety: { maxEvictionsPerMinute: 2 },
    });
    const node = sick[0]!.name;
    const evicted = async () =>
      ((await getHealth(node))?.actions ?? []).filter((x) => x.kind === 'Evict' && x.outcome === 'Succeeded');
    await eventually('the first two evictions, the rest held', async () => (await evicted()).length === 2, {
      timeoutMs: 90_000,
    });
    // A graceful change mid-burst: b leads at once, from its own cache of the eviction log.
    expect(await a.stop(), 'a exits 0 on SIGTERM').to.equal(0);
    await b.waitForLog('Started controller', 30_000);
    log('a stopped; b leads');
    const c = await startOperator('faults-c', ['--leader-elect']);
    await c.waitForLog('Caches synced: standing by until this replica leads', 60_000);
    // kill -9 mid-evictions: c takes over when the lease runs out.
    b.kill();
    await c.waitForLog('Started controller', 40_000);
    log('b killed; c leads');
    await eventually('all four evicted', async () => (await evicted()).length === 4, { timeoutMs: 120_000 });
    const d = await startOperator('faults-d', ['--leader-elect']);
    await sick[0]!.end();
    await eventually(
      'recovering: readings under the thresholds, not yet for recoverySeconds',
      async () => {
        const h = await getHealth(node);
        return (
          h?.ioPressure?.observation === 'Under' &&
          condition(h.conditions, 'IoPressureHigh')?.status === 'True'
        );
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    expect(await isCordoned(node), 'not undone yet').to.equal(true);
    // kill -9 before the undo: d must undo what the others did.
    c.kill();
    await d.waitForLog('Started controller', 40_000);
    log('c killed; d leads');
    await eventually('everything undone by d', () => nothingLeftBehind(names, namespace), {
      timeoutMs: 120_000,
    });
    await d.waitForLog('Uncordoned Node', 10_000);

    const writes = await operatorWrites(since);
    const attempts = await operatorWrites(since, { indeterminate: true });
    expect(settledSettings(attempts, 'nodes', 'unschedulable'), 'one cordon, one uncordon').to.deep.equal({
      [node]: [true, false],
    });
    const evictions = writesPerObject(writes, 'pods/eviction');
    expect(Object.values(evictions), 'four pods, each evicted once').to.deep.equal([1, 1, 1, 1]);
    const most = maxEvictionsInAMinute(writes);
    log(`audit: at most ${most} evictions in any minute across four processes`);
    expect(most, 'maxEvictionsPerMinute across leaders').to.be.at.most(2);
    const pauses = settledSettings(attempts, 'deployments', 'paused');
    log(`audit: deployment changes ${JSON.stringify(pauses)}`);
    expect(pauses.roll?.[0], 'roll paused').to.equal(true);
    for (const [name, changes] of Object.entries(pauses))
      expect(alternates(changes), `${name}: never paused twice without a resume`).to.equal(true);
    expect((await getPolicyStatus(policy))?.recentEvictions?.length ?? 0).to.be.at.most(2);
  });
  it('rides out the world changing under a remediation: a pod gone while evicted, SandboxHealth deleted or edited by hand, a paused Deployment deleted or scaled to 0, the node deleted', async function () {
    this.timeout(420_000);
    const since = new Date();
    const operator = await startOperator('faults-world');
    const hold = 'sandbox.remediator.io/test-hold';
    // No evictions at first: the stuck pods stay, so the rollouts keep feeding the node and stay paused.
    const { namespace, names, policy, spec, sick } = await liveRemediation(cleanup, {
      sickNodes: 2,
      spread: 18,
      safety: { maxEvictionsPerMinute: 0 },
      rollouts: ['roll', 'gone', 'scaled'],
      finalizers: [hold],
    });
    // Pods held by a finalizer linger in Terminating once evicted; let them go before the namespace is deleted.
    cleanup.add(async () => {
      const { core } = api();
      for (const pod of (await core.listNamespacedPod({ namespace })).items)
        await kubectl([
          'patch',
          'pod',
          pod.metadata!.name!,
          '-n',
          namespace,
          '--type=merge',
          '-p',
          '{"metadata":{"finalizers":null}}',
        ]);
    });
    const [first, second] = sick as [SaturatedNode, SaturatedNode];
    await second.pressure('load');
    await eventually(
      'both nodes cordoned, the three rollouts paused',
      async () => {
        for (const name of ['roll', 'gone', 'scaled'])
          if (pausedBy(await readDeployment(namespace, name)) === undefined) return false;
        return (await isCordoned(first.name)) && (await isCordoned(second.name));
      },
      { timeoutMs: 90_000 },
    );

    // SandboxHealth deleted by hand: written again, still saying what was done.
    expect((await kubectl(['delete', 'sandboxhealth', first.name])).code).to.equal(0);
    const back = await eventually(
      'SandboxHealth written again',
      async () => {
        const h = await getHealth(first.name);
        return condition(h?.conditions, 'Cordoned')?.status === 'True' ? h : undefined;
      },
      { timeoutMs: 30_000 },
    );
    expect(back.remediation, 'the remediation read back from the stamps').to.not.equal(undefined);

    // Status edited by hand to say the pressure ended an hour ago: not evidence, so nothing is undone.
    const forged = {
      status: {
        ioPressure: { observation: 'Under', since: new Date(Date.now() - 3_600_000).toISOString() },
        conditions: [
          {
            type: 'IoPressureHigh',
            status: 'False',
            reason: 'IoPressureRecovered',
            message: 'edited by hand',
            lastTransitionTime: new Date(Date.now() - 3_600_000).toISOString(),
          },
        ],
      },
    };
    const edited = await kubectl([
      'patch',
      'sandboxhealth',
      second.name,
      '--subresource=status',
      '--type=merge',
      '-p',
      JSON.stringify(forged),
    ]);
    expect(edited.code, edited.stderr).to.equal(0);
    await eventually(
      'the edit overwritten: IoPressureHigh True again',
      async () => condition((await getHealth(second.name))?.conditions, 'IoPressureHigh')?.status === 'True',
      { timeoutMs: 30_000 },
    );
    expect(await isCordoned(second.name), 'not uncordoned on an edited status').to.equal(true);

    // A paused Deployment deleted, another scaled to 0.
    await api().apps.deleteNamespacedDeployment({ name: 'gone', namespace });
    expect((await kubectl(['scale', 'deployment/scaled', '-n', namespace, '--replicas=0'])).code).to.equal(0);
    // The node deleted mid-remediation.
    await api().core.deleteNode({ name: second.name });
    await eventually(
      'the deleted node and Deployment gone from status',
      async () => {
        const h = await getHealth(first.name);
        const throttled = condition(h?.conditions, 'RolloutsThrottled')?.message ?? '';
        return !throttled.includes(`${namespace}/gone`) && (await getHealth(second.name)) === undefined;
      },
      { timeoutMs: 60_000 },
    );

    // Evictions allowed: the stuck pods go, each held in Terminating by its finalizer; looked at again and again,
    // none is evicted twice.
    await applyPolicy(cleanup, policy, { ...spec, safety: { ...spec.safety, maxEvictionsPerMinute: 10 } });
    await eventually(
      'the stuck pods evicted',
      async () =>
        ((await getHealth(first.name))?.actions ?? []).filter(
          (x) => x.kind === 'Evict' && x.outcome === 'Succeeded',
        ).length >= 3,
      { timeoutMs: 60_000 },
    );
    const terminating = (await api().core.listNamespacedPod({ namespace })).items.filter(
      (p) => p.metadata?.deletionTimestamp && p.spec?.nodeName === first.name,
    );
    expect(terminating.length, 'evicted pods held in Terminating').to.be.at.least(2);
    await sleep(10_000);

    await first.end();
    await second.end().catch(() => undefined); // its node is gone; the agent and /proc still go
    const rest = names.filter((n) => n !== second.name);
    await eventually('everything undone', () => nothingLeftBehind(rest, namespace, ['roll', 'scaled']), {
      timeoutMs: 120_000,
    });
    expect(operator.isRunning(), 'the operator rode it all out').to.equal(true);

    const writes = await operatorWrites(since);
    const attempts = await operatorWrites(since, { indeterminate: true });
    const cordons = settledSettings(attempts, 'nodes', 'unschedulable');
    log(`audit: node changes ${JSON.stringify(cordons)}`);
    expect(cordons[first.name], 'first: one cordon, one uncordon').to.deep.equal([true, false]);
    expect(cordons[second.name], 'second: cordoned once, never touched after its deletion').to.deep.equal([
      true,
    ]);
    const evictions = writesPerObject(writes, 'pods/eviction');
    log(`audit: ${Object.keys(evictions).length} pods evicted`);
    expect(
      Object.values(evictions).every((n) => n === 1),
      'no pod evicted twice',
    ).to.equal(true);
    const pauses = settledSettings(attempts, 'deployments', 'paused');
    log(`audit: deployment changes ${JSON.stringify(pauses)}`);
    for (const [name, changes] of Object.entries(pauses))
      expect(alternates(changes), `${name}: never paused twice without a resume`).to.equal(true);
    expect(pauses.gone, 'the deleted Deployment: paused, never written after').to.deep.equal([true]);
  });
});
