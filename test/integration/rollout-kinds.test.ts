// Rollout throttling of StatefulSets and DaemonSets on the real control plane: kube-controller-manager's own
// StatefulSet and DaemonSet controllers roll them out onto kwok nodes, one of which is saturated.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1DaemonSet, V1StatefulSet } from '@kubernetes/client-node';
import { expect } from 'chai';
import { api, Cleanup, eventually, hack, kubectl } from '../support/cluster.js';
import { saturablePool, TEST_POOL } from '../support/saturable-pool.js';
import {
  applyCrds,
  applyRbac,
  startAsServiceAccount,
  type OperatorProcess,
} from '../support/operator-process.js';
import { condition, getHealth, getPolicyStatus } from '../support/resources.js';
import { createRolloutDeployment, isComplete, readDeployment } from '../support/rollouts.js';
import { eventsWithReasonAtLeast, startIncident } from '../support/workloads.js';

const STAMP = 'sandbox.remediator.io/paused-by';
const HELD = 'sandbox.remediator.io/held-update-strategy';
const log = (msg: string) => {
  console.log(`      [rollout-kinds] ${msg}`);
};
/** Until some node of the pool is IoPressureHigh=True. */
const ioPressureHigh = (namespace: string, pool: string) =>
  eventually(
    `IoPressureHigh in ${pool} (${namespace})`,
    async () => {
      const nodes = await api().core.listNode({ labelSelector: `${TEST_POOL}=${pool}` });
      for (const n of nodes.items)
        if (condition((await getHealth(n.metadata!.name!))?.conditions, 'IoPressureHigh')?.status === 'True')
          return true;
      return false;
    },
    { timeoutMs: 60_000 },
  );
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const readSts = (namespace: string, name: string) =>
  api().apps.readNamespacedStatefulSet({ namespace, name });
const readDs = (namespace: string, name: string) => api().apps.readNamespacedDaemonSet({ namespace, name });
const restart = (kind: string, namespace: string, name: string) =>
  kubectl(['rollout', 'restart', `${kind}/${name}`, '-n', namespace]);

/** Every pod runs the update revision and is ready. */
const stsDone = (s: V1StatefulSet) =>
  (s.status?.observedGeneration ?? 0) >= (s.metadata?.generation ?? 0) &&
  s.status?.updatedReplicas === s.spec?.replicas &&
  s.status?.readyReplicas === s.spec?.replicas &&
  s.status?.currentRevision === s.status?.updateRevision;
const dsDone = (d: V1DaemonSet) =>
  (d.status?.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0) &&
  d.status?.desiredNumberScheduled !== 0 &&
  d.status?.updatedNumberScheduled === d.status?.desiredNumberScheduled &&
  d.status?.numberAvailable === d.status?.desiredNumberScheduled;

