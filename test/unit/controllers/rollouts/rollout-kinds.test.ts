// Rollout throttling for every kind, over the in-memory cluster with StatefulSets, DaemonSets and Argo Rollouts as
// the API has them (read through the real views, patched as JSON merge patches): each kind held its own way, given
// back exactly, left alone when its owner changes it meanwhile, and counted together against maxConcurrentRollouts.
import { expect } from 'chai';
import type { SandboxPolicySpecInput } from '../../../../src/api/v1alpha1/index.js';
import { heldPartition } from '../../../../src/actuation/workload-change.js';
import type { RawObject } from '../../../../src/kube/informer.js';
import { aPod, anEvent, nameReservedMessage, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';
import { aReconciler } from '../../../support/reconciler.js';

const IO = { sustainSeconds: 0, recoverySeconds: 30, staleAfterSeconds: 3600 };
const THROTTLE: SandboxPolicySpecInput = {
  ioPressure: IO,
  // No cordon: what is shown here is the rollouts alone (they are held for a saturated node, cordoned or not).
  remediation: { cordon: false, evictStuckPods: false, throttleRollouts: { maxConcurrentRollouts: 5 } },
  safety: { cooldownSeconds: 300 },
};

function world(spec: SandboxPolicySpecInput = THROTTLE) {
  const saturation = { on: true };
  const cluster = new MemoryCluster().addPolicy('p', spec).addNodes(aNode('n1'), aNode('n2'));
  const controllers = aReconciler(cluster, {
    startSeconds: 600,
    sources: () => ({
      kind: 'prometheus',
      pollMs: 10_000,
      refresh: () => Promise.resolve(),
      read: (node: string) => ({
        source: 'prometheus',
        observedTime: new Date(controllers.clock.now()).toISOString(),
        psiSomeAvg10Percent: saturation.on && node === 'n1' ? 55 : 1,
      }),
    }),
  });
  /** Runs passes with time moving on, as the queue would. */
  const passes = async (n: number, seconds = 20) => {
    for (let i = 0; i < n; i++) {
      await controllers.reconciler.reconcile('p');
      controllers.clock.advance(seconds * 1000);
    }
  };
  /** The node recovers: no stuck pods, idle for longer than recoverySeconds. */
  const recover = async () => {
    cluster.pods.length = 0;
    cluster.events.length = 0;
    saturation.on = false;
    await passes(4);
  };
  return { cluster, saturation, passes, recover, ...controllers };
}

const meta = (name: string, annotations: Record<string, string> = {}) => ({
  namespace: 'shop',
  name,
  uid: `uid-${name}`,
  generation: 2,
  creationTimestamp: T0, // as a list gives it (a watch gives a string; the views read both)
  annotations,
});

const statefulSet = (name: string, updateStrategy?: Record<string, unknown>): RawObject => ({
  kind: 'StatefulSet',
  metadata: meta(name),
  spec: { replicas: 3, ...(updateStrategy ? { updateStrategy } : {}) },
  status: {
    observedGeneration: 2,
    replicas: 3,
    readyReplicas: 2,
    updatedReplicas: 1,
    currentRevision: `${name}-old`,
    updateRevision: `${name}-new`,
  },
});

const daemonSet = (name: string): RawObject => ({
  kind: 'DaemonSet',
  metadata: meta(name, { 'deprecated.daemonset.template.generation': '2' }),
  spec: { updateStrategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1, maxSurge: 0 } } },
  status: { observedGeneration: 2, desiredNumberScheduled: 2, updatedNumberScheduled: 1 },
});

const argoRollout = (name: string): RawObject => ({
  kind: 'Rollout',
  metadata: meta(name),
  spec: { replicas: 3 },
  status: { currentPodHash: 'abc', stableRS: 'old', updatedReplicas: 1, phase: 'Progressing' },
});

/** A StatefulSet's pod at a revision (its controller-revision-hash), a DaemonSet's at a template generation. */
const ofStatefulSet = (name: string, owner: string, revision: string) => ({
  name,
  kind: 'StatefulSet',
  owner,
  labels: { 'controller-revision-hash': revision },
});
const ofDaemonSet = (name: string, owner: string, generation: string) => ({
  name,
  kind: 'DaemonSet',
  owner,
  labels: { 'pod-template-generation': generation },
});

