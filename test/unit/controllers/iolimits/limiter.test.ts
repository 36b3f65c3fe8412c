// Reconcile tests of the in-place remedy (limitIo, issue 44): the culprit of a saturated node is limited in
// spec.ioLimits, verified by the agent's report before a step, stepped while the disk stays saturated, lifted once it
// wants no more; a person's lift is theirs; a limit the agent could not apply hands the pod on to migration.
import { expect } from 'chai';
import {
  IO_LIMIT_STAMP,
  type IoAttribution,
  type IoConsumer,
  type IoLimitReport,
  type WantedIoLimitSpec,
} from '../../../../src/api/v1alpha1/index.js';
import type { PodView } from '../../../../src/detection/index.js';
import { aPod, anEvent, nameReservedMessage, T0 } from '../../../support/builders.js';
import { REFUSAL_RETRY_MS } from '../../../../src/controllers/remediation/refused-changes.js';
import { TerminalError } from '../../../../src/runtime/controller.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';
import { aReconciler } from '../../../support/reconciler.js';

const MIB = 1024 * 1024;
const running = (name: string, labels: Record<string, string> = {}): PodView => ({
  ...aPod().named(name, 'shop').onNode('n1').running().labelled(labels).build(),
  controllerKind: 'StatefulSet',
});

/** What each pod does: 40 MiB/s written and 400 writes/s for the db, a little for the others. */
const consumer = (pod: PodView, share: number, role: IoConsumer['role'], scale = 1): IoConsumer => ({
  kind: 'Pod',
  podUid: pod.uid,
  sharePercent: share,
  role,
  readBytesPerSecond: 4 * MIB * scale,
  writeBytesPerSecond: 40 * MIB * scale,
  readOpsPerSecond: 40 * scale,
  writeOpsPerSecond: 400 * scale,
});

type Cast = Record<'db' | 'api' | 'exempt', PodView>;

function world(
  remediation: Record<string, unknown> = {},
  safety: Record<string, unknown> = {},
  consumers?: (cast: Cast, scale: number) => IoConsumer[],
) {
  const cluster = new MemoryCluster()
    .addPolicy('p', {
      detection: { stuckThresholdSeconds: 30 },
      ioPressure: { sustainSeconds: 0, recoverySeconds: 0, staleAfterSeconds: 3600 },
      remediation: {
        cordon: false,
        evictStuckPods: false,
        limitIo: { sustainSeconds: 30, recoverySeconds: 60, cooldownSeconds: 300 },
        ...remediation,
      },
      safety: { maxUnhealthyNodes: 1, ...safety },
    })
    .addNodes(aNode('n1'), aNode('n2'), aNode('n3'));
  const db = running('db-0');
  const api = running('api-0');
  const exempt = running('ingest-0', { 'sandbox.remediator.io/no-limit': 'true' });
  cluster.running = [db, api, exempt];
  const stuck = {
    ...aPod().named('web-1', 'shop').onNode('n1').waitingSince(new Date(0)).build(),
    controllerKind: 'ReplicaSet',
  };
  cluster.pods = [stuck];
  cluster.events = [anEvent().about(stuck).saying(nameReservedMessage(stuck)).build()];
  /** `stall`: the node's PSI some, whatever the disk does (a throttled pod's tasks wait on IO too). */
  const state = { saturated: true, dbScale: 1, stall: undefined as number | undefined };
  const attribution = (): IoAttribution => ({
    cgroupVersion: 'v2',
    driver: 'systemd',
    device: 'sda',
    deviceNumber: '8:0',
    confidence: 'High',
    confidenceReason: 'cgroup v2, ext4',
    podsMeasured: 3,
    consumers: consumers
      ? consumers({ db, api, exempt }, state.dbScale)
      : [
          consumer(db, 45, 'Culprit', state.dbScale),
          consumer(exempt, 30, 'Culprit'),
          consumer(api, 2, 'Bystander', 0.05),
        ],
  });
  const options = {
    startSeconds: 600,
    sources: () => ({
      kind: 'agent',
      refresh: () => Promise.resolve(),
      read: (node: string) => ({
        source: 'agent',
        observedTime: new Date(controllers.clock.now()).toISOString(),
        psiSomeAvg10Percent: node === 'n1' ? (state.stall ?? (state.saturated ? 60 : 1)) : 1,
        ...(node === 'n1'
          ? {
              attribution: attribution(),
              diskBusyPercent: state.saturated ? 97 : 10,
              devices: [{ name: 'sda', busyPercent: state.saturated ? 97 : 10, inFlight: 30 }],
            }
          : {}),
      }),
    }),
  };
  let controllers = aReconciler(cluster, options);
  /** The operator restarted: a new process over the same API, its clock where the old one's was. */
  const restart = () =>
    (controllers = aReconciler(cluster, {
      ...options,
      startSeconds: (controllers.clock.now() - T0.getTime()) / 1000,
    }));
  const wanted = () => cluster.healthMap.get('n1')?.ioLimits ?? [];
  /** The node's agent: applies what is wanted (or refuses it) and reports, as a new version of the object. */
  const agentReports = (allowed = true) => {
    const limits = wanted();
    const report: IoLimitReport = {
      allowed,
      observedTime: new Date(controllers.clock.now()).toISOString(),
      applied: allowed
        ? limits.map((l) => ({
            podUid: l.podUid,
            device: l.device,
            cgroupVersion: 'v2' as const,
            cgroup: `kubepods.slice/pod${l.podUid}`,
            wanted: l.limit,
            written: l.limit,
            before: {
              rbps: 'max' as const,
              wbps: 'max' as const,
              riops: 'max' as const,
              wiops: 'max' as const,
            },
          }))
        : [],
      results: limits.map((l) => ({
        podUid: l.podUid,
        result: allowed ? ('Set' as const) : ('Refused' as const),
        message: allowed ? 'set' : 'no --allow-io-limits',
      })),
    };
    cluster.changeHealth('n1', (h) => ({ ...h, status: { ...h.status!, ioLimits: report } }));
  };
  const events = (reason: string) => cluster.takeEvents().filter((e) => e.includes(reason));
  return { cluster, db, api, exempt, state, wanted, agentReports, events, restart, ...controllers };
}

