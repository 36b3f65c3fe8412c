// Passes pipelined: the reconciler as the Manager runs it, whose passes do not wait for their writes. Writes are held
// here until the test lets them go, to show what goes on meanwhile.
import { expect } from 'chai';
import { DryRunActuator } from '../../../../src/actuation/actuator.js';
import { buildControllers, type ControllerDeps } from '../../../../src/controllers/manager/wiring.js';
import { silentLogger } from '../../../../src/observability/log.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster, tellOfChanges } from '../../../support/memory-cluster.js';
import { HandApplyQueue, IO_SPEC, settle, type Requeued } from '../../../support/reconciler.js';

/**
 * Calls of the cluster's write methods that match are held until released (or, `answers`, carried out at once and
 * their answers held); the others go through at once.
 */
function holding(cluster: MemoryCluster) {
  type Rule = {
    method: string;
    match: (arg: unknown) => boolean;
    answers: boolean;
    waiting: ((error?: Error) => void)[];
  };
  const rules: Rule[] = [];
  const proxy = new Proxy(cluster, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function') return value;
      return async (...args: unknown[]) => {
        const rule = rules.find((r) => r.method === String(prop) && r.match(args[0]));
        const gate = () => new Promise<Error | undefined>((resolve) => rule!.waiting.push(resolve));
        if (rule && !rule.answers) await gate();
        const call = (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        if (rule?.answers) {
          const settled = call.then(
            (v) => ({ v }),
            (e: unknown) => ({ e }),
          );
          // An answer let go with an error is lost on its way back: the API applied the call all the same.
          const lost = await gate();
          if (lost) throw lost;
          const out = await settled;
          if ('e' in out) throw out.e;
          return out.v;
        }
        return call;
      };
    },
  });
  return {
    proxy,
    /** Holds matching calls; returns how to let them go (all of them, now and from then on; or the newest alone). */
    hold(method: string, match: (arg: unknown) => boolean = () => true, answers = false) {
      const rule: Rule = { method, match, answers, waiting: [] };
      rules.push(rule);
      return {
        held: () => rule.waiting.length,
        release: () => {
          rules.splice(rules.indexOf(rule), 1);
          for (const go of rule.waiting.splice(0)) go();
        },
        releaseNewest: (error?: Error) => rule.waiting.pop()?.(error),
        releaseOldest: (error?: Error) => rule.waiting.shift()?.(error),
      };
    },
  };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

function world(spec: object = IO_SPEC) {
  const cluster = new MemoryCluster().addPolicy('p', spec).addNodes(aNode('n1'), aNode('n2'), aNode('n3'));
  const clock = new FakeClock(secondsAfter(T0, 600).getTime());
  const saturated = new Set(['n1', 'n2']);
  const sources: ControllerDeps['sources'] = () => ({
    kind: 'prometheus',
    pollMs: 60_000,
    refresh: () => Promise.resolve(),
    read: (node: string) => ({
      source: 'prometheus',
      observedTime: new Date(clock.now()).toISOString(),
      psiSomeAvg10Percent: saturated.has(node) ? 80 : 1,
    }),
  });
  const writes = holding(cluster);
  const { proxy } = writes;
  const requeues: Requeued[] = [];
  const applies = new HandApplyQueue(
    () => controllers.applier,
    (policy) => requeues.push({ policy, after: 'backoff' }),
  );
  /** What each report sent beside its node's write in flight came to: true applied, false refused. */
  const fenced: boolean[] = [];
  /** How long each report waited, from asked for to written (ms). */
  const waits: number[] = [];
  const controllers = buildControllers({
    hooks: {
      onFencedReport: (applied) => fenced.push(applied),
      onReport: (waitedMs) => waits.push(waitedMs),
    },
    cache: cluster,
    writer: proxy,
    recorder: proxy,
    actuators: { real: proxy, dryRun: new DryRunActuator() },
    workloads: proxy,
    clock,
    logger: silentLogger,
    sources,
    requeue: (policy, after) => requeues.push({ policy, after }),
    scheduleApply: (policy) => {
      applies.schedule(policy);
    },
  });
  /** Every apply started and every report asked for is done. */
  const idle = () => settle(controllers, applies);
  tellOfChanges(cluster, controllers.reconciler);
  /** A pod stuck on `node` since T0 with a NameReserved failure Event. */
  const stuck = (name: string, node: string) => {
    const pod = { ...aPod().named(name).onNode(node).waitingSince(T0).build(), controllerKind: 'ReplicaSet' };
    cluster.pods.push(pod);
    cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
    cluster.changed(node);
  };
  const listed = (node: string) => (cluster.health(node)?.status?.stuckPods ?? []).map((p) => p.name);
  const hold = (method: string, match?: (arg: unknown) => boolean, answers?: boolean) =>
    writes.hold(method, match, answers);
  return { cluster, clock, hold, requeues, stuck, listed, fenced, waits, idle, applies, ...controllers };
}