describe('rollout throttling of StatefulSets and DaemonSets on the real cluster', function () {
  const cleanup = new Cleanup();
  const operators: OperatorProcess[] = [];
  before(async () => {
    await applyCrds();
    await applyRbac();
  });
  afterEach(async () => {
    for (const o of operators.splice(0)) await o.stop();
    await cleanup.run();
  });

  /**
   * A pool of 3 nodes, the first saturated on demand, under a policy with maxConcurrentRollouts `max`; a StatefulSet
   * whose 2 pods run on it and a DaemonSet on every node of the pool, both rolled out to the end.
   */
  async function kinds(max: number) {
    // As the Deployment runs it: its ServiceAccount, config/rbac's role and admission policy, so that every hold and
    // release below goes through the policy that allows only those fields.
    const dir = await mkdtemp(join(tmpdir(), 'rollout-kinds-'));
    cleanup.add(() => rm(dir, { recursive: true, force: true }));
    const operator = await startAsServiceAccount(dir, 'rollout-kinds');
    operators.push(operator);
    const [saturable] = await saturablePool(
      cleanup,
      {
        remediation: { evictStuckPods: false, throttleRollouts: { maxConcurrentRollouts: max } },
        safety: { maxUnhealthyNodes: 1, cooldownSeconds: 30 },
      },
      { prefix: 'it-kinds' },
    );
    const { namespace, pool, sick } = saturable!;
    const template = (app: string, nodeSelector: Record<string, string>) => ({
      metadata: { labels: { app } },
      spec: {
        nodeSelector,
        terminationGracePeriodSeconds: 0,
        containers: [{ name: 'app', image: 'registry.local/app:1' }],
      },
    });
    const { apps } = api();
    // No update strategy given: the apiserver's defaults are what the hold must give back.
    await apps.createNamespacedStatefulSet({
      namespace,
      body: {
        metadata: { name: 'db' },
        spec: {
          replicas: 2,
          serviceName: 'db',
          selector: { matchLabels: { app: 'db' } },
          template: template('db', { 'kubernetes.io/hostname': sick }),
        },
      },
    });
    await apps.createNamespacedDaemonSet({
      namespace,
      body: {
        metadata: { name: 'agent' },
        spec: {
          selector: { matchLabels: { app: 'agent' } },
          updateStrategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1 } },
          template: template('agent', { [TEST_POOL]: pool }),
        },
      },
    });
    await eventually('db rolled out', async () => stsDone(await readSts(namespace, 'db')), {
      timeoutMs: 60_000,
    });
    await eventually('agent rolled out', async () => dsDone(await readDs(namespace, 'agent')), {
      timeoutMs: 60_000,
    });
    return { ...saturable!, operator };
  }

  /** Both held by the policy while their new pods are stuck on the saturated node. */
  async function setUp() {
    const { namespace, sick, policy, proc } = await kinds(5);
    const before = {
      sts: (await readSts(namespace, 'db')).spec?.updateStrategy,
      ds: (await readDs(namespace, 'agent')).spec?.updateStrategy,
    };
    log(`strategies before: ${JSON.stringify(before)}`);

    // The incident, then a new rollout of each: their new pods on the sick node stick.
    await startIncident(cleanup, sick);
    await proc.setPressure('load');
    for (const [kind, name] of [
      ['statefulset', 'db'],
      ['daemonset', 'agent'],
    ] as const)
      expect((await restart(kind, namespace, name)).code).to.equal(0);
    const held = async () => {
      const [sts, ds] = await Promise.all([readSts(namespace, 'db'), readDs(namespace, 'agent')]);
      return sts.metadata?.annotations?.[STAMP] === policy && ds.metadata?.annotations?.[STAMP] === policy
        ? { sts, ds }
        : undefined;
    };
    const both = await eventually('both held by the policy', held, { timeoutMs: 90_000 });
    const recover = async () => {
      await hack('incident', ['stop', '--node', sick]);
      await proc.setPressure('idle');
    };
    return { namespace, policy, before, both, recover };
  }

  it('freezes a StatefulSet at its partition and switches a DaemonSet to OnDelete while the pressure holds, then restores both exactly and they finish', async function () {
    this.timeout(300_000);
    const { namespace, policy, before, both, recover } = await setUp();
    expect(
      operators[0]!.logs.filter((l) => l.message.startsWith('Argo Rollouts is not installed')),
      'said once at start-up: Rollouts are not watched',
    ).to.have.length(1);
    // Frozen where its rollout stands: db-1 (the top ordinal) is updated, so the partition is 1 (issue 40).
    expect(
      both.sts.spec?.updateStrategy?.rollingUpdate?.partition,
      'frozen at db-1, the updated ordinal',
    ).to.equal(1);
    expect(JSON.parse(both.sts.metadata?.annotations?.[HELD] ?? 'null')).to.deep.equal(before.sts);
    expect(both.ds.spec?.updateStrategy, 'switched to OnDelete').to.deep.equal({ type: 'OnDelete' });
    expect(JSON.parse(both.ds.metadata?.annotations?.[HELD] ?? 'null')).to.deep.equal(before.ds);
    const listed = (await getPolicyStatus(policy))?.throttledRollouts ?? [];
    expect(listed.map((r) => `${r.kind}/${r.name}`).sort()).to.deep.equal([
      `DaemonSet/${namespace}/agent`,
      `StatefulSet/${namespace}/db`,
    ]);

    // The hold keeps its owner's change: the stuck pod (the StatefulSet updates its highest ordinal first), deleted,
    // comes back at the update revision, at the partition; with the partition at the replicas, as before issue 40, it
    // came back at the old revision, silently rolled back. (Sampling progress could not fail here: the stuck pod blocks
    // both rollouts anyway.)
    // The StatefulSet controller acts on the spec it has observed: until then a recreated pod follows the old spec.
    const observed = await eventually(
      'the StatefulSet controller observed the hold',
      async () => {
        const s = await readSts(namespace, 'db');
        return (s.status?.observedGeneration ?? 0) >= (s.metadata?.generation ?? 1) ? s : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    expect(observed.spec?.updateStrategy?.rollingUpdate?.partition, 'still frozen').to.equal(1);
    const { core } = api();
    const stuck = await core.readNamespacedPod({ namespace, name: 'db-1' });
    const revision = (p: { metadata?: { labels?: Record<string, string> } }) =>
      p.metadata?.labels?.['controller-revision-hash'];
    expect(revision(stuck), 'db-1 was updated before the hold').to.equal(observed.status?.updateRevision);
    await core.deleteNamespacedPod({ namespace, name: 'db-1', gracePeriodSeconds: 0 });
    const again = await eventually(
      'db-1 recreated',
      async () => {
        const p = await core.readNamespacedPod({ namespace, name: 'db-1' }).catch(() => undefined);
        return p && p.metadata?.uid !== stuck.metadata?.uid ? p : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    expect(revision(again), 'recreated at the revision its owner rolled it out to').to.equal(
      observed.status?.updateRevision,
    );
    expect(observed.status?.currentRevision).to.not.equal(observed.status?.updateRevision);
    const db0 = await core.readNamespacedPod({ namespace, name: 'db-0' });
    expect(revision(db0), 'db-0, not updated yet, stays at the current revision').to.equal(
      observed.status?.currentRevision,
    );

    await recover();
    await eventually(
      'both given back',
      async () => {
        const [sts, ds] = await Promise.all([readSts(namespace, 'db'), readDs(namespace, 'agent')]);
        return !sts.metadata?.annotations?.[STAMP] && !ds.metadata?.annotations?.[STAMP];
      },
      { timeoutMs: 120_000 },
    );
    const [sts, ds] = await Promise.all([readSts(namespace, 'db'), readDs(namespace, 'agent')]);
    expect(sts.spec?.updateStrategy, 'the StatefulSet strategy it had').to.deep.equal(before.sts);
    expect(ds.spec?.updateStrategy, 'the DaemonSet strategy it had').to.deep.equal(before.ds);
    expect(
      Object.keys(sts.metadata?.annotations ?? {}).filter((k) => k.startsWith('sandbox.')),
    ).to.deep.equal([]);
    await eventually('db finished', async () => stsDone(await readSts(namespace, 'db')), {
      timeoutMs: 90_000,
    });
    await eventually('agent finished', async () => dsDone(await readDs(namespace, 'agent')), {
      timeoutMs: 90_000,
    });
    expect(await eventsWithReasonAtLeast(1, 'RolloutPaused', namespace, 'db')).to.have.length.of.at.least(1);
    expect(await eventsWithReasonAtLeast(1, 'RolloutResumed', namespace, 'agent')).to.have.length(1);
  });

  it('leaves alone a StatefulSet and a DaemonSet whose owner changed the strategy mid-hold, and restores neither', async function () {
    this.timeout(300_000);
    const { namespace, recover } = await setUp();
    // Not the partition our hold set (1, where the rollout stood): its owner holds the whole set.
    const theirs = {
      sts: { type: 'RollingUpdate', rollingUpdate: { partition: 2 } },
      ds: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 2, maxSurge: 0 } },
    };
    const patch = (kind: string, name: string, strategy: object) =>
      kubectl([
        'patch',
        kind,
        name,
        '-n',
        namespace,
        '--type=merge',
        '-p',
        JSON.stringify({ spec: { updateStrategy: strategy } }),
      ]);
    expect((await patch('statefulset', 'db', theirs.sts)).code).to.equal(0);
    expect((await patch('daemonset', 'agent', theirs.ds)).code).to.equal(0);
    await eventually(
      'both let go',
      async () => {
        const [sts, ds] = await Promise.all([readSts(namespace, 'db'), readDs(namespace, 'agent')]);
        return !sts.metadata?.annotations?.[STAMP] && !ds.metadata?.annotations?.[STAMP];
      },
      { timeoutMs: 60_000 },
    );
    expect(await eventsWithReasonAtLeast(1, 'RemediationReleased', namespace, 'db')).to.have.length(1);
    expect(await eventsWithReasonAtLeast(1, 'RemediationReleased', namespace, 'agent')).to.have.length(1);
    await recover();
    await sleep(15_000); // the recovery and its passes: what was let go stays as its owner set it
    const [sts, ds] = await Promise.all([readSts(namespace, 'db'), readDs(namespace, 'agent')]);
    expect(sts.spec?.updateStrategy).to.deep.equal(theirs.sts);
    expect(ds.spec?.updateStrategy).to.deep.equal(theirs.ds);
  });
  it('lets one rollout progress at a time across kinds with maxConcurrentRollouts 1: a Deployment, a StatefulSet and a DaemonSet restarted at once', async function () {
    this.timeout(300_000);
    const { namespace, pool, sick, proc } = await kinds(1);
    // On the saturated node, as db and agent are: only rollouts whose new pods could land there count (issue 40).
    await createRolloutDeployment(cleanup, namespace, 'web', pool, sick);
    await eventually('web available', async () => isComplete(await readDeployment(namespace, 'web')), {
      timeoutMs: 60_000,
    });
    await proc.setPressure('load');
    await ioPressureHigh(namespace, pool);
    // Slowed down so that they overlap (kwok's pods are ready at once): each step of each kind waits 8 s for its
    // new pods to be available. minReadySeconds is outside the pod template: no new revision.
    for (const kind of ['deployment/web', 'statefulset/db', 'daemonset/agent'])
      expect(
        (
          await kubectl([
            'patch',
            kind,
            '-n',
            namespace,
            '--type=merge',
            '-p',
            '{"spec":{"minReadySeconds":8}}',
          ])
        ).code,
      ).to.equal(0);
    for (const [kind, name] of [
      ['deployment', 'web'],
      ['statefulset', 'db'],
      ['daemonset', 'agent'],
    ] as const)
      expect((await restart(kind, namespace, name)).code).to.equal(0);
    const restarted = Date.now();
    // Progressing: not finished, and not held (a Deployment paused, a StatefulSet we froze, OnDelete).
    const progressing = async () => {
      const [web, db, agent] = await Promise.all([
        readDeployment(namespace, 'web'),
        readSts(namespace, 'db'),
        readDs(namespace, 'agent'),
      ]);
      return {
        web: !isComplete(web) && web.spec?.paused !== true,
        db: !stsDone(db) && !db.metadata?.annotations?.[STAMP],
        agent: !dsDone(agent) && agent.spec?.updateStrategy?.type !== 'OnDelete',
        held: [web, db, agent].filter((w) => w.metadata?.annotations?.[STAMP]).length,
        done: isComplete(web) && stsDone(db) && dsDone(agent),
        // Rolled out by its controller before the hold could land (the DaemonSet's one pod replaced within the first
        // pass), then available while held: its turn came first, unseen by the samples.
        rolledBeforeHold: {
          web: web.spec?.paused === true && isComplete(web),
          db: !!db.metadata?.annotations?.[STAMP] && stsDone(db),
          agent: agent.spec?.updateStrategy?.type === 'OnDelete' && dsDone(agent),
        },
      };
    };
    // The operator's first pass after the restarts queues two of them; from then on, one at a time.
    await eventually('two of the three queued', async () => (await progressing()).held === 2, {
      timeoutMs: 30_000,
      intervalMs: 200,
    });
    log(`two queued ${Date.now() - restarted} ms after the restarts`);
    let most = 0;
    const seen = new Set<string>();
    const deadline = Date.now() + 180_000;
    for (;;) {
      const now = await progressing();
      for (const k of ['web', 'db', 'agent'] as const) {
        if (now.rolledBeforeHold[k] && !seen.has(k)) log(`${k} rolled out before its hold landed`);
        if (now[k] || now.rolledBeforeHold[k]) seen.add(k);
      }
      most = Math.max(most, [now.web, now.db, now.agent].filter(Boolean).length);
      if (now.done || Date.now() > deadline) break;
      await sleep(1000);
    }
    expect(most, 'progressing at once, sampled every second').to.equal(1);
    expect([...seen].sort(), 'each progressed in its turn').to.deep.equal(['agent', 'db', 'web']);
    expect((await progressing()).done, 'all three finished, one after another').to.equal(true);
    expect(await eventsWithReasonAtLeast(2, 'RolloutPaused', namespace)).to.have.length.of.at.least(2);
    expect(await eventsWithReasonAtLeast(2, 'RolloutResumed', namespace)).to.have.length.of.at.least(2);
    await proc.setPressure('idle');
  });
});
