// The measured culprit on the real cluster (issue 25): a real agent reads a crafted /proc and a crafted cgroup v2
// tree whose counters advance, for pods that really exist on a kwok node, and the operator chooses the remedy by
// who does the IO. A culprit pod is moved (evicted, its replacement Running elsewhere); a victim, a DaemonSet pod
// writing heavily and a culprit labelled no-migrate are not. When the runtime does most of the IO, the rollout
// feeding the node is paused and no pod is moved.
import type { V1Pod } from '@kubernetes/client-node';
import { expect } from 'chai';
import { NO_MIGRATE_LABEL } from '../../src/api/v1alpha1/index.js';
import type { Qos } from '../support/cgroup-tree.js';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  hack,
  uniqueName,
} from '../support/cluster.js';
import { MeasuredNode } from '../support/measured-node.js';
import { useOperator } from '../support/operator-process.js';
import { FAST_IO } from '../support/proc-root.js';
import { applyPolicy, getHealth } from '../support/resources.js';
import { createRolloutDeployment, pausedBy, readDeployment, restartRollout } from '../support/rollouts.js';
import {
  eventsWithReason,
  eventsWithReasonAtLeast,
  isRunning,
  podsOf,
  readNode,
  startIncident,
  waitForRunning,
} from '../support/workloads.js';

/** FAST_IO, and the crafted disk (90 % busy under load) saturated: a culprit is named only on a saturated disk. */
const SATURATING_IO = { ...FAST_IO, thresholds: { ...FAST_IO.thresholds, diskBusyPercent: 85 } };
const poolSelector = (pool: string) => ({ matchLabels: { 'sandbox.remediator.io/test-pool': pool } });
const preferring = (node: string) => ({
  nodeAffinity: {
    preferredDuringSchedulingIgnoredDuringExecution: [
      {
        weight: 100,
        preference: { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [node] }] },
      },
    ],
  },
});
const podTemplate = (app: string, pool: string, node: string, labels: Record<string, string> = {}) => ({
  metadata: { labels: { app, ...labels } },
  spec: {
    nodeSelector: { 'sandbox.remediator.io/test-pool': pool },
    affinity: preferring(node),
    terminationGracePeriodSeconds: 0,
    containers: [{ name: 'app', image: 'registry.local/app:1' }],
  },
});
const qosOf = (pod: V1Pod) => (pod.status?.qosClass ?? 'BestEffort') as Qos;
const onNode = (pods: V1Pod[], node: string) => pods.filter((p) => p.spec?.nodeName === node);