/** The world with maxPodsPerNode 1 for pods labelled io=heavy, and those pods running on n1. */
function migratingWorld(heavy: readonly string[], safety: object = {}) {
  const w = world({
    ...IO_SPEC,
    safety: { ...IO_SPEC.safety, ...safety },
    remediation: { migrateWorkloads: { podSelector: { matchLabels: { io: 'heavy' } }, maxPodsPerNode: 1 } },
  });
  for (const name of heavy)
    w.cluster.running.push({
      ...aPod().named(name).onNode('n1').running().labelled({ io: 'heavy' }).build(),
      controllerKind: 'ReplicaSet',
    });
  return w;
}

/** n1 cordoned, then the pass that evicts web-1 and migrates db-0, with its report of n1 held: that report, and the pods migrated. */
async function migrationReportHeld(w: ReturnType<typeof migratingWorld>) {
  w.stuck('web-1', 'n1');
  await w.reconciler.reconcile('p'); // the cordon
  await w.idle();
  const report = w.hold('patchHealthStatus', (name) => name === 'n1');
  await w.reconciler.reconcile('p'); // web-1 evicted, db-0 migrated; the report telling of it hangs
  for (let j = 0; j < 5; j++) await turn();
  const migrated = () => w.cluster.evicted.filter((pod) => pod.startsWith('default/db-'));
  expect(migrated()).to.have.length(1);
  return { report, migrated };
}

/** Deletes policy p (a pass sees it gone) and makes it again under its name: a new uid, no status. */
async function makeAgain(w: ReturnType<typeof world>): Promise<void> {
  const old = w.cluster.policyMap.get('p')!;
  w.cluster.policyMap.delete('p');
  await w.reconciler.reconcile('p');
  const { status: _status, ...fresh } = old;
  w.cluster.policyMap.set('p', { ...fresh, uid: 'uid-p-again' });
}

