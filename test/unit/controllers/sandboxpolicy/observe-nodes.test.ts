// observeNodes alone: which nodes are unsettled (a write of ours the cache does not show) and which are observed, what
// an observation holds, which measured culprits may move while IO limits are in place, and the pods moved by label.
import { expect } from 'chai';
import {
  MAX_IO_LIMITS_PER_NODE,
  NO_LIMIT_LABEL,
  validateSandboxPolicySpec,
  type IoAttribution,
  type IoConsumer,
  type SandboxHealthStatus,
  type WantedIoLimitSpec,
} from '../../../../src/api/v1alpha1/index.js';
import { PolicyMemory } from '../../../../src/controllers/policy-memory.js';
import { MutationCache } from '../../../../src/controllers/reporting/mutation-cache.js';
import { UnreportedResults } from '../../../../src/controllers/reporting/unreported.js';
import { observeNodes } from '../../../../src/controllers/sandboxpolicy/observe-nodes.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { Expectations } from '../../../../src/runtime/expectations.js';
import type { IoSource, SourcedReading } from '../../../../src/signals/types.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';

const NOW = secondsAfter(T0, 3600);
const T = T0.toISOString();
const ago = (seconds: number) => secondsAfter(NOW, -seconds).toISOString();

/** A reading `age` seconds old, PSI 60 (over the default 40) unless told otherwise. */
const reading = (overrides: Partial<SourcedReading> = {}, age = 0): SourcedReading => ({
  source: 'agent',
  observedTime: ago(age),
  psiSomeAvg10Percent: 60,
  ...overrides,
});
const under = (age: number) => reading({ psiSomeAvg10Percent: 1 }, age);
const MEASURED: IoAttribution = { confidence: 'Low', confidenceReason: '', podsMeasured: 0, consumers: [] };

/** A source that reads n1 (n2 has no reading), and fails its refresh while `fail` is set. */
function aSource(n1: SourcedReading | undefined, kind = 'agent') {
  const source: IoSource & { refreshed: string[][]; fail?: Error } = {
    kind,
    refreshed: [],
    refresh(nodes) {
      source.refreshed.push([...nodes]);
      return source.fail ? Promise.reject(source.fail) : Promise.resolve();
    },
    read: (node) => (node === 'n1' ? n1 : undefined),
  };
  return source;
}

/** A pod Pending on the node for `waited` seconds, with a NameReserved Event: stuck past 30s. */
function pending(cluster: MemoryCluster, name: string, node: string, waited: number): void {
  const pod = aPod().named(name, 'shop').onNode(node).waitingSince(secondsAfter(NOW, -waited)).build();
  cluster.pods.push(pod);
  cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
}

function world(raw: Record<string, unknown> = {}, source?: IoSource) {
  const result = validateSandboxPolicySpec({ detection: { stuckThresholdSeconds: 30 }, ...raw });
  if (!result.valid) throw new Error(JSON.stringify(result.problems));
  const cluster = new MemoryCluster().addNodes(aNode('n1'), aNode('n2'));
  const expectations = new Expectations(new FakeClock(NOW.getTime()));
  const mutations = new MutationCache(cluster, expectations);
  const unreported = new UnreportedResults();
  const memory = new PolicyMemory('uid-p');
  const said: string[] = [];
  const say = (level: string) => (message: string) => void said.push(`${level} ${message}`);
  const logger = { error: say('error'), warn: say('warn'), info: say('info'), debug: () => undefined };
  const deps = { cache: cluster, unreported, expectations, mutations, workloads: cluster, logger };
  const observe = ({ nodes = ['n1', 'n2'], refresh = false } = {}) =>
    observeNodes(deps, { policy: 'p', spec: result.spec, nodes, now: NOW, source, refresh }, memory);
  const observeN1 = async () => (await observe()).observations.find((o) => o.node.name === 'n1')!;
  return {
    spec: result.spec,
    cluster,
    expectations,
    mutations,
    unreported,
    memory,
    said,
    observe,
    observeN1,
  };
}
type World = ReturnType<typeof world>;