const rates = (l: WantedIoLimitSpec | undefined) =>
  l && [l.limit.rbps, l.limit.wbps, l.limit.riops, l.limit.wiops];

describe('IoLimiter: the culprit limited in place', () => {
  it('limits the culprit of a saturated node at startPercent of what it does, and not a bystander nor a no-limit pod', async () => {
    const { cluster, reconciler, wanted, db } = world();
    await reconciler.reconcile('p'); // the SandboxHealth made
    await reconciler.reconcile('p');
    expect(wanted().map((l) => l.pod)).to.deep.equal([`shop/${db.name}`]);
    expect(rates(wanted()[0])).to.deep.equal([2 * MIB, 20 * MIB, 50, 200]); // riops: 20 is under the 50 ops/s floor
    expect(wanted()[0]).to.include({ device: '8:0', policy: 'p', podUid: db.uid });
    expect(cluster.takeEvents()).to.include(`Pod/${db.name} Warning IoLimited`);
  });

  it('steps a limit down only once the agent reports it applied, and after sustainSeconds of pressure', async () => {
    const { reconciler, wanted, agentReports, clock, events } = world();
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    events('IoLimited');
    clock.advance(40_000);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(rates(wanted()[0]), 'not applied yet: never stepped').to.deep.equal([2 * MIB, 20 * MIB, 50, 200]);
    agentReports();
    await reconciler.reconcile('p');
    expect(rates(wanted()[0]), 'applied, still saturated: stepped').to.deep.equal([MIB, 10 * MIB, 50, 100]);
    expect(events('IoLimitStepped')).to.have.length(1);
  });

  it("steps no limit down when only the throttle's own stall keeps the node's PSI up, the disk quiet", async () => {
    const { reconciler, wanted, agentReports, clock, state, events } = world();
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    agentReports();
    await reconciler.reconcile('p');
    const first = rates(wanted()[0]);
    state.saturated = false;
    state.stall = 90;
    for (let i = 0; i < 3; i++) {
      clock.advance(20_000);
      reconciler.markDirty('p', 'n1');
      await reconciler.reconcile('p');
    }
    expect(rates(wanted()[0]), 'the disk 10 % busy: the limit works').to.deep.equal(first);
    expect(events('IoLimitStepped')).to.deep.equal([]);
  });

  it('lifts the limit once the disk is no longer saturated and the pod wants no more for recoverySeconds', async () => {
    const { reconciler, wanted, agentReports, clock, state, events } = world();
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    agentReports();
    state.saturated = false;
    state.dbScale = 0.1; // well under its cap
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(wanted(), 'quiet, not yet for recoverySeconds').to.have.length(1);
    clock.advance(61_000);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(wanted()).to.deep.equal([]);
    expect(events('IoLimitLifted')).to.have.length(1);
  });

  it('keeps the limit of a pod that still presses against its cap after the disk recovered', async () => {
    const { reconciler, wanted, agentReports, clock, state } = world();
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    agentReports();
    state.saturated = false; // its cap is what holds the disk down: the pod still does all its limit allows
    state.dbScale = 0.5;
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    clock.advance(61_000);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(wanted(), 'at its cap: not quiet, so not lifted').to.have.length(1);
  });

  it('leaves a limit a person lifted to them: said once, and not set again within the cooldown', async () => {
    const { cluster, reconciler, wanted, db, clock, events } = world();
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    events('IoLimited');
    cluster.changeHealth('n1', (h) => {
      const { ioLimits: _lifted, ...rest } = h;
      return rest; // kubectl patch sandboxhealth n1 --type json -p '[{"op":"remove","path":"/spec/ioLimits"}]'
    });
    await reconciler.reconcile('p');
    expect(events('IoLimitLiftedByOthers')).to.deep.equal([`Pod/${db.name} Normal IoLimitLiftedByOthers`]);
    clock.advance(60_000);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(wanted(), 'within the cooldown').to.deep.equal([]);
    expect(events('IoLimit')).to.deep.equal([]);
    clock.advance(300_000);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(
      wanted().map((l) => l.podUid),
      'after it',
    ).to.deep.equal([db.uid]);
  });

  it('writes over no one: a list changed between the look and the write is decided again', async () => {
    const { cluster, reconciler, wanted } = world();
    await reconciler.reconcile('p');
    cluster.failNextIoLimitsPatch.set('n1', Object.assign(new Error('changed'), { code: 409, body: {} }));
    await reconciler.reconcile('p');
    expect(wanted(), 'the write refused').to.deep.equal([]);
    await reconciler.reconcile('p'); // the retry, after the apply queue's backoff
    expect(wanted()).to.have.length(1);
  });

  it('does not send a list the apiserver refused for what it is again, until REFUSAL_RETRY_MS pass', async () => {
    const { cluster, reconciler, wanted, clock } = world();
    await reconciler.reconcile('p');
    cluster.failNextIoLimitsPatch.set('n1', new TerminalError('denied by an admission policy'));
    await reconciler.reconcile('p');
    const ioLimitWrites = () => cluster.takeWrites().filter((w) => w.endsWith('ioLimits'));
    expect(ioLimitWrites()).to.deep.equal(['patch health/n1 ioLimits']);
    for (let i = 0; i < 3; i++) {
      clock.advance(10_000);
      reconciler.markDirty('p', 'n1');
      await reconciler.reconcile('p');
    }
    expect(ioLimitWrites(), 'not sent again meanwhile').to.deep.equal([]);
    clock.advance(REFUSAL_RETRY_MS);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(wanted(), 'tried again, and taken').to.have.length(1);
  });

  it('hands a pod whose limit the agent refused on to migration, and says why', async () => {
    const { cluster, reconciler, agentReports, db, events } = world({
      cordon: true, // a pod moves only off a fenced node
      migrateWorkloads: { by: 'measuredIo', maxPodsPerNode: 5 },
    });
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    // The no-limit culprit moves at once; the other is limited first, not moved.
    expect(cluster.takeWrites().filter((w) => w.startsWith('evict'))).to.deep.equal([
      'evict pod/shop/ingest-0',
    ]);
    agentReports(false);
    await reconciler.reconcile('p');
    expect(events('IoLimitNotApplied')).to.deep.equal([`Pod/${db.name} Warning IoLimitNotApplied`]);
    await reconciler.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.startsWith('evict'))).to.include(`evict pod/shop/${db.name}`);
  });

  it('hands a pod whose stamps a webhook refuses on to migration, and says why once', async () => {
    const { cluster, reconciler, db, wanted, events } = world({
      cordon: true,
      migrateWorkloads: { by: 'measuredIo', maxPodsPerNode: 5 },
    });
    cluster.refuseStamps.add(`shop/${db.name}`);
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    const stampsOfDb = () => cluster.takeWrites().filter((w) => w === `stamp pod/shop/${db.name}`);
    expect(stampsOfDb(), 'tried once').to.have.length(1);
    expect(wanted(), 'no limit asked for unstamped').to.deep.equal([]);
    const message = cluster.recorded.find((t) => t.reason === 'IoLimitNotApplied')?.message;
    expect(events('IoLimitNotApplied')).to.deep.equal([`Pod/${db.name} Warning IoLimitNotApplied`]);
    expect(message).to.match(/not set: .*refused \(.*freeze\.example\.com.*left unlimited for 300s/);
    await reconciler.reconcile('p');
    expect(
      cluster.takeWrites().filter((w) => w.startsWith('evict')),
      'moved instead',
    ).to.include(`evict pod/shop/${db.name}`);
    expect(events('IoLimitNotApplied'), 'said once').to.deep.equal([]);
  });

  it('keeps a limit whose step a webhook refuses where it is, exhausted, and hands the pod on', async () => {
    const { cluster, reconciler, db, wanted, agentReports, clock, events } = world({
      cordon: true,
      migrateWorkloads: { by: 'measuredIo', maxPodsPerNode: 5 },
    });
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    agentReports();
    const [set] = wanted();
    cluster.takeWrites();
    cluster.takeEvents();
    clock.advance(40_000);
    cluster.refuseStamps.add(`shop/${db.name}`);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p'); // the step, refused
    const message = cluster.recorded.find((t) => t.reason === 'IoLimitNotApplied')?.message;
    expect(message).to.match(/not stepped: .*refused .*its limit stays as it is until lifted/);
    expect(events('IoLimitStepped'), 'not said stepped').to.deep.equal([]);
    expect(rates(wanted()[0]), 'kept').to.deep.equal(rates(set));
    clock.advance(1_000);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(wanted()[0]).to.include({ exhausted: true });
    const exhausted = cluster.recorded.find((t) => t.reason === 'IoLimitExhausted')?.message;
    expect(exhausted, 'not said at its floor').to.match(
      /kept where it is .*not stepped.*stamps were refused/,
    );
    expect(rates(wanted()[0]), 'still kept').to.deep.equal(rates(set));
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.startsWith('evict'))).to.include(`evict pod/shop/${db.name}`);
  });

  it('after a restart, tries the stamps of a limited pod a webhook refuses once, not at every pass, and says the limit stays', async () => {
    const { cluster, reconciler, db, agentReports, clock, restart } = world();
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    agentReports();
    cluster.refuseStamps.add(`shop/${db.name}`);
    const restarted = restart();
    cluster.takeWrites();
    cluster.takeEvents();
    for (let i = 0; i < 3; i++) {
      clock.advance(5_000);
      restarted.reconciler.markDirty('p', 'n1');
      await restarted.reconciler.reconcile('p');
    }
    expect(cluster.takeWrites().filter((w) => w === `stamp pod/shop/${db.name}`)).to.have.length(1);
    const said = cluster.recorded.filter((t) => t.reason === 'IoLimitNotApplied').map((t) => t.message);
    expect(said).to.have.length(1);
    expect(said[0]).to.match(/not stepped: .*its limit stays as it is until lifted/);
  });

  it('stamps a pod whose stamps were refused again only after REFUSAL_RETRY_MS, not at every pass', async () => {
    const { cluster, reconciler, db, wanted, clock } = world();
    cluster.refuseStamps.add(`shop/${db.name}`);
    const stampsOfDb = () => cluster.takeWrites().filter((w) => w === `stamp pod/shop/${db.name}`);
    for (let i = 0; i < 4; i++) {
      clock.advance(30_000);
      reconciler.markDirty('p', 'n1');
      await reconciler.reconcile('p');
    }
    expect(stampsOfDb(), 'tried once in 2 min').to.have.length(1);
    cluster.refuseStamps.clear(); // the webhook fixed
    clock.advance(REFUSAL_RETRY_MS);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(stampsOfDb(), 'tried again').to.have.length(1);
    expect(wanted().map((l) => l.podUid)).to.deep.equal([db.uid]);
  });

  it('limits no pod when the cause is not a pod: a victim, or the runtime doing the IO', async () => {
    const runtime: IoConsumer = {
      kind: 'Runtime',
      sharePercent: 70,
      role: 'Runtime',
      readBytesPerSecond: 0,
      writeBytesPerSecond: 70 * MIB,
      readOpsPerSecond: 0,
      writeOpsPerSecond: 700,
    };
    const { reconciler, wanted } = world({}, {}, (cast) => [
      runtime,
      { ...consumer(cast.db, 26, 'Culprit'), psiSomeAvg10Percent: 5 },
      { ...consumer(cast.api, 3, 'Victim'), psiSomeAvg10Percent: 80 },
    ]);
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    expect(wanted()).to.deep.equal([]);
  });

  it('hands on a pod whose limit the agent never reports applied, once twice sustainSeconds have passed', async () => {
    const { cluster, reconciler, clock, db, events } = world({
      cordon: true,
      migrateWorkloads: { by: 'measuredIo', maxPodsPerNode: 5 },
    });
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    cluster.takeWrites();
    clock.advance(30_000);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(events('IoLimitNotApplied'), 'not yet').to.deep.equal([]);
    clock.advance(31_000);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(events('IoLimitNotApplied')).to.deep.equal([`Pod/${db.name} Warning IoLimitNotApplied`]);
    await reconciler.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.startsWith('evict'))).to.include(`evict pod/shop/${db.name}`);
  });

  it('lifts every limit of a policy that no longer asks for them', async () => {
    const { cluster, reconciler, wanted, events } = world();
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    expect(wanted()).to.have.length(1);
    const policy = cluster.policy('p')!;
    const spec = policy.spec as { remediation: Record<string, unknown> };
    const { limitIo: _removed, ...remediation } = spec.remediation;
    cluster.policyMap.set('p', { ...policy, generation: 2, spec: { ...spec, remediation } });
    await reconciler.reconcile('p');
    expect(wanted()).to.deep.equal([]);
    expect(events('IoLimitLifted')).to.have.length(1);
  });

  it('in a dry run, says the limit it would set, once, and writes nothing', async () => {
    const { cluster, reconciler, wanted, events } = world({}, { dryRun: true });
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(wanted()).to.deep.equal([]);
    expect(cluster.takeWrites().filter((w) => w.includes('ioLimits'))).to.deep.equal([]);
    expect(events('IoLimited')).to.have.length(1);
  });
});

