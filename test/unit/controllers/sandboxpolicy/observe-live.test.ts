// The live reads of a pass, alone: which rollouts run on a saturated node (read at most once per 15s a node), where
// the claims of the pods that may move are bound (read once per pod), and when a node needs either read at all.
import { expect } from 'chai';
import { validateSandboxPolicySpec } from '../../../../src/api/v1alpha1/index.js';
import { PolicyMemory, type NodeObservation } from '../../../../src/controllers/policy-memory.js';
import {
  needsLiveReads,
  readRunningRollouts,
  resolveClaims,
} from '../../../../src/controllers/sandboxpolicy/observe-live.js';
import type { MeasuredPod, PodData } from '../../../../src/detection/index.js';
import type { IoPressureDecision } from '../../../../src/policy/io-pressure.js';
import { aPod, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';

const NOW = secondsAfter(T0, 600);
const later = (ms: number) => new Date(NOW.getTime() + ms);

function specWith(remediation: Record<string, unknown>) {
  const result = validateSandboxPolicySpec({ remediation });
  if (!result.valid) throw new Error(JSON.stringify(result.problems));
  return result.spec;
}
const THROTTLING = specWith({ throttleRollouts: {} });
const NOT_THROTTLING = specWith({});

/** The IO decision of a node whose IoPressureHigh is True (saturated) or False; undefined: no source. */
const HIGH: IoPressureDecision = {
  tracking: { observation: 'Over', since: T0 },
  condition: { type: 'IoPressureHigh', status: 'True', reason: 'ThresholdSustained', message: '' },
};
const LOW: IoPressureDecision = {
  tracking: { observation: 'Under', since: T0 },
  condition: { type: 'IoPressureHigh', status: 'False', reason: 'BelowThresholds', message: '' },
};

/** A running pod of shop on n1 that may move, mounting these claims (no data at all: undefined). */
function candidate(name: string, claims?: string[], data: Partial<PodData> = {}): MeasuredPod {
  const pod = aPod().named(name, 'shop').onNode('n1').running().build();
  return claims ? { ...pod, data: { localVolumes: [], claims, ...data } } : pod;
}

/** n1, n2 and n3 in the cache; the reads of running pods and of claims counted; what is logged kept. */
function world() {
  const cluster = new MemoryCluster().addNodes(aNode('n1'), aNode('n2'), aNode('n3'));
  const reads = { pods: 0, claims: [] as string[] };
  const listPods = cluster.runningPodsOn.bind(cluster);
  cluster.runningPodsOn = (node, selector) => {
    reads.pods++;
    return listPods(node, selector);
  };
  const placements = cluster.claimPlacements.bind(cluster);
  cluster.claimPlacements = (namespace, claims) => {
    reads.claims.push(...claims);
    return placements(namespace, claims);
  };
  const said: string[] = [];
  const logger = {
    error: () => undefined,
    info: () => undefined,
    debug: () => undefined,
    warn: (m: string) => void said.push(m),
  };
  const memory = new PolicyMemory('uid-p');
  return { cluster, reads, said, memory, deps: { cache: cluster, workloads: cluster, logger } };
}
type World = ReturnType<typeof world>;

/** n1 observed (what the live reads read and fill in): its IO decision and the pods that may move. */
type Observed = Pick<NodeObservation, 'node' | 'io' | 'ioHeavyPods' | 'runningRollouts'>;
const observed = (io: IoPressureDecision | undefined, ioHeavyPods: MeasuredPod[] = []): Observed => ({
  node: aNode('n1'),
  io,
  ioHeavyPods,
});

describe('readRunningRollouts', () => {
  const rollouts = async (w: World, at = NOW, node = 'n1') => {
    const observation: Observed = { ...observed(HIGH), node: aNode(node) };
    await readRunningRollouts(w.deps, { policy: 'p', spec: THROTTLING, now: at }, observation, w.memory);
    return observation.runningRollouts && [...observation.runningRollouts].sort();
  };

  it('names the rollouts that run a pod on the node, and no others', async () => {
    const w = world();
    w.cluster
      .runsOn('Deployment', 'shop/web')
      .runsOn('StatefulSet', 'shop/db')
      .runsOn('DaemonSet', 'shop/logs', 'n2');
    w.cluster.running.push(aPod().named('bare', 'shop').onNode('n1').running().build());
    expect(await rollouts(w)).to.deep.equal(['Deployment/shop/web', 'StatefulSet/shop/db']);
    expect(w.memory.state('n1').rollouts?.at).to.equal(NOW.getTime());
  });

  /** Milliseconds after the first read, and whether the node is read again then. */
  const ttl: Record<string, [after: number, again: boolean]> = {
    'takes the rollouts as read for 15 seconds': [14_999, false],
    'reads them again once 15 seconds have passed': [15_000, true],
  };
  for (const [name, [after, again]] of Object.entries(ttl))
    it(name, async () => {
      const w = world();
      w.cluster.runsOn('Deployment', 'shop/web');
      await rollouts(w);
      w.cluster.runsOn('StatefulSet', 'shop/db');
      const seen = await rollouts(w, later(after));
      const all = ['Deployment/shop/web', 'StatefulSet/shop/db'];
      expect(seen).to.deep.equal(again ? all : ['Deployment/shop/web']);
      expect(w.reads.pods).to.equal(again ? 2 : 1);
    });

  it("keeps each node's rollouts apart", async () => {
    const w = world();
    w.cluster.runsOn('Deployment', 'shop/web').runsOn('Deployment', 'shop/api', 'n2');
    expect([await rollouts(w), await rollouts(w, NOW, 'n2')]).to.deep.equal([
      ['Deployment/shop/web'],
      ['Deployment/shop/api'],
    ]);
    expect(w.reads.pods).to.equal(2);
  });

  it('leaves the rollouts unknown when the read fails, forgets the old ones, and reads again next time', async () => {
    const w = world();
    w.cluster.runsOn('Deployment', 'shop/web');
    await rollouts(w);
    const list = w.cluster.runningPodsOn.bind(w.cluster);
    w.cluster.runningPodsOn = () => Promise.reject(new Error('forbidden'));
    expect(await rollouts(w, later(15_000))).to.equal(undefined);
    expect(w.memory.state('n1').rollouts).to.equal(undefined);
    expect(w.said).to.deep.equal(['Failed to list the pods of a node to find the rollouts that run there']);
    w.cluster.runningPodsOn = list;
    expect(await rollouts(w, later(15_001))).to.deep.equal(['Deployment/shop/web']);
  });

  /** The spec, the IO decision, whether there is a reader. */
  const none: Record<string, [spec: typeof THROTTLING, io: IoPressureDecision | undefined, reader: boolean]> =
    {
      'for a policy that does not throttle rollouts': [NOT_THROTTLING, HIGH, true],
      'for a node whose pressure is not proven': [THROTTLING, LOW, true],
      'for a node with no IO decision': [THROTTLING, undefined, true],
      'without a reader': [THROTTLING, HIGH, false],
    };
  for (const [name, [spec, io, reader]] of Object.entries(none))
    it(`reads nothing, and forgets what it read, ${name}`, async () => {
      const w = world();
      w.memory.state('n1').rollouts = { at: NOW.getTime(), keys: new Set(['Deployment/shop/old']) };
      const deps = reader ? w.deps : { ...w.deps, workloads: undefined };
      const observation = observed(io);
      await readRunningRollouts(deps, { policy: 'p', spec, now: NOW }, observation, w.memory);
      expect([observation.runningRollouts, w.memory.state('n1').rollouts, w.reads.pods]).to.deep.equal([
        undefined,
        undefined,
        0,
      ]);
    });
});

describe('resolveClaims', () => {
  /** The volumes of shop's claims: local only n1 can reach, shared n1 and n2, elsewhere n1 and a node not cached. */
  const only = (...nodes: string[]) => [
    { matchFields: [{ key: 'metadata.name', operator: 'In', values: nodes }] },
  ];
  function claimsWorld() {
    const w = world();
    w.cluster.claimTerms.set('shop/local', only('n1'));
    w.cluster.claimTerms.set('shop/shared', only('n1', 'n2'));
    w.cluster.claimTerms.set('shop/elsewhere', only('n1', 'n9'));
    return w;
  }
  const resolve = async (
    w: World,
    pods: MeasuredPod[],
    deps: Parameters<typeof resolveClaims>[0] = w.deps,
  ) => {
    const observation = observed(HIGH, pods);
    await resolveClaims(deps, 'p', observation, w.memory);
    return observation.ioHeavyPods;
  };
  const bound = (pods: MeasuredPod[]) => pods.map((p) => [p.name, p.data?.nodeBoundClaims]);

  it('names the claims whose volume no other node the cache knows can reach, keeping the order of the pods', async () => {
    const w = claimsWorld();
    const pods = [candidate('db', ['local', 'shared', 'anywhere']), candidate('cache', ['elsewhere'])];
    expect(bound(await resolve(w, pods))).to.deep.equal([
      ['db', ['local']],
      ['cache', ['elsewhere']],
    ]);
  });

  it("reads a pod's claims once while it is a candidate, and forgets the pod once it is not", async () => {
    const w = claimsWorld();
    const [db, cache] = [candidate('db', ['local']), candidate('cache', ['shared'])];
    await resolve(w, [db, cache]);
    expect(bound(await resolve(w, [db]))).to.deep.equal([['db', ['local']]]);
    expect(w.reads.claims).to.deep.equal(['local', 'shared']);
    expect([...(w.memory.state('n1').claims?.entries() ?? [])]).to.deep.equal([[db.uid, ['local']]]);
  });

  it('passes a pod with no data, no claims, or claims resolved already, through as it is, unread', async () => {
    const w = claimsWorld();
    const rest = [
      candidate('bare'),
      candidate('none', []),
      candidate('known', ['local'], { nodeBoundClaims: [] }),
    ];
    const got = await resolve(w, [candidate('db', ['shared']), ...rest]);
    expect(got.slice(1)).to.have.ordered.members(rest);
    expect(w.reads.claims).to.deep.equal(['shared']);
  });

  it('leaves a pod whose claims cannot be read unresolved, says so, and reads it again next time', async () => {
    const w = claimsWorld();
    const read = w.cluster.claimPlacements.bind(w.cluster);
    w.cluster.claimPlacements = () => Promise.reject(new Error('forbidden'));
    const db = candidate('db', ['local']);
    expect(bound(await resolve(w, [db]))).to.deep.equal([['db', undefined]]);
    expect(w.said).to.deep.equal(['Failed to read where the claims of a Pod are bound']);
    expect(w.memory.state('n1').claims?.size).to.equal(0);
    w.cluster.claimPlacements = read;
    expect(bound(await resolve(w, [db]))).to.deep.equal([['db', ['local']]]);
  });

  /** The pods that may move, and whether there is a reader. */
  const none: Record<string, [pods: MeasuredPod[], reader: boolean]> = {
    'when no pod that may move mounts a claim': [[candidate('db', []), candidate('bare')], true],
    'without a reader': [[candidate('db', ['local'])], false],
  };
  for (const [name, [pods, reader]] of Object.entries(none))
    it(`reads nothing, and forgets what it read, ${name}`, async () => {
      const w = claimsWorld();
      w.memory.state('n1').claims = new Map([['gone', ['local']]]);
      const got = await resolve(w, pods, reader ? w.deps : { ...w.deps, workloads: undefined });
      expect(got).to.have.ordered.members(pods);
      expect([w.memory.state('n1').claims, w.reads.claims]).to.deep.equal([undefined, []]);
    });
});

describe('needsLiveReads', () => {
  const claimed = [candidate('db', ['data'])];
  /** The spec, the IO decision, the pods that may move, and whether a live read is needed. */
  const cases: Record<string, [typeof THROTTLING, IoPressureDecision | undefined, MeasuredPod[], boolean]> = {
    'needs one for a pod that may move and mounts a claim': [NOT_THROTTLING, LOW, claimed, true],
    'needs one for a saturated node of a policy that throttles rollouts': [THROTTLING, HIGH, [], true],
    'needs none on a node whose pressure is not proven, with nothing mounted': [THROTTLING, LOW, [], false],
    'needs none with no IO decision': [THROTTLING, undefined, [candidate('db', [])], false],
    'needs none on a saturated node of a policy that does not throttle': [NOT_THROTTLING, HIGH, [], false],
  };
  for (const [name, [spec, io, pods, needed]] of Object.entries(cases))
    it(`${name}, and forgets what the reads kept only when it needs none`, () => {
      const memory = new PolicyMemory('uid-p');
      const rollouts = { at: 0, keys: new Set(['Deployment/shop/web']) };
      const culprits = new Map([['shop/db', 0]]);
      Object.assign(memory.state('n1'), { claims: new Map([['uid', ['data']]]), rollouts, culprits });
      expect(needsLiveReads(spec, observed(io, pods), memory)).to.equal(needed);
      const { claims, rollouts: kept, culprits: stillCulprits } = memory.state('n1');
      expect([claims !== undefined, kept === rollouts]).to.deep.equal([needed, needed]);
      expect(stillCulprits, 'what other parts keep stays').to.equal(culprits);
    });

  it('keeps no memory of a node it knows nothing of', () => {
    const memory = new PolicyMemory('uid-p');
    expect(needsLiveReads(NOT_THROTTLING, observed(LOW), memory)).to.equal(false);
    expect(memory.nodes.has('n1')).to.equal(false);
  });
});