const putHealth = (w: World, status?: SandboxHealthStatus) =>
  w.cluster.healthMap.set('n1', { name: 'n1', uid: 'h-n1', nodeName: 'n1', ...(status ? { status } : {}) });

/** Our cordon of n1, which the cache shows only on deliver(). */
async function cordonUnseen(w: World) {
  w.cluster.lagging = true;
  const version = await w.cluster.patchNode({ node: 'n1', unschedulable: true, annotations: {} });
  w.expectations.expect('Node/n1', version);
}
/** Our lease of n1, which the cache shows only on deliver(). */
async function leaseUnseen(w: World) {
  w.cluster.lagging = true;
  const at = { acquireTime: NOW, renewTime: NOW, durationSeconds: 60, transitions: 0 };
  const version = await w.cluster.writeNodeLease({ node: 'n1', nodeUid: 'uid-n1', holder: 'us', ...at });
  w.expectations.expect('NodeLease/n1', version);
}
/** Our status write of n1 over a cached stuckPodCount 1, unseen; its answer kept in the mutation cache or not. */
async function healthWriteUnseen(w: World, kept: boolean) {
  putHealth(w, { policy: 'p', stuckPodCount: 1 });
  w.cluster.lagging = true;
  const { version, status } = await w.cluster.patchHealthStatus('n1', { stuckPodCount: 2 });
  w.mutations.wroteHealth('n1', version, kept ? status : undefined);
}
async function cordonSeen(w: World) {
  await cordonUnseen(w);
  w.cluster.deliver();
}
/** Our status write of n1 answered before the cache shows the object at all. */
function statusOfUnseenObject(w: World) {
  w.mutations.wroteHealth('n1', '500', { stuckPodCount: 3 });
}
const healthAwaited = (w: World) => healthWriteUnseen(w, false);
const healthWritten = (w: World) => healthWriteUnseen(w, true);

describe('observeNodes: settled and unsettled nodes', () => {
  /** What is done first, and what is wanted: the nodes observed | the nodes unsettled. */
  const cases: Record<string, [setup: (w: World) => unknown, want: string]> = {
    'observes every node and holds none with no write of ours in flight': [() => 0, 'n1 n2 | '],
    'observes a node whose cordon of ours is not back yet, but holds it': [cordonUnseen, 'n1 n2 | n1'],
    'holds the node no more once the cache shows our cordon': [cordonSeen, 'n1 n2 | '],
    'holds a node whose lease of ours is not back yet': [leaseUnseen, 'n1 n2 | n1'],
    'holds, unobserved, a node whose SandboxHealth write is awaited, none cached': [healthAwaited, 'n2 | n1'],
    'observes a node whose SandboxHealth write the mutation cache holds': [healthWritten, 'n1 n2 | '],
    'skips a node gone from the cache, without holding it': [(w) => w.cluster.nodeMap.delete('n1'), 'n2 | '],
  };
  for (const [name, [setup, want]] of Object.entries(cases))
    it(name, async () => {
      const w = world();
      await setup(w);
      const { observations, unsettled } = await w.observe();
      expect(`${observations.map((o) => o.node.name).join(' ')} | ${unsettled.join(' ')}`).to.equal(want);
    });

  it('looks only at the nodes asked for', async () => {
    const { observations } = await world().observe({ nodes: ['n2'] });
    expect(observations.map((o) => o.node.name)).to.deep.equal(['n2']);
  });

  it('reports the stuck pods of a node whose cordon is not back yet', async () => {
    const w = world();
    pending(w.cluster, 'web-1', 'n1', 60);
    await cordonUnseen(w);
    const n1 = await w.observeN1();
    expect(n1.findings.stuckPods.map((s) => s.pod.name)).to.deep.equal(['web-1']);
    expect(n1.detection.stuckPodCount).to.equal(1);
  });
});