describe('PolicyReconciler, pipelined', () => {
  it("reports a new stuck pod on one node while another node's cordon is still in flight", async () => {
    const w = world();
    await w.reconciler.reconcile('p');
    await w.idle();
    const cordon = w.hold('patchNode', (change) => (change as { node: string }).node === 'n1');
    w.stuck('web-1', 'n1');
    await w.reconciler.reconcile('p'); // decides the cordon of n1; its patch hangs
    await turn();
    expect(cordon.held()).to.equal(1);

    w.stuck('web-2', 'n3');
    await w.reconciler.reconcile('p');
    await turn();
    expect(w.listed('n3'), 'n3 reported, n1 still being cordoned').to.deep.equal(['web-2']);
    expect(w.cluster.nodeMap.get('n1')!.unschedulable).to.equal(false);

    cordon.release();
    await w.idle();
    expect(w.cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
    expect(w.requeues.at(-1), 'a pass was held meanwhile: the next decides at once').to.deep.equal({
      policy: 'p',
      after: 0,
    });
  });

  it('reports a new stuck pod while the policy status write is in flight', async () => {
    const w = world();
    await w.reconciler.reconcile('p');
    await w.idle();
    const status = w.hold('patchPolicyStatus');
    w.stuck('web-1', 'n3'); // Degraded (not IO): the policy's counts change
    await w.reconciler.reconcile('p');
    await turn();
    expect(status.held()).to.equal(1);
    expect(w.listed('n3')).to.deep.equal(['web-1']);
    status.release();
    await w.idle();
    expect(w.cluster.policy('p')!.status).to.include({ degradedNodes: 1 });
  });

  /** n3 reported, then web-1 stuck on it, its report held: the world, the held report, and the writes since. */
  async function reportOfWeb1Held(answers = false) {
    const w = world();
    await w.reconciler.reconcile('p');
    await w.idle();
    w.cluster.takeWrites();
    const report = w.hold('patchHealthStatus', (name) => name === 'n3', answers);
    w.stuck('web-1', 'n3');
    await w.reconciler.reconcile('p');
    await turn();
    expect(report.held()).to.equal(1);
    return { w, report };
  }

  /** web-2 stuck on n3 too: its report goes at once, beside web-1's, both held. */
  async function web2Beside(w: ReturnType<typeof world>, report: { held(): number }) {
    w.stuck('web-2', 'n3');
    await w.reconciler.reconcile('p');
    await turn();
    expect(report.held()).to.equal(2);
  }

  it("sends a node's new stuck pod beside its own report in flight, fenced on it, and both apply in order", async () => {
    const { w, report } = await reportOfWeb1Held();
    // kubelet fails a second pod on n3 while the first report is under way: its report goes at once, after the first.
    w.stuck('web-2', 'n3');
    await w.reconciler.reconcile('p');
    await turn();
    expect(report.held(), 'the second sent before the first is back').to.equal(2);
    // A third waits: two at most to one object.
    w.stuck('web-3', 'n3');
    await w.reconciler.reconcile('p');
    await turn();
    expect(report.held()).to.equal(2);
    w.requeues.length = 0;
    report.release();
    await w.idle();
    expect(w.listed('n3'), 'no pass between them').to.have.members(['web-1', 'web-2']);
    expect(w.cluster.takeWrites().filter((x) => x.includes('health/n3'))).to.deep.equal([
      'patch health/n3',
      'patch health/n3 after',
    ]);
    expect(w.fenced).to.deep.equal([true]);
    expect(w.requeues, 'web-3 looked at again at once').to.deep.include({ policy: 'p', after: 0 });
    await w.reconciler.reconcile('p');
    await w.idle();
    expect(w.listed('n3')).to.have.members(['web-1', 'web-2', 'web-3']);
    // Each planned on what the one before it left: no pod's Event twice.
    expect(w.cluster.takeEvents().filter((e) => e.endsWith('SandboxCreationStuck'))).to.have.members([
      'Pod/web-1 Warning SandboxCreationStuck',
      'Pod/web-2 Warning SandboxCreationStuck',
      'Pod/web-3 Warning SandboxCreationStuck',
    ]);
  });

  it('has the API refuse a fenced report that arrives before the one it follows, and looks again once that one is back', async () => {
    const { w, report } = await reportOfWeb1Held();
    await web2Beside(w, report);
    // The second reaches the API first: its test of the first one's reportId fails, and nothing of it is written.
    report.releaseNewest();
    for (let j = 0; j < 3; j++) await turn();
    expect(w.cluster.health('n3')?.status?.stuckPods ?? []).to.deep.equal([]);
    expect(w.fenced).to.deep.equal([false]);
    w.clock.advance(1_500);
    w.requeues.length = 0;
    report.release();
    await w.idle();
    expect(w.listed('n3')).to.deep.equal(['web-1']);
    expect(w.requeues, 'looked at again at once').to.deep.include({ policy: 'p', after: 0 });
    await w.reconciler.reconcile('p');
    await w.idle();
    expect(w.listed('n3')).to.have.members(['web-1', 'web-2']);
    expect(w.cluster.takeEvents().filter((e) => e.endsWith('SandboxCreationStuck'))).to.have.members([
      'Pod/web-1 Warning SandboxCreationStuck',
      'Pod/web-2 Warning SandboxCreationStuck',
    ]);
    // web-2's news waited from its first asking, through the refusal: not from the look after it.
    expect(w.waits.at(-1), "web-2's report's wait (ms)").to.be.at.least(1_500);
  });

  it('takes a write whose answer was lost as applied once the write that followed it is applied', async () => {
    const { w, report } = await reportOfWeb1Held(true);
    await web2Beside(w, report);
    // The first write's answer is lost on its way back (a reset): the API applied it, and the second is applied after it.
    report.releaseOldest(new Error('socket hang up'));
    for (let j = 0; j < 3; j++) await turn();
    report.release();
    await w.idle();
    expect(w.fenced).to.deep.equal([true]);
    expect(
      w.requeues.filter((r) => r.after === 'backoff'),
      'no failure to back off from',
    ).to.deep.equal([]);
    expect(w.cluster.takeEvents().filter((e) => e.endsWith('SandboxCreationStuck'))).to.have.members([
      'Pod/web-1 Warning SandboxCreationStuck',
      'Pod/web-2 Warning SandboxCreationStuck',
    ]);
  });

  it('caches the later of two reports whose answers come back out of order', async () => {
    const { w, report } = await reportOfWeb1Held(true);
    // The watch lags: a pass reads n3's status from what our writes answered.
    w.cluster.lagging = true;
    // Both apply in order at the API; the second's answer comes back first.
    await web2Beside(w, report);
    const apiListed = () => (w.cluster.apiHealth('n3')?.status?.stuckPods ?? []).map((p) => p.name);
    expect(apiListed()).to.have.members(['web-1', 'web-2']);
    report.releaseNewest();
    await turn();
    report.release();
    await w.idle();
    w.cluster.takeWrites();
    w.cluster.changed('n3');
    await w.reconciler.reconcile('p');
    await w.idle();
    // Had the first answer been taken for what the API holds, web-2 would be written and reported again.
    expect(w.cluster.takeWrites().filter((x) => x.includes('health/n3'))).to.deep.equal([]);
    expect(w.cluster.takeEvents().filter((e) => e.endsWith('SandboxCreationStuck'))).to.have.members([
      'Pod/web-1 Warning SandboxCreationStuck',
      'Pod/web-2 Warning SandboxCreationStuck',
    ]);
  });

  it("sends a node's new stuck pod while its applied report's Events are still being reported", async () => {
    const w = world();
    await w.reconciler.reconcile('p');
    await w.idle();
    const events = w.hold('record', (t) => (t as { target: { name: string } }).target.name === 'web-1');
    w.stuck('web-1', 'n3');
    await w.reconciler.reconcile('p');
    for (let j = 0; j < 3; j++) await turn();
    expect(w.listed('n3')).to.deep.equal(['web-1']);
    expect(events.held(), 'the first report applied, its Event under way').to.equal(1);
    w.stuck('web-2', 'n3');
    await w.reconciler.reconcile('p');
    for (let j = 0; j < 3; j++) await turn();
    expect(w.listed('n3'), 'not behind the Event').to.have.members(['web-1', 'web-2']);
    expect(w.fenced, 'unfenced: the write before it had applied').to.deep.equal([]);
    events.release();
    await w.idle();
    expect(w.cluster.takeEvents().filter((e) => e.endsWith('SandboxCreationStuck'))).to.have.members([
      'Pod/web-1 Warning SandboxCreationStuck',
      'Pod/web-2 Warning SandboxCreationStuck',
    ]);
  });

  it('sends the next report at once, unfenced, once a later write proved an earlier one whose answer is still out', async () => {
    const { w, report } = await reportOfWeb1Held(true);
    await web2Beside(w, report);
    report.releaseNewest(); // the second's answer: it applied, so the first did
    for (let j = 0; j < 3; j++) await turn();
    // web-3: planned on the second's answer, and not fenced on the first (the API holds the second's reportId).
    w.stuck('web-3', 'n3');
    await w.reconciler.reconcile('p');
    for (let j = 0; j < 3; j++) await turn();
    const apiListed = (w.cluster.apiHealth('n3')?.status?.stuckPods ?? []).map((p) => p.name);
    expect(apiListed, 'before the first answer is back').to.have.members(['web-1', 'web-2', 'web-3']);
    report.release();
    await w.idle();
    expect(w.fenced, 'none refused').to.deep.equal([true]);
    expect(w.cluster.takeEvents().filter((e) => e.endsWith('SandboxCreationStuck'))).to.have.members([
      'Pod/web-1 Warning SandboxCreationStuck',
      'Pod/web-2 Warning SandboxCreationStuck',
      'Pod/web-3 Warning SandboxCreationStuck',
    ]);
  });

  it("plans no report on a look taken while the node's own report was in flight", async () => {
    const w = world();
    await w.reconciler.reconcile('p');
    await w.idle();
    // web-1 stuck on n1: its report is applied with the cordon.
    w.stuck('web-1', 'n1');
    await w.reconciler.reconcile('p');
    await w.idle();
    expect(w.listed('n1')).to.deep.equal(['web-1']);
    expect(w.cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
    w.cluster.takeEvents();
    // web-2 stuck too: n1's report of it hangs, and so does web-1's eviction, decided on the look before it (web-2's
    // waits for a report that explains it).
    const report = w.hold('patchHealthStatus', (name) => name === 'n1');
    const eviction = w.hold('evict');
    w.stuck('web-2', 'n1');
    await w.reconciler.reconcile('p');
    await turn();
    expect(report.held()).to.equal(1);
    expect(eviction.held()).to.equal(1);
    // The next pass looks at n1 while the report is in flight (the status it reads is from before it).
    w.cluster.changed('n1');
    await w.reconciler.reconcile('p');
    await turn();
    // The report is applied; then the eviction's decision, carried out, asks for n1's report: on that look it must not be.
    report.release();
    await turn();
    eviction.release();
    await w.idle();
    expect(w.cluster.evicted).to.deep.equal(['default/web-1']);
    await w.reconciler.reconcile('p');
    await w.idle();
    expect(w.cluster.evicted).to.deep.equal(['default/web-1', 'default/web-2']);
    const reported = w.cluster.takeEvents();
    expect(reported.filter((e) => e === 'Pod/web-2 Warning SandboxCreationStuck')).to.have.length(1);
    expect(reported.filter((e) => e === 'Pod/web-1 Normal EvictedStuckPod')).to.have.length(1);
    expect(
      w.cluster.health('n1')!.status!.actions!.map((a) => `${a.kind} ${a.target} ${a.outcome}`),
    ).to.deep.equal([
      'Evict pod/default/web-2 Succeeded',
      'Evict pod/default/web-1 Succeeded',
      'Cordon node/n1 Succeeded',
    ]);
  });

  it('evicts no stuck pod while the report that first lists it is in flight, and asks for a pass once it applied', async () => {
    const w = world();
    await w.reconciler.reconcile('p');
    await w.idle();
    w.cluster.changeNode('n1', (n) => ({ ...n, unschedulable: true })); // fenced already: kubectl cordon n1
    const report = w.hold('patchHealthStatus', (name) => name === 'n1');
    w.stuck('web-1', 'n1');
    // Passes go on while n1's report of web-1 is in flight: the stored status does not list it, so none evicts it.
    for (let i = 0; i < 2; i++) {
      await w.reconciler.reconcile('p');
      for (let j = 0; j < 3; j++) await turn();
    }
    expect(report.held()).to.equal(1);
    expect(w.cluster.evicted).to.deep.equal([]);
    w.requeues.length = 0;
    report.release();
    await w.idle();
    expect(w.listed('n1')).to.deep.equal(['web-1']);
    expect(w.requeues).to.deep.include({ policy: 'p', after: 0 });
    await w.reconciler.reconcile('p'); // the pass it asked for
    await w.idle();
    expect(w.cluster.evicted).to.deep.equal(['default/web-1']);
  });

  it('decides nothing while a decision is carried out, and never acts twice on one', async () => {
    const w = world();
    await w.reconciler.reconcile('p');
    await w.idle();
    const cordons = w.hold('patchNode');
    w.stuck('web-1', 'n1');
    w.stuck('web-2', 'n2');
    await w.reconciler.reconcile('p');
    await turn();
    expect(cordons.held()).to.equal(2);
    for (let i = 0; i < 3; i++) {
      w.cluster.changed('n1');
      await w.reconciler.reconcile('p');
      await turn();
    }
    expect(cordons.held(), 'no second cordon decided meanwhile').to.equal(2);
    cordons.release();
    await w.idle();
    expect(w.cluster.writes.filter((x) => x.startsWith('patch node/'))).to.deep.equal([
      'patch node/n1',
      'patch node/n2',
    ]);
    expect(w.cluster.health('n1')!.status!.actions!.map((a) => `${a.kind} ${a.outcome}`)).to.deep.equal([
      'Cordon Succeeded',
    ]);
  });

  it('migrates no more than maxPodsPerNode while the report of a migration is in flight', async () => {
    const w = migratingWorld(['db-0', 'db-1', 'db-2'], { maxEvictionsPerMinute: 30 });
    w.stuck('web-1', 'n1');
    await w.reconciler.reconcile('p'); // the cordon
    await w.idle();
    expect(w.cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
    // n1's reports hang from here on: the one that tells of the migration too. The passes that follow must count the
    // migration all the same.
    const report = w.hold('patchHealthStatus', (name) => name === 'n1');
    const migrated = () => w.cluster.evicted.filter((pod) => pod.startsWith('default/db-'));
    for (let i = 0; i < 6; i++) {
      w.clock.advance(2_000);
      w.cluster.changed('n1');
      await w.reconciler.reconcile('p');
      for (let j = 0; j < 5; j++) await turn();
    }
    expect(migrated(), 'maxPodsPerNode: 1').to.have.length(1);
    expect(report.held(), 'the report telling of it, and one that follows it, still in flight').to.equal(2);
    report.release();
    await w.idle();
    expect(migrated()).to.have.length(1);
    expect(w.cluster.health('n1')!.status!.actions!.filter((a) => a.kind === 'Migrate')).to.have.length(1);
  });

  it('decides nothing on a look that the report of a migration superseded', async () => {
    const w = migratingWorld(['db-0', 'db-1']);
    w.stuck('web-1', 'n1');
    await w.reconciler.reconcile('p'); // the cordon
    await w.idle();
    // The report telling of the migration hangs; a pass looks at n1 meanwhile (its status read from before it).
    const report = w.hold('patchHealthStatus', (name) => name === 'n1');
    await w.reconciler.reconcile('p'); // web-1 evicted, db-0 migrated
    for (let j = 0; j < 5; j++) await turn();
    w.cluster.changed('n1');
    await w.reconciler.reconcile('p');
    for (let j = 0; j < 5; j++) await turn();
    const migrated = () => w.cluster.evicted.filter((pod) => pod.startsWith('default/db-'));
    expect(migrated()).to.have.length(1);
    // The report is applied while the next pass looks at other nodes: that pass must not decide on its stale look at n1.
    w.cluster.changed('n2');
    const pass = w.reconciler.reconcile('p');
    report.release();
    await pass;
    await w.idle();
    for (let i = 0; i < 3; i++) {
      await w.reconciler.reconcile('p');
      await w.idle();
    }
    expect(migrated(), 'maxPodsPerNode: 1').to.have.length(1);
  });

  it("decides nothing on a look whose node's report applied during its live reads", async () => {
    const w = migratingWorld(['db-0', 'db-1']);
    const { report, migrated } = await migrationReportHeld(w);
    // A pass reads n1's status (from before the report), then waits on its live read of n1's IO-heavy pods; the report
    // is applied meanwhile, and what it reported leaves the policy's memory.
    const liveRead = w.hold('runningPodsOn', (node) => node === 'n1');
    w.cluster.changed('n1');
    const pass = w.reconciler.reconcile('p');
    for (let j = 0; j < 5; j++) await turn();
    expect(liveRead.held()).to.equal(1);
    report.release();
    for (let j = 0; j < 5; j++) await turn();
    liveRead.release();
    const result = await pass;
    expect(result.requeueAfterMs, 'looked at again at once').to.equal(0);
    await w.idle();
    for (let i = 0; i < 3; i++) {
      await w.reconciler.reconcile('p');
      await w.idle();
    }
    expect(migrated(), 'maxPodsPerNode: 1').to.have.length(1);
  });

  it('backs off one step for a round whose reports all failed, not one per node', async () => {
    const w = world();
    await w.reconciler.reconcile('p');
    await w.idle();
    for (const node of ['n1', 'n2', 'n3']) {
      w.cluster.failNextHealthPatch.set(node, new Error('etcdserver: leader changed'));
      w.stuck(`web-${node}`, node);
    }
    const before = w.requeues.length;
    await w.reconciler.reconcile('p');
    await w.idle();
    const backoffs = w.requeues.slice(before).filter((r) => r.after === 'backoff');
    expect(backoffs, 'asked once, by the first failure').to.have.length(1);
    expect(w.applies.errors.map(String)).to.have.length(1);
    expect(String(w.applies.errors[0])).to.contain('leader changed');
  });

  it("decides nothing for a policy made again under the same name until its namesake's decision is back", async () => {
    const w = world();
    await w.reconciler.reconcile('p');
    await w.idle();
    const cordon = w.hold('patchNode');
    w.stuck('web-1', 'n1');
    await w.reconciler.reconcile('p');
    await turn();
    expect(cordon.held()).to.equal(1);
    // Deleted and made again while its cordon is in flight: the new policy must not decide beside it.
    await makeAgain(w);
    await w.reconciler.reconcile('p');
    await turn();
    expect(cordon.held(), 'no second cordon').to.equal(1);
    const requeued = w.requeues.length;
    cordon.release();
    await w.idle();
    expect(w.requeues.slice(requeued), 'asked to decide once it is back').to.deep.include({
      policy: 'p',
      after: 0,
    });
    expect(w.cluster.writes.filter((x) => x.startsWith('patch node/'))).to.deep.equal(['patch node/n1']);
  });

  it('counts, for a policy made again under the same name, the migration its namesake did whose report is still in flight', async () => {
    const w = migratingWorld(['db-0', 'db-1'], { maxEvictionsPerMinute: 30 });
    const { report, migrated } = await migrationReportHeld(w);
    // Deleted and made again while that report waits: the new policy's memory starts empty, and n1 is the same node.
    await makeAgain(w);
    for (let i = 0; i < 4; i++) {
      w.clock.advance(2_000);
      w.cluster.changed('n1');
      await w.reconciler.reconcile('p');
      for (let j = 0; j < 5; j++) await turn();
    }
    expect(migrated(), 'maxPodsPerNode: 1, the report still in flight').to.have.length(1);
    report.release();
    for (let i = 0; i < 3; i++) {
      w.clock.advance(2_000);
      w.cluster.changed('n1');
      await w.reconciler.reconcile('p');
      await w.idle();
    }
    expect(migrated(), 'maxPodsPerNode: 1').to.have.length(1);
    const actions = w.cluster.health('n1')!.status!.actions ?? [];
    expect(
      actions.filter((a) => a.kind === 'Migrate'),
      'reported once, by one report or the other',
    ).to.have.length(1);
  });

  it("looks again, unasked, at a node whose namesake's report superseded its look, and decides again", async () => {
    const w = migratingWorld(['db-0', 'db-1'], { maxEvictionsPerMinute: 30 });
    w.stuck('web-1', 'n1');
    await w.reconciler.reconcile('p'); // the cordon
    await w.idle();
    // The decision that migrates db-0 hangs on its policy status (the second write: the first reserves the evictions),
    // its report of n1 on the SandboxHealth write.
    const report = w.hold('patchHealthStatus', (name) => name === 'n1');
    let statusWrites = 0;
    const status = w.hold('patchPolicyStatus', () => ++statusWrites >= 2);
    await w.reconciler.reconcile('p');
    for (let j = 0; j < 5; j++) await turn();
    expect(report.held()).to.equal(1);
    // Made again meanwhile: its first pass looks at every node, and decides nothing while the namesake's is out.
    await makeAgain(w);
    await w.reconciler.reconcile('p');
    for (let j = 0; j < 5; j++) await turn();
    // The namesake's report is applied after that look (nothing of the new policy is marked for it), then its decision.
    report.release();
    for (let j = 0; j < 5; j++) await turn();
    status.release();
    await w.idle();
    // n2 saturates now; n1 changes no more. The new policy must decide (cordon n2), having looked again at n1.
    w.stuck('web-2', 'n2');
    for (let i = 0; i < 3; i++) {
      w.clock.advance(1_000);
      await w.reconciler.reconcile('p');
      await w.idle();
    }
    expect(w.cluster.nodeMap.get('n2')!.unschedulable, 'n2 cordoned').to.equal(true);
    const migrated = w.cluster.evicted.filter((pod) => pod.startsWith('default/db-'));
    expect(migrated, 'maxPodsPerNode: 1').to.have.length(1);
  });

  it("fails the policy's apply with what failed, decides nothing while the apply queue backs off, and decides again on the retry", async () => {
    const w = world();
    await w.reconciler.reconcile('p');
    await w.idle();
    w.cluster.failNextNodePatch.set('n1', new Error('etcdserver: request timed out'));
    w.stuck('web-1', 'n1');
    await w.reconciler.reconcile('p');
    await w.idle();
    expect(w.requeues.at(-1)).to.deep.equal({ policy: 'p', after: 'backoff' });
    expect(w.applies.errors.map(String), 'failed once').to.have.length(1);
    expect(String(w.applies.errors[0])).to.contain('etcdserver: request timed out');
    // Backing off: a pass looks and reports, and decides nothing (the cordon is not tried again yet).
    w.cluster.takeWrites();
    w.reconciler.markDirty('p', 'n1');
    await w.reconciler.reconcile('p');
    await w.idle();
    expect(w.cluster.takeWrites().filter((x) => x.startsWith('patch node/'))).to.deep.equal([]);
    // The backoff over, the retry asks for a pass, which decides again: the cordon goes.
    await w.applies.retry();
    expect(w.requeues.at(-1)).to.deep.equal({ policy: 'p', after: 0 });
    await w.reconciler.reconcile('p');
    await w.idle();
    expect(w.cluster.takeWrites().filter((x) => x.startsWith('patch node/'))).to.deep.equal([
      'patch node/n1',
    ]);
    expect(w.cluster.nodeMap.get('n1')!.unschedulable).to.equal(true);
  });
});