describe('IoLimitStamps: the limited pod stamped', () => {
  const stampOf = (cluster: MemoryCluster, pod: PodView) => cluster.podStamps.get(pod.uid);

  it('stamps the culprit before the list that asks for its limit, follows its step, and takes the stamps off with the lift', async () => {
    const { cluster, reconciler, db, api, agentReports, clock, state, wanted } = world();
    await reconciler.reconcile('p');
    cluster.takeWrites();
    await reconciler.reconcile('p');
    const writes = cluster.takeWrites();
    expect(writes.indexOf(`stamp pod/shop/${db.name}`), 'stamped before the list').to.be.within(
      0,
      writes.indexOf('patch health/n1 ioLimits') - 1,
    );
    expect(stampOf(cluster, db)).to.deep.equal({
      [IO_LIMIT_STAMP.policy]: 'p',
      [IO_LIMIT_STAMP.limit]: '8:0 rbps=2097152 wbps=20971520 riops=50 wiops=200',
      [IO_LIMIT_STAMP.since]: wanted()[0]?.since,
      [IO_LIMIT_STAMP.uid]: db.uid,
    });
    expect(stampOf(cluster, api), 'a bystander').to.equal(undefined);
    clock.advance(40_000);
    agentReports();
    await reconciler.reconcile('p');
    expect(stampOf(cluster, db)?.[IO_LIMIT_STAMP.limit], 'stepped').to.equal(
      '8:0 rbps=1048576 wbps=10485760 riops=50 wiops=100',
    );
    agentReports();
    state.saturated = false;
    state.dbScale = 0.01;
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    clock.advance(61_000);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(wanted(), 'lifted').to.deep.equal([]);
    expect(stampOf(cluster, db), 'kept until the agent reports the lift done').to.not.equal(undefined);
    agentReports();
    await reconciler.reconcile('p');
    expect(stampOf(cluster, db)).to.equal(undefined);
  });

  it('reads no list older than its own last write: the stamp stays while the watch has not shown the list', async () => {
    const { cluster, reconciler, db, wanted } = world();
    await reconciler.reconcile('p');
    cluster.lagging = true;
    await reconciler.reconcile('p');
    expect(cluster.apiHealth('n1')?.ioLimits, 'written to the API').to.have.length(1);
    expect(wanted(), 'not shown by the watch yet').to.deep.equal([]);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(stampOf(cluster, db), 'not taken off on the stale list').to.not.equal(undefined);
    cluster.lagging = false;
    cluster.deliver();
    cluster.takeWrites();
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(stampOf(cluster, db)).to.not.equal(undefined);
    expect(cluster.takeWrites().filter((w) => w.startsWith('stamp'))).to.deep.equal([]);
  });

  it('asks for no limit on a pod it could not stamp: the list waits for the retry', async () => {
    const { cluster, reconciler, db, wanted } = world();
    await reconciler.reconcile('p');
    cluster.failStamps.add(`shop/${db.name}`);
    await reconciler.reconcile('p');
    expect(wanted(), 'not written').to.deep.equal([]);
    await reconciler.reconcile('p'); // the retry, after the apply queue's backoff
    expect(wanted()).to.have.length(1);
    expect(stampOf(cluster, db)).to.not.equal(undefined);
  });

  it("holds back only the limit of the pod it could not stamp: another pod's step goes on the same list", async () => {
    let apiCulprit = false;
    const { cluster, reconciler, db, api, wanted, agentReports, clock } = world({}, {}, (cast, scale) => [
      consumer(cast.db, 45, 'Culprit', scale),
      apiCulprit ? consumer(cast.api, 30, 'Culprit') : consumer(cast.api, 2, 'Bystander', 0.05),
    ]);
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    agentReports();
    clock.advance(40_000);
    apiCulprit = true;
    cluster.failStamps.add(`shop/${api.name}`);
    reconciler.markDirty('p', 'n1');
    await reconciler.reconcile('p');
    expect(wanted().map((l) => [l.pod, rates(l)])).to.deep.equal([
      [`shop/${db.name}`, [MIB, 10 * MIB, 50, 100]],
    ]);
    expect(stampOf(cluster, db)?.[IO_LIMIT_STAMP.limit], 'stepped').to.match(/wbps=10485760/);
    await reconciler.reconcile('p'); // the retry
    expect(wanted().map((l) => l.pod)).to.have.members([`shop/${db.name}`, `shop/${api.name}`]);
  });

  it('writes each stamp once; a restarted operator writes it once again, as it does not watch running pods', async () => {
    const { cluster, reconciler, db, restart } = world();
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    cluster.takeWrites();
    reconciler.markDirty('p');
    await reconciler.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.startsWith('stamp'))).to.deep.equal([]);
    const again = restart().reconciler;
    await again.reconcile('p');
    await again.reconcile('p');
    expect(cluster.takeWrites().filter((w) => w.startsWith('stamp'))).to.deep.equal([
      `stamp pod/shop/${db.name}`,
    ]);
  });

  it('takes off the stamps of a limit a person lifted, and stamps nothing in a dry run', async () => {
    const { cluster, reconciler, db } = world();
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    cluster.changeHealth('n1', (h) => {
      const { ioLimits: _lifted, ...rest } = h;
      return rest;
    });
    await reconciler.reconcile('p');
    expect(stampOf(cluster, db)).to.equal(undefined);
    const dry = world({}, { dryRun: true });
    await dry.reconciler.reconcile('p');
    await dry.reconciler.reconcile('p');
    expect(dry.cluster.takeWrites().filter((w) => w.startsWith('stamp'))).to.deep.equal([]);
  });
});