/** A pod of the kind's controller, at the given revision, stuck on n1 with kubelet's reserved-name Event. */
function stuckOn(
  cluster: MemoryCluster,
  pod: { name: string; kind: string; owner: string; labels: Record<string, string> },
) {
  const stuck = {
    ...aPod().named(pod.name, 'shop').onNode('n1').waitingSince(T0).build(),
    controllerKind: pod.kind,
    controllerName: pod.owner,
    labels: pod.labels,
  };
  cluster.pods.push(stuck);
  cluster.events.push(anEvent().about(stuck).saying(nameReservedMessage(stuck)).build());
}

const strategyOf = (cluster: MemoryCluster, key: string) =>
  (cluster.rawWorkloads.get(key)?.spec as { updateStrategy?: unknown } | undefined)?.updateStrategy;
const annotationsOf = (cluster: MemoryCluster, key: string) =>
  (cluster.rawWorkloads.get(key)?.metadata as { annotations?: Record<string, string> }).annotations ?? {};

describe('PolicyReconciler rollouts of every kind', () => {
  for (const [title, strategy] of [
    ['a partition of 0', { type: 'RollingUpdate', rollingUpdate: { partition: 0 } }],
    [
      'a partition of 1 and maxUnavailable',
      { type: 'RollingUpdate', rollingUpdate: { partition: 1, maxUnavailable: 2 } },
    ],
    ['no update strategy at all', undefined],
  ] as const)
    it(`freezes a StatefulSet feeding a saturated node where its rollout stands (db-2 updated: partition 2), and restores ${title} exactly`, async () => {
      const { cluster, passes, recover } = world();
      const key = cluster.putWorkload(statefulSet('db', strategy));
      stuckOn(cluster, ofStatefulSet('db-2', 'db', 'db-new'));
      await passes(2);
      expect(strategyOf(cluster, key)).to.deep.include({
        rollingUpdate: { ...(strategy?.rollingUpdate ?? {}), partition: 2 },
      });
      expect(annotationsOf(cluster, key)).to.include({
        'sandbox.remediator.io/paused-by': 'p',
        'sandbox.remediator.io/pause-reason': 'FeedsSaturatedNode',
        'sandbox.remediator.io/held-update-strategy': JSON.stringify(strategy ?? {}),
        'sandbox.remediator.io/held-partition': '2',
      });
      expect(cluster.policy('p')!.status!.throttledRollouts?.[0]).to.include({
        kind: 'StatefulSet',
        name: 'shop/db',
        reason: 'FeedsSaturatedNode',
      });
      expect(cluster.takeEvents()).to.include('StatefulSet/db Normal RolloutPaused');
      await passes(2);
      expect(cluster.patchedWorkloads, 'held once').to.have.length(1);

      await recover();
      expect(strategyOf(cluster, key) ?? {}, 'the strategy it had').to.deep.equal(strategy ?? {});
      expect(annotationsOf(cluster, key)).to.deep.equal({});
      expect(cluster.takeEvents()).to.include('StatefulSet/db Normal RolloutResumed');
    });

  it('leaves alone a StatefulSet whose owner changed the partition while we held it, and one its owner holds', async () => {
    const { cluster, passes, recover } = world();
    const key = cluster.putWorkload(
      statefulSet('db', { type: 'RollingUpdate', rollingUpdate: { partition: 0 } }),
    );
    const theirs = cluster.putWorkload(statefulSet('theirs', { type: 'OnDelete' }));
    for (const owner of ['db', 'theirs'])
      stuckOn(cluster, {
        name: `${owner}-2`,
        kind: 'StatefulSet',
        owner,
        labels: { 'controller-revision-hash': `${owner}-new` },
      });
    await passes(2);
    expect(annotationsOf(cluster, key)).to.have.property('sandbox.remediator.io/held-partition', '2');
    // Its owner wants the rollout to go on: partition 1, while we hold it.
    const raw = structuredClone(cluster.rawWorkloads.get(key)!);
    (raw.spec as { updateStrategy: unknown }).updateStrategy = {
      type: 'RollingUpdate',
      rollingUpdate: { partition: 1 },
    };
    cluster.putWorkload(raw);
    await passes(2);
    expect(strategyOf(cluster, key)).to.deep.equal({
      type: 'RollingUpdate',
      rollingUpdate: { partition: 1 },
    });
    expect(annotationsOf(cluster, key)).to.not.have.property('sandbox.remediator.io/paused-by');
    expect(annotationsOf(cluster, key)).to.have.property('sandbox.remediator.io/hands-off-until');
    expect(cluster.takeEvents()).to.include('StatefulSet/db Normal RemediationReleased');
    await passes(1);
    expect(strategyOf(cluster, key), 'not held again within the cooldown').to.deep.equal({
      type: 'RollingUpdate',
      rollingUpdate: { partition: 1 },
    });
    await recover();
    expect(strategyOf(cluster, key), 'and not "restored" after').to.deep.equal({
      type: 'RollingUpdate',
      rollingUpdate: { partition: 1 },
    });
    expect(
      cluster.patchedWorkloads.map((p) => p.key),
      'an OnDelete StatefulSet has nothing to hold',
    ).to.not.include(theirs);
  });

  it('gives a StatefulSet back only the partition it had: what its owner edited meanwhile stays', async () => {
    const { cluster, passes, recover } = world();
    const key = cluster.putWorkload(
      statefulSet('db', { type: 'RollingUpdate', rollingUpdate: { partition: 1, maxUnavailable: 1 } }),
    );
    stuckOn(cluster, ofStatefulSet('db-2', 'db', 'db-new'));
    await passes(2);
    const raw = structuredClone(cluster.rawWorkloads.get(key)!);
    const strategy = (raw.spec as { updateStrategy: { rollingUpdate: Record<string, unknown> } })
      .updateStrategy;
    expect(strategy.rollingUpdate.partition, 'held where the rollout stands').to.equal(2);
    strategy.rollingUpdate.maxUnavailable = 2; // its owner, while we hold it
    cluster.putWorkload(raw);
    await passes(1);
    expect(annotationsOf(cluster, key), 'still ours').to.have.property(
      'sandbox.remediator.io/paused-by',
      'p',
    );
    await recover();
    expect(strategyOf(cluster, key)).to.deep.equal({
      type: 'RollingUpdate',
      rollingUpdate: { partition: 1, maxUnavailable: 2 },
    });
  });

  it('switches a DaemonSet feeding a saturated node to OnDelete and restores its strategy exactly; one switched back by its owner is left alone', async () => {
    const { cluster, passes, recover } = world();
    const key = cluster.putWorkload(daemonSet('agent'));
    const other = cluster.putWorkload(daemonSet('other'));
    for (const owner of ['agent', 'other'])
      stuckOn(cluster, {
        name: `${owner}-x`,
        kind: 'DaemonSet',
        owner,
        labels: { 'pod-template-generation': '2' },
      });
    await passes(2);
    for (const k of [key, other]) {
      expect(strategyOf(cluster, k)).to.deep.equal({ type: 'OnDelete' });
      expect(annotationsOf(cluster, k)).to.include({
        'sandbox.remediator.io/held-update-strategy': JSON.stringify(
          daemonSet('x').spec!['updateStrategy' as never],
        ),
      });
    }
    // The owner of `other` switches it back to a rolling update of their own.
    const raw = structuredClone(cluster.rawWorkloads.get(other)!);
    const theirs = { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 3 } };
    (raw.spec as { updateStrategy: unknown }).updateStrategy = theirs;
    cluster.putWorkload(raw);
    await passes(1);
    expect(annotationsOf(cluster, other)).to.not.have.property('sandbox.remediator.io/paused-by');
    await recover();
    expect(strategyOf(cluster, key)).to.deep.equal({
      type: 'RollingUpdate',
      rollingUpdate: { maxUnavailable: 1, maxSurge: 0 },
    });
    expect(strategyOf(cluster, other), 'theirs, as they set it').to.deep.equal(theirs);
  });

  it('does not count a pod of an old revision stuck on the node as the rollout feeding it', async () => {
    const { cluster, passes } = world();
    const sts = cluster.putWorkload(
      statefulSet('db', { type: 'RollingUpdate', rollingUpdate: { partition: 0 } }),
    );
    const ds = cluster.putWorkload(daemonSet('agent'));
    stuckOn(cluster, ofStatefulSet('db-0', 'db', 'db-old'));
    stuckOn(cluster, ofDaemonSet('agent-x', 'agent', '1'));
    await passes(2);
    for (const key of [sts, ds])
      expect(annotationsOf(cluster, key)).to.not.have.property('sandbox.remediator.io/paused-by');
  });

  it('pauses an Argo Rollout by spec.paused alone and resets only that; never touches one paused at a canary step', async () => {
    const { cluster, passes, recover } = world();
    const key = cluster.putWorkload(argoRollout('shop-front'));
    const stepped = argoRollout('stepped');
    (stepped.status as Record<string, unknown>).pauseConditions = [
      { reason: 'CanaryPauseStep', startTime: T0.toISOString() },
    ];
    const atStep = cluster.putWorkload(stepped);
    for (const owner of ['shop-front', 'stepped'])
      stuckOn(cluster, {
        name: `${owner}-abc-1`,
        kind: 'ReplicaSet',
        owner: `${owner}-abc`,
        labels: { 'rollouts-pod-template-hash': 'abc' },
      });
    await passes(2);
    const held = cluster.patchedWorkloads.find((p) => p.key === key)!;
    expect(held.patch.spec).to.deep.equal({ paused: true });
    expect(cluster.policy('p')!.status!.throttledRollouts?.map((r) => [r.kind, r.name])).to.deep.equal([
      ['Rollout', 'shop/shop-front'],
    ]);
    await recover();
    const released = cluster.patchedWorkloads.filter((p) => p.key === key).at(-1)!;
    expect(released.patch.spec, 'no promotion: spec.paused only').to.deep.equal({ paused: false });
    expect(cluster.patchedWorkloads.map((p) => p.key)).to.not.include(atStep);
  });

  it('lets one rollout progress at a time across kinds with maxConcurrentRollouts 1, the oldest first', async () => {
    const { cluster, passes } = world({
      ...THROTTLE,
      remediation: { throttleRollouts: { maxConcurrentRollouts: 1 } },
    });
    // The DaemonSet starts rolling out first, the Deployment and the StatefulSet a pass later: the oldest goes on.
    const ds = cluster.putWorkload(daemonSet('zz-agent'));
    await passes(1);
    cluster.deploymentMap.set('shop/web', {
      kind: 'Deployment',
      namespace: 'shop',
      name: 'web',
      uid: 'uid-web',
      generation: 2,
      paused: false,
      createdAt: T0,
      rollingOut: true,
    });
    cluster.changeDeployment('shop/web', (d) => d);
    const sts = cluster.putWorkload(
      statefulSet('db', { type: 'RollingUpdate', rollingUpdate: { partition: 0 } }),
    );
    // Both run pods on the saturated n1, so their new pods may land there; the DaemonSet covers it.
    cluster.runsOn('Deployment', 'shop/web').runsOn('StatefulSet', 'shop/db');
    await passes(2);
    expect(cluster.deploymentMap.get('shop/web')!.paused, 'the Deployment waits').to.equal(true);
    expect(
      (strategyOf(cluster, sts) as { rollingUpdate?: { partition?: number } }).rollingUpdate?.partition,
      'the StatefulSet waits, where its rollout stands',
    ).to.equal(2);
    expect(strategyOf(cluster, ds), 'the oldest, the DaemonSet, goes on').to.deep.include({
      type: 'RollingUpdate',
    });
    const queue = cluster.policy('p')!.status!.throttledRollouts ?? [];
    expect(queue.map((r) => r.reason)).to.deep.equal(['RolloutQueued', 'RolloutQueued']);
    expect(new Set(queue.map((r) => r.kind)).size, 'the queue names each kind').to.equal(2);
  });

  it("exempts no workload for its label alone: app.kubernetes.io/name=sandbox-remediator in a tenant's namespace is held", async () => {
    const { cluster, passes } = world();
    const posing = daemonSet('sandbox-remediator-agent');
    (posing.metadata as { labels?: Record<string, string> }).labels = {
      'app.kubernetes.io/name': 'sandbox-remediator',
    };
    const key = cluster.putWorkload(posing);
    stuckOn(cluster, ofDaemonSet('sandbox-remediator-agent-x', 'sandbox-remediator-agent', '2'));
    await passes(2);
    expect(cluster.patchedWorkloads.map((p) => p.key)).to.include(key);
  });

  it('when its policy is deleted, gives back every kind it held exactly', async () => {
    const { cluster, passes, reconciler, sweeper } = world();
    const sts = cluster.putWorkload(
      statefulSet('db', { type: 'RollingUpdate', rollingUpdate: { partition: 0 } }),
    );
    const ds = cluster.putWorkload(daemonSet('agent'));
    stuckOn(cluster, ofStatefulSet('db-2', 'db', 'db-new'));
    stuckOn(cluster, ofDaemonSet('agent-x', 'agent', '2'));
    await passes(2);
    expect(strategyOf(cluster, ds)).to.deep.equal({ type: 'OnDelete' });
    cluster.policyMap.delete('p');
    await reconciler.reconcile('p');
    await sweeper.sweep();
    expect(strategyOf(cluster, sts)).to.deep.equal({
      type: 'RollingUpdate',
      rollingUpdate: { partition: 0 },
    });
    expect(strategyOf(cluster, ds)).to.deep.equal({
      type: 'RollingUpdate',
      rollingUpdate: { maxUnavailable: 1, maxSurge: 0 },
    });
    for (const key of [sts, ds])
      expect(
        Object.keys(annotationsOf(cluster, key)).filter((k) => k.startsWith('sandbox.remediator.io/')),
      ).to.deep.equal([]);
  });

  it('in a dry run changes no kind, and reports the same holds', async () => {
    const { cluster, passes } = world({ ...THROTTLE, safety: { dryRun: true } });
    const sts = cluster.putWorkload(
      statefulSet('db', { type: 'RollingUpdate', rollingUpdate: { partition: 0 } }),
    );
    stuckOn(cluster, ofStatefulSet('db-2', 'db', 'db-new'));
    await passes(3);
    expect(cluster.patchedWorkloads).to.deep.equal([]);
    expect(strategyOf(cluster, sts)).to.deep.equal({
      type: 'RollingUpdate',
      rollingUpdate: { partition: 0 },
    });
    expect(
      cluster.policy('p')!.status!.throttledRollouts?.map((r) => [r.kind, r.name, r.dryRun]),
    ).to.deep.equal([['StatefulSet', 'shop/db', true]]);
    expect(cluster.takeEvents().filter((e) => e.includes('RolloutPaused'))).to.deep.equal([
      'StatefulSet/db Normal RolloutPaused',
    ]);
  });

  it("never freezes a StatefulSet below its owner's partition, and holds none with nothing left to update", async () => {
    const { cluster, passes } = world();
    // Its owner updates only ordinals 2 and up; ordinal 2 is done: nothing is left, and only readiness is awaited.
    const done = statefulSet('done', { type: 'RollingUpdate', rollingUpdate: { partition: 2 } });
    const doneKey = cluster.putWorkload(done);
    stuckOn(cluster, ofStatefulSet('done-2', 'done', 'done-new'));
    // Its owner updates ordinals 1 and up; its status counts none updated yet, but its stuck fresh-2 runs the update
    // revision: frozen at 2, so that fresh-2, recreated, keeps it.
    const fresh = statefulSet('fresh', { type: 'RollingUpdate', rollingUpdate: { partition: 1 } });
    (fresh.status as { updatedReplicas: number }).updatedReplicas = 0;
    const freshKey = cluster.putWorkload(fresh);
    stuckOn(cluster, ofStatefulSet('fresh-2', 'fresh', 'fresh-new'));
    await passes(2);
    expect(
      cluster.patchedWorkloads.map((p) => p.key),
      'nothing left to update: not held',
    ).to.not.include(doneKey);
    expect(
      (strategyOf(cluster, freshKey) as { rollingUpdate?: { partition?: number } }).rollingUpdate?.partition,
    ).to.equal(2);
    expect(
      heldPartition({
        replicas: 5,
        updatedReplicas: 4,
        strategy: { type: 'RollingUpdate', rollingUpdate: { partition: 3 } },
      }),
      "never below its owner's",
    ).to.equal(3);
  });
});
