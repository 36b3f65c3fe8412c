// Reconcile tests of remediation: cordon, evict, migrate and undo over an in-memory cluster, asserting the exact
// writes and Events of each pass. Pressure is immediate (sustainSeconds 0) so each pass is one decision.
import { silentLogger } from '../../../../src/observability/log.js';
import { expect } from 'chai';
import { DryRunActuator } from '../../../../src/actuation/actuator.js';
import { toApiTime, type SandboxHealthStatus } from '../../../../src/api/v1alpha1/index.js';
import type { ControllerDeps } from '../../../../src/controllers/manager/wiring.js';
import { byObject, settledControllers, writtenBefore } from '../../../support/reconciler.js';
import type { NodeView, PodView } from '../../../../src/detection/index.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { TerminalError } from '../../../../src/runtime/controller.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster, tellOfChanges } from '../../../support/memory-cluster.js';

const quiet = silentLogger;
const NODES = ['n1', 'n2', 'n3', 'n4', 'n5', 'n6'];
const HIGH = { psiSomeAvg10Percent: 55 };
const LOW = { psiSomeAvg10Percent: 2 };
/** The first pass runs 60 s after T0: pods waiting since T0 are past the 30 s threshold. */
const START = secondsAfter(T0, 60);
const at = (seconds: number) => secondsAfter(START, seconds).toISOString();
const IO_REASON = 'Sandbox creation stuck from IO under verified IO pressure';

/** Pressure is immediate; cooldown (120 s) outlasts recovery (30 s), so both visibly hold an undo. */
function policySpec(
  safety: Record<string, unknown> = {},
  remediation: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    detection: { stuckThresholdSeconds: 30 },
    ioPressure: { sustainSeconds: 0, recoverySeconds: 30, staleAfterSeconds: 3600 },
    // The Node condition has its own tests (node-conditions.test.ts): these count the other writes.
    remediation: { nodeCondition: false, ...remediation },
    safety: { maxUnhealthyNodes: 1, cooldownSeconds: 120, maxEvictionsPerMinute: 10, ...safety },
  };
}

interface WorldOptions {
  nodes?: NodeView[];
  /** Nodes whose IO reading is over the threshold; every other node reads low. */
  saturated?: string[];
  /** Without an IO source the nodes' IoPressureHigh is absent (detection only). */
  source?: boolean;
}

/** Six nodes, policy p, a polled IO source over `readings`; start() builds a reconciler (again: a restart). */
function world(spec: Record<string, unknown>, options: WorldOptions = {}) {
  const nodes = options.nodes ?? NODES.map((n) => aNode(n));
  const saturated = new Set(options.saturated ?? ['n1']);
  const cluster = new MemoryCluster().addPolicy('p', spec).addNodes(...nodes);
  const readings = new Map<string, { psiSomeAvg10Percent: number }>(
    nodes.map((n) => [n.name, saturated.has(n.name) ? HIGH : LOW]),
  );
  const clock = new FakeClock(START.getTime());
  const sources: ControllerDeps['sources'] = () => ({
    kind: 'prometheus',
    pollMs: 10_000,
    refresh: () => Promise.resolve(),
    read: (node: string) => {
      const r = readings.get(node);
      return r
        ? { source: 'prometheus', observedTime: new Date(clock.now()).toISOString(), ...r }
        : undefined;
    },
  });
  const start = () => {
    const controllers = settledControllers({
      writeConcurrency: 1, // one write at a time: the tests assert the exact order of writes
      cache: cluster,
      writer: cluster,
      recorder: cluster,
      actuators: { real: cluster, dryRun: new DryRunActuator() },
      workloads: cluster,
      clock,
      logger: quiet,
      ...(options.source === false ? {} : { sources }),
    });
    tellOfChanges(cluster, controllers.reconciler);
    return controllers;
  };
  const { reconciler, sweeper, requeues, applies } = start();
  return { cluster, clock, readings, reconciler, sweeper, requeues, applies, start };
}

/** Pods stuck in ContainerCreating on `node` since T0, each with a NameReserved failure Event. */
function stuckOn(cluster: MemoryCluster, node: string, names: string[], controllerKind?: string): PodView[] {
  const pods = names.map((name) => {
    const pod = aPod().named(name).onNode(node).waitingSince(T0).build();
    return controllerKind ? { ...pod, controllerKind } : pod;
  });
  cluster.pods.push(...pods);
  cluster.events.push(...pods.map((p) => anEvent().about(p).saying(nameReservedMessage(p)).build()));
  return pods;
}
const replicaSetPodsOn = (cluster: MemoryCluster, node: string, ...names: string[]) =>
  stuckOn(cluster, node, names, 'ReplicaSet');

const health = (cluster: MemoryCluster, node: string): SandboxHealthStatus => cluster.health(node)!.status!;
const condition = (cluster: MemoryCluster, node: string, type: string) =>
  cluster.health(node)?.status?.conditions?.find((c) => c.type === type);
const policyCondition = (cluster: MemoryCluster, type: string) =>
  cluster.policy('p')?.status?.conditions?.find((c) => c.type === type);
/** Recorded actions, newest first, as "Kind target Outcome". */
const actionsOf = (cluster: MemoryCluster, node: string) =>
  (health(cluster, node).actions ?? []).map((a) => `${a.kind} ${a.target} ${a.outcome}`);
const blockedOf = (cluster: MemoryCluster, node: string) =>
  (health(cluster, node).blocked ?? []).map((b) => `${b.kind} ${b.target} ${b.guard}`);