describe('observeNodes: what an observation holds', () => {
  /** What is done first, and the previous status's stuckPodCount and whether the object exists, as wanted. */
  type Previous = [setup: (w: World) => unknown, count: number | undefined, exists: boolean];
  const previous: Record<string, Previous> = {
    'no previous status, and no object, without a SandboxHealth': [() => 0, undefined, false],
    'no previous status for a SandboxHealth with none yet': [(w) => putHealth(w), undefined, true],
    'the cached status': [(w) => putHealth(w, { stuckPodCount: 1 }), 1, true],
    'our written status over the cached one': [healthWritten, 2, true],
    'our status of an object the cache does not show yet': [statusOfUnseenObject, 3, true],
  };
  for (const [name, [setup, count, exists]] of Object.entries(previous))
    it(`reads ${name}`, async () => {
      const w = world();
      await setup(w);
      const n1 = await w.observeN1();
      expect([n1.previous?.stuckPodCount, n1.exists]).to.deep.equal([count, exists]);
    });

  it("finds each node's own stuck pods, degraded from minStuckPods", async () => {
    const w = world({ detection: { stuckThresholdSeconds: 30, minStuckPods: 2 } });
    pending(w.cluster, 'a', 'n1', 90);
    pending(w.cluster, 'b', 'n1', 60);
    pending(w.cluster, 'c', 'n2', 60);
    pending(w.cluster, 'young', 'n2', 10);
    const { observations } = await w.observe();
    const seen = observations.map((o) => [o.findings.stuckPods.map((s) => s.pod.name), o.findings.degraded]);
    expect(seen).to.deep.equal([
      [['a', 'b'], true],
      [['c'], false],
    ]);
    expect(observations.map((o) => o.detection.stuckPodCount)).to.deep.equal([2, 1]);
  });

  it("carries the node's cached version, its lease, and how many of our reports of it applied", async () => {
    const w = world();
    w.cluster.changeNode('n1', (n) => ({ ...n, labels: { a: 'b' } }));
    const lease = { node: 'n1', uid: 'l1', holder: 'someone' };
    w.cluster.putLease(lease);
    w.unreported.appliedWith('n1', []);
    w.unreported.appliedWith('n1', []);
    const n1 = await w.observeN1();
    expect(n1.version).to.be.a('string').and.equal(w.cluster.observedVersion('Node', 'n1'));
    expect(n1.lease).to.deep.equal(lease);
    expect(n1.reportsApplied).to.equal(w.unreported.applied('n1')).and.not.equal(0);
  });

  const due: { name: string; waited?: number; reading?: SourcedReading; dueIn: number }[] = [
    { name: 'never, with nothing pending and no source', dueIn: Infinity },
    { name: 'when a pending pod crosses the threshold', waited: 10, dueIn: 20_000 },
    { name: 'just after a fresh reading goes stale', reading: under(10), dueIn: 80_001 },
    { name: 'not for a reading stale already', reading: under(100), dueIn: Infinity },
    { name: 'when the pressure has been over for sustainSeconds', reading: reading(), dueIn: 30_000 },
    { name: 'at the soonest of these', waited: 25, reading: under(10), dueIn: 5_000 },
  ];
  for (const c of due)
    it(`is due ${c.name}`, async () => {
      const w = world({}, c.reading ? aSource(c.reading) : undefined);
      if (c.waited !== undefined) pending(w.cluster, 'web-1', 'n1', c.waited);
      expect((await w.observeN1()).dueAt - NOW.getTime()).to.equal(c.dueIn);
    });

  const high = { type: 'IoPressureHigh', reason: 'x', message: '', lastTransitionTime: T };
  const wasHigh: SandboxHealthStatus = {
    conditions: [{ ...high, status: 'True' }],
    ioPressure: { observation: 'Under', since: ago(60) },
  };
  const wasOver: SandboxHealthStatus = { ioPressure: { observation: 'Over', since: ago(30) } };
  const noReading = { reason: 'SourceForbidden', message: 'no' } as const;
  const forbidden = { ...aSource(undefined), problem: () => noReading };
  /** The source, sustainSeconds, the stored status, and the IoPressureHigh wanted. */
  type Io = [IoSource | undefined, number, SandboxHealthStatus | undefined, string?];
  const [OVER, UNDER] = [aSource(reading()), aSource(under(0))];
  const io: Record<string, Io> = {
    'nothing of IO without a source': [undefined, 0, undefined],
    'True at once with no sustainSeconds': [OVER, 0, undefined, 'True/ThresholdSustained'],
    'not yet True, over for less than sustainSeconds': [OVER, 30, undefined, 'False/ThresholdNotSustained'],
    'True once stored tracking says over for sustainSeconds': [OVER, 30, wasOver, 'True/ThresholdSustained'],
    'True under thresholds after True, until recoverySeconds': [UNDER, 0, wasHigh, 'True/RecoveryPending'],
    "Unknown for the source's reason it has no reading": [forbidden, 0, undefined, 'Unknown/SourceForbidden'],
  };
  for (const [name, [source, sustain, stored, want]] of Object.entries(io))
    it(`decides ${name}, and writes it in detection`, async () => {
      const w = world({ ioPressure: { sustainSeconds: sustain } }, source);
      if (stored) putHealth(w, stored);
      const { io: decision, detection } = await w.observeN1();
      expect(decision && `${decision.condition.status}/${decision.condition.reason}`).to.equal(want);
      const written = detection.conditions.find((x) => x.type === 'IoPressureHigh');
      expect(written && `${written.status}/${written.reason}`).to.equal(want);
    });

  it("keeps the reading's attribution as measured, whatever the pressure", async () => {
    const quiet = await world(
      {},
      aSource(reading({ psiSomeAvg10Percent: 1, attribution: MEASURED })),
    ).observeN1();
    expect(quiet.measured).to.deep.equal(MEASURED);
    expect(await world({}, aSource(reading())).observeN1()).not.to.have.property('measured');
  });

  const P = 'prometheus';
  const polled = (psi: number, age: number) => reading({ source: P, psiSomeAvg10Percent: psi }, age);
  /** The source's kind, the reading stored, and which reading detection writes. */
  const written: Record<
    string,
    [kind: string, stored: SourcedReading | undefined, writes: 'none' | 'new' | 'stored']
  > = {
    "writes no reading of the agent's: the agent writes its own": ['agent', undefined, 'none'],
    'writes a polled reading when none is stored': [P, undefined, 'new'],
    'keeps a stored polled reading, fresh and in the same band': [P, polled(62, 40), 'stored'],
    'writes a polled reading that moved to another band': [P, polled(15, 10), 'new'],
    'writes a polled reading once the stored one is half staleAfterSeconds old': [P, polled(62, 45), 'new'],
  };
  for (const [name, [kind, stored, writes]] of Object.entries(written))
    it(name, async () => {
      const now = reading({ source: kind });
      const w = world({}, aSource(now, kind));
      if (stored) putHealth(w, { ioReading: stored });
      const { ioReading } = (await w.observeN1()).detection;
      expect(ioReading).to.deep.equal({ none: undefined, new: now, stored }[writes]);
    });

  it('asks the source again only when told to refresh; says a failure once, and when it reads again', async () => {
    const source = aSource(reading());
    const w = world({}, source);
    w.memory.sourceFor(w.spec, () => source);
    await w.observe();
    expect(source.refreshed).to.deep.equal([]);
    source.fail = new Error('prometheus is down');
    const { observations } = await w.observe({ refresh: true });
    await w.observe({ refresh: true });
    expect(source.refreshed.join(' ')).to.equal('n1,n2 n1,n2');
    expect(observations, 'observed all the same').to.have.length(2);
    delete source.fail;
    await w.observe({ refresh: true });
    expect(w.said).to.deep.equal(['warn Failed to read IO pressure', 'info Reading IO pressure again']);
  });
});

