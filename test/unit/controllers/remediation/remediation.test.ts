// Reconcile tests of remediation: cordon, evict, migrate and undo over an in-memory cluster, asserting the exact
// writes and Events of each pass. Pressure is immediate (sustainSeconds 0) so each pass is one decision.
import { expect } from 'chai';
import { DryRunActuator } from '../../../../src/actuation/actuator.js';
import { byObject, settledControllers, writtenBefore } from '../../../support/reconciler.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';
import {
  quiet,
  NODES,
  LOW,
  START,
  at,
  IO_REASON,
  policySpec,
  world,
  replicaSetPodsOn,
  health,
  condition,
  policyCondition,
  actionsOf,
  blockedOf,
  evictionWrites,
  detectedOnN1,
  allHealthsCreated,
} from '../../../support/remediation-world.js';

describe('PolicyReconciler remediation', () => {
  /**
   * One incident, pass by pass: web-1 and web-2 stuck on saturated n1, and the steps before `step` run (what they
   * wrote and recorded taken), so that each case below asserts one step.
   */
  async function incidentAt(step: number) {
    const w = world(policySpec());
    replicaSetPodsOn(w.cluster, 'n1', 'web-1', 'web-2');
    const pass = () => w.reconciler.reconcile('p');
    const steps = [
      pass, // 1: the cordon
      pass, // 2: the evictions
      pass, // 3: the evicted pods gone
      pass, // 4: nothing new
      async () => {
        w.readings.set('n1', LOW); // 5: pressure ends
        w.clock.advance(10_000);
        await pass();
      },
      async () => {
        w.clock.advance(30_000); // 6: recovered, in the cooldown
        await pass();
      },
      async () => {
        w.clock.advance(81_000); // 7: the cooldown over
        await pass();
      },
    ];
    for (const run of steps.slice(0, step - 1)) {
      await run();
      w.cluster.takeWrites();
      w.cluster.takeEvents();
    }
    await steps[step - 1]!();
    return w;
  }

  it('cordons a saturated node in one patch, evicting nothing before the cordon is seen', async () => {
    const { cluster, requeues } = await incidentAt(1);
    // Pass 1: one patch of the node (spec and stamps together), no eviction before the cordon is seen. The reports of
    // the nodes nothing is done on go at once; n1's once its cordon is back.
    expect(writtenBefore(cluster.writes, 'patch node/n1', 'patch health/n1')).to.equal(true);
    expect(byObject(cluster.takeWrites())).to.deep.equal(
      byObject(['patch node/n1', ...allHealthsCreated, 'patch policy/p']),
    );
    expect(cluster.takeEvents()).to.deep.equal([
      ...detectedOnN1('web-1', 'web-2'),
      'Node/n1 Normal Cordoned',
    ]);
    const n1 = cluster.nodeMap.get('n1')!;
    expect(n1.unschedulable).to.equal(true);
    expect(n1.stamps).to.deep.equal({
      policy: 'p',
      since: START,
      taintsBefore: [],
      reason: `${IO_REASON} (2 pod(s)).`,
      cordoned: true,
    });
    expect(cluster.evicted).to.deep.equal([]);
    expect(actionsOf(cluster, 'n1')).to.deep.equal(['Cordon node/n1 Succeeded']);
    // The decision carried out, the policy is looked at again to follow it up; and at once, as the report that lists
    // the stuck pods with their cause applied (their eviction waits for it).
    expect(requeues).to.deep.equal([
      { policy: 'p', after: 5_000 },
      { policy: 'p', after: 0 },
    ]);
  });

  it('evicts the stuck pods once the cordon is seen, the eviction budget written to the policy first', async () => {
    const { cluster, reconciler } = world(policySpec());
    const [web1, web2] = replicaSetPodsOn(cluster, 'n1', 'web-1', 'web-2');
    await reconciler.reconcile('p');
    cluster.takeWrites();
    cluster.takeEvents();
    // Pass 2: the cache shows the cordon. The eviction budget is written to the policy before any eviction.
    const budgetAtEviction: number[] = [];
    const evict = cluster.evict.bind(cluster);
    cluster.evict = (pod) => {
      budgetAtEviction.push(cluster.policy('p')!.status!.recentEvictions?.length ?? 0);
      return evict(pod);
    };
    await reconciler.reconcile('p');
    expect(budgetAtEviction).to.deep.equal([2, 2]);
    expect(byObject(cluster.takeWrites())).to.deep.equal(
      byObject([
        'patch policy/p',
        'evict pod/default/web-1',
        'evict pod/default/web-2',
        'patch health/n1',
        'patch policy/p',
      ]),
    );
    expect(cluster.takeEvents()).to.deep.equal([
      'Pod/web-1 Normal EvictedStuckPod',
      'Pod/web-2 Normal EvictedStuckPod',
    ]);
    expect(cluster.evicted).to.deep.equal(['default/web-1', 'default/web-2']);
    const status = health(cluster, 'n1');
    expect(
      status.actions!.map((a) => ({ kind: a.kind, target: a.target, uid: a.uid, outcome: a.outcome })),
    ).to.deep.equal([
      { kind: 'Evict', target: 'pod/default/web-2', uid: web2!.uid, outcome: 'Succeeded' },
      { kind: 'Evict', target: 'pod/default/web-1', uid: web1!.uid, outcome: 'Succeeded' },
      { kind: 'Cordon', target: 'node/n1', uid: undefined, outcome: 'Succeeded' },
    ]);
    expect(status.actions![0]).to.include({ time: at(0), dryRun: false, reason: 'SandboxCreationStuckOnIo' });
    expect(status.lastAction).to.equal('Evict Succeeded');
    expect(status.remediation).to.deep.equal({
      policy: 'p',
      since: at(0),
      cordoned: true,
      reason: `${IO_REASON} (2 pod(s)).`,
      dryRun: false,
    });
    expect(condition(cluster, 'n1', 'Cordoned')).to.include({
      status: 'True',
      reason: 'CordonedForIoPressure',
    });
    expect(status.state).to.equal('Remediating');
    expect(status.blocked).to.deep.equal([]);
    expect(cluster.policy('p')!.status).to.deep.include({
      recentEvictions: [at(0), at(0)],
      actionCount: 3,
      remediatingNodes: 1,
      degradedNodes: 1,
    });
  });

  it('keeps the node once its evicted pods have left: no longer degraded, still remediating', async () => {
    const { cluster } = await incidentAt(3);
    // Pass 3: the evicted pods have left the cache; the node is no longer degraded but stays ours.
    expect(byObject(cluster.takeWrites())).to.deep.equal(byObject(['patch health/n1', 'patch policy/p']));
    expect(cluster.takeEvents()).to.deep.equal(['Node/n1 Normal SandboxCreationRecovered']);
    expect(health(cluster, 'n1').state).to.equal('Remediating');
  });

  it('writes nothing and records nothing on a pass with nothing new', async () => {
    const { cluster } = await incidentAt(4);
    // Pass 4: nothing new: no writes, no Events.
    expect(cluster.takeWrites()).to.deep.equal([]);
    expect(cluster.takeEvents()).to.deep.equal([]);
  });

  it('is Recovering for recoverySeconds once the pressure ends, undoing nothing yet', async () => {
    const { cluster } = await incidentAt(5);
    // Pressure ends: Recovering for recoverySeconds (30 s), nothing undone yet.
    expect(byObject(cluster.takeWrites())).to.deep.equal(byObject(['patch health/n1']));
    expect(cluster.takeEvents()).to.deep.equal([]);
    expect(health(cluster, 'n1').state).to.equal('Recovering');
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
  });

  it('holds the uncordon for the cooldown once recovered, and says so', async () => {
    const { cluster } = await incidentAt(6);
    // Recovered at 40 s, but the cooldown (120 s from the cordon) holds the undo.
    expect(byObject(cluster.takeWrites())).to.deep.equal(byObject(['patch health/n1', 'patch policy/p']));
    expect(cluster.takeEvents()).to.deep.equal([
      'Node/n1 Normal IoPressureRecovered',
      'Node/n1 Warning RemediationBlocked',
    ]);
    expect(blockedOf(cluster, 'n1')).to.deep.equal(['Uncordon node/n1 Cooldown']);
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
  });

  it('uncordons after the cooldown, removing its stamps and status.remediation', async () => {
    const { cluster } = await incidentAt(7);
    // Cooldown over: uncordoned, stamps removed, status.remediation removed.
    expect(byObject(cluster.takeWrites())).to.deep.equal(
      byObject(['patch node/n1', 'patch health/n1', 'patch policy/p']),
    );
    expect(cluster.takeEvents()).to.deep.equal(['Node/n1 Normal Uncordoned']);
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(false);
    expect(cluster.nodeMap.get('n1')!.stamps).to.equal(undefined);
    const after = health(cluster, 'n1');
    expect(after).to.not.have.property('remediation');
    expect(after.state).to.equal('Healthy');
    expect(after.blocked).to.deep.equal([]);
    expect(after.lastAction).to.equal('Uncordon Succeeded');
    expect(after.actions![0]).to.include({
      kind: 'Uncordon',
      target: 'node/n1',
      reason: 'Recovered',
      time: at(121),
    });
    expect(cluster.policy('p')!.status).to.include({ remediatingNodes: 0, degradedNodes: 0 });
    // The node it has just made schedulable is neither cordoned nor "cordoned by others".
    expect(condition(cluster, 'n1', 'Cordoned')).to.include({ status: 'False', reason: 'NotCordoned' });
  });

  it('mirrors a real cordon in status.remediation with dryRun false from the pass that made it', async () => {
    const { cluster, reconciler } = world(policySpec());
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.stamps).to.not.equal(undefined);
    expect(health(cluster, 'n1').remediation).to.deep.equal({
      policy: 'p',
      since: at(0),
      cordoned: true,
      reason: `${IO_REASON} (1 pod(s)).`,
      dryRun: false,
    });
  });

  it('never stamps or uncordons a node someone else cordoned, but evicts the stuck pods on it', async () => {
    const { cluster, clock, readings, reconciler, requeues } = world(policySpec(), {
      nodes: NODES.map((n) => (n === 'n1' ? { ...aNode(n), unschedulable: true } : aNode(n))),
    });
    replicaSetPodsOn(cluster, 'n1', 'web-1', 'web-2');

    // Already fenced: the first pass reports the stuck pods with their cause, evicts none before that report, and
    // asks for a pass once it applied; that pass evicts them. The node is never patched.
    await reconciler.reconcile('p');
    expect(byObject(cluster.takeWrites())).to.deep.equal(byObject([...allHealthsCreated, 'patch policy/p']));
    expect(cluster.takeEvents()).to.deep.equal(detectedOnN1('web-1', 'web-2'));
    expect(requeues.at(-1)).to.deep.equal({ policy: 'p', after: 0 });
    await reconciler.reconcile('p');
    expect(byObject(cluster.takeWrites())).to.deep.equal(
      byObject([
        'patch policy/p',
        'evict pod/default/web-1',
        'evict pod/default/web-2',
        'patch health/n1',
        'patch policy/p',
      ]),
    );
    expect(cluster.takeEvents()).to.deep.equal([
      'Pod/web-1 Normal EvictedStuckPod',
      'Pod/web-2 Normal EvictedStuckPod',
    ]);
    expect(cluster.nodeMap.get('n1')!.stamps).to.equal(undefined);
    expect(health(cluster, 'n1')).to.not.have.property('remediation');
    expect(condition(cluster, 'n1', 'Cordoned')).to.include({ status: 'False', reason: 'CordonedByOthers' });
    expect(cluster.policy('p')!.status).to.include({ remediatingNodes: 0 });

    // Recovery and more than the cooldown later: still theirs, still unschedulable, never patched.
    readings.set('n1', LOW);
    for (const seconds of [10, 30, 200]) {
      clock.advance(seconds * 1000);
      await reconciler.reconcile('p');
    }
    expect(cluster.writes.filter((w) => w.startsWith('patch node/'))).to.deep.equal([]);
    expect(cluster.takeEvents()).to.deep.equal([
      'Node/n1 Normal SandboxCreationRecovered',
      'Node/n1 Normal IoPressureRecovered',
    ]);
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
    expect(cluster.nodeMap.get('n1')!.stamps).to.equal(undefined);
    expect(health(cluster, 'n1').state).to.equal('Healthy');
    expect(condition(cluster, 'n1', 'Cordoned')).to.include({ status: 'False', reason: 'CordonedByOthers' });
  });

  it('evicts at most 8 pods a pass and comes back at once for the rest, within the eviction budget', async () => {
    const { cluster, reconciler, requeues } = world(policySpec({ maxEvictionsPerMinute: 20 }));
    const names = Array.from({ length: 12 }, (_, i) => `web-${i}`);
    replicaSetPodsOn(cluster, 'n1', ...names);
    await reconciler.reconcile('p'); // the cordon
    cluster.takeWrites();

    await reconciler.reconcile('p');
    expect(evictionWrites(cluster)).to.have.length(8);
    expect(requeues.at(-1)).to.deep.equal({ policy: 'p', after: 0 });
    expect(cluster.policy('p')!.status!.recentEvictions).to.have.length(8);
    cluster.takeWrites();

    await reconciler.reconcile('p');
    expect(evictionWrites(cluster)).to.have.length(4);
    expect(cluster.evicted).to.have.members(names.map((n) => `default/${n}`));
    expect(cluster.policy('p')!.status!.recentEvictions).to.have.length(12);
  });

  it('goes on to the other pods when a disruption budget refuses the first 8, without a busy loop', async () => {
    const { cluster, reconciler } = world(policySpec({ maxEvictionsPerMinute: 20 }));
    const names = Array.from({ length: 12 }, (_, i) => `web-${i}`);
    replicaSetPodsOn(cluster, 'n1', ...names);
    // The first 8 in the decision's order (by name).
    const first = [...names].sort().slice(0, 8);
    for (const name of first) cluster.protectedPods.add(`default/${name}`);
    await reconciler.reconcile('p'); // the cordon
    cluster.takeWrites();

    const refused = await reconciler.reconcile('p');
    expect(cluster.evicted).to.deep.equal([]);
    expect(blockedOf(cluster, 'n1')).to.have.length(8);
    expect(refused.requeueAfterMs, 'nothing got through: the follow-up, not at once').to.be.greaterThan(0);

    await reconciler.reconcile('p');
    const others = names.filter((n) => !first.includes(n));
    expect(cluster.evicted).to.have.members(others.map((n) => `default/${n}`));
  });

  it('honours maxEvictionsPerMinute across a restart, from status.recentEvictions', async () => {
    const { cluster, clock, start, reconciler } = world(policySpec({ maxEvictionsPerMinute: 2 }));
    replicaSetPodsOn(cluster, 'n1', 'web-1', 'web-2', 'web-3', 'web-4', 'web-5');

    await reconciler.reconcile('p'); // cordon
    await reconciler.reconcile('p');
    expect(cluster.evicted).to.deep.equal(['default/web-1', 'default/web-2']);
    expect(blockedOf(cluster, 'n1')).to.deep.equal([
      'Evict pod/default/web-3 EvictionRate',
      'Evict pod/default/web-4 EvictionRate',
      'Evict pod/default/web-5 EvictionRate',
    ]);
    expect(cluster.policy('p')!.status!.recentEvictions).to.deep.equal([at(0), at(0)]);
    cluster.takeWrites();
    cluster.takeEvents();

    // A restarted process remembers nothing in memory; the policy status still holds the budget.
    const restarted = start().reconciler;
    clock.advance(30_000);
    await restarted.reconcile('p');
    expect(evictionWrites(cluster)).to.deep.equal([]);
    expect(cluster.takeEvents()).to.deep.equal([]);
    expect(cluster.evicted).to.have.length(2);

    // A minute after the first evictions, two more.
    clock.advance(31_000);
    await restarted.reconcile('p');
    expect(evictionWrites(cluster)).to.deep.equal(['evict pod/default/web-3', 'evict pod/default/web-4']);
    expect(cluster.policy('p')!.status!.recentEvictions).to.deep.equal([at(61), at(61)]);
    expect(blockedOf(cluster, 'n1')).to.deep.equal(['Evict pod/default/web-5 EvictionRate']);
    cluster.takeWrites();

    const again = start().reconciler;
    clock.advance(61_000);
    await again.reconcile('p');
    expect(evictionWrites(cluster)).to.deep.equal(['evict pod/default/web-5']);
    expect(cluster.evicted).to.have.length(5);
  });

  it('logs each eviction when its answer came, not when its pass began, so the next minute starts after the last one', async () => {
    const { cluster, clock, reconciler } = world(policySpec({ maxEvictionsPerMinute: 2 }));
    replicaSetPodsOn(cluster, 'n1', 'web-1', 'web-2', 'web-3', 'web-4');
    await reconciler.reconcile('p'); // cordon
    // Each eviction takes 1.5 s to be answered (a busy apiserver).
    const evict = cluster.evict.bind(cluster);
    cluster.evict = async (pod) => {
      const outcome = await evict(pod);
      clock.advance(1500);
      return outcome;
    };
    const passAt = clock.now();
    await reconciler.reconcile('p');
    expect(cluster.evicted).to.deep.equal(['default/web-1', 'default/web-2']);
    expect(cluster.policy('p')!.status!.recentEvictions).to.deep.equal([
      new Date(passAt + 1500).toISOString(),
      new Date(passAt + 3000).toISOString(),
    ]);
    cluster.takeWrites();

    // A minute after the first answer, not the second: one more, not two.
    clock.advance(61_600 - (clock.now() - passAt));
    await reconciler.reconcile('p');
    expect(evictionWrites(cluster)).to.deep.equal(['evict pod/default/web-3']);
  });

  it('counts an eviction that got no answer against the budget, and one the API refused not', async () => {
    // Four a minute, one of them kept for a node with no eviction yet: three for n1 in this pass.
    const { cluster, reconciler } = world(policySpec({ maxEvictionsPerMinute: 4 }));
    replicaSetPodsOn(cluster, 'n1', 'web-1', 'web-2', 'web-3', 'web-4');
    await reconciler.reconcile('p'); // cordon
    const evict = cluster.evict.bind(cluster);
    cluster.evict = (pod) => {
      if (pod.name === 'web-1') return Promise.reject(new Error('The operation was aborted due to timeout'));
      if (pod.name === 'web-2')
        return Promise.reject(Object.assign(new Error('Forbidden'), { statusCode: 403 }));
      return evict(pod);
    };
    await reconciler.reconcile('p').catch(() => undefined);
    expect(cluster.evicted).to.deep.equal(['default/web-3']);
    // The timed-out one may have been carried out: two spent, one refused.
    expect(cluster.policy('p')!.status!.recentEvictions).to.have.length(2);
  });

  it('in a dry run decides, reports and records the same as a real run, and changes nothing', async () => {
    const run = async (dryRun: boolean) => {
      const w = world(policySpec({ dryRun }));
      replicaSetPodsOn(w.cluster, 'n1', 'web-1', 'web-2');
      await w.reconciler.reconcile('p');
      const firstWrites = w.cluster.takeWrites();
      await w.reconciler.reconcile('p');
      return { ...w, firstWrites, secondWrites: w.cluster.takeWrites() };
    };
    const real = await run(false);
    const dry = await run(true);

    expect(dry.cluster.recorded.map((t) => `${t.target.kind}/${t.target.name} ${t.reason}`)).to.deep.equal(
      real.cluster.recorded.map((t) => `${t.target.kind}/${t.target.name} ${t.reason}`),
    );
    const acted = dry.cluster.recorded.filter((t) => ['Cordoned', 'EvictedStuckPod'].includes(t.reason));
    expect(acted.map((t) => t.reason)).to.deep.equal(['Cordoned', 'EvictedStuckPod', 'EvictedStuckPod']);
    for (const t of acted) expect(t.message).to.match(/^Dry run/);

    expect(actionsOf(dry.cluster, 'n1')).to.deep.equal(actionsOf(real.cluster, 'n1'));
    expect(health(dry.cluster, 'n1').actions!.every((a) => a.dryRun)).to.equal(true);
    expect(health(dry.cluster, 'n1').lastAction).to.equal('Evict Succeeded (dry run)');
    expect(health(dry.cluster, 'n1').remediation).to.deep.include({
      policy: 'p',
      cordoned: true,
      dryRun: true,
    });
    expect(condition(dry.cluster, 'n1', 'Cordoned')).to.include({ status: 'True', reason: 'DryRun' });
    expect(health(dry.cluster, 'n1').state).to.equal('Remediating');

    expect(byObject(dry.firstWrites)).to.deep.equal(byObject([...allHealthsCreated, 'patch policy/p']));
    expect(byObject(dry.secondWrites)).to.deep.equal(
      byObject(['patch policy/p', 'patch health/n1', 'patch policy/p']),
    );
    expect(dry.cluster.nodeMap.get('n1')).to.deep.equal(aNode('n1'));
    expect(dry.cluster.evicted).to.deep.equal([]);
    expect(dry.cluster.pods.map((p) => p.name)).to.deep.equal(['web-1', 'web-2']);

    // The pods are still there (nothing was evicted), yet neither the cordon nor the evictions are repeated.
    dry.cluster.takeEvents();
    await dry.reconciler.reconcile('p');
    expect(dry.cluster.takeWrites()).to.deep.equal([]);
    expect(dry.cluster.takeEvents()).to.deep.equal([]);
  });

  it('leaves nothing in flight after a dry run: the same pods are evicted for real at once when the policy turns real', async () => {
    const w = world(policySpec({ dryRun: true }));
    replicaSetPodsOn(w.cluster, 'n1', 'web-1');
    await w.reconciler.reconcile('p'); // a simulated cordon
    await w.reconciler.reconcile('p'); // a simulated eviction: web-1 is still there
    expect(actionsOf(w.cluster, 'n1')).to.deep.equal([
      'Evict pod/default/web-1 Succeeded',
      'Cordon node/n1 Succeeded',
    ]);
    w.cluster.policyMap.set('p', { ...w.cluster.policy('p')!, generation: 2, spec: policySpec() });
    w.cluster.changed();
    await w.reconciler.reconcile('p'); // the real cordon
    expect(w.cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
    await w.reconciler.reconcile('p'); // the cordon is seen: the real eviction, not a minute later
    expect(w.cluster.evicted).to.deep.equal(['default/web-1']);
  });

  it('starts nothing in a storm: StormDetected once, every node blocked by StormLimit', async () => {
    const { cluster, reconciler } = world(policySpec({ maxUnhealthyNodes: 2 }), { saturated: NODES });
    for (const n of NODES) replicaSetPodsOn(cluster, n, `web-${n}`);

    await reconciler.reconcile('p');
    expect(byObject(cluster.takeWrites())).to.deep.equal(byObject([...allHealthsCreated, 'patch policy/p']));
    expect(cluster.takeEvents()).to.have.members([
      ...NODES.flatMap((n) => [
        `Node/${n} Warning SandboxCreationDegraded`,
        `Node/${n} Warning IoPressureHigh`,
        `Pod/web-${n} Warning SandboxCreationStuck`,
        `Node/${n} Warning RemediationBlocked`,
      ]),
      'SandboxPolicy/p Warning StormDetected',
    ]);
    for (const n of NODES) {
      expect(blockedOf(cluster, n)).to.deep.equal([`Cordon node/${n} StormLimit`]);
      expect(cluster.nodeMap.get(n)!.unschedulable).to.equal(false);
    }
    expect(policyCondition(cluster, 'StormDetected')).to.include({
      status: 'True',
      reason: 'StormLimitReached',
    });
    expect(cluster.policy('p')!.status).to.include({
      degradedNodes: 6,
      remediatingNodes: 0,
      blockedActionCount: 6,
    });

    await reconciler.reconcile('p');
    expect(cluster.takeWrites()).to.deep.equal([]);
    expect(cluster.takeEvents()).to.deep.equal([]);
  });

  it('lists at most 100 overlapping nodes and counts them all', async () => {
    const names = Array.from({ length: 150 }, (_, i) => `n${String(i + 1).padStart(3, '0')}`);
    const cluster = new MemoryCluster()
      .addPolicy('broad', {}, T0)
      .addPolicy('zone-a', { nodeSelector: { matchLabels: { zone: 'a' } } }, secondsAfter(T0, 10))
      .addNodes(...names.map((n) => aNode(n, { zone: 'a' })));
    const reconciler = settledControllers({
      writeConcurrency: 1, // one write at a time: the tests assert the exact order of writes
      cache: cluster,
      writer: cluster,
      recorder: cluster,
      actuators: { real: cluster, dryRun: new DryRunActuator() },
      clock: new FakeClock(START.getTime()),
      logger: quiet,
    }).reconciler;

    await reconciler.reconcile('broad');
    const status = cluster.policy('broad')!.status!;
    expect(status).to.include({ matchedNodes: 0, overlappingNodeCount: 150 });
    expect(status.overlappingNodes).to.have.length(100);
    expect(status.overlappingNodes![0]).to.deep.equal({ node: 'n001', ownedBy: 'zone-a' });
    expect(status.overlappingNodes![99]).to.deep.equal({ node: 'n100', ownedBy: 'zone-a' });
  });
});
