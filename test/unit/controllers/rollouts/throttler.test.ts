// Reconcile tests of rollout throttling and pod-start pacing over the in-memory cluster: what is written, and
// what is left behind when a policy goes away or runs dry.
import { expect } from 'chai';
import type { SandboxPolicySpecInput } from '../../../../src/api/v1alpha1/index.js';
import type { WorkloadView, GatedPodView } from '../../../../src/detection/index.js';
import {
  aPod,
  anEvent,
  aRollingDeployment,
  nameReservedMessage,
  secondsAfter,
  T0,
} from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';
import { aReconciler } from '../../../support/reconciler.js';

const START = secondsAfter(T0, 600);

function world(spec: SandboxPolicySpecInput, saturated = true) {
  const saturation = { on: saturated };
  const cluster = new MemoryCluster().addPolicy('p', spec).addNodes(aNode('n1'), aNode('n2'));
  const clock = () => controllers.clock;
  const controllers = aReconciler(cluster, {
    startSeconds: 600,
    sources: () => ({
      kind: 'prometheus',
      pollMs: 10_000,
      refresh: () => Promise.resolve(),
      read: (node: string) => ({
        source: 'prometheus',
        observedTime: new Date(clock().now()).toISOString(),
        psiSomeAvg10Percent: saturation.on && node === 'n1' ? 55 : 1,
      }),
    }),
  });
  return { cluster, saturation, ...controllers };
}

const IO = { sustainSeconds: 0, recoverySeconds: 30, staleAfterSeconds: 3600 };
const PACING = {
  ioPressure: IO,
  remediation: {
    throttleRollouts: {
      pacePodStarts: { maxPodStartsPerMinute: 2, namespaceSelector: { matchLabels: { pacing: 'on' } } },
    },
  },
};
const gatedPod = (name: string, policy = 'p', secondsAgo = 10): GatedPodView => ({
  namespace: 'shop',
  name,
  uid: `uid-${name}`,
  gates: ['sandbox.remediator.io/paced'],
  policy,
  gatedAt: new Date(START.getTime() - secondsAgo * 1000),
});
const ourPause = (name: string, policy = 'p'): WorkloadView => ({
  kind: 'Deployment',
  namespace: 'shop',
  name,
  uid: `uid-${name}`,
  generation: 3,
  paused: true,
  createdAt: T0,
  rollingOut: true,
  stamps: { policy, since: T0, reason: 'RolloutQueued', startedAt: T0 },
});