describe('observeNodes: culprits that may move while IO limits are in place', () => {
  const RATES = { readBytesPerSecond: 1, writeBytesPerSecond: 2, readOpsPerSecond: 3, writeOpsPerSecond: 4 };
  type Setup = {
    limitIo?: boolean;
    /** limitIo's minSharePercent (db-0 does 60 %). */
    limitShare?: number;
    /** The node's list already holds MAX_IO_LIMITS_PER_NODE limits of ours, on other pods. */
    full?: boolean;
    labels?: Record<string, string>;
    unmeasured?: keyof typeof RATES;
    noDeviceNumber?: boolean;
    limit?: Partial<WantedIoLimitSpec>;
    devices?: { name: string; busyPercent: number; inFlight: number }[] | undefined;
  };
  /** n1 saturated (sda 97% busy, as the reading's disk), db-0 its culprit at 60%; limitIo and n1's ioLimits as told. */
  async function culprits(c: Setup) {
    const limitIo =
      c.limitIo === false ? {} : { limitIo: c.limitShare ? { minSharePercent: c.limitShare } : {} };
    const remediation = { migrateWorkloads: { by: 'measuredIo' }, ...limitIo };
    const labels = c.labels ?? {};
    const db = aPod().named('db-0').onNode('n1').running().labelled(labels).build();
    const consumers: IoConsumer[] = [
      {
        kind: 'Pod',
        podUid: db.uid,
        sharePercent: 60,
        role: 'Culprit',
        ...RATES,
        ...(c.unmeasured ? { [c.unmeasured]: undefined } : {}),
      },
      { kind: 'System', sharePercent: 40, role: 'System' },
    ];
    const base = { device: 'sda', podsMeasured: 1, ...(c.noDeviceNumber ? {} : { deviceNumber: '8:0' }) };
    const attribution = { ...base, confidence: 'High', confidenceReason: 'v2', consumers } as const;
    const devices = 'devices' in c ? c.devices : [{ name: 'sda', busyPercent: 97, inFlight: 30 }];
    const measured = reading({ diskBusyPercent: 97, attribution, ...(devices ? { devices } : {}) });
    const w = world({ ioPressure: { sustainSeconds: 0 }, remediation }, aSource(measured));
    w.cluster.running = [{ ...db, controllerKind: 'StatefulSet' }];
    const limit = { podUid: db.uid, pod: 'default/db-0', device: '8:0', limit: { wbps: 1e6 }, policy: 'p' };
    const others = Array.from({ length: c.full ? MAX_IO_LIMITS_PER_NODE : 0 }, (_, i) => ({
      ...limit,
      podUid: `other-${i}`,
      pod: `default/other-${i}`,
      since: ago(60),
    }));
    const ioLimits =
      c.limit || c.full
        ? [...others, ...(c.limit ? [{ ...limit, since: ago(60), ...c.limit }] : [])]
        : undefined;
    w.cluster.healthMap.set('n1', { name: 'n1', uid: 'h', ...(ioLimits ? { ioLimits } : {}) });
    const n1 = await w.observeN1();
    return { moved: n1.ioHeavyPods.map((p) => `${p.name} ${p.sharePercent}%`), cause: n1.cause?.cause };
  }

  const OTHERS = { policy: 'q', exhausted: true };
  /** What is set up, and whether db-0 moves. */
  const table: Record<string, [Setup, moves: boolean]> = {
    'keeps a culprit with no limit in place yet: it is limited first': [{}, false],
    'keeps a culprit whose limit of ours is not exhausted': [{ limit: {} }, false],
    'moves a culprit whose limit of ours is exhausted': [{ limit: { exhausted: true } }, true],
    "keeps a culprit limited only by another policy's limit, as one not limited": [{ limit: OTHERS }, false],
    'moves a culprit labelled never to be limited': [{ labels: { [NO_LIMIT_LABEL]: 'true' } }, true],
    'moves a culprit with a rate not measured': [{ unmeasured: 'writeOpsPerSecond' }, true],
    'moves a culprit on a device with no number to limit it by': [{ noDeviceNumber: true }, true],
    "moves a culprit under limitIo's minSharePercent (over migration's): it would never be limited": [
      { limitShare: 70 },
      true,
    ],
    "moves a culprit with no limit when the node's list of limits is full": [{ full: true }, true],
    'moves a culprit, limited or not, without limitIo': [{ limitIo: false, limit: {} }, true],
    'moves one by the busiest disk where the reading lists none': [
      { limitIo: false, devices: undefined },
      true,
    ],
  };
  for (const [name, [setup, moves]] of Object.entries(table))
    it(name, async () => {
      expect(await culprits(setup)).to.deep.equal({ moved: moves ? ['db-0 60%'] : [], cause: 'Pod' });
    });

  it("judges the culprit by its own disk's busy time, not the busiest disk's", async () => {
    const sda = { name: 'sda', busyPercent: 20, inFlight: 1 };
    const devices = [{ ...sda, name: 'sdb', busyPercent: 99 }, sda];
    expect(await culprits({ limitIo: false, devices })).to.deep.equal({ moved: [], cause: 'Unattributed' });
  });

  it('forgets the culprits of a node whose pressure is not proven, and reads none of its pods', async () => {
    const w = world({ remediation: { migrateWorkloads: { by: 'measuredIo' } } }, aSource(under(0)));
    w.memory.state('n1').culprits = new Map([['shop/db-0', 0]]);
    let reads = 0;
    w.cluster.runningPodsOn = () => (reads++, Promise.resolve([]));
    const n1 = await w.observeN1();
    expect(w.memory.state('n1').culprits).to.equal(undefined);
    expect([reads, n1.cause, n1.ioHeavyPods]).to.deep.equal([0, undefined, []]);
  });
});