const evictionWrites = (cluster: MemoryCluster) => cluster.writes.filter((w) => w.startsWith('evict '));

/** First-pass writes when only n1 changes its node: every SandboxHealth is created and written once. */
const allHealthsCreated = NODES.flatMap((n) => [`create health/${n}`, `patch health/${n}`]);
/** First-pass Events for n1 with its stuck pods, before any remediation Event. */
const detectedOnN1 = (...pods: string[]) => [
  'Node/n1 Warning SandboxCreationDegraded',
  'Node/n1 Warning IoPressureHigh',
  ...pods.map((p) => `Pod/${p} Warning SandboxCreationStuck`),
];

/** web-1 stuck on n1 and reported by a first pass whose writes the watch has not delivered yet. */
async function reportedWhileLagging() {
  const w = world(policySpec(), { source: false });
  replicaSetPodsOn(w.cluster, 'n1', 'web-1');
  w.cluster.lagging = true;
  await w.reconciler.reconcile('p');
  w.cluster.takeWrites();
  w.cluster.takeEvents();
  return w;
}

describe('PolicyReconciler remediation', () => {
  it('cordons a saturated node, evicts its stuck pods once the cordon is seen, and uncordons after recovery and cooldown', async () => {
    const { cluster, clock, readings, reconciler, requeues } = world(policySpec());
    const [web1, web2] = replicaSetPodsOn(cluster, 'n1', 'web-1', 'web-2');

    // Pass 1: one patch of the node (spec and stamps together), no eviction before the cordon is seen. The reports of
    // the nodes nothing is done on go at once; n1's once its cordon is back.
    await reconciler.reconcile('p');
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

    // Pass 3: the evicted pods have left the cache; the node is no longer degraded but stays ours.
    await reconciler.reconcile('p');
    expect(byObject(cluster.takeWrites())).to.deep.equal(byObject(['patch health/n1', 'patch policy/p']));
    expect(cluster.takeEvents()).to.deep.equal(['Node/n1 Normal SandboxCreationRecovered']);
    expect(health(cluster, 'n1').state).to.equal('Remediating');

    // Pass 4: nothing new: no writes, no Events.
    await reconciler.reconcile('p');
    expect(cluster.takeWrites()).to.deep.equal([]);
    expect(cluster.takeEvents()).to.deep.equal([]);

    // Pressure ends: Recovering for recoverySeconds (30 s), nothing undone yet.
    readings.set('n1', LOW);
    clock.advance(10_000);
    await reconciler.reconcile('p');
    expect(byObject(cluster.takeWrites())).to.deep.equal(byObject(['patch health/n1']));
    expect(cluster.takeEvents()).to.deep.equal([]);
    expect(health(cluster, 'n1').state).to.equal('Recovering');
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);

    // Recovered at 40 s, but the cooldown (120 s from the cordon) holds the undo.
    clock.advance(30_000);
    await reconciler.reconcile('p');
    expect(byObject(cluster.takeWrites())).to.deep.equal(byObject(['patch health/n1', 'patch policy/p']));
    expect(cluster.takeEvents()).to.deep.equal([
      'Node/n1 Normal IoPressureRecovered',
      'Node/n1 Warning RemediationBlocked',
    ]);
    expect(blockedOf(cluster, 'n1')).to.deep.equal(['Uncordon node/n1 Cooldown']);
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);

    // Cooldown over: uncordoned, stamps removed, status.remediation removed.
    clock.advance(81_000);
    await reconciler.reconcile('p');
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

  describe('read-your-writes', () => {
    it('decides nothing twice while its own cordon and evictions have not come back through the watch', async () => {
      const { cluster, reconciler } = world(policySpec());
      replicaSetPodsOn(cluster, 'n1', 'web-1', 'web-2');
      cluster.lagging = true;

      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject(['patch node/n1', ...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.takeEvents()).to.deep.equal([
        ...detectedOnN1('web-1', 'web-2'),
        'Node/n1 Normal Cordoned',
      ]);
      expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(false); // the cache has not seen it yet

      // Before the watch delivers: no second cordon, no SandboxHealth rewritten, no Event repeated.
      const early = await reconciler.reconcile('p');
      const writes = cluster.takeWrites();
      // Policy status writes are the subject of the next test.
      expect(writes.filter((w) => !w.startsWith('patch policy/'))).to.deep.equal([]);
      expect(cluster.takeEvents()).to.deep.equal([]);
      expect(early.requeueAfterMs).to.be.at.most(500);

      cluster.deliver();
      expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
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

      // The evicted pods and the new status are still on their way: nothing is evicted twice.
      const again = await reconciler.reconcile('p');
      expect(evictionWrites(cluster)).to.deep.equal([]);
      expect(cluster.takeWrites().filter((w) => !w.startsWith('patch policy/'))).to.deep.equal([]);
      expect(cluster.takeEvents()).to.deep.equal([]);
      // Nothing to wait for at once: what was written stands in for the status, and the watch's delivery of the
      // evicted pods brings the next pass.
      expect(again.requeueAfterMs).to.be.greaterThan(500);

      cluster.deliver();
      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(byObject(['patch health/n1', 'patch policy/p']));
      expect(cluster.takeEvents()).to.deep.equal(['Node/n1 Normal SandboxCreationRecovered']);
      expect(cluster.evicted).to.deep.equal(['default/web-1', 'default/web-2']);
    });

    it("decides on a saturated node while another node's SandboxHealth write is still on its way", async () => {
      const { cluster, reconciler } = world(policySpec());
      await reconciler.reconcile('p');
      cluster.takeWrites();
      cluster.takeEvents();
      cluster.lagging = true;

      // n2's status is written and its write is not back through the watch...
      cluster.pods.push(aPod().named('slow').onNode('n2').waitingSince(T0).build());
      reconciler.markDirty('p', 'n2');
      await reconciler.reconcile('p');
      expect(cluster.takeWrites()).to.include('patch health/n2');

      // ...when n1's pods get stuck on IO: the cordon does not wait for n2's write to come back.
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      reconciler.markDirty('p', 'n1');
      await reconciler.reconcile('p');
      expect(cluster.takeWrites()).to.include.members(['patch node/n1', 'patch health/n1']);
      // The policy's counts stand on what was written for n2: two degraded nodes, one remediated.
      cluster.deliver();
      expect(cluster.policy('p')!.status).to.include({ degradedNodes: 2, remediatingNodes: 1 });
      expect(condition(cluster, 'n2', 'SandboxCreationDegraded')).to.include({ status: 'True' });
      expect(cluster.nodeMap.get('n2')!.unschedulable).to.equal(false);
    });

    it('keeps the policy status as it was while its own writes are in flight', async () => {
      const { cluster, reconciler } = world(policySpec());
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      cluster.lagging = true;
      await reconciler.reconcile('p');
      cluster.takeWrites();

      // Our writes are not back through the watch: there is nothing new to report, least of all "0 degraded".
      const early = await reconciler.reconcile('p');
      expect(cluster.takeWrites()).to.deep.equal([]);
      expect(early.requeueAfterMs).to.be.at.most(500);
      cluster.deliver();
      expect(cluster.policy('p')!.status).to.include({
        matchedNodes: 6,
        degradedNodes: 1,
        remediatingNodes: 1,
      });
    });

    it('records SandboxCreationDegraded once when the next reconcile runs before the watch delivers', async () => {
      const { cluster, reconciler } = world(policySpec(), { source: false });
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      cluster.lagging = true;

      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject([...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.takeEvents()).to.deep.equal([
        'Node/n1 Warning SandboxCreationDegraded',
        'Pod/web-1 Warning SandboxCreationStuck',
      ]);

      // Another change on n1 (a kubelet retry Event) arrives before the watch delivers our own write.
      reconciler.markDirty('p', 'n1');
      const early = await reconciler.reconcile('p');
      expect(cluster.takeWrites().filter((w) => w.startsWith('patch health/'))).to.deep.equal([]);
      expect(cluster.takeEvents()).to.deep.equal([]);
      expect(
        early.requeueAfterMs,
        'no polling for the watch: the status written stands in',
      ).to.be.greaterThan(500);

      // Policy status writes are the subject of the test above.
      cluster.deliver();
      await reconciler.reconcile('p');
      expect(cluster.takeWrites().filter((w) => !w.startsWith('patch policy/'))).to.deep.equal([]);
      expect(cluster.takeEvents()).to.deep.equal([]);
      expect(condition(cluster, 'n1', 'SandboxCreationDegraded')).to.include({ status: 'True' });
    });

    it('creates a SandboxHealth again that vanished while its write stood in for it, instead of patching it forever', async () => {
      const { cluster, reconciler } = await reportedWhileLagging();
      cluster.vanishHealth('n1');

      // The cache still shows it: the patch meets a 404, and the object is created again in the same pass.
      replicaSetPodsOn(cluster, 'n1', 'web-2');
      reconciler.markDirty('p', 'n1');
      await reconciler.reconcile('p');
      expect(cluster.takeWrites().filter((w) => w.endsWith('health/n1'))).to.deep.equal([
        'patch health/n1',
        'create health/n1',
        'patch health/n1',
      ]);
      cluster.deliver();
      expect(health(cluster, 'n1').stuckPods!.map((p) => p.name)).to.have.members(['web-1', 'web-2']);
    });

    it('reports a pod newly stuck on a node whose last SandboxHealth write is not back yet, on what it wrote', async () => {
      const { cluster, reconciler } = await reportedWhileLagging();

      // A second pod gets stuck before the watch shows n1's first report: it is reported at once, with no wait
      // for the watch, and what was reported before (the degraded condition, web-1) is not reported again.
      replicaSetPodsOn(cluster, 'n1', 'web-2');
      reconciler.markDirty('p', 'n1');
      await reconciler.reconcile('p');
      expect(cluster.takeWrites().filter((w) => w.startsWith('patch health/'))).to.deep.equal([
        'patch health/n1',
      ]);
      expect(cluster.takeEvents()).to.deep.equal(['Pod/web-2 Warning SandboxCreationStuck']);
      cluster.deliver();
      expect(health(cluster, 'n1').stuckPods!.map((p) => p.name)).to.have.members(['web-1', 'web-2']);
      expect(condition(cluster, 'n1', 'SandboxCreationDegraded')).to.include({ status: 'True' });

      // Both writes came back: nothing is left to write or record.
      await reconciler.reconcile('p');
      expect(cluster.takeWrites().filter((w) => !w.startsWith('patch policy/'))).to.deep.equal([]);
      expect(cluster.takeEvents()).to.deep.equal([]);
    });
  });

  describe('failure isolation', () => {
    it("writes every other node's status when one SandboxHealth patch fails, then has the queue retry after its backoff", async () => {
      const { cluster, reconciler, requeues, applies } = world(policySpec(), { saturated: [] });
      cluster.failNextHealthPatch.set('n2', new Error('boom'));

      await reconciler.reconcile('p');
      expect(requeues.map((r) => r.after)).to.include('backoff');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject([...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.health('n2')!.status).to.equal(undefined);
      for (const n of ['n1', 'n3', 'n4', 'n5', 'n6']) expect(cluster.health(n)!.status!.policy).to.equal('p');

      // The policy's apply failed with it: the apply queue backs off, and grows the backoff for as long as writes fail.
      expect(String(applies.errors.at(-1))).to.contain('boom');
      // The retry writes what is missing and nothing else.
      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(byObject(['patch health/n2']));
      expect(cluster.health('n2')!.status!.policy).to.equal('p');
    });

    it('asks no retry when the failed SandboxHealth patch is terminal, still writing the other nodes', async () => {
      const { cluster, reconciler, requeues } = world(policySpec(), { saturated: [] });
      cluster.failNextHealthPatch.set('n2', new TerminalError('422 Unprocessable'));

      await reconciler.reconcile('p');
      expect(requeues.map((r) => r.after)).to.not.include('backoff');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject([...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.health('n2')!.status).to.equal(undefined);
      for (const n of ['n1', 'n3', 'n4', 'n5', 'n6']) expect(cluster.health(n)!.status!.policy).to.equal('p');
    });

    it('records a failed cordon as Failed with a RemediationFailed Event, reports the other nodes, then has the queue retry', async () => {
      const { cluster, reconciler, requeues, applies } = world(policySpec());
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      cluster.failNextNodePatch.set('n1', new Error('conflict'));

      await reconciler.reconcile('p');
      // The failure asks for the backoff; the report listing web-1 asks for nothing (the node is not fenced, and a
      // pass at once would skip the backoff).
      expect(requeues).to.deep.equal([{ policy: 'p', after: 'backoff' }]);
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject(['patch node/n1', ...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.takeEvents()).to.deep.equal([
        ...detectedOnN1('web-1'),
        'Node/n1 Warning RemediationFailed',
      ]);
      expect(actionsOf(cluster, 'n1')).to.deep.equal(['Cordon node/n1 Failed']);
      expect(health(cluster, 'n1').actions![0]!.message).to.contain('conflict');
      expect(health(cluster, 'n1').lastAction).to.equal('Cordon Failed');
      for (const n of ['n2', 'n3', 'n4', 'n5', 'n6']) expect(cluster.health(n)!.status!.policy).to.equal('p');
      expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(false);
      expect(cluster.policy('p')!.status).to.include({ actionCount: 0 });

      // The apply failed with it (the queue's backoff); the retry cordons, once.
      expect(String(applies.errors.at(-1))).to.contain('conflict');
      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject(['patch node/n1', 'patch health/n1', 'patch policy/p']),
      );
      expect(cluster.takeEvents()).to.deep.equal(['Node/n1 Normal Cordoned']);
      expect(actionsOf(cluster, 'n1')).to.deep.equal(['Cordon node/n1 Succeeded', 'Cordon node/n1 Failed']);
    });

    it('claims no cordon in status when the cordon failed', async () => {
      const { cluster, reconciler } = world(policySpec());
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      cluster.failNextNodePatch.set('n1', new Error('conflict'));
      await reconciler.reconcile('p');

      expect(cluster.nodeMap.get('n1')!.stamps).to.equal(undefined);
      const status = health(cluster, 'n1');
      expect(status).to.not.have.property('remediation');
      expect(condition(cluster, 'n1', 'Cordoned')).to.include({ status: 'False', reason: 'NotCordoned' });
      expect(status.state).to.equal('IoPressure');
      expect(cluster.policy('p')!.status).to.include({ remediatingNodes: 0 });
    });

    it('resolves (no retry) when the failed cordon is terminal, reporting it and the other nodes', async () => {
      const { cluster, reconciler } = world(policySpec());
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      cluster.failNextNodePatch.set('n1', new TerminalError('422 Unprocessable'));

      await reconciler.reconcile('p');
      expect(byObject(cluster.takeWrites())).to.deep.equal(
        byObject(['patch node/n1', ...allHealthsCreated, 'patch policy/p']),
      );
      expect(cluster.takeEvents()).to.deep.equal([
        ...detectedOnN1('web-1'),
        'Node/n1 Warning RemediationFailed',
      ]);
      expect(actionsOf(cluster, 'n1')).to.deep.equal(['Cordon node/n1 Failed']);
    });
  });

  describe('PodDisruptionBudget', () => {
    const migrating = policySpec({}, { migrateWorkloads: { podSelector: { matchLabels: { io: 'heavy' } } } });
    function heavyOn(cluster: MemoryCluster, node: string, name: string): PodView {
      const pod = {
        ...aPod().named(name).onNode(node).running().labelled({ io: 'heavy' }).build(),
        controllerKind: 'ReplicaSet',
      };
      cluster.running.push(pod);
      return pod;
    }

    it('lists a migration the budget refuses as blocked with one Event, and migrates once it allows', async () => {
      const { cluster, reconciler } = world(migrating);
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      stuckOn(cluster, 'n1', ['bare']); // no controller: never evicted, so the node stays degraded
      heavyOn(cluster, 'n1', 'db-0');
      cluster.protectedPods.add('default/db-0');

      await reconciler.reconcile('p'); // cordon
      cluster.takeWrites();
      cluster.takeEvents();

      await reconciler.reconcile('p');
      expect(evictionWrites(cluster)).to.deep.equal(['evict pod/default/web-1']);
      expect(cluster.takeEvents()).to.deep.equal([
        'Pod/web-1 Normal EvictedStuckPod',
        'Node/n1 Warning RemediationBlocked',
        'Node/n1 Warning RemediationBlocked',
      ]);
      expect(blockedOf(cluster, 'n1')).to.deep.equal([
        'Evict pod/default/bare NoController',
        'Migrate pod/default/db-0 DisruptionBudget',
      ]);
      const refused = health(cluster, 'n1').blocked!.find((b) => b.guard === 'DisruptionBudget')!;
      expect(refused.message).to.contain('disruption budget');
      expect(cluster.running.map((p) => p.name)).to.deep.equal(['db-0']);
      cluster.takeWrites();

      // Still refused on the next passes: listed, not announced again, nothing evicted.
      for (let pass = 0; pass < 2; pass++) {
        await reconciler.reconcile('p');
        expect(cluster.takeEvents()).to.deep.equal([]);
        expect(blockedOf(cluster, 'n1')).to.deep.equal([
          'Evict pod/default/bare NoController',
          'Migrate pod/default/db-0 DisruptionBudget',
        ]);
      }
      expect(evictionWrites(cluster)).to.deep.equal([]);
      expect(refused.since).to.equal(health(cluster, 'n1').blocked![1]!.since);

      // The budget allows it now.
      cluster.protectedPods.delete('default/db-0');
      await reconciler.reconcile('p');
      expect(evictionWrites(cluster)).to.deep.equal(['evict pod/default/db-0']);
      expect(cluster.takeEvents()).to.deep.equal(['Pod/db-0 Normal MigratedIoHeavyPod']);
      expect(blockedOf(cluster, 'n1')).to.deep.equal(['Evict pod/default/bare NoController']);
      expect(actionsOf(cluster, 'n1')[0]).to.equal('Migrate pod/default/db-0 Succeeded');
      expect(cluster.running).to.deep.equal([]);
    });

    it('retries a refused migration while the node is still saturated and cordoned, after its stuck pods are gone', async () => {
      const { cluster, reconciler } = world(migrating);
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      heavyOn(cluster, 'n1', 'db-0');
      cluster.protectedPods.add('default/db-0');

      await reconciler.reconcile('p'); // cordon
      await reconciler.reconcile('p'); // evict web-1; db-0 refused
      expect(blockedOf(cluster, 'n1')).to.deep.equal(['Migrate pod/default/db-0 DisruptionBudget']);
      cluster.takeWrites();

      cluster.protectedPods.delete('default/db-0');
      await reconciler.reconcile('p');
      await reconciler.reconcile('p');
      expect(evictionWrites(cluster)).to.deep.equal(['evict pod/default/db-0']);
    });

    it('spends no eviction budget on an eviction the budget refused', async () => {
      const { cluster, reconciler } = world(migrating);
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      stuckOn(cluster, 'n1', ['bare']);
      heavyOn(cluster, 'n1', 'db-0');
      cluster.protectedPods.add('default/db-0');

      for (let pass = 0; pass < 4; pass++) await reconciler.reconcile('p');
      // One pod left the node; the refused attempts at db-0 evicted nothing.
      expect(cluster.evicted).to.deep.equal(['default/web-1']);
      expect(cluster.policy('p')!.status!.recentEvictions).to.deep.equal([at(0)]);
    });
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

describe('PolicyReconciler releasing what no policy owns', () => {
  const stampedBy = (policy: string) => ({
    ...aNode('orphan', { pool: 'other' }),
    unschedulable: true,
    taints: [{ key: 'sandbox.remediator.io/io-pressure', value: 'true', effect: 'NoSchedule' }],
    stamps: {
      policy,
      since: T0,
      reason: 'Sandbox creation stuck from IO.',
      cordoned: true,
      taint: { key: 'sandbox.remediator.io/io-pressure', value: 'true', effect: 'NoSchedule' },
    },
  });

  it('undoes exactly what the stamps say on a node whose policy is gone, and nothing on unstamped nodes', async () => {
    const byOthers = { ...aNode('cordoned-by-admin', { pool: 'other' }), unschedulable: true };
    const { cluster, reconciler, sweeper } = world(
      { ...policySpec(), nodeSelector: { matchLabels: { pool: 'mine' } } },
      { nodes: [aNode('n1', { pool: 'mine' }), stampedBy('deleted-policy'), byOthers] },
    );
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.writes.filter((w) => w.startsWith('patch node/'))).to.deep.equal(['patch node/orphan']);
    const orphan = cluster.nodeMap.get('orphan')!;
    expect(orphan.unschedulable).to.equal(false);
    expect(orphan.taints).to.deep.equal([]);
    expect(orphan.stamps).to.equal(undefined);
    expect(cluster.nodeMap.get('cordoned-by-admin')!.unschedulable).to.equal(true);
    expect(cluster.takeEvents()).to.include.members([
      'Node/orphan Normal Untainted',
      'Node/orphan Normal Uncordoned',
    ]);
    cluster.takeWrites();
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.startsWith('patch node/'))).to.deep.equal([]);
  });

  it('waits to undo on a node whose policy is gone while a NodeMaintenance drains it, and undoes once it ends', async () => {
    const drained = stampedBy('deleted-policy');
    const maintained = {
      ...drained,
      taints: [...drained.taints, { key: 'medik8s.io/drain', effect: 'NoSchedule' }],
      stamps: { ...drained.stamps, taintsBefore: [] },
    };
    const { cluster, sweeper } = world(
      { ...policySpec(), nodeSelector: { matchLabels: { pool: 'mine' } } },
      { nodes: [aNode('n1', { pool: 'mine' }), maintained] },
    );
    await sweeper.sweep();
    expect(cluster.nodeMap.get('orphan')!.unschedulable, 'not uncordoned under maintenance').to.equal(true);
    expect(cluster.nodeMap.get('orphan')!.stamps?.policy).to.equal('deleted-policy');
    // The maintenance ends: its taint goes, and the sweep undoes ours.
    cluster.nodeMap.set('orphan', { ...cluster.nodeMap.get('orphan')!, taints: drained.taints });
    await sweeper.sweep();
    expect(cluster.nodeMap.get('orphan')!.unschedulable).to.equal(false);
    expect(cluster.nodeMap.get('orphan')!.stamps).to.equal(undefined);
  });

  it('hands an excluded node over as it is: drops the stamps, keeps its cordon and taint, and says so', async () => {
    const excluded = {
      ...stampedBy('p'),
      labels: { pool: 'mine', 'sandbox.remediator.io/exclude': 'true' },
    };
    const { cluster, reconciler, sweeper } = world(
      { ...policySpec(), nodeSelector: { matchLabels: { pool: 'mine' } } },
      { nodes: [aNode('n1', { pool: 'mine' }), excluded] },
    );
    await sweeper.sweep();
    await reconciler.reconcile('p');
    const orphan = cluster.nodeMap.get('orphan')!;
    expect(orphan.stamps, 'no claim of ours').to.equal(undefined);
    expect(orphan.unschedulable, 'still cordoned').to.equal(true);
    expect(orphan.taints.map((t) => t.key)).to.deep.equal(['sandbox.remediator.io/io-pressure']);
    expect(cluster.takeEvents()).to.include('Node/orphan Normal RemediationReleased');
    cluster.takeWrites();
    await sweeper.sweep();
    expect(
      cluster.takeWrites().filter((w) => w.startsWith('patch node/')),
      'once',
    ).to.deep.equal([]);
  });

  it('leaves the stamps of a policy that still exists but is invalid (frozen), and acts on nothing before the watches are healthy', async () => {
    const { cluster, reconciler, sweeper } = world(
      { ...policySpec(), nodeSelector: { matchLabels: { pool: 'mine' } } },
      { nodes: [aNode('n1', { pool: 'mine' }), stampedBy('broken')] },
    );
    cluster.addPolicy('broken', { ioPressure: { source: 'prometheus' } });
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('orphan')!.stamps?.policy).to.equal('broken');

    cluster.policyMap.delete('broken');
    cluster.watching = false;
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('orphan')!.stamps?.policy, 'not while a watch is broken').to.equal('broken');
    cluster.watching = true;
    await sweeper.sweep();
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('orphan')!.stamps).to.equal(undefined);
  });
});

describe('PolicyReconciler safety under races and refusals', () => {
  it('claims nothing when someone else cordons the node between its decision and its patch (409)', async () => {
    const { cluster, reconciler, requeues, applies } = world(policySpec());
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    cluster.changeNode('n1', (n) => n); // the node has a resourceVersion from here on
    cluster.beforeNextNodePatch = () => {
      cluster.changeNode('n1', (n) => ({ ...n, unschedulable: true })); // kubectl cordon n1
    };
    await reconciler.reconcile('p');
    expect(requeues, 'the conflict is retried by the queue').to.deep.include({
      policy: 'p',
      after: 'backoff',
    });
    expect(cluster.nodeMap.get('n1')!.stamps, 'the admin cordon carries no stamp of ours').to.equal(
      undefined,
    );
    expect(cluster.takeEvents()).to.not.include('Node/n1 Normal Cordoned');
    expect(actionsOf(cluster, 'n1').filter((a) => a.startsWith('Cordon'))).to.deep.equal([]);

    expect(String(applies.errors.at(-1)), 'the apply failed with the conflict').to.contain('409');
    await reconciler.reconcile('p'); // the retry, after the apply queue's backoff
    expect(cluster.nodeMap.get('n1')!.stamps).to.equal(undefined);
    expect(condition(cluster, 'n1', 'Cordoned')).to.include({ status: 'False', reason: 'CordonedByOthers' });
  });

  it('does not retry a change the apiserver refused (422) until the node or the policy changes', async () => {
    const { cluster, reconciler, clock } = world(policySpec());
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    cluster.failNextNodePatch.set(
      'n1',
      new TerminalError('patch of node/n1 refused: spec.taints: Invalid value'),
    );
    await reconciler.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.startsWith('patch node/'))).to.deep.equal(['patch node/n1']);
    expect(cluster.takeEvents()).to.include('Node/n1 Warning RemediationFailed');
    for (let i = 0; i < 3; i++) {
      clock.advance(5_000);
      await reconciler.reconcile('p');
    }
    expect(cluster.takeWrites().filter((w) => w.startsWith('patch node/'))).to.deep.equal([]);
    expect(blockedOf(cluster, 'n1')).to.deep.equal(['Cordon node/n1 RefusedByApi']);
    expect(cluster.takeEvents().filter((e) => e.includes('RemediationFailed'))).to.deep.equal([]);

    cluster.changeNode('n1', (n) => ({ ...n, labels: { ...n.labels, fixed: 'true' } }));
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.unschedulable, 'the node changed: decided and tried again').to.equal(
      true,
    );
  });

  it('does not cordon on a reading that went stale while the node waited in a storm', async () => {
    const spec = policySpec({ maxUnhealthyNodes: 1 });
    spec.ioPressure = { sustainSeconds: 0, recoverySeconds: 30, staleAfterSeconds: 10 };
    const { cluster, clock, readings, reconciler } = world(spec, { saturated: ['n1', 'n2'] });
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    replicaSetPodsOn(cluster, 'n2', 'api-1');
    await reconciler.reconcile('p');
    expect(blockedOf(cluster, 'n1')).to.deep.equal(['Cordon node/n1 StormLimit']);
    // n1's source dies (no reading any more); n2 recovers and is no longer degraded.
    readings.delete('n1');
    readings.set('n2', LOW);
    cluster.pods = cluster.pods.filter((p) => p.nodeName !== 'n2');
    cluster.changed('n2');
    clock.advance(11_000); // n1's last reading is now older than staleAfterSeconds
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.unschedulable, 'no verified reading: nothing starts').to.equal(false);
    expect(condition(cluster, 'n1', 'IoPressureHigh')).to.include({ reason: 'ReadingUnknown' });
  });

  it('leaves a cordon the admin reverted alone for cooldownSeconds, and counts no action for letting go', async () => {
    const { cluster, clock, reconciler } = world(policySpec({ cooldownSeconds: 120 }));
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
    const actionsBefore = cluster.policy('p')!.status!.actionCount;
    cluster.changeNode('n1', (n) => ({ ...n, unschedulable: false })); // kubectl uncordon n1
    clock.advance(1_000);
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.stamps, 'our claim dropped').to.equal(undefined);
    expect(cluster.takeEvents()).to.include('Node/n1 Normal RemediationReleased');
    for (let i = 0; i < 3; i++) {
      clock.advance(10_000);
      await reconciler.reconcile('p');
    }
    expect(cluster.nodeMap.get('n1')!.unschedulable, 'not cordoned again within the cooldown').to.equal(
      false,
    );
    expect(blockedOf(cluster, 'n1')).to.include('Cordon node/n1 Cooldown');
    expect(cluster.policy('p')!.status!.actionCount).to.equal(actionsBefore);
    clock.advance(120_000);
    await reconciler.reconcile('p');
    expect(cluster.nodeMap.get('n1')!.unschedulable, 'after the cooldown, the evidence acts again').to.equal(
      true,
    );
  });

  it('in a dry run leaves real stamps exactly as they are, and says so once', async () => {
    const { cluster, clock, reconciler } = world(policySpec({ dryRun: true }), { saturated: [] });
    cluster.changeNode('n1', (n) => ({
      ...n,
      unschedulable: true,
      stamps: { policy: 'p', since: T0, reason: 'earlier real run', cordoned: true },
    }));
    for (let i = 0; i < 3; i++) {
      await reconciler.reconcile('p');
      clock.advance(200_000);
    }
    expect(cluster.nodeMap.get('n1')!.stamps?.reason).to.equal('earlier real run');
    const events = cluster.takeEvents().filter((e) => e.startsWith('Node/n1'));
    expect(events.filter((e) => e.includes('Uncordoned'))).to.deep.equal([]);
    expect(events.filter((e) => e.includes('RemediationBlocked'))).to.have.length(1);
    expect(blockedOf(cluster, 'n1')).to.deep.equal(['Uncordon node/n1 DryRun']);
  });
});

