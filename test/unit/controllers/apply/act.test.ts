// actOnPlan (src/controllers/apply/act.ts) on the real deps over a MemoryCluster: the node patches before the other
// strands, the budget reservation before what it pays for, and what a failed node patch or reservation leaves out.
import { expect } from 'chai';
import { validateSandboxPolicySpec, type NodeStamps } from '../../../../src/api/v1alpha1/index.js';
import { ActionLog } from '../../../../src/controllers/action-log.js';
import { actOnPlan, type ActDeps } from '../../../../src/controllers/apply/act.js';
import type { Pass, Plan } from '../../../../src/controllers/apply/pass.js';
import { Failures } from '../../../../src/controllers/failures.js';
import { IoLimitStamps } from '../../../../src/controllers/iolimits/pod-stamps.js';
import { IoLimiter } from '../../../../src/controllers/iolimits/limiter.js';
import { NodeConditions } from '../../../../src/controllers/nodecondition/node-conditions.js';
import { Pacer, type PacingPlan } from '../../../../src/controllers/pacing/pacer.js';
import { PolicyMemory, type NodeObservation } from '../../../../src/controllers/policy-memory.js';
import { Evictor } from '../../../../src/controllers/remediation/evictor.js';
import { RefusedChanges } from '../../../../src/controllers/remediation/refused-changes.js';
import { MutationCache } from '../../../../src/controllers/reporting/mutation-cache.js';
import { RolloutThrottler, type RolloutPlan } from '../../../../src/controllers/rollouts/throttler.js';
import type { GatedPodView } from '../../../../src/detection/index.js';
import { silentLogger } from '../../../../src/observability/log.js';
import type { Action, Eviction } from '../../../../src/policy/actions.js';
import type { NodeFacts } from '../../../../src/policy/node-facts.js';
import type { ReleaseReason } from '../../../../src/policy/pacing.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { Expectations } from '../../../../src/runtime/expectations.js';
import { aRollingDeployment, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';
import { writtenBefore } from '../../../support/reconciler.js';

const validation = validateSandboxPolicySpec({});
if (!validation.valid) throw new Error(JSON.stringify(validation.problems));
const SPEC = validation.spec;
const NODES = ['n1', 'n2'];
const STAMPS: NodeStamps = { policy: 'p', since: T0, taintsBefore: [], reason: 'stuck', cordoned: true };
const WHY = { reason: 'SandboxCreationStuckOnIo', message: 'stuck' };
const cordon = (node: string): Action => ({ kind: 'Cordon', node, target: `node/${node}`, ...WHY });
const evict = (node: string): Eviction => ({
  ...{ kind: 'Evict', node, target: `pod/default/web-${node}`, ...WHY },
  pod: { namespace: 'default', name: `web-${node}`, uid: `uid-web-${node}` },
});
/** Saturated and degraded by IO: its Node condition is set True. */
const saturated = (name: string): NodeFacts => ({
  ...{ name, ready: true, controlPlane: false, unschedulable: false, taints: [], degradedByIo: true },
  ...{ io: 'High', ioCause: 'Unknown', ioStuckPods: [], ioHeavyPods: [], migrated: 0 },
});
const gated = (name: string): GatedPodView => ({
  ...{ namespace: 'default', name, uid: `uid-${name}`, gates: ['sandbox.remediator.io/paced'] },
  ...{ policy: 'p', gatedAt: T0 },
});
const WEB = aRollingDeployment('web');
const ROLLOUT = 'deployment/shop/web';

/** The deps as buildControllers wires them (one write at a time), over a cluster with nodes n1 and n2. */
function world() {
  const clock = new FakeClock(T0.getTime());
  const cluster = new MemoryCluster().addPolicy('p', {}).addNodes(aNode('n1'), aNode('n2'));
  cluster.deploymentMap.set('shop/web', WEB);
  const expectations = new Expectations(clock);
  const actions = new ActionLog(silentLogger);
  const shared = { cache: cluster, expectations, recorder: cluster };
  const deps: ActDeps = {
    expectations,
    refused: new RefusedChanges(),
    writeConcurrency: 1,
    writer: cluster,
    mutations: new MutationCache(cluster, expectations),
    actions,
    evictor: new Evictor({ cache: cluster, clock, expectations, writeConcurrency: 1 }),
    throttler: new RolloutThrottler({ ...shared, actions }),
    pacer: new Pacer({ ...shared, lifter: cluster, logger: silentLogger, clock }),
    conditions: new NodeConditions({ ...shared, logger: silentLogger, writeConcurrency: 1, hooks: {} }),
    limiter: new IoLimiter({ ...shared, writer: cluster }),
    stamps: new IoLimitStamps({ ...shared, clock }),
  };
  const memory = new PolicyMemory('uid-p');
  memory.startPass(1, NODES, T0.getTime()); // past the first pass: what is marked dirty now is kept
  const pass: Pass = {
    policy: cluster.policy('p')!,
    spec: SPEC,
    memory,
    dryRun: false,
    actuator: cluster,
    now: T0,
    failures: new Failures(silentLogger, { policy: 'p' }),
    owned: NODES,
    overlaps: [],
  };
  const act = (plan: Plan) => actOnPlan(deps, pass, plan);
  /** Makes the next budget reservation fail, as an apiserver that times out. */
  const failReservation = () => {
    cluster.patchPolicyStatus = (name) => {
      cluster.writes.push(`patch policy/${name}`);
      return Promise.reject(new Error('etcdserver: request timed out'));
    };
  };
  return { cluster, deps, pass, memory, act, failReservation };
}

interface PlanOptions {
  /** Whether the pass decided (false: a node was still settling). */
  decided?: boolean;
  cordons?: string[];
  evictions?: string[];
  /** Gated pods lifted, by why: Paced spends the pace budget, the others do not. */
  lifts?: Partial<Record<ReleaseReason, string[]>>;
}

/** A plan for n1 and n2: cordons and evictions, a rollout held, gates lifted, the Node condition set on both. */
function planFor(cluster: MemoryCluster, o: PlanOptions = {}): Plan {
  const {
    cordons = NODES,
    evictions = NODES,
    lifts = { Paced: ['paced-1'], WaitedTooLong: ['waited-1'] },
  } = o;
  const actions = [...cordons.map(cordon), ...evictions.map(evict)];
  const releases = Object.entries(lifts).flatMap(([reason, pods]) =>
    pods.map((name) => ({ pod: gated(name), reason: reason as ReleaseReason })),
  );
  cluster.gated.push(...releases.map((r) => r.pod));
  const pacing: PacingPlan = {
    ...{ policy: 'p', publication: undefined, gated: releases.map((r) => r.pod), decision: { releases } },
    ...{ paced: lifts.Paced?.length ?? 0, kept: [], maxPodStartsPerMinute: 10, maxGateSeconds: 60 },
  };
  const stamps = { policy: 'p', since: T0, reason: 'FeedsSaturatedNode' as const, startedAt: T0 };
  const pause = {
    kind: 'PauseRollout' as const,
    target: ROLLOUT,
    ...WHY,
    reason: 'FeedsSaturatedNode' as const,
  };
  const rollouts: RolloutPlan = {
    decision: {
      ...{ actions: [{ ...pause, stamps }], blocked: [] },
      pausedAfter: [{ target: ROLLOUT, reason: 'FeedsSaturatedNode', feeds: ['n1'] }],
    },
    ...{ byTarget: new Map([[ROLLOUT, WEB]]), versions: new Map(), simulated: new Map(), dryRun: false },
  };
  const observations = NODES.map(
    (name) => ({ node: cluster.nodeMap.get(name), version: undefined }) as unknown as NodeObservation,
  );
  return {
    observations,
    facts: new Map(NODES.map((name) => [name, saturated(name)])),
    remediation:
      o.decided === false
        ? undefined
        : {
            actions,
            blocked: [],
            storm: { detected: false, unhealthy: 2, limit: 10 },
            stampsAfter: new Map(NODES.map((name) => [name, STAMPS])),
          },
    actions,
    evictions: { evictions: evictions.map(evict), left: 0 },
    rollouts,
    pacing,
    limits: undefined,
    stamps: [],
  };
}

describe('acting on a plan', () => {
  // [what is written first, what after it]
  const orders: Record<string, [string, string]> = {
    'patches every node before it sets any Node condition': ['patch node/n2', 'set condition node/n1'],
    'patches every node before it holds a rollout': ['patch node/n2', `patch ${ROLLOUT}`],
    'patches every node before it reserves the budget': ['patch node/n2', 'patch policy/p'],
    'patches every node before it lifts a gate that spends no budget': [
      'patch node/n2',
      'release pod/default/waited-1',
    ],
    'reserves the budget before the first eviction': ['patch policy/p', 'evict pod/default/web-n1'],
    'reserves the budget before it lifts a paced gate': ['patch policy/p', 'release pod/default/paced-1'],
  };
  for (const [name, [first, then]] of Object.entries(orders))
    it(name, async () => {
      const { cluster, act } = world();
      await act(planFor(cluster));
      expect(writtenBefore(cluster.writes, first, then), cluster.writes.join('\n')).to.equal(true);
    });

  it('writes nothing but node patches until every node patch is answered', async () => {
    const { cluster, act } = world();
    await act(planFor(cluster));
    const firstOther = cluster.writes.findIndex((w) => !w.startsWith('patch node/'));
    expect(cluster.writes.slice(0, firstOther)).to.deep.equal(['patch node/n1', 'patch node/n2']);
    expect(cluster.writes.slice(firstOther).filter((w) => w.startsWith('patch node/'))).to.deep.equal([]);
  });

  it('writes the eviction and paced-gate budget it spends, and returns it as reserved', async () => {
    const { cluster, act } = world();
    const done = await act(planFor(cluster));
    expect(cluster.policyPatches).to.have.length(1);
    const [reservation] = cluster.policyPatches;
    expect(Object.keys(reservation!).sort()).to.deep.equal(['recentEvictions', 'recentGateReleases']);
    expect([reservation!.recentEvictions?.length, reservation!.recentGateReleases?.length]).to.deep.equal([
      2, 1,
    ]);
    expect(done.reserved).to.deep.equal(reservation);
  });

  it('leaves a node whose patch failed out of the evictions and the Node conditions, and looks at it again', async () => {
    const { cluster, act, memory } = world();
    cluster.failNextNodePatch.set('n1', new Error('etcdserver: leader changed'));
    const done = await act(planFor(cluster));
    expect([...done.failedNodes]).to.deep.equal(['n1']);
    expect(cluster.evicted).to.deep.equal(['default/web-n2']);
    expect(cluster.writes.filter((w) => w.startsWith('set condition'))).to.deep.equal([
      'set condition node/n2',
    ]);
    expect(done.results.get('n1')?.map((r) => `${r.action.kind} ${r.outcome}`)).to.deep.equal([
      'Cordon Failed',
    ]);
    expect([...memory.startPass(1, NODES, T0.getTime()).dirty]).to.include('n1');
  });

  it('evicts nothing and lifts no paced gate when the reservation write fails, but lifts a gate that spends none', async () => {
    const { cluster, pass, act, failReservation } = world();
    failReservation();
    const done = await act(planFor(cluster));
    expect(cluster.evicted, 'no eviction').to.deep.equal([]);
    expect(cluster.released, 'only the gate that spends no budget').to.deep.equal(['default/waited-1']);
    expect(done.reserved).to.equal(undefined);
    expect(pass.failures.retriable.map(String)).to.deep.equal(['Error: etcdserver: request timed out']);
    expect(cluster.writes, 'the node patches went ahead').to.include.members([
      'patch node/n1',
      'patch node/n2',
    ]);
  });

  it('reserves nothing when nothing spends budget, and still lifts the gates that spend none', async () => {
    const { cluster, act } = world();
    const done = await act(planFor(cluster, { evictions: [], lifts: { PressureGone: ['gone-1'] } }));
    expect(cluster.policyPatches).to.deep.equal([]);
    expect(done.reserved).to.equal(undefined);
    expect(cluster.released).to.deep.equal(['default/gone-1']);
  });

  it('patches no node and sets no Node condition when the pass decided nothing', async () => {
    const { cluster, act } = world();
    const done = await act(planFor(cluster, { decided: false, evictions: [] }));
    const written = cluster.writes.filter((w) => w.includes('node/'));
    expect(written).to.deep.equal([]);
    expect([...done.failedNodes]).to.deep.equal([]);
    expect(cluster.writes, 'the rollouts go on').to.include(`patch ${ROLLOUT}`);
  });

  it("reports each node's results in order, marked with the actuator's mode, and the rollouts held for it", async () => {
    const { cluster, act } = world();
    const done = await act(planFor(cluster));
    const said = [...done.results].map(([node, rs]) => [
      node,
      rs.map((r) => `${r.action.kind} ${r.outcome}${r.simulated ? ' (dry run)' : ''}`),
    ]);
    expect(said).to.deep.equal([
      ['n1', ['Cordon Succeeded', 'Evict Succeeded']],
      ['n2', ['Cordon Succeeded', 'Evict Succeeded']],
    ]);
    expect(done.evictedAt).to.have.length(2);
    expect(Object.fromEntries(done.rollouts.throttling)).to.deep.equal({ n1: [ROLLOUT] });
  });

  it('returns what the apiserver held back: a node change it refused, then an eviction a budget refused', async () => {
    const { cluster, deps, act } = world();
    deps.refused.refuse(cluster.nodeMap.get('n1')!, { uid: 'uid-p', generation: 1 }, 'denied', T0);
    cluster.protectedPods.add('default/web-n2');
    const done = await act(planFor(cluster));
    expect(done.blocked.map((b) => `${b.target} ${b.guard}`)).to.deep.equal([
      'node/n1 RefusedByApi',
      'pod/default/web-n2 DisruptionBudget',
    ]);
    expect(cluster.writes, 'a refused change is not sent again').not.to.include('patch node/n1');
    expect(cluster.evicted, 'nor is a pod of a node it left as it was evicted').to.deep.equal([]);
  });
});