describe('observeNodes: pods moved by label', () => {
  const stamps = { policy: 'p', since: T0, reason: 'IoSaturated', cordoned: true };
  const remediation = { policy: 'p', since: ago(60), cordoned: true, reason: 'IoSaturated', dryRun: false };
  type Case = { ours?: 'stamps' | 'record'; sustain?: number; fails?: boolean };
  /** What is ours on n1 and the like, and the pods to move. */
  const cases: Record<string, [Case, moved: string[]]> = {
    'reads the selected pods of a saturated node we remediate': [{ ours: 'stamps' }, ['heavy']],
    'reads them where only the stored status records our remediation': [{ ours: 'record' }, ['heavy']],
    'reads none on a saturated node we have not remediated': [{}, []],
    'reads none while the pressure is not yet sustained': [{ ours: 'stamps', sustain: 30 }, []],
    'moves none when the read fails, and says so': [{ ours: 'stamps', fails: true }, []],
  };
  for (const [name, [c, moved]] of Object.entries(cases))
    it(name, async () => {
      const migrateWorkloads = { by: 'labels', podSelector: { matchLabels: { io: 'heavy' } } };
      const spec = { ioPressure: { sustainSeconds: c.sustain ?? 0 }, remediation: { migrateWorkloads } };
      const w = world(spec, aSource(reading()));
      w.cluster.running = [
        aPod().named('heavy').onNode('n1').running().labelled({ io: 'heavy' }).build(),
        aPod().named('light').onNode('n1').running().build(),
      ];
      if (c.ours === 'stamps') w.cluster.nodeMap.set('n1', { ...aNode('n1'), stamps });
      if (c.ours === 'record') putHealth(w, { remediation });
      if (c.fails) w.cluster.runningPodsOn = () => Promise.reject(new Error('forbidden'));
      const n1 = await w.observeN1();
      expect(n1.ioHeavyPods.map((p) => p.name)).to.deep.equal(moved);
      expect(w.said).to.deep.equal(c.fails ? ['warn Failed to list IO-heavy pods'] : []);
    });
});