describe('PolicyReconciler and the Node condition', () => {
  const apiAt = (seconds: number) => toApiTime(secondsAfter(START, seconds));
  const own = (cluster: MemoryCluster, node = 'n1') => cluster.nodeMap.get(node)!.ownCondition;
  const conditionWrites = (cluster: MemoryCluster) =>
    cluster.takeWrites().filter((w) => w.includes('condition'));
  const conditionEvents = (cluster: MemoryCluster) =>
    cluster.takeEvents().filter((e) => /NodeCondition|RemediationExhausted/.test(e));

  it('holds True through the incident with one lastTransitionTime, across a restart, and turns False on recovery', async () => {
    const { cluster, clock, readings, reconciler, start } = world(policySpec({}, { nodeCondition: true }));
    replicaSetPodsOn(cluster, 'n1', 'web-1', 'web-2');
    await reconciler.reconcile('p');
    expect(conditionWrites(cluster)).to.deep.equal(['set condition node/n1']);
    expect(conditionEvents(cluster)).to.deep.equal(['Node/n1 Warning NodeConditionSet']);
    const set = own(cluster)!;
    expect(set).to.include({ status: 'True', reason: 'IoSaturated', lastTransitionTime: apiAt(0) });
    expect(set.message).to.match(/^2 pods stuck creating their sandbox for an IO cause; IO pressure proven/);
    for (const node of NODES.slice(1)) expect(own(cluster, node), node).to.equal(undefined);

    // The stuck pods are evicted and leave; the disk stays saturated: still True, since the same moment.
    await reconciler.reconcile('p');
    cluster.pods = [];
    clock.advance(70_000);
    await reconciler.reconcile('p');
    expect(own(cluster)).to.include({ status: 'True', reason: 'IoSaturated', lastTransitionTime: apiAt(0) });
    conditionEvents(cluster);

    // A restarted operator reads the condition back and rewrites neither its status nor its time.
    const restarted = start().reconciler;
    clock.advance(5_000);
    await restarted.reconcile('p');
    expect(own(cluster)).to.include({ status: 'True', lastTransitionTime: apiAt(0) });
    expect(conditionEvents(cluster)).to.deep.equal([]);

    // Recovered (recoverySeconds 30 of low readings): False, reason Recovered, a new transition time, one Event.
    readings.set('n1', LOW);
    clock.advance(10_000);
    await restarted.reconcile('p');
    expect(own(cluster)?.status, 'recovering is not recovered').to.equal('True');
    clock.advance(30_000);
    await restarted.reconcile('p');
    expect(own(cluster)).to.include({ status: 'False', reason: 'Recovered', lastTransitionTime: apiAt(115) });
    expect(conditionEvents(cluster)).to.deep.equal(['Node/n1 Normal NodeConditionCleared']);
    clock.advance(120_000);
    await restarted.reconcile('p');
    expect(own(cluster)).to.include({ status: 'False', lastTransitionTime: apiAt(115) });
  });

  it('escalates with RemediationExhausted once the fenced, emptied node stays saturated for afterSeconds', async () => {
    const { cluster, clock, reconciler } = world(
      policySpec({}, { nodeCondition: true, escalation: { afterSeconds: 600 } }),
    );
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    cluster.pods = [];
    clock.advance(599_000);
    await reconciler.reconcile('p');
    expect(own(cluster)).to.include({ status: 'True', reason: 'IoSaturated' });
    conditionEvents(cluster);
    clock.advance(1_000);
    await reconciler.reconcile('p');
    expect(own(cluster)).to.include({
      status: 'True',
      reason: 'RemediationExhausted',
      lastTransitionTime: apiAt(0),
    });
    expect(own(cluster)!.message).to.match(/^Still IO-saturated since policy p fenced the node at \S+Z, /);
    // The message holds: a minute on, the refresh finds nothing to write.
    clock.advance(61_000);
    cluster.takeWrites();
    await reconciler.reconcile('p');
    expect(conditionWrites(cluster)).to.deep.equal([]);
    expect(conditionEvents(cluster)).to.deep.equal(['Node/n1 Warning RemediationExhausted']);
    // Nothing more is done by the operator: the node stays cordoned, no more writes but the message's refresh.
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
  });

  it('writes nothing in a dry run or while paused, and removes its condition when nodeCondition turns false', async () => {
    for (const safety of [{ dryRun: true }, { paused: true }]) {
      const { cluster, reconciler } = world(policySpec(safety, { nodeCondition: true }));
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      await reconciler.reconcile('p');
      expect(conditionWrites(cluster), JSON.stringify(safety)).to.deep.equal([]);
      expect(own(cluster)).to.equal(undefined);
    }
    const { cluster, reconciler } = world(policySpec({}, { nodeCondition: true }));
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    await reconciler.reconcile('p');
    expect(own(cluster)?.status).to.equal('True');
    cluster.addPolicy('p', policySpec({}, { nodeCondition: false }));
    cluster.policyMap.get('p')!.generation = 2;
    cluster.changed();
    cluster.takeEvents();
    cluster.takeWrites();
    await reconciler.reconcile('p');
    expect(own(cluster)).to.equal(undefined);
    expect(conditionWrites(cluster)).to.deep.equal(['remove condition node/n1']);
    expect(conditionEvents(cluster)).to.deep.equal(['Node/n1 Normal NodeConditionRemoved']);
  });

  it('switched to a dry run or paused mid-incident, sets nothing more but takes its True back once recovered', async () => {
    for (const safety of [{ dryRun: true }, { paused: true }]) {
      const { cluster, clock, readings, reconciler } = world(policySpec({}, { nodeCondition: true }));
      replicaSetPodsOn(cluster, 'n1', 'web-1');
      await reconciler.reconcile('p');
      expect(own(cluster)?.status).to.equal('True');
      cluster.addPolicy('p', policySpec(safety, { nodeCondition: true }));
      cluster.policyMap.get('p')!.generation = 2;
      cluster.changed();
      cluster.takeWrites();
      cluster.takeEvents();
      // Still saturated, the message due for a refresh: nothing written.
      clock.advance(70_000);
      await reconciler.reconcile('p');
      expect(conditionWrites(cluster), JSON.stringify(safety)).to.deep.equal([]);
      // Recovered: False, so that no health check acts on a verdict this policy no longer keeps.
      cluster.pods = [];
      readings.set('n1', LOW);
      await reconciler.reconcile('p');
      for (const step of [31_000, 31_000]) {
        clock.advance(step);
        await reconciler.reconcile('p');
      }
      expect(own(cluster), JSON.stringify(safety)).to.include({ status: 'False', reason: 'Recovered' });
      expect(conditionWrites(cluster), JSON.stringify(safety)).to.deep.equal(['set condition node/n1']);
      expect(conditionEvents(cluster)).to.deep.equal(['Node/n1 Normal NodeConditionCleared']);
    }
  });

  it('the sweep removes it when the policy is gone, and keeps it while the policy is only invalid', async () => {
    const { cluster, reconciler, sweeper } = world(policySpec({}, { nodeCondition: true }));
    replicaSetPodsOn(cluster, 'n1', 'web-1');
    await reconciler.reconcile('p');
    expect(own(cluster)?.status).to.equal('True');
    cluster.addPolicy('p', { ...policySpec(), safety: { maxUnhealthyNodes: 'lots' } });
    cluster.takeWrites();
    await sweeper.sweep();
    expect(own(cluster)?.status, 'frozen with its invalid policy').to.equal('True');
    cluster.policyMap.delete('p');
    await sweeper.sweep();
    expect(own(cluster)).to.equal(undefined);
    expect(conditionWrites(cluster)).to.deep.equal(['remove condition node/n1']);
  });
});