describe('IoLimiter: what a pass costs', () => {
  it('reads no SandboxHealth of a node the pass did not look at, when the policy limits nothing', async () => {
    const { cluster, reconciler } = world({ limitIo: undefined });
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    const read: string[] = [];
    const health = cluster.health.bind(cluster);
    cluster.health = (name: string) => {
      read.push(name);
      return health(name);
    };
    reconciler.markDirty('p', 'n2');
    await reconciler.reconcile('p');
    expect(reconciler.lastPass).to.include({ full: false, observed: 1 });
    expect(read.filter((node) => node !== 'n2')).to.deep.equal([]);
  });

  it('plans a limited node at every pass, though the pass looked only at another: its lift comes with time', async () => {
    const { reconciler, wanted, agentReports, state, restart } = world();
    await reconciler.reconcile('p');
    await reconciler.reconcile('p');
    agentReports();
    // A new process: it wrote nothing, and learns of the limit from its first (full) pass.
    const after = restart();
    await after.reconciler.reconcile('p');
    state.saturated = false;
    state.dbScale = 0.1;
    after.reconciler.markDirty('p', 'n1');
    await after.reconciler.reconcile('p');
    expect(wanted(), 'quiet, not yet for recoverySeconds').to.have.length(1);
    after.clock.advance(61_000);
    after.reconciler.markDirty('p', 'n2');
    await after.reconciler.reconcile('p');
    expect(after.reconciler.lastPass).to.include({ full: false, observed: 1 });
    expect(wanted()).to.deep.equal([]);
  });
});
