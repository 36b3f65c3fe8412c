// Reconcile tests of the remedy by cause (issue 25): the reading's attribution names who does a saturated node's IO;
// with migrateWorkloads.by measuredIo the culprit moves, and nothing else does.
import { expect } from 'chai';
import type { IoAttribution, IoConsumer } from '../../../../src/api/v1alpha1/index.js';
import type { PodView } from '../../../../src/detection/index.js';
import { aPod, anEvent, nameReservedMessage } from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';
import { aReconciler } from '../../../support/reconciler.js';

const running = (
  name: string,
  controllerKind: string | undefined,
  labels: Record<string, string> = {},
): PodView => ({
  ...aPod().named(name, 'shop').onNode('n1').running().labelled(labels).build(),
  ...(controllerKind ? { controllerKind } : {}),
});

type Pods = Record<'db' | 'logs' | 'pinned' | 'api', PodView>;

function world(
  consumers: (pods: Pods) => IoConsumer[],
  remediation: Record<string, unknown> = {},
  { sustainSeconds = 0, psi = 60, busy = 97 } = {},
) {
  const cluster = new MemoryCluster()
    .addPolicy('p', {
      detection: { stuckThresholdSeconds: 30 },
      ioPressure: { sustainSeconds, recoverySeconds: 30, staleAfterSeconds: 3600 },
      remediation: { migrateWorkloads: { by: 'measuredIo', maxPodsPerNode: 5 }, ...remediation },
      safety: { maxUnhealthyNodes: 1 },
    })
    .addNodes(aNode('n1'), aNode('n2'), aNode('n3'));
  const pods: Pods = {
    db: running('db-0', 'StatefulSet', { app: 'db' }),
    logs: running('logs-x1', 'DaemonSet'),
    pinned: running('pinned-0', 'StatefulSet', { 'sandbox.remediator.io/no-migrate': 'true' }),
    api: running('api-0', 'ReplicaSet'),
  };
  cluster.running = Object.values(pods);
  const stuck = {
    ...aPod().named('web-1', 'shop').onNode('n1').waitingSince(new Date(0)).build(),
    controllerKind: 'ReplicaSet',
  };
  cluster.pods = [stuck];
  cluster.events = [anEvent().about(stuck).saying(nameReservedMessage(stuck)).build()];
  const attribution = (): IoAttribution => ({
    cgroupVersion: 'v2',
    driver: 'systemd',
    device: 'sda',
    deviceNumber: '8:0',
    confidence: 'High',
    confidenceReason: 'cgroup v2, ext4',
    podsMeasured: 4,
    consumers: consumers(pods),
  });
  const controllers = aReconciler(cluster, {
    startSeconds: 600,
    sources: () => ({
      kind: 'agent',
      refresh: () => Promise.resolve(),
      read: (node: string) => ({
        source: 'agent',
        observedTime: new Date(controllers.clock.now()).toISOString(),
        psiSomeAvg10Percent: node === 'n1' ? psi : 1,
        // The attributed disk saturated in the same reading (diskBusyPercent 90 by default).
        ...(node === 'n1'
          ? {
              attribution: attribution(),
              diskBusyPercent: busy,
              devices: [{ name: 'sda', busyPercent: busy, inFlight: 30 }],
            }
          : {}),
      }),
    }),
  });
  return { cluster, pods, ...controllers };
}

const share = (pod: PodView, sharePercent: number, role: IoConsumer['role'], psi?: number): IoConsumer => ({
  kind: 'Pod',
  podUid: pod.uid,
  sharePercent,
  role,
  ...(psi !== undefined ? { psiSomeAvg10Percent: psi } : {}),
});