describe('PolicyReconciler pacing and rollouts', () => {
  it('publishes gating to the webhook under pressure, lifts gates at the rate, and writes only its own log', async () => {
    const { cluster, reconciler, pacing } = world(PACING);
    cluster.gated = [gatedPod('a', 'p', 30), gatedPod('b', 'p', 20), gatedPod('c', 'p', 10)];
    await reconciler.reconcile('p');
    expect(pacing().get('p')).to.include({ gating: true, dryRun: false });
    expect(cluster.released).to.deep.equal(['shop/a', 'shop/b']);
    const reservation = cluster.policyPatches.find((patch) => patch.recentGateReleases && !patch.conditions);
    // Stamped by when the lifts will have been done (10 s ahead), then, once lifted, when they were.
    const ahead = secondsAfter(START, 10).toISOString();
    expect(reservation, 'the rate is spent in status before lifting').to.deep.equal({
      recentGateReleases: [ahead, ahead],
    });
    expect(cluster.policy('p')!.status!.recentGateReleases).to.deep.equal([
      START.toISOString(),
      START.toISOString(),
    ]);
    expect(cluster.policy('p')!.status).to.include({ gatedPods: 1 });
    expect(cluster.takeEvents()).to.include.members([
      'Pod/a Normal PodStartHeld',
      'Pod/a Normal PodStartReleased',
    ]);
  });

  it('counts the rate from when each gate was lifted, so a slow pass cannot fit more than the rate into 60 s', async () => {
    const { cluster, reconciler, clock } = world(PACING);
    cluster.gated = [gatedPod('a', 'p', 30), gatedPod('b', 'p', 20), gatedPod('c', 'p', 10)];
    const lift = cluster.releaseGate.bind(cluster);
    cluster.releaseGate = (pod) => {
      clock.advance(3000); // each lift takes 3 s to reach the apiserver
      return lift(pod);
    };
    await reconciler.reconcile('p');
    expect(cluster.released).to.deep.equal(['shop/a', 'shop/b']);
    expect(cluster.policy('p')!.status!.recentGateReleases).to.deep.equal([
      secondsAfter(START, 3).toISOString(),
      secondsAfter(START, 6).toISOString(),
    ]);
    clock.advance(60_000 - 6000 + 1000); // 61 s after the pass began, 58 s after the first lift
    await reconciler.reconcile('p');
    expect(cluster.released, 'not yet: the first lift was under 60 s ago').to.have.length(2);
    clock.advance(3000);
    await reconciler.reconcile('p');
    expect(cluster.released).to.deep.equal(['shop/a', 'shop/b', 'shop/c']);
  });

  it('when its policy is deleted: stops gating, lifts its gates and resumes its pauses, and nothing else', async () => {
    const { cluster, reconciler, sweeper, pacing } = world(PACING);
    await reconciler.reconcile('p');
    expect(pacing().has('p')).to.equal(true);
    cluster.gated = [gatedPod('mine'), gatedPod('other-policy', 'q')];
    cluster.addPolicy('q', { ...PACING, nodeSelector: { matchLabels: { pool: 'none' } } });
    cluster.deploymentMap.set('shop/web', ourPause('web'));
    const { stamps: _none, ...users } = ourPause('users');
    cluster.deploymentMap.set('shop/users', users);
    cluster.policyMap.delete('p');
    await reconciler.reconcile('p');
    await sweeper.sweep();
    expect(pacing().has('p'), 'the webhook stops gating for it').to.equal(false);
    expect(cluster.released).to.deep.equal(['shop/mine']);
    expect(cluster.deploymentMap.get('shop/web')).to.include({ paused: false });
    expect(cluster.deploymentMap.get('shop/web')!.stamps).to.equal(undefined);
    expect(cluster.deploymentMap.get('shop/users')!.paused, "the user's own pause").to.equal(true);
    expect(cluster.takeEvents()).to.include.members(['Pod/mine Normal PodStartReleased']);
  });

  it('in a dry run gates nothing and leaves real pauses frozen, but lifts real gates: a gate never strands a pod', async () => {
    const { cluster, reconciler, pacing } = world({ ...PACING, safety: { dryRun: true } }, false);
    cluster.gated = [gatedPod('left-by-a-real-run')];
    cluster.deploymentMap.set('shop/web', ourPause('web'));
    for (let i = 0; i < 3; i++) await reconciler.reconcile('p');
    expect(pacing().get('p')).to.include({ gating: false, dryRun: true });
    expect(cluster.released).to.deep.equal(['shop/left-by-a-real-run']);
    expect(cluster.deploymentMap.get('shop/web')).to.include({ paused: true });
    expect(cluster.takeEvents().filter((e) => e.includes('RolloutResumed'))).to.deep.equal([]);
    expect(cluster.policy('p')!.status!.throttledRollouts?.map((r) => [r.name, r.dryRun])).to.deep.equal([
      ['shop/web', false],
    ]);
  });

  it('pauses on the version it decided on: a Deployment the user changed meanwhile answers 409, and is not claimed', async () => {
    const { cluster, reconciler, applies } = world({
      ioPressure: IO,
      remediation: { throttleRollouts: { maxConcurrentRollouts: 1 } },
    });
    const rolling = (name: string, generation: number): WorkloadView => ({
      kind: 'Deployment',
      namespace: 'shop',
      name,
      uid: `uid-${name}`,
      generation,
      paused: false,
      createdAt: T0,
      rollingOut: true,
    });
    for (const name of ['a', 'b', 'c']) {
      cluster.deploymentMap.set(`shop/${name}`, rolling(name, 2));
      cluster.changeDeployment(`shop/${name}`, (d) => d); // a version in the cache
      cluster.runsOn('Deployment', `shop/${name}`); // on the saturated n1: its new pods may land there
    }
    // c is paused first (the newest queue); while that patch is under way, the user pauses b.
    cluster.beforeNextDeploymentPatch = () => {
      cluster.changeDeployment('shop/b', (d) => ({ ...d, paused: true }));
    };
    await reconciler.reconcile('p');
    expect(cluster.deploymentMap.get('shop/b')).to.include({ paused: true });
    expect(cluster.deploymentMap.get('shop/b')!.stamps, "the user's pause is not claimed").to.equal(
      undefined,
    );
    // The apply failed with the 409 (the apply queue backs off); the retry, after its backoff, claims nothing either.
    expect(String(applies.errors.at(-1))).to.contain('409');
    await reconciler.reconcile('p');
    expect(cluster.deploymentMap.get('shop/b')!.stamps, 'a user pause is never touched').to.equal(undefined);
  });

  it('keeps a queued rollout waiting when the pause that was to make room for it is refused', async () => {
    // No cordon: n1 stays open to both rollouts' new pods (a cordoned node would take none of `queued`'s).
    const { cluster, reconciler } = world({
      ioPressure: IO,
      remediation: { cordon: false, throttleRollouts: { maxConcurrentRollouts: 1 } },
      safety: { maxUnhealthyNodes: 1 },
    });
    // `queued` waits in our queue; `feeder` rolls out, and its new pod is stuck on the saturated n1.
    cluster.deploymentMap.set('shop/queued', ourPause('queued'));
    cluster.deploymentMap.set('shop/feeder', {
      kind: 'Deployment',
      namespace: 'shop',
      name: 'feeder',
      uid: 'uid-feeder',
      generation: 2,
      paused: false,
      createdAt: T0,
      rollingOut: true,
    });
    for (const key of ['shop/queued', 'shop/feeder']) {
      cluster.changeDeployment(key, (d) => d);
      cluster.runsOn('Deployment', key);
    }
    const stuck = {
      ...aPod().named('feeder-abc-1', 'shop').onNode('n1').waitingSince(T0).build(),
      controllerKind: 'ReplicaSet',
      controllerName: 'feeder-abc',
      labels: { 'pod-template-hash': 'abc' },
    };
    cluster.pods.push(stuck);
    cluster.events.push(anEvent().about(stuck).saying(nameReservedMessage(stuck)).build());
    // The deployment controller writes the feeder first: our pause of it answers 409.
    cluster.beforeNextDeploymentPatch = () => {
      cluster.changeDeployment('shop/feeder', (d) => d);
    };
    await reconciler.reconcile('p'); // the 409 is retried by the queue, after its backoff
    expect(cluster.deploymentMap.get('shop/feeder')).to.include({ paused: false });
    expect(cluster.deploymentMap.get('shop/queued'), 'still queued: its room was not made').to.include({
      paused: true,
    });
    expect(cluster.deploymentMap.get('shop/queued')!.stamps).to.include({ reason: 'RolloutQueued' });
    expect(cluster.takeEvents().filter((e) => e.includes('RolloutResumed'))).to.deep.equal([]);

    // The retry: at most one of the two rolls out while n1 is under pressure.
    await reconciler.reconcile('p');
    const progressing = ['shop/queued', 'shop/feeder'].filter((k) => !cluster.deploymentMap.get(k)!.paused);
    expect(progressing.length, `rolling out at once: ${progressing.join(', ')}`).to.be.at.most(1);
  });
  // Issue 26's defect: the pause needed our cordon. A saturated node feeds a pause whether or not it is cordoned.
  for (const [title, spec] of [
    ['with cordon off', { cordon: false }],
    ['in a storm, when maxUnhealthyNodes holds the cordon back', { maxUnhealthyNodes: 0 }],
  ] as const)
    it(`pauses the rollout that feeds a node with proven IO pressure ${title}, and resumes it after`, async () => {
      const { cluster, reconciler, clock, saturation } = world({
        ioPressure: IO,
        remediation: {
          ...('cordon' in spec ? { cordon: false } : {}),
          throttleRollouts: { maxConcurrentRollouts: 5 },
        },
        safety: 'maxUnhealthyNodes' in spec ? { maxUnhealthyNodes: 0 } : {},
      });
      cluster.deploymentMap.set('shop/feeder', {
        kind: 'Deployment',
        namespace: 'shop',
        name: 'feeder',
        uid: 'uid-feeder',
        generation: 2,
        paused: false,
        createdAt: T0,
        rollingOut: true,
      });
      cluster.changeDeployment('shop/feeder', (d) => d);
      const stuck = {
        ...aPod().named('feeder-abc-1', 'shop').onNode('n1').waitingSince(T0).build(),
        controllerKind: 'ReplicaSet',
        controllerName: 'feeder-abc',
        labels: { 'pod-template-hash': 'abc' },
      };
      cluster.pods.push(stuck);
      cluster.events.push(anEvent().about(stuck).saying(nameReservedMessage(stuck)).build());
      await reconciler.reconcile('p');
      await reconciler.reconcile('p');
      expect(cluster.node('n1')?.unschedulable, 'not cordoned').to.equal(false);
      expect(cluster.deploymentMap.get('shop/feeder')).to.include({ paused: true });
      expect(cluster.deploymentMap.get('shop/feeder')!.stamps).to.include({ reason: 'FeedsSaturatedNode' });
      expect(cluster.policy('p')!.status!.throttledRollouts?.[0]).to.include({
        kind: 'Deployment',
        name: 'shop/feeder',
        reason: 'FeedsSaturatedNode',
      });
      // The pressure ends: the stuck pod is gone and the node reads idle for recoverySeconds.
      cluster.pods.splice(cluster.pods.indexOf(stuck), 1);
      cluster.events.length = 0;
      saturation.on = false;
      for (let i = 0; i < 4; i++) {
        clock.advance(20_000);
        await reconciler.reconcile('p');
      }
      expect(cluster.deploymentMap.get('shop/feeder')).to.include({ paused: false });
      expect(cluster.deploymentMap.get('shop/feeder')!.stamps).to.equal(undefined);
    });
  it('lifts gates while a rollout pause is still in flight: the strands of a pass do not wait on each other', async () => {
    const { cluster, reconciler } = world({
      ...PACING,
      remediation: {
        throttleRollouts: { ...PACING.remediation.throttleRollouts, maxConcurrentRollouts: 1 },
      },
    });
    cluster.gated = [gatedPod('a', 'p', 30), gatedPod('b', 'p', 20)];
    for (const name of ['old', 'new']) {
      cluster.deploymentMap.set(
        `shop/${name}`,
        aRollingDeployment(name, { createdAt: name === 'old' ? T0 : secondsAfter(T0, 60) }),
      );
      cluster.changeDeployment(`shop/${name}`, (d) => d);
      cluster.runsOn('Deployment', `shop/${name}`);
    }
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const patchWorkload = cluster.patchWorkload.bind(cluster);
    let pausing = 0;
    cluster.patchWorkload = async (change) => {
      pausing++;
      await held;
      return patchWorkload(change);
    };
    const pass = reconciler.reconcile('p');
    for (let i = 0; i < 100 && cluster.released.length < 2; i++) await new Promise((r) => setTimeout(r, 5));
    expect(pausing, 'the pause is in flight').to.equal(1);
    expect(cluster.released, 'the gates were lifted meanwhile').to.deep.equal(['shop/a', 'shop/b']);
    release();
    await pass;
    const paused = ['old', 'new'].filter((n) => cluster.deploymentMap.get(`shop/${n}`)!.paused);
    expect(paused, 'one of the two rollouts paused, once the write went through').to.have.length(1);
  });
});