describe('the measured culprit on the real cluster', function () {
  const operator = useOperator();
  const cleanup = new Cleanup();
  afterEach(() => cleanup.run());

  /** A Deployment of one pod preferring `node` (its replacement goes elsewhere once the node is cordoned). */
  async function deployment(namespace: string, name: string, pool: string, node: string, labels = {}) {
    const { apps } = api();
    await apps.createNamespacedDeployment({
      namespace,
      body: {
        metadata: { name },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: name } },
          template: podTemplate(name, pool, node, labels),
        },
      },
    });
    cleanup.add(() => apps.deleteNamespacedDeployment({ name, namespace }).catch(() => undefined));
  }

  async function onePodOn(namespace: string, app: string, node: string): Promise<V1Pod> {
    const [pod] = await waitForRunning(namespace, app, 1);
    expect(pod!.spec?.nodeName, `${app} on ${node}`).to.equal(node);
    return pod!;
  }

  it('moves the pod measured as the culprit, and not a victim, a DaemonSet pod writing heavily, nor a culprit labelled no-migrate', async function () {
    this.timeout(240_000);
    const namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 3);
    const sick = names[0]!;
    const policy = uniqueName('it-culprit');
    await applyPolicy(cleanup, policy, {
      nodeSelector: poolSelector(pool),
      detection: { stuckThresholdSeconds: 3 },
      ioPressure: SATURATING_IO,
      remediation: { migrateWorkloads: { by: 'measuredIo' } }, // maxPodsPerNode 2: the held take no place
      safety: { maxUnhealthyNodes: 1, minSchedulableNodes: 1, cooldownSeconds: 5, maxEvictionsPerMinute: 20 },
    });
    // The cast, all on the sick node: the culprit, a victim, a no-migrate culprit, and a DaemonSet on every node.
    await deployment(namespace, 'db', pool, sick);
    await deployment(namespace, 'app', pool, sick);
    await deployment(namespace, 'ingest', pool, sick, { [NO_MIGRATE_LABEL]: 'true' });
    const { apps } = api();
    await apps.createNamespacedDaemonSet({
      namespace,
      body: {
        metadata: { name: 'logs' },
        spec: {
          selector: { matchLabels: { app: 'logs' } },
          template: {
            metadata: { labels: { app: 'logs' } },
            spec: {
              nodeSelector: { 'sandbox.remediator.io/test-pool': pool },
              terminationGracePeriodSeconds: 0,
              containers: [{ name: 'app', image: 'registry.local/app:1' }],
            },
          },
        },
      },
    });
    cleanup.add(() => apps.deleteNamespacedDaemonSet({ name: 'logs', namespace }).catch(() => undefined));
    const db = await onePodOn(namespace, 'db', sick);
    const app = await onePodOn(namespace, 'app', sick);
    const ingest = await onePodOn(namespace, 'ingest', sick);
    const logs = onNode(await waitForRunning(namespace, 'logs', 3), sick)[0]!;
    const stay = [app, ingest, logs].map((p) => p.metadata!.uid!);

    const node = new MeasuredNode(sick, cleanup);
    await node.start();
    // The pods not moved do more IO than the culprit: were a guard missing, they would be moved first. The top two
    // are 4 points apart: the shares are measured over the agent's window, and 1 point apart they swapped under load.
    node.pod(logs.metadata!.uid!, qosOf(logs), { percent: 34 });
    node.pod(ingest.metadata!.uid!, qosOf(ingest), { percent: 30 });
    node.pod(db.metadata!.uid!, qosOf(db), { percent: 27 });
    node.pod(app.metadata!.uid!, qosOf(app), { percent: 1, psi: 60 });
    node.runtimeLoad({ percent: 3 });
    await startIncident(cleanup, sick);
    await deployment(namespace, 'web', pool, sick);
    await eventually('the web pod stuck on the sick node', async () =>
      onNode(await podsOf(namespace, 'web'), sick).some((p) => !isRunning(p)),
    );
    await node.pressure('load');

    const named = await eventually(
      'the cause: pods, named',
      async () => {
        const h = await getHealth(sick);
        return h?.ioCause?.cause === 'Pod' && h.ioCause.consumers?.some((c) => c.name === db.metadata!.name)
          ? h
          : undefined;
      },
      { timeoutMs: 60_000 },
    );
    const consumers = named.ioCause!.consumers!;
    const role = (pod: V1Pod) => consumers.find((c) => c.podUid === pod.metadata!.uid)?.role;
    expect([role(logs), role(ingest), role(db), role(app)]).to.deep.equal([
      'Culprit',
      'Culprit',
      'Culprit',
      'Victim',
    ]);
    expect(consumers.find((c) => c.podUid === db.metadata!.uid)).to.include({
      namespace,
      name: db.metadata!.name,
    });
    expect(named.topConsumer).to.match(new RegExp(`^${namespace}/${logs.metadata!.name} 3\\d%$`));
    expect(await eventsWithReasonAtLeast(1, 'IoCulpritFound', 'default', sick)).to.have.length(1);

    // Cordoned, the stuck pod evicted, then the culprit moved: its replacement Running on another node.
    const moved = await eventually(
      'the culprit moved',
      async () => {
        const events = await eventsWithReason('MigratedIoHeavyPod', namespace);
        return events.some((e) => e.involvedObject.name === db.metadata!.name) ? events : undefined;
      },
      { timeoutMs: 60_000 },
    );
    const told = moved.map((e) => `${e.involvedObject.name}: ${e.message}`);
    // Should it fail, what the operator did and what failed on the way: CI keeps only the output.
    const trail = operator.logs
      .filter((l) => l.level === 'warn' || l.level === 'error' || /Migrat|Evict/.test(l.message))
      .map((l) => JSON.stringify(l))
      .slice(-30);
    expect(told, `only the culprit, once: ${told.join(' | ')}\n${trail.join('\n')}`).to.have.length(1);
    expect((await readNode(sick)).spec?.unschedulable).to.equal(true);
    await node.removePod(db.metadata!.uid!, qosOf(db)); // as kubelet does, with the pod gone
    const [replacement] = await waitForRunning(namespace, 'db', 1);
    expect(replacement!.metadata?.uid).to.not.equal(db.metadata!.uid);
    expect(replacement!.spec?.nodeName).to.be.oneOf(names.slice(1));

    // Passes later, the others are where they were, under their UIDs: no guard gave way.
    await new Promise((r) => setTimeout(r, 8000));
    const still = onNode(
      [
        ...(await podsOf(namespace, 'app')),
        ...(await podsOf(namespace, 'ingest')),
        ...(await podsOf(namespace, 'logs')),
      ],
      sick,
    ).map((p) => p.metadata!.uid!);
    expect(still.sort()).to.deep.equal([...stay].sort());
    expect(await eventsWithReason('MigratedIoHeavyPod', namespace)).to.have.length(1);

    const stopped = await hack('incident', ['stop', '--node', sick]);
    expect(stopped.code, stopped.stderr).to.equal(0);
    await node.pressure('idle');
    await eventually(
      'the node uncordoned after the recovery',
      async () => !(await readNode(sick)).spec?.unschedulable,
      {
        timeoutMs: 60_000,
      },
    );
  });

  it('moves a culprit measured only after its node was fenced and the stuck pods evicted, on cgroup v2 and v1, three nodes saturated of six', async function () {
    this.timeout(240_000);
    const namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 6);
    const sick = [names[0]!, names[1]!, names[2]!];
    const policy = uniqueName('it-late-culprit');
    await applyPolicy(cleanup, policy, {
      nodeSelector: poolSelector(pool),
      detection: { stuckThresholdSeconds: 3 },
      ioPressure: SATURATING_IO,
      remediation: { migrateWorkloads: { by: 'measuredIo' } },
      safety: { maxUnhealthyNodes: 3, minSchedulableNodes: 1, cooldownSeconds: 5, maxEvictionsPerMinute: 20 },
    });
    // A culprit-to-be on two of the three sick nodes (35 % on v2, 75 % on v1, as issue 44 found them), idle at first:
    // the disks are saturated by what no pod does, so there is no culprit when the nodes are fenced. The third
    // node's pod stays idle: saturated, it has no culprit at all.
    const cast = [
      { node: sick[0]!, version: 'v2' as const, app: 'db2', percent: 35 },
      { node: sick[1]!, version: 'v1' as const, app: 'db1', percent: 75 },
      { node: sick[2]!, version: 'v2' as const, app: 'db0', percent: 0 },
    ];
    const measured: { m: MeasuredNode; pod: V1Pod }[] = [];
    for (const { node, version, app } of cast) {
      await deployment(namespace, app, pool, node);
      const pod = await onePodOn(namespace, app, node);
      const m = new MeasuredNode(node, cleanup, version);
      await m.start();
      m.pod(pod.metadata!.uid!, qosOf(pod), { percent: 0 });
      m.runtimeLoad({ percent: 3 });
      measured.push({ m, pod });
      await startIncident(cleanup, node);
      await deployment(namespace, `web-${app}`, pool, node);
    }
    for (const { m } of measured) await m.pressure('load');
    for (const { app, node } of cast)
      await eventually(
        `the stuck pod of ${node} evicted, the node cordoned`,
        async () => {
          const evicted = await eventsWithReason('EvictedStuckPod', namespace);
          const cordoned = (await readNode(node)).spec?.unschedulable === true;
          return cordoned && evicted.some((e) => e.involvedObject.name.startsWith(`web-${app}-`));
        },
        { timeoutMs: 90_000 },
      );
    // Only now does each pod do its share: the culprit is found after the fence.
    cast.forEach(({ percent }, i) => {
      const { m, pod } = measured[i]!;
      m.pod(pod.metadata!.uid!, qosOf(pod), { percent });
    });
    const culprits = measured.slice(0, 2);
    const moved = await eventually(
      'both culprits moved',
      async () => {
        const events = await eventsWithReason('MigratedIoHeavyPod', namespace);
        const names = events.map((e) => e.involvedObject.name);
        return culprits.every(({ pod }) => names.includes(pod.metadata?.name ?? '')) ? events : undefined;
      },
      { timeoutMs: 90_000 },
    ).catch(async (err: unknown) => {
      const healths = await Promise.all(sick.map((n) => getHealth(n)));
      const trail = operator.logs
        .filter((l) => l.level !== 'debug')
        .map((l) => JSON.stringify(l))
        .slice(-40);
      throw new Error(
        `${String(err)}; ${healths.map((h) => JSON.stringify({ ioCause: h?.ioCause, blocked: h?.blocked, state: h?.state })).join(' | ')}\n${trail.join('\n')}`,
      );
    });
    expect(moved).to.have.length(2);
  });

  it('pauses the rollout feeding the node and moves no pod when the runtime does most of the IO', async function () {
    this.timeout(240_000);
    const namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 3);
    const sick = names[0]!;
    const policy = uniqueName('it-runtime');
    await applyPolicy(cleanup, policy, {
      nodeSelector: poolSelector(pool),
      detection: { stuckThresholdSeconds: 3 },
      ioPressure: SATURATING_IO,
      remediation: {
        evictStuckPods: false,
        migrateWorkloads: { by: 'measuredIo' },
        throttleRollouts: { maxConcurrentRollouts: 5 },
      },
      safety: { maxUnhealthyNodes: 1, minSchedulableNodes: 1, cooldownSeconds: 5 },
    });
    await deployment(namespace, 'busy', pool, sick);
    const busy = await onePodOn(namespace, 'busy', sick);
    await createRolloutDeployment(cleanup, namespace, 'web', pool, sick);
    await waitForRunning(namespace, 'web', 3);

    const node = new MeasuredNode(sick, cleanup);
    await node.start();
    // A pod at a culprit's share, but the runtime does more: the cause is the runtime, and no pod is moved.
    node.pod(busy.metadata!.uid!, qosOf(busy), { percent: 26 });
    node.runtimeLoad({ percent: 60 });
    await startIncident(cleanup, sick);
    await restartRollout(namespace, 'web');
    await eventually('the rollout stuck on the sick node', async () =>
      onNode(await podsOf(namespace, 'web'), sick).some((p) => !isRunning(p)),
    );
    await node.pressure('load');

    let seen: Awaited<ReturnType<typeof getHealth>>;
    const health = await eventually(
      'the cause: the runtime',
      async () => {
        seen = await getHealth(sick);
        return seen?.ioCause?.cause === 'Runtime' ? seen : undefined;
      },
      { timeoutMs: 60_000 },
    ).catch((err: unknown) => {
      // What the operator and the agent said instead: the next engineer needs it.
      throw new Error(
        `${String(err)}; ioCause ${JSON.stringify(seen?.ioCause)}; reading ${JSON.stringify(seen?.ioReading)}`,
      );
    });
    // Its share as measured over the agent's last window: near the 60 % it does, not to the percent.
    const share = Number(
      /container runtime does (\d+)% .*no pod is moved/.exec(health.ioCause?.message ?? '')?.[1],
    );
    expect(share, health.ioCause?.message).to.be.within(50, 70);
    expect(health.topConsumer).to.match(/^runtime [5-7]\d%$/);
    await eventually(
      'web paused by the policy',
      async () => pausedBy(await readDeployment(namespace, 'web')) === policy,
      { timeoutMs: 60_000 },
    );
    expect(await eventsWithReasonAtLeast(1, 'IoRuntimeBusy', 'default', sick)).to.have.length(1);
    await new Promise((r) => setTimeout(r, 8000));
    expect(await eventsWithReason('MigratedIoHeavyPod', namespace)).to.deep.equal([]);
    expect((await podsOf(namespace, 'busy')).map((p) => p.metadata?.uid)).to.deep.equal([busy.metadata!.uid]);

    const stopped = await hack('incident', ['stop', '--node', sick]);
    expect(stopped.code, stopped.stderr).to.equal(0);
    await node.pressure('idle');
    await eventually(
      'web resumed after the recovery',
      async () => pausedBy(await readDeployment(namespace, 'web')) === undefined,
      { timeoutMs: 60_000 },
    );
  });
});