describe('PolicyReconciler and the measured culprit', () => {
  // The culprit's live read is the window: a look that reads the node's pods again takes long enough for an apply to end.
  it('writes the Node condition once when its apply ends during the live read of a look begun while it was written', async () => {
    const { cluster, reconciler, applies } = world((p) => [share(p.db, 40, 'Culprit')], {
      cordon: false,
      evictStuckPods: false,
      nodeCondition: true,
    });
    cluster.lagging = true; // nothing we write shows in the cache until deliver()
    const write = cluster.holdConditionWrite();
    await reconciler.pass('p'); // decides the condition alone; the apply starts, and its write is held
    await write.reached();
    // The look reads n1 without the condition; its live read of n1's pods (to name the culprit) outlasts the apply.
    cluster.duringNextLiveRead = async () => {
      write.release();
      await applies.idle();
    };
    reconciler.markDirty('p', 'n1'); // a kubelet retry Event on n1 meanwhile
    await reconciler.pass('p');
    expect(cluster.duringNextLiveRead, 'the look read n1 live').to.equal(undefined);
    // Before the watch shows the condition, n1 is looked at again (the second look, then this pass) and waits for it.
    await reconciler.reconcile('p');
    cluster.deliver();
    await reconciler.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.includes('condition'))).to.deep.equal([
      'set condition node/n1',
    ]);
    expect(cluster.nodeMap.get('n1')!.ownCondition).to.include({ status: 'True' });
  });

  it('decides in a pass begun while an apply ran as soon as that apply is done, on a second look at what it wrote', async () => {
    const { cluster, reconciler, applier, requeues } = world((p) => [share(p.db, 40, 'Culprit')], {
      cordon: false,
      evictStuckPods: false,
      nodeCondition: true,
    });
    cluster.lagging = true; // the condition shows in the cache only on deliver(): its fence must hold the second look
    const write = cluster.holdConditionWrite();
    await reconciler.pass('p');
    await write.reached();
    cluster.duringNextLiveRead = async () => {
      write.release();
      await reconciler.idle();
    };
    reconciler.markDirty('p', 'n1');
    const asked = requeues.length;
    await reconciler.pass('p');
    expect(cluster.duringNextLiveRead, 'the look read n1 live').to.equal(undefined);
    // Not held for another pass: this one handed a decision to the apply queue, and the apply that was done asked for
    // no pass at once (its follow-up, if any, as it planned).
    expect(applier.busy('p')).to.equal(true);
    expect(requeues.slice(asked).filter((r) => r.after === 0)).to.deep.equal([]);
    await reconciler.idle();
    cluster.deliver();
    await reconciler.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.includes('condition'))).to.deep.equal([
      'set condition node/n1',
    ]);
  });

  it('moves the culprit, and neither a victim, a DaemonSet pod writing heavily, nor a culprit labelled no-migrate', async () => {
    const { cluster, reconciler } = world((p) => [
      share(p.db, 40, 'Culprit'),
      share(p.logs, 30, 'Culprit'),
      share(p.pinned, 25, 'Culprit'),
      share(p.api, 2, 'Victim', 60),
      { kind: 'System', sharePercent: 3, role: 'System' },
    ]);
    await reconciler.reconcile('p'); // cordon
    expect(cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
    await reconciler.reconcile('p'); // the cordon is seen: the stuck pod, then the culprit
    expect(cluster.evicted).to.deep.equal(['shop/web-1', 'shop/db-0']);
    const status = cluster.health('n1')!.status!;
    expect(status.topConsumer).to.equal('shop/db-0 40%');
    expect(status.ioCause).to.deep.include({ cause: 'Pod' });
    expect(status.ioCause!.consumers!.map((c) => [c.namespace, c.name, c.role])).to.deep.equal([
      ['shop', 'db-0', 'Culprit'],
      ['shop', 'logs-x1', 'Culprit'],
      ['shop', 'pinned-0', 'Culprit'],
      ['shop', 'api-0', 'Victim'],
      [undefined, undefined, 'System'],
    ]);
    expect((status.blocked ?? []).map((b) => `${b.target} ${b.guard}`)).to.deep.equal([
      'pod/shop/logs-x1 DaemonSetPod',
      'pod/shop/pinned-0 NoMigrateLabel',
    ]);
    const migrated = (status.actions ?? []).find((a) => a.kind === 'Migrate' && a.outcome === 'Succeeded');
    expect(migrated).to.deep.include({ target: 'pod/shop/db-0', reason: 'MeasuredIoCulprit' });
    expect(migrated!.message).to.match(/40% of the device's IO/);
    expect(cluster.takeEvents()).to.include('Node/n1 Warning IoCulpritFound');
  });

  it('gives a place a guard holds to the next culprit: those it holds do more IO, maxPodsPerNode is 1', async () => {
    const { cluster, reconciler } = world(
      (p) => [
        share(p.logs, 35, 'Culprit'),
        share(p.pinned, 30, 'Culprit'),
        share(p.db, 26, 'Culprit'),
        { kind: 'System', sharePercent: 9, role: 'System' },
      ],
      { migrateWorkloads: { by: 'measuredIo', maxPodsPerNode: 1 } },
    );
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    expect(cluster.evicted).to.deep.equal(['shop/web-1', 'shop/db-0']);
    await reconciler.reconcile('p');
    expect(cluster.evicted, 'one moved: maxPodsPerNode').to.deep.equal(['shop/web-1', 'shop/db-0']);
  });

  it('moves no pod when the runtime does the IO, and says so', async () => {
    // db at a culprit's share: only the runtime rule keeps it on the node.
    const { cluster, reconciler } = world((p) => [
      share(p.db, 26, 'Culprit'),
      { kind: 'Runtime', sharePercent: 64, role: 'Runtime' },
      { kind: 'System', sharePercent: 10, role: 'System' },
    ]);
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    expect(cluster.evicted, 'only the stuck pod').to.deep.equal(['shop/web-1']);
    const status = cluster.health('n1')!.status!;
    expect(status.ioCause).to.deep.include({ cause: 'Runtime' });
    expect(status.topConsumer).to.equal('runtime 64%');
    expect(cluster.takeEvents()).to.include('Node/n1 Warning IoRuntimeBusy');
  });

  it('with podSelector, moves only the culprits it selects', async () => {
    const { cluster, reconciler } = world(
      (p) => [
        share(p.db, 40, 'Culprit'),
        share(p.api, 35, 'Culprit'),
        { kind: 'System', sharePercent: 25, role: 'System' },
      ],
      { migrateWorkloads: { by: 'measuredIo', podSelector: { matchLabels: { app: 'db' } } } },
    );
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    expect(cluster.evicted).to.deep.equal(['shop/web-1', 'shop/db-0']);
    expect(cluster.health('n1')!.status!.ioCause!.message, 'says which culprit stays, and why').to.match(
      /Not moved: shop\/api-0 \(outside migrateWorkloads\.podSelector\)\.$/,
    );
  });

  it('says of a culprit no running pod answers to that it is not moved', async () => {
    const { cluster, reconciler, pods } = world((p) => [
      { kind: 'Pod', podUid: 'f00dfeed-0000-4000-8000-00000000dead', sharePercent: 60, role: 'Culprit' },
      share(p.db, 30, 'Culprit'),
      { kind: 'System', sharePercent: 10, role: 'System' },
    ]);
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    expect(cluster.evicted).to.deep.equal(['shop/web-1', 'shop/db-0']);
    expect(pods.db.name).to.equal('db-0');
    expect(cluster.health('n1')!.status!.ioCause!.message).to.match(
      /Not moved: f00dfeed-0000-4000-8000-00000000dead \(no running pod of n1 answers to it\)\.$/,
    );
  });

  it('moves a culprit only once it has been one for sustainSeconds, as the pressure must be (a burst is none)', async () => {
    const { cluster, reconciler, clock } = world(
      (p) => [share(p.db, 40, 'Culprit'), { kind: 'System', sharePercent: 60, role: 'System' }],
      {},
      { sustainSeconds: 20 },
    );
    await reconciler.reconcile('p'); // the pressure starts to count
    clock.advance(20_000);
    await reconciler.reconcile('p'); // IoPressureHigh: cordon; db a culprit from now
    await reconciler.reconcile('p');
    expect(cluster.evicted, 'the stuck pod, not yet the culprit').to.deep.equal(['shop/web-1']);
    clock.advance(19_000);
    await reconciler.reconcile('p');
    expect(cluster.evicted).to.deep.equal(['shop/web-1']);
    clock.advance(1_000);
    await reconciler.reconcile('p');
    expect(cluster.evicted).to.deep.equal(['shop/web-1', 'shop/db-0']);
  });

  it('moves a culprit first measured after the stuck pods were evicted and gone, nothing stuck on the node any more', async () => {
    let culprit = false;
    const { cluster, reconciler, clock } = world(
      (p) => [
        share(p.db, culprit ? 35 : 10, culprit ? 'Culprit' : 'Victim'),
        { kind: 'System', sharePercent: 60, role: 'System' },
      ],
      {},
      { sustainSeconds: 20 },
    );
    await reconciler.reconcile('p');
    clock.advance(20_000);
    await reconciler.reconcile('p'); // IoPressureHigh: cordon
    await reconciler.reconcile('p'); // the stuck pod evicted; no culprit yet
    expect(cluster.evicted).to.deep.equal(['shop/web-1']);
    cluster.pods = []; // gone, its replacement elsewhere: nothing stuck here any more
    cluster.events = [];
    culprit = true;
    // The reading changes with no event here (the agent's publish would mark the node): a full pass reads it.
    for (let passes = 0; passes < 60 && cluster.evicted.length < 2; passes++) {
      clock.advance(5_000);
      await reconciler.reconcile('p');
    }
    expect(cluster.evicted).to.deep.equal(['shop/web-1', 'shop/db-0']);
    const degraded = cluster
      .health('n1')!
      .status!.conditions!.find((c) => c.type === 'SandboxCreationDegraded');
    expect(degraded?.status, 'moved with nothing stuck on the node').to.equal('False');
  });

  it('reads the pods again before a culprit moves: a no-migrate label put on meanwhile holds it', async () => {
    const { cluster, reconciler, pods } = world((p) => [
      share(p.db, 40, 'Culprit'),
      { kind: 'System', sharePercent: 60, role: 'System' },
    ]);
    await reconciler.reconcile('p'); // cordon; the pods read, db among them unlabelled
    const labelled = {
      ...pods.db,
      labels: { ...pods.db.labels, 'sandbox.remediator.io/no-migrate': 'true' },
    };
    cluster.running = cluster.running.map((pod) => (pod.uid === pods.db.uid ? labelled : pod));
    await reconciler.reconcile('p');
    expect(cluster.evicted).to.deep.equal(['shop/web-1']);
    expect((cluster.health('n1')!.status!.blocked ?? []).map((b) => `${b.target} ${b.guard}`)).to.deep.equal([
      'pod/shop/db-0 NoMigrateLabel',
    ]);
  });

  it('asks nothing, names no cause and sends no Event for a node whose pressure is not proven', async () => {
    const { cluster, reconciler } = world(
      (p) => [share(p.db, 40, 'Culprit'), { kind: 'System', sharePercent: 60, role: 'System' }],
      {},
      { psi: 5, busy: 30 }, // busy, not saturated: nothing proven
    );
    const reads: string[] = [];
    const list = cluster.runningPodsOn.bind(cluster);
    cluster.runningPodsOn = (node, selector) => {
      reads.push(node);
      return list(node, selector);
    };
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    expect(reads).to.deep.equal([]);
    expect(cluster.health('n1')!.status!.ioCause).to.equal(undefined);
    expect(cluster.takeEvents().filter((e) => e.includes('IoCulpritFound'))).to.deep.equal([]);
  });

  it('holds maxPodsPerNode for the whole remediation, after its Migrate records left the recent actions', async () => {
    let top: keyof Pods = 'db';
    const { cluster, reconciler, pods } = world(
      (p) => [share(p[top], 40, 'Culprit'), { kind: 'System', sharePercent: 60, role: 'System' }],
      { migrateWorkloads: { by: 'measuredIo', maxPodsPerNode: 1 } },
    );
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    expect(cluster.evicted).to.deep.equal(['shop/web-1', 'shop/db-0']);
    expect(cluster.health('n1')!.status!.remediation?.migrated).to.equal(1);
    cluster.running = cluster.running.filter((pod) => pod.uid !== pods.db.uid);
    // Twenty later records (a long incident's evictions and blocks) pushed the Migrate out of the recent actions.
    cluster.health('n1')!.status!.actions = [];
    top = 'api'; // with db gone, the next pod's share rises: a new culprit
    cluster.changed('n1');
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    expect(cluster.evicted, 'no second move: maxPodsPerNode 1').to.deep.equal(['shop/web-1', 'shop/db-0']);
  });

  it('writes nothing more while the shares wobble and the cast holds', async () => {
    let dbShare = 60;
    const { cluster, reconciler } = world((p) => [
      share(p.db, dbShare, 'Culprit'),
      { kind: 'System', sharePercent: 100 - dbShare, role: 'System' },
    ]);
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    cluster.takeWrites();
    dbShare = 63; // the agent republished: the same culprit, a little more
    cluster.changed('n1');
    await reconciler.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.startsWith('patch health'))).to.deep.equal([]);
    expect(cluster.health('n1')!.status!.topConsumer).to.equal('shop/db-0 60%');
  });
});
