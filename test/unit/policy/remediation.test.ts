import { expect } from 'chai';
import fc from 'fast-check';
import {
  formatTaint,
  resolveIntOrPercent,
  SandboxPolicySpecSchema,
  type NodeStamps,
  type SandboxPolicySpec,
  type SandboxPolicySpecInput,
  type Taint,
} from '../../../src/api/v1alpha1/index.js';
import type { PodData } from '../../../src/detection/index.js';
import type { Action, BlockedAction } from '../../../src/policy/actions.js';
import type {
  CandidatePod,
  IoState,
  NodeFacts,
  RemediationDecision,
} from '../../../src/policy/node-facts.js';
import { decideRemediation } from '../../../src/policy/remediation.js';
import { secondsAfter, T0 } from '../../support/builders.js';

const NOW = secondsAfter(T0, 3600);
const ago = (seconds: number) => secondsAfter(NOW, -seconds);
const OUR_TAINT: Taint = { key: 'sandbox.remediator.io/io-pressure', value: 'true', effect: 'NoSchedule' };
const taintText = (effect = 'NoSchedule') => `sandbox.remediator.io/io-pressure=true:${effect}`;

const pod = (name: string, controllerKind = 'ReplicaSet'): CandidatePod => ({
  namespace: 'default',
  name,
  uid: `uid-${name}`,
  controllerKind,
});
const barePod = (name: string): CandidatePod => ({ namespace: 'default', name, uid: `uid-${name}` });
/** A running pod that keeps nothing on its node. */
const NO_DATA: PodData = { localVolumes: [], claims: [], nodeBoundClaims: [] };
const mirrorPod = (name: string): CandidatePod => ({ ...pod(name, 'Node'), mirror: true });

/** NodeFacts that read like prose: aNodeFacts('n1').degradedByIo().ioHigh().withStuckPods(pod('a')). */
class NodeFactsBuilder {
  private readonly facts: NodeFacts;
  constructor(name: string) {
    this.facts = {
      name,
      ready: true,
      controlPlane: false,
      unschedulable: false,
      taints: [],
      degradedByIo: false,
      io: 'Low',
      ioCause: 'Unknown',
      ioStuckPods: [],
      ioHeavyPods: [],
      migrated: 0,
    };
  }
  degradedByIo(): this {
    this.facts.degradedByIo = true;
    delete this.facts.quietSince;
    return this;
  }
  io(state: IoState): this {
    this.facts.io = state;
    return this;
  }
  ioHigh(): this {
    return this.io('High');
  }
  withStuckPods(...pods: CandidatePod[]): this {
    this.facts.ioStuckPods = pods;
    return this;
  }
  /** Running pods that may move, read as the live read reads them: with no data on the node unless they say so. */
  withIoHeavyPods(...pods: CandidatePod[]): this {
    this.facts.ioHeavyPods = pods.map((p) => (p.data ? p : { ...p, data: NO_DATA }));
    return this;
  }
  /** Who the reading's attribution says does the IO. */
  cause(cause: NodeFacts['ioCause']): this {
    this.facts.ioCause = cause;
    return this;
  }
  notReady(): this {
    this.facts.ready = false;
    return this;
  }
  controlPlane(): this {
    this.facts.controlPlane = true;
    return this;
  }
  /** spec.unschedulable set, by whoever. */
  cordoned(): this {
    this.facts.unschedulable = true;
    return this;
  }
  tainted(taint: Taint): this {
    this.facts.taints = [...this.facts.taints, taint];
    return this;
  }
  /** Carries our stamps, and the node shows what they say (cordoned, our taint). */
  ours(stamps: Partial<NodeStamps> = {}): this {
    const full = this.stampsOf(stamps);
    if (full.cordoned) this.cordoned();
    if (full.taint) this.tainted(full.taint);
    return this;
  }
  /** Carries our stamps, but the node does not show them (someone else reverted them). */
  stampedOnly(stamps: Partial<NodeStamps> = {}): this {
    this.stampsOf(stamps);
    return this;
  }
  /** Verifiably recovered: no longer degraded, nothing stuck, IO low, quiet for a long time. */
  recovered(quietFor = 3600): this {
    this.facts.degradedByIo = false;
    this.facts.ioStuckPods = [];
    this.facts.io = 'Low';
    this.facts.quietSince = ago(quietFor);
    return this;
  }
  quietSince(time: Date): this {
    this.facts.quietSince = time;
    return this;
  }
  /** A pod was evicted off it this long ago. */
  evictedSecondsAgo(seconds: number): this {
    this.facts.lastEvictionAt = ago(seconds);
    return this;
  }
  lastUndoAt(time: Date): this {
    this.facts.lastUndoAt = time;
    return this;
  }
  migrated(count: number): this {
    this.facts.migrated = count;
    return this;
  }
  build(): NodeFacts {
    return { ...this.facts, taints: [...this.facts.taints] };
  }
  private stampsOf(stamps: Partial<NodeStamps>): NodeStamps {
    const full: NodeStamps = { policy: 'p', since: T0, reason: 'stuck', cordoned: true, ...stamps };
    this.facts.stamps = full;
    return full;
  }
}

const aNodeFacts = (name: string) => new NodeFactsBuilder(name);
const healthy = (name: string) => aNodeFacts(name);
/** Degraded from IO under sustained pressure, with stuck pods (default: one, NAME-a). */
const sick = (name: string, ...pods: CandidatePod[]) =>
  aNodeFacts(name)
    .degradedByIo()
    .ioHigh()
    .withStuckPods(...(pods.length > 0 ? pods : [pod(`${name}-a`)]));

type SpecOverrides = {
  remediation?: NonNullable<SandboxPolicySpecInput['remediation']>;
  safety?: NonNullable<SandboxPolicySpecInput['safety']>;
};
const BASE_SAFETY = {
  maxUnhealthyNodes: 3,
  minSchedulableNodes: 1,
  cooldownSeconds: 300,
  maxEvictionsPerMinute: 10,
};
const specWith = (overrides: SpecOverrides = {}): SandboxPolicySpec =>
  SandboxPolicySpecSchema.parse({
    ...(overrides.remediation ? { remediation: overrides.remediation } : {}),
    safety: { ...BASE_SAFETY, ...overrides.safety },
  });
const MIGRATE = { podSelector: { matchLabels: { io: 'heavy' } }, maxPodsPerNode: 2 };

function decide(input: {
  spec?: SpecOverrides;
  nodes: readonly NodeFacts[];
  /** Seconds before NOW. */
  recentEvictions?: readonly number[];
  cacheReady?: boolean;
}): RemediationDecision {
  return decideRemediation({
    policy: 'p',
    spec: specWith(input.spec),
    nodes: input.nodes,
    now: NOW,
    recentEvictions: (input.recentEvictions ?? []).map(ago),
    cacheReady: input.cacheReady ?? true,
  });
}

const onNode = (x: { node: string; target: string }) => (x.target.startsWith('pod/') ? ` on ${x.node}` : '');
const describeAction = (a: Action) =>
  `${a.kind} ${a.target}${onNode(a)}${a.kind === 'Taint' || a.kind === 'Untaint' ? ` ${formatTaint(a.taint)}` : ''} ${a.reason}`;
const describeBlocked = (b: BlockedAction) => `${b.kind} ${b.target}${onNode(b)} ${b.guard}`;
const describeStamps = (s: NodeStamps) => {
  const since = (NOW.getTime() - s.since.getTime()) / 1000;
  return [
    s.cordoned ? 'cordoned' : 'not cordoned',
    ...(s.taint ? [`taint ${formatTaint(s.taint)}`] : []),
    since === 0 ? 'since now' : `since now-${since}s`,
  ].join(', ');
};
/** The nodes that carry stamps after the decision, summarised. */
const stampsAfterOf = (decision: RemediationDecision) =>
  Object.fromEntries(
    [...decision.stampsAfter].flatMap(([node, s]) => (s ? [[node, describeStamps(s)] as const] : [])),
  );

interface Row {
  name: string;
  spec?: SpecOverrides;
  nodes: NodeFactsBuilder[];
  recentEvictions?: number[];
  cacheReady?: boolean;
  actions: string[];
  blocked?: string[];
  stampsAfter?: Record<string, string>;
  storm?: RemediationDecision['storm'];
}

function runTable(rows: readonly Row[]): void {
  for (const row of rows) {
    it(row.name, () => {
      const nodes = row.nodes.map((n) => n.build());
      const decision = decide({ ...row, nodes });
      expect(decision.actions.map(describeAction), 'actions').to.deep.equal(row.actions);
      expect(decision.blocked.map(describeBlocked), 'blocked').to.deep.equal(row.blocked ?? []);
      expect(stampsAfterOf(decision), 'stampsAfter').to.deep.equal(row.stampsAfter ?? {});
      if (row.storm) expect(decision.storm, 'storm').to.deep.equal(row.storm);
    });
  }
}

const CORDON_N1 = 'Cordon node/n1 SandboxCreationStuckOnIo';
const evict = (name: string, node = 'n1') => `Evict pod/default/${name} on ${node} SandboxCreationStuckOnIo`;
const migrate = (name: string, node = 'n1') => `Migrate pod/default/${name} on ${node} IoHeavyWorkload`;
const STAMPED_LONG_AGO = 'cordoned, since now-3600s';

describe('decideRemediation', () => {
  describe('what triggers a remediation', () => {
    runTable([
      {
        name: 'cordons a node degraded by IO under sustained pressure, and evicts nothing in the same pass',
        nodes: [sick('n1', pod('a'), pod('b')), healthy('h1'), healthy('h2')],
        actions: [CORDON_N1],
        stampsAfter: { n1: 'cordoned, since now' },
        storm: { detected: false, unhealthy: 1, limit: 3 },
      },
      ...(['Rising', 'Recovering', 'Unknown', 'Low'] as const).map((io) => ({
        name: `does nothing with requireIoPressure true and IO ${io}`,
        nodes: [sick('n1').io(io), healthy('h1')],
        actions: [],
      })),
      ...(['High', 'Rising', 'Recovering', 'Unknown', 'Low'] as const).map((io) => ({
        name: `cordons on the stuck-pod evidence alone with requireIoPressure false and IO ${io}`,
        spec: { remediation: { requireIoPressure: false } },
        nodes: [sick('n1').io(io), healthy('h1')],
        actions: [CORDON_N1],
        stampsAfter: { n1: 'cordoned, since now' },
      })),
      ...[true, false].map((requireIoPressure) => ({
        // Network, image and runtime-handler causes never make a node degradedByIo.
        name: `never acts on a node not degraded by IO, even under High IO with stuck pods (requireIoPressure ${requireIoPressure})`,
        spec: { remediation: { requireIoPressure } },
        nodes: [aNodeFacts('n1').ioHigh().withStuckPods(pod('a')), healthy('h1')],
        actions: [],
        storm: { detected: false, unhealthy: 0, limit: 3 },
      })),
      {
        name: 'cordons and taints together, stamping both',
        spec: { remediation: { taint: {} } },
        nodes: [sick('n1'), healthy('h1')],
        actions: [CORDON_N1, `Taint node/n1 ${taintText()} SandboxCreationStuckOnIo`],
        stampsAfter: { n1: `cordoned, taint ${taintText()}, since now` },
      },
      ...(['NoSchedule'] as const).map((effect) => ({
        name: `taints with ${effect} (a fence) without cordoning, and evicts nothing in the same pass`,
        spec: { remediation: { cordon: false, taint: { effect } } },
        nodes: [sick('n1'), healthy('h1')],
        actions: [`Taint node/n1 ${taintText(effect)} SandboxCreationStuckOnIo`],
        stampsAfter: { n1: `not cordoned, taint ${taintText(effect)}, since now` },
      })),
      {
        name: 'taints with PreferNoSchedule (no fence) and holds the evictions: a replacement could land here again',
        spec: { remediation: { cordon: false, taint: { effect: 'PreferNoSchedule' } } },
        nodes: [sick('n1'), healthy('h1')],
        actions: [`Taint node/n1 ${taintText('PreferNoSchedule')} SandboxCreationStuckOnIo`],
        blocked: ['Evict node/n1 NodeStillSchedulable'],
        stampsAfter: { n1: `not cordoned, taint ${taintText('PreferNoSchedule')}, since now` },
      },
      {
        name: 'holds the evictions when neither cordon nor taint is allowed',
        spec: { remediation: { cordon: false } },
        nodes: [sick('n1'), healthy('h1')],
        actions: [],
        blocked: ['Evict node/n1 NodeStillSchedulable'],
      },
      {
        name: 'blocks nothing when it may neither fence nor evict',
        spec: { remediation: { cordon: false, evictStuckPods: false } },
        nodes: [sick('n1'), healthy('h1')],
        actions: [],
      },
    ]);

    it('stamps the policy, the time and the reason of a new remediation', () => {
      const decision = decide({ nodes: [sick('n1', pod('a'), pod('b')).build(), healthy('h1').build()] });
      expect(decision.stampsAfter.get('n1')).to.deep.equal({
        policy: 'p',
        since: NOW,
        taintsBefore: [],
        reason: 'Sandbox creation stuck from IO under verified IO pressure (2 pod(s)).',
        cordoned: true,
      });
      expect(decision.actions[0]).to.include({
        node: 'n1',
        target: 'node/n1',
        message: decision.stampsAfter.get('n1')!.reason,
      });
    });

    it('has an entry in stampsAfter for every node, stamped or not', () => {
      const decision = decide({
        nodes: [sick('n1').build(), healthy('h1').build(), healthy('h2').ours().io('Rising').build()],
      });
      expect([...decision.stampsAfter.keys()].sort()).to.deep.equal(['h1', 'h2', 'n1']);
      expect(decision.stampsAfter.get('h1')).to.equal(undefined);
    });
  });

  describe('evictions', () => {
    runTable([
      {
        name: 'evicts the stuck pods once our cordon is seen, keeping the stamps',
        nodes: [sick('n1', pod('a'), pod('b')).ours(), healthy('h1')],
        actions: [evict('a'), evict('b')],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'evicts only the stuck pods its report explains; the others wait for it, with no block and no budget spent',
        spec: { safety: { maxEvictionsPerMinute: 1 } },
        nodes: [sick('n1', { ...pod('a'), unlisted: true }, pod('b')).ours(), healthy('h1')],
        actions: [evict('b')],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'evicts on a node someone else cordoned, and writes no stamps for it',
        nodes: [sick('n1', pod('a'), pod('b')).cordoned(), healthy('h1')],
        actions: [evict('a'), evict('b')],
      },
      {
        name: 'evicts once our NoSchedule taint is seen',
        spec: { remediation: { cordon: false, taint: {} } },
        nodes: [sick('n1', pod('a')).ours({ cordoned: false, taint: OUR_TAINT }), healthy('h1')],
        actions: [evict('a')],
        stampsAfter: { n1: `not cordoned, taint ${taintText()}, since now-3600s` },
      },
      {
        name: 'does not count a PreferNoSchedule taint of ours as a fence',
        spec: { remediation: { cordon: false, taint: { effect: 'PreferNoSchedule' } } },
        nodes: [
          sick('n1', pod('a')).ours({ cordoned: false, taint: { ...OUR_TAINT, effect: 'PreferNoSchedule' } }),
          healthy('h1'),
        ],
        actions: [],
        blocked: ['Evict node/n1 NodeStillSchedulable'],
        stampsAfter: { n1: `not cordoned, taint ${taintText('PreferNoSchedule')}, since now-3600s` },
      },
      {
        name: 'evicts nothing with evictStuckPods false',
        spec: { remediation: { evictStuckPods: false } },
        nodes: [sick('n1', pod('a')).ours(), healthy('h1')],
        actions: [],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'evicts at most maxEvictionsPerMinute',
        spec: { safety: { maxEvictionsPerMinute: 2, maxUnhealthyNodes: 3 } },
        nodes: [
          sick('n1', pod('a')).ours(),
          sick('n2', pod('b')).ours(),
          sick('n3', pod('c')).ours(),
          healthy('h1'),
        ],
        actions: [evict('a', 'n1'), evict('b', 'n2')],
        blocked: ['Evict pod/default/c on n3 EvictionRate'],
        stampsAfter: { n1: STAMPED_LONG_AGO, n2: STAMPED_LONG_AGO, n3: STAMPED_LONG_AGO },
      },
      {
        // A third of the budget, while the window is fresh: a node saturated a moment later gets its first at once.
        name: "keeps a third of the minute's budget for nodes with no eviction yet",
        spec: { safety: { maxEvictionsPerMinute: 6 } },
        nodes: [sick('n1', ...['a', 'b', 'c', 'd', 'e', 'f'].map((p) => pod(p))).ours(), healthy('h1')],
        actions: [evict('a'), evict('b'), evict('c'), evict('d')],
        blocked: ['Evict pod/default/e on n1 EvictionRate', 'Evict pod/default/f on n1 EvictionRate'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'lets that reserve go as the window ages: half of it half a minute after its first eviction',
        spec: { safety: { maxEvictionsPerMinute: 6 } },
        nodes: [
          sick('n1', ...['a', 'b', 'c'].map((p) => pod(p)))
            .ours()
            .evictedSecondsAgo(30),
          healthy('h1'),
        ],
        recentEvictions: [30],
        actions: [evict('a'), evict('b'), evict('c')],
        blocked: [],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'gives the reserve to a node with no eviction yet, after another spent the rest',
        spec: { safety: { maxEvictionsPerMinute: 6, maxUnhealthyNodes: 3 } },
        nodes: [
          sick('n1', pod('a')).ours().evictedSecondsAgo(5),
          sick('n2', pod('b'), pod('c')).ours(),
          healthy('h1'),
        ],
        recentEvictions: [5, 5, 5, 5],
        actions: [evict('b', 'n2')],
        blocked: ['Evict pod/default/c on n2 EvictionRate', 'Evict pod/default/a on n1 EvictionRate'],
        stampsAfter: { n1: STAMPED_LONG_AGO, n2: STAMPED_LONG_AGO },
      },
      {
        name: 'counts evictions of the last 60 s against the budget',
        spec: { safety: { maxEvictionsPerMinute: 2 } },
        nodes: [sick('n1', pod('a'), pod('b')).ours(), healthy('h1')],
        recentEvictions: [59],
        actions: [evict('a')],
        blocked: ['Evict pod/default/b on n1 EvictionRate'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'does not count evictions 60 s old or older',
        spec: { safety: { maxEvictionsPerMinute: 2 } },
        nodes: [sick('n1', pod('a')).ours(), sick('n2', pod('b')).ours(), healthy('h1'), healthy('h2')],
        recentEvictions: [60, 61, 3600],
        actions: [evict('a', 'n1'), evict('b', 'n2')],
        stampsAfter: { n1: STAMPED_LONG_AGO, n2: STAMPED_LONG_AGO },
      },
      {
        name: 'blocks every eviction when the recent ones exceed the budget',
        spec: { safety: { maxEvictionsPerMinute: 2 } },
        nodes: [sick('n1', pod('a')).ours(), healthy('h1')],
        recentEvictions: [1, 2, 3, 4, 5],
        actions: [],
        blocked: ['Evict pod/default/a on n1 EvictionRate'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'evicts nothing with maxEvictionsPerMinute 0',
        spec: { safety: { maxEvictionsPerMinute: 0 } },
        nodes: [sick('n1', pod('a')).ours(), healthy('h1')],
        actions: [],
        blocked: ['Evict pod/default/a on n1 EvictionRate'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        // One node's pods cannot spend it all: each node its first eviction, then what is left above the reserve for
        // later nodes round the nodes.
        name: 'shares the budget across nodes: a share each, the most degraded first, the rest round them',
        spec: { safety: { maxEvictionsPerMinute: 6 } },
        nodes: [
          sick('n1', pod('a')).ours(),
          sick('n2', pod('b'), pod('c'), pod('d'), pod('e')).ours(),
          healthy('h1'),
          healthy('h2'),
        ],
        actions: [evict('b', 'n2'), evict('c', 'n2'), evict('a', 'n1'), evict('d', 'n2')],
        blocked: ['Evict pod/default/e on n2 EvictionRate'],
        stampsAfter: { n1: STAMPED_LONG_AGO, n2: STAMPED_LONG_AGO },
      },
      {
        name: 'never evicts bare, DaemonSet or mirror pods, and they spend no budget',
        spec: { safety: { maxEvictionsPerMinute: 1 } },
        nodes: [
          sick(
            'n1',
            barePod('bare'),
            pod('ds', 'DaemonSet'),
            mirrorPod('static'),
            pod('web', 'StatefulSet'),
          ).ours(),
          healthy('h1'),
        ],
        actions: [evict('web')],
        blocked: [
          'Evict pod/default/bare on n1 NoController',
          'Evict pod/default/ds on n1 DaemonSetPod',
          'Evict pod/default/static on n1 MirrorPod',
        ],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'reports a pod guard, not EvictionRate, once the budget is spent',
        spec: { safety: { maxEvictionsPerMinute: 1 } },
        nodes: [sick('n1', pod('web'), pod('web-2'), barePod('bare')).ours(), healthy('h1')],
        actions: [evict('web')],
        blocked: ['Evict pod/default/web-2 on n1 EvictionRate', 'Evict pod/default/bare on n1 NoController'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
    ]);

    it('names the pod it evicts by namespace, name and uid', () => {
      const decision = decide({ nodes: [sick('n1', pod('a')).ours().build(), healthy('h1').build()] });
      expect(decision.actions[0]).to.deep.include({
        kind: 'Evict',
        node: 'n1',
        target: 'pod/default/a',
        pod: { namespace: 'default', name: 'a', uid: 'uid-a' },
      });
    });

    it('spends the budget fairly: every node its first eviction while the budget covers them, counts within one', () => {
      fc.assert(
        fc.property(
          fc.array(fc.integer({ min: 1, max: 5 }), { minLength: 1, maxLength: 6 }),
          fc.integer({ min: 0, max: 15 }),
          (podsPerNode, budget) => {
            const nodes = podsPerNode.map((count, i) =>
              sick(`n${i}`, ...Array.from({ length: count }, (_, j) => pod(`n${i}-${j}`)))
                .ours()
                .build(),
            );
            const decision = decide({
              spec: {
                safety: { maxEvictionsPerMinute: budget, maxUnhealthyNodes: 100, minSchedulableNodes: 0 },
              },
              nodes: [...nodes, healthy('h1').build()],
            });
            const per = podsPerNode.map(
              (_, i) => decision.actions.filter((a) => a.kind === 'Evict' && a.node === `n${i}`).length,
            );
            const total = podsPerNode.reduce((a, b) => a + b, 0);
            // A first eviction for every node the budget covers; the rest above the reserve kept for later nodes.
            const nodeCount = podsPerNode.length;
            const firsts = Math.min(budget, nodeCount);
            const reserve = Math.floor(budget / 3);
            const evicted = firsts + Math.min(total - nodeCount, Math.max(0, budget - reserve - nodeCount));
            expect(
              per.reduce((a, b) => a + b, 0),
              'a first each the budget covers, then the budget above the reserve, or every pod',
            ).to.equal(evicted);
            if (budget >= podsPerNode.length)
              expect(
                per.every((n) => n >= 1),
                per.join(','),
              ).to.equal(true);
            // Within one of each other, but for a node that ran out of pods.
            const open = per.filter((n, i) => n < podsPerNode[i]!);
            if (open.length > 0) expect(Math.max(...per) - Math.min(...open), per.join(',')).to.be.at.most(1);
            const blocked = decision.blocked.filter((b) => b.guard === 'EvictionRate').length;
            expect(blocked, 'each pod not evicted held by the rate').to.equal(total - evicted);
          },
        ),
      );
    });
  });

  describe('migration of IO-heavy pods', () => {
    const heavy = [pod('m1'), pod('m2'), pod('m3')];
    runTable([
      {
        name: 'moves at most maxPodsPerNode IO-heavy pods off a fenced node under High IO',
        spec: { remediation: { migrateWorkloads: MIGRATE } },
        nodes: [
          sick('n1', pod('a'))
            .ours()
            .withIoHeavyPods(...heavy),
          healthy('h1'),
        ],
        actions: [evict('a'), migrate('m1'), migrate('m2')],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'counts pods already migrated in this remediation',
        spec: { remediation: { migrateWorkloads: MIGRATE } },
        nodes: [
          sick('n1', pod('a'))
            .ours()
            .withIoHeavyPods(...heavy)
            .migrated(1),
          healthy('h1'),
        ],
        actions: [evict('a'), migrate('m1')],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      ...[2, 5].map((migrated) => ({
        name: `moves nothing more once ${migrated} pods were migrated`,
        spec: { remediation: { migrateWorkloads: MIGRATE } },
        nodes: [
          sick('n1', pod('a'))
            .ours()
            .withIoHeavyPods(...heavy)
            .migrated(migrated),
          healthy('h1'),
        ],
        actions: [evict('a')],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      })),
      {
        name: 'moves nothing without High IO, even when the stuck pods alone trigger',
        spec: { remediation: { migrateWorkloads: MIGRATE, requireIoPressure: false } },
        nodes: [
          sick('n1', pod('a'))
            .io('Unknown')
            .ours()
            .withIoHeavyPods(...heavy),
          healthy('h1'),
        ],
        actions: [evict('a')],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        // Three a minute, one of them kept for a node with no eviction yet (a migration is an eviction).
        name: 'spends the shared eviction budget',
        spec: { remediation: { migrateWorkloads: MIGRATE }, safety: { maxEvictionsPerMinute: 3 } },
        nodes: [
          sick('n1', pod('a'))
            .ours()
            .withIoHeavyPods(...heavy),
          healthy('h1'),
        ],
        actions: [evict('a'), migrate('m1')],
        blocked: ['Migrate pod/default/m2 on n1 EvictionRate'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'applies the pod guards to IO-heavy pods',
        spec: { remediation: { migrateWorkloads: MIGRATE } },
        nodes: [sick('n1', pod('a')).ours().withIoHeavyPods(barePod('m1'), pod('m2')), healthy('h1')],
        actions: [evict('a'), migrate('m2')],
        blocked: ['Migrate pod/default/m1 on n1 NoController'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'keeps moving IO-heavy pods off a node we hold while IO stays High, after its stuck pods are gone',
        spec: { remediation: { migrateWorkloads: MIGRATE } },
        nodes: [
          aNodeFacts('n1')
            .ours()
            .ioHigh()
            .withIoHeavyPods(...heavy),
          healthy('h1'),
        ],
        actions: [migrate('m1'), migrate('m2')],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'holds those migrations while paused',
        spec: { remediation: { migrateWorkloads: MIGRATE }, safety: { paused: true } },
        nodes: [
          aNodeFacts('n1')
            .ours()
            .ioHigh()
            .withIoHeavyPods(...heavy),
          healthy('h1'),
        ],
        actions: [],
        blocked: ['Migrate node/n1 Paused'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'moves nothing in the pass that cordons',
        spec: { remediation: { migrateWorkloads: MIGRATE } },
        nodes: [sick('n1', pod('a')).withIoHeavyPods(...heavy), healthy('h1')],
        actions: [CORDON_N1],
        stampsAfter: { n1: 'cordoned, since now' },
      },
    ]);
  });

  describe('migration of measured culprits (by measuredIo), and the remedy by cause', () => {
    const MEASURED = { by: 'measuredIo' as const, minSharePercent: 25, maxPodsPerNode: 2 };
    const culprit = (name: string, share: number, extra: Partial<CandidatePod> = {}): CandidatePod => ({
      ...pod(name),
      sharePercent: share,
      ...extra,
    });
    const measured = (name: string, node = 'n1') =>
      `Migrate pod/default/${name} on ${node} MeasuredIoCulprit`;
    runTable([
      {
        name: 'moves the measured culprit off a fenced node after its stuck pods, biggest share first',
        spec: { remediation: { migrateWorkloads: MEASURED } },
        nodes: [
          sick('n1', pod('a'))
            .ours()
            .cause('Pod')
            .withIoHeavyPods(culprit('db-0', 64), culprit('cache-0', 30)),
          healthy('h1'),
        ],
        actions: [evict('a'), measured('db-0'), measured('cache-0')],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'moves no pod when the runtime does the IO, whatever migrateWorkloads selects',
        spec: { remediation: { migrateWorkloads: MIGRATE } },
        nodes: [sick('n1', pod('a')).ours().cause('Runtime').withIoHeavyPods(pod('m1')), healthy('h1')],
        actions: [evict('a')],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'keeps moving culprits off a node still saturated after its stuck pods are gone, not when the runtime is the cause',
        spec: { remediation: { migrateWorkloads: MEASURED } },
        nodes: [
          aNodeFacts('n1').ioHigh().ours().cause('Pod').withIoHeavyPods(culprit('db-0', 70)),
          aNodeFacts('n2').ioHigh().ours().cause('Runtime').withIoHeavyPods(culprit('web-0', 70)),
          healthy('h1'),
          healthy('h2'),
        ],
        actions: [measured('db-0')],
        stampsAfter: { n1: STAMPED_LONG_AGO, n2: STAMPED_LONG_AGO },
      },
      {
        name: 'never moves a culprit labelled no-migrate, of kube-system, a DaemonSet, static or bare pod',
        spec: { remediation: { migrateWorkloads: { ...MEASURED, maxPodsPerNode: 10 } } },
        nodes: [
          aNodeFacts('n1')
            .ioHigh()
            .ours()
            .cause('Pod')
            .withIoHeavyPods(
              culprit('pinned', 60, { noMigrate: true }),
              { ...culprit('dns', 30), namespace: 'kube-system' },
              culprit('logs', 40, { controllerKind: 'DaemonSet' }),
              { ...mirrorPod('etcd'), sharePercent: 30 },
              { ...barePod('bare'), sharePercent: 30 },
            ),
          healthy('h1'),
        ],
        actions: [],
        blocked: [
          'Migrate pod/default/pinned on n1 NoMigrateLabel',
          'Migrate pod/kube-system/dns on n1 ProtectedNamespace',
          'Migrate pod/default/logs on n1 DaemonSetPod',
          'Migrate pod/default/etcd on n1 MirrorPod',
          'Migrate pod/default/bare on n1 NoController',
        ],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'never moves a culprit whose data would be lost, that could not start elsewhere, or system-critical; a stuck pod whatever its volumes',
        spec: { remediation: { migrateWorkloads: { ...MEASURED, maxPodsPerNode: 10 } } },
        nodes: [
          sick('n1', { ...pod('stuck'), data: { localVolumes: ['scratch'], claims: [] } })
            .ours()
            .cause('Pod')
            .withIoHeavyPods(
              culprit('cache', 60, { data: { localVolumes: ['scratch'], claims: [] } }),
              culprit('db', 50, { data: { localVolumes: [], claims: ['data'], nodeBoundClaims: ['data'] } }),
              culprit('dns', 40, {
                data: { localVolumes: [], claims: [], priorityClassName: 'system-cluster-critical' },
              }),
              culprit('agent', 35, { data: { localVolumes: [], claims: [], priority: 2_000_001_000 } }),
              culprit('unread', 30, { data: { localVolumes: [], claims: ['logs'] } }),
              culprit('web', 26, { data: { localVolumes: [], claims: ['shared'], nodeBoundClaims: [] } }),
            ),
          healthy('h1'),
        ],
        actions: [evict('stuck'), measured('web')],
        blocked: [
          'Migrate pod/default/cache on n1 LocalStorage',
          'Migrate pod/default/db on n1 NodeBoundVolume',
          'Migrate pod/default/dns on n1 SystemCritical',
          'Migrate pod/default/agent on n1 SystemCritical',
          'Migrate pod/default/unread on n1 PodDataUnknown',
        ],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'moves local storage and system-critical pods when the policy allows it, never one bound to the node',
        spec: {
          remediation: {
            migrateWorkloads: {
              ...MEASURED,
              maxPodsPerNode: 10,
              evictLocalStoragePods: true,
              evictSystemCriticalPods: true,
            },
          },
        },
        nodes: [
          aNodeFacts('n1')
            .ioHigh()
            .ours()
            .cause('Pod')
            .withIoHeavyPods(
              culprit('cache', 60, { data: { localVolumes: ['scratch'], claims: [] } }),
              culprit('db', 50, { data: { localVolumes: [], claims: ['data'], nodeBoundClaims: ['data'] } }),
              culprit('dns', 40, {
                data: { localVolumes: [], claims: [], priorityClassName: 'system-node-critical' },
              }),
            ),
          healthy('h1'),
        ],
        actions: [measured('cache'), measured('dns')],
        blocked: ['Migrate pod/default/db on n1 NodeBoundVolume'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
    ]);

    it("never moves a pod of the operator's own namespace", () => {
      const decision = decideRemediation({
        policy: 'p',
        spec: specWith({ remediation: { migrateWorkloads: MEASURED } }),
        nodes: [
          aNodeFacts('n1')
            .ioHigh()
            .ours()
            .cause('Pod')
            .withIoHeavyPods({ ...culprit('me', 90), namespace: 'sandbox-remediator-system' })
            .build(),
          healthy('h1').build(),
        ],
        now: NOW,
        recentEvictions: [],
        cacheReady: true,
        operatorNamespace: 'sandbox-remediator-system',
      });
      expect(decision.actions).to.deep.equal([]);
      expect(decision.blocked.map(describeBlocked)).to.deep.equal([
        'Migrate pod/sandbox-remediator-system/me on n1 ProtectedNamespace',
      ]);
    });
  });

  describe('guards on new changes', () => {
    runTable([
      {
        name: 'CacheNotSynced: does nothing on a cache that is not synced',
        cacheReady: false,
        nodes: [sick('n1'), healthy('h1')],
        actions: [],
        blocked: ['Cordon node/n1 CacheNotSynced'],
      },
      {
        name: 'CacheNotSynced: evicts nothing either, and comes before Paused',
        cacheReady: false,
        spec: { safety: { paused: true } },
        nodes: [sick('n1').ours(), healthy('h1')],
        actions: [],
        // Already cordoned: what is held is the evictions that follow the cordon.
        blocked: ['Evict node/n1 CacheNotSynced'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'Paused: does nothing while paused',
        spec: { safety: { paused: true } },
        nodes: [sick('n1'), sick('n2').ours(), healthy('h1')],
        actions: [],
        blocked: ['Cordon node/n1 Paused', 'Evict node/n2 Paused'],
        stampsAfter: { n2: STAMPED_LONG_AGO },
      },
      {
        name: 'ControlPlaneNode: never acts on a control-plane node',
        nodes: [sick('n1').controlPlane(), healthy('h1')],
        actions: [],
        blocked: ['Cordon node/n1 ControlPlaneNode'],
      },
      {
        name: 'NodeNotReady: leaves a node that is not Ready alone',
        nodes: [sick('n1').notReady(), healthy('h1')],
        actions: [],
        blocked: ['Cordon node/n1 NodeNotReady'],
      },
      {
        name: 'the first blocked kind is Taint when only tainting is allowed',
        spec: { remediation: { cordon: false, taint: {} }, safety: { paused: true } },
        nodes: [sick('n1'), healthy('h1')],
        actions: [],
        blocked: ['Taint node/n1 Paused'],
      },
      {
        name: 'Cooldown: does not cordon again within cooldownSeconds of an undo',
        nodes: [sick('n1').lastUndoAt(ago(299)), healthy('h1')],
        actions: [],
        blocked: ['Cordon node/n1 Cooldown'],
      },
      {
        name: 'Cooldown: cordons again once cooldownSeconds have passed since the undo',
        nodes: [sick('n1').lastUndoAt(ago(300)), healthy('h1')],
        actions: [CORDON_N1],
        stampsAfter: { n1: 'cordoned, since now' },
      },
      {
        name: 'StormLimit: starts nothing when more nodes are unhealthy than maxUnhealthyNodes',
        spec: { safety: { maxUnhealthyNodes: 1 } },
        nodes: [sick('n1'), sick('n2'), healthy('h1'), healthy('h2'), healthy('h3')],
        actions: [],
        blocked: ['Cordon node/n1 StormLimit', 'Cordon node/n2 StormLimit'],
        storm: { detected: true, unhealthy: 2, limit: 1 },
      },
      {
        name: 'StormLimit: acts when exactly maxUnhealthyNodes nodes are unhealthy',
        spec: { safety: { maxUnhealthyNodes: 2 } },
        nodes: [sick('n1'), sick('n2'), healthy('h1'), healthy('h2')],
        actions: [CORDON_N1, 'Cordon node/n2 SandboxCreationStuckOnIo'],
        stampsAfter: { n1: 'cordoned, since now', n2: 'cordoned, since now' },
        storm: { detected: false, unhealthy: 2, limit: 2 },
      },
      {
        name: 'StormLimit: counts the nodes we still hold, though they no longer trigger',
        spec: { safety: { maxUnhealthyNodes: 1 } },
        nodes: [sick('n1'), healthy('n2').ours().io('Recovering'), healthy('h1'), healthy('h2')],
        actions: [],
        blocked: ['Cordon node/n1 StormLimit'],
        stampsAfter: { n2: STAMPED_LONG_AGO },
        storm: { detected: true, unhealthy: 2, limit: 1 },
      },
      {
        name: 'StormLimit: holds the evictions on a node already cordoned',
        spec: { safety: { maxUnhealthyNodes: 1 } },
        nodes: [sick('n1', pod('a')).ours(), sick('n2'), healthy('h1'), healthy('h2')],
        actions: [],
        blocked: ['Evict node/n1 StormLimit', 'Cordon node/n2 StormLimit'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'StormLimit: still undoes a recovered node',
        spec: { safety: { maxUnhealthyNodes: 1 } },
        nodes: [sick('n1'), healthy('n2').ours().recovered(), healthy('h1'), healthy('h2')],
        actions: ['Uncordon node/n2 Recovered'],
        blocked: ['Cordon node/n1 StormLimit'],
        storm: { detected: true, unhealthy: 2, limit: 1 },
      },
      {
        name: 'StormLimit: a percentage rounds down (50% of 5 nodes is 2; 3 unhealthy)',
        spec: { safety: { maxUnhealthyNodes: '50%', minSchedulableNodes: 0 } },
        nodes: [sick('n1'), sick('n2'), sick('n3'), healthy('h1'), healthy('h2')],
        actions: [],
        blocked: ['Cordon node/n1 StormLimit', 'Cordon node/n2 StormLimit', 'Cordon node/n3 StormLimit'],
        storm: { detected: true, unhealthy: 3, limit: 2 },
      },
      {
        name: 'StormLimit: a percentage rounds down (50% of 5 nodes is 2; 2 unhealthy)',
        spec: { safety: { maxUnhealthyNodes: '50%', minSchedulableNodes: 0 } },
        nodes: [sick('n1'), sick('n2'), healthy('h1'), healthy('h2'), healthy('h3')],
        actions: [CORDON_N1, 'Cordon node/n2 SandboxCreationStuckOnIo'],
        stampsAfter: { n1: 'cordoned, since now', n2: 'cordoned, since now' },
        storm: { detected: false, unhealthy: 2, limit: 2 },
      },
      {
        name: 'StormLimit: the default 20% of 4 nodes allows one, so the one unhealthy node is fenced',
        spec: { safety: { maxUnhealthyNodes: '20%' } },
        nodes: [sick('n1'), healthy('h1'), healthy('h2'), healthy('h3')],
        actions: [CORDON_N1],
        stampsAfter: { n1: 'cordoned, since now' },
        storm: { detected: false, unhealthy: 1, limit: 1 },
      },
      {
        name: 'StormLimit: the default 20% of 4 nodes allows one, not two',
        spec: { safety: { maxUnhealthyNodes: '20%' } },
        nodes: [sick('n1'), sick('n2'), healthy('h1'), healthy('h2')],
        actions: [],
        blocked: ['Cordon node/n1 StormLimit', 'Cordon node/n2 StormLimit'],
        storm: { detected: true, unhealthy: 2, limit: 1 },
      },
      {
        name: 'StormLimit: 0% allows none, however small the cluster',
        spec: { safety: { maxUnhealthyNodes: '0%' } },
        nodes: [sick('n1'), healthy('h1'), healthy('h2'), healthy('h3')],
        actions: [],
        blocked: ['Cordon node/n1 StormLimit'],
        storm: { detected: true, unhealthy: 1, limit: 0 },
      },
      {
        name: 'MinSchedulableNodes: counts nodes cordoned by others',
        spec: { safety: { minSchedulableNodes: 2 } },
        nodes: [sick('n1'), healthy('h1').cordoned(), healthy('h2')],
        actions: [],
        blocked: ['Cordon node/n1 MinSchedulableNodes'],
      },
      {
        name: 'MinSchedulableNodes: cordons when enough nodes stay schedulable',
        spec: { safety: { minSchedulableNodes: 2 } },
        nodes: [sick('n1'), healthy('h1'), healthy('h2')],
        actions: [CORDON_N1],
        stampsAfter: { n1: 'cordoned, since now' },
      },
      {
        name: 'MinSchedulableNodes: a node that is not Ready is not schedulable',
        spec: { safety: { minSchedulableNodes: 2 } },
        nodes: [sick('n1'), healthy('h1').notReady(), healthy('h2')],
        actions: [],
        blocked: ['Cordon node/n1 MinSchedulableNodes'],
      },
      {
        name: 'MinSchedulableNodes: counts the cordons of the same pass, the most degraded nodes first',
        spec: { safety: { minSchedulableNodes: 2, maxUnhealthyNodes: 3 } },
        nodes: [
          sick('n1', pod('a')),
          sick('n2', pod('b'), pod('c'), pod('d')),
          sick('n3', pod('e'), pod('f')),
          healthy('h1'),
        ],
        actions: ['Cordon node/n2 SandboxCreationStuckOnIo', 'Cordon node/n3 SandboxCreationStuckOnIo'],
        blocked: ['Cordon node/n1 MinSchedulableNodes'],
        stampsAfter: { n2: 'cordoned, since now', n3: 'cordoned, since now' },
      },
    ]);
  });

  describe('undo after recovery', () => {
    const DRAIN: Taint = { key: 'medik8s.io/drain', effect: 'NoSchedule' };
    const DEDICATED: Taint = { key: 'dedicated', value: 'db', effect: 'NoSchedule' };
    const UPGRADE: Taint = { key: 'upgrade', effect: 'NoExecute' };
    const recoveredOurs = (stamps: Partial<NodeStamps> = {}) => aNodeFacts('n1').ours(stamps).recovered();
    runTable([
      {
        name: 'untaints, then uncordons, what the stamps say, and drops the stamps',
        nodes: [recoveredOurs({ taint: OUR_TAINT }), healthy('h1')],
        actions: [`Untaint node/n1 ${taintText()} Recovered`, 'Uncordon node/n1 Recovered'],
      },
      {
        name: 'only uncordons when the stamps say only cordoned',
        nodes: [recoveredOurs(), healthy('h1')],
        actions: ['Uncordon node/n1 Recovered'],
      },
      {
        name: 'never uncordons a node someone else cordoned, though it carries our taint stamp',
        nodes: [recoveredOurs({ cordoned: false, taint: OUR_TAINT }).cordoned(), healthy('h1')],
        actions: [`Untaint node/n1 ${taintText()} Recovered`],
      },
      {
        name: 'Cooldown: holds the undo within cooldownSeconds of the remediation',
        nodes: [recoveredOurs({ since: ago(299) }), healthy('h1')],
        actions: [],
        blocked: ['Uncordon node/n1 Cooldown'],
        stampsAfter: { n1: 'cordoned, since now-299s' },
      },
      {
        name: 'Cooldown: holds a taint-only undo as Untaint',
        nodes: [recoveredOurs({ since: ago(10), cordoned: false, taint: OUR_TAINT }), healthy('h1')],
        actions: [],
        blocked: ['Untaint node/n1 Cooldown'],
        stampsAfter: { n1: `not cordoned, taint ${taintText()}, since now-10s` },
      },
      {
        name: 'Cooldown: undoes once cooldownSeconds have passed since the remediation',
        nodes: [recoveredOurs({ since: ago(300) }), healthy('h1')],
        actions: ['Uncordon node/n1 Recovered'],
      },
      {
        name: 'OtherFence: waits while a NodeMaintenance drains the node',
        nodes: [recoveredOurs({ taintsBefore: [] }).tainted(DRAIN), healthy('h1')],
        actions: [],
        blocked: ['Uncordon node/n1 OtherFence'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'OtherFence: waits while a taint another manager added after our fence stands',
        nodes: [
          recoveredOurs({ taintsBefore: ['dedicated'] })
            .tainted(DEDICATED)
            .tainted(UPGRADE),
          healthy('h1'),
        ],
        actions: [],
        blocked: ['Uncordon node/n1 OtherFence'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: "OtherFence: undoes over a taint that was there before our fence, a PreferNoSchedule, and the lifecycle's",
        nodes: [
          recoveredOurs({ taintsBefore: ['dedicated'] })
            .tainted(DEDICATED)
            .tainted({ key: 'upgrade', effect: 'PreferNoSchedule' })
            .tainted({ key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule' }),
          healthy('h1'),
        ],
        actions: ['Uncordon node/n1 Recovered'],
      },
      {
        name: 'OtherFence: stamps written before the taints were kept wait only for a NodeMaintenance',
        nodes: [
          recoveredOurs().tainted(UPGRADE),
          aNodeFacts('n2').ours().recovered().tainted(DRAIN),
          healthy('h1'),
        ],
        actions: ['Uncordon node/n1 Recovered'],
        blocked: ['Uncordon node/n2 OtherFence'],
        stampsAfter: { n2: STAMPED_LONG_AGO },
      },
      ...(['High', 'Rising', 'Recovering', 'Unknown'] as const).map((io) => ({
        name: `holds while IO is ${io}`,
        nodes: [recoveredOurs().io(io), healthy('h1')],
        actions: [],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      })),
      {
        name: 'holds while pods are still stuck from IO',
        nodes: [recoveredOurs().withStuckPods(pod('a')), healthy('h1')],
        actions: [],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'holds while the node is still degraded',
        nodes: [aNodeFacts('n1').ours().degradedByIo().io('Low'), healthy('h1')],
        actions: [],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'undoes nothing with undoOnRecovery false',
        spec: { remediation: { undoOnRecovery: false } },
        nodes: [recoveredOurs(), healthy('h1')],
        actions: [],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'Paused: undoes nothing while paused',
        spec: { safety: { paused: true } },
        nodes: [recoveredOurs(), healthy('h1')],
        actions: [],
        blocked: ['Uncordon node/n1 Paused'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'CacheNotSynced: undoes nothing on a cache that is not synced',
        cacheReady: false,
        nodes: [recoveredOurs(), healthy('h1')],
        actions: [],
        blocked: ['Uncordon node/n1 CacheNotSynced'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'ControlPlaneNode: undoes nothing on a control-plane node',
        nodes: [recoveredOurs().controlPlane(), healthy('h1')],
        actions: [],
        blocked: ['Uncordon node/n1 ControlPlaneNode'],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'undoes on a node that is not Ready: undo only gives back',
        nodes: [recoveredOurs().notReady(), healthy('h1')],
        actions: ['Uncordon node/n1 Recovered'],
      },
      {
        name: 'without requireIoPressure: undoes after recoverySeconds quiet, IO unknown',
        spec: { remediation: { requireIoPressure: false } },
        nodes: [recoveredOurs().io('Unknown').quietSince(ago(120)), healthy('h1')],
        actions: ['Uncordon node/n1 Recovered'],
      },
      {
        name: 'without requireIoPressure: holds before recoverySeconds quiet',
        spec: { remediation: { requireIoPressure: false } },
        nodes: [recoveredOurs().io('Unknown').quietSince(ago(119)), healthy('h1')],
        actions: [],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      ...(['High', 'Rising'] as const).map((io) => ({
        name: `without requireIoPressure: holds while IO is known to be ${io}`,
        spec: { remediation: { requireIoPressure: false } },
        nodes: [recoveredOurs().io(io), healthy('h1')],
        actions: [],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      })),
    ]);
  });

  describe('stamps someone else contradicted', () => {
    runTable([
      {
        name: 'drops the cordon stamp when someone made the node schedulable again, without cordoning anew',
        nodes: [sick('n1').stampedOnly(), healthy('h1')],
        actions: ['Uncordon node/n1 UncordonedByOthers'],
      },
      {
        name: 'keeps the taint stamp when only the cordon was reverted',
        nodes: [healthy('n1').stampedOnly({ taint: OUR_TAINT }).tainted(OUR_TAINT), healthy('h1')],
        actions: ['Uncordon node/n1 UncordonedByOthers'],
        stampsAfter: { n1: `not cordoned, taint ${taintText()}, since now-3600s` },
      },
      {
        name: 'drops the taint stamp when someone removed our taint',
        nodes: [healthy('n1').stampedOnly({ taint: OUR_TAINT }).cordoned(), healthy('h1')],
        actions: [`Untaint node/n1 ${taintText()} UntaintedByOthers`],
        stampsAfter: { n1: STAMPED_LONG_AGO },
      },
      {
        name: 'drops both stamps when both were reverted',
        nodes: [healthy('n1').stampedOnly({ taint: OUR_TAINT }), healthy('h1')],
        actions: ['Uncordon node/n1 UncordonedByOthers', `Untaint node/n1 ${taintText()} UntaintedByOthers`],
      },
      {
        name: 'drops stamps even while paused',
        spec: { safety: { paused: true } },
        nodes: [healthy('n1').stampedOnly(), healthy('h1')],
        actions: ['Uncordon node/n1 UncordonedByOthers'],
      },
      {
        name: 'drops stamps even on a cache that is not synced',
        cacheReady: false,
        nodes: [healthy('n1').stampedOnly({ cordoned: false, taint: OUR_TAINT }), healthy('h1')],
        actions: [`Untaint node/n1 ${taintText()} UntaintedByOthers`],
      },
    ]);
  });

  describe('what counts as a fence: the effect on the node, and taints as well as cordons', () => {
    // A taint of our key fences only with an effect that keeps pods off: the effect on the node counts, not the spec's.
    it('does not treat a same-key PreferNoSchedule taint someone else set as a fence', () => {
      const decision = decide({
        spec: { remediation: { cordon: false, taint: { effect: 'NoSchedule' } } },
        nodes: [
          sick('n1', pod('a'))
            .tainted({ ...OUR_TAINT, effect: 'PreferNoSchedule' })
            .build(),
          healthy('h1').build(),
        ],
      });
      expect(decision.actions.map(describeAction)).not.to.include(evict('a'));
    });

    // A NoSchedule taint fences a node just as a cordon does: minSchedulableNodes counts both.
    it('does not fence with NoSchedule taints below minSchedulableNodes', () => {
      const decision = decide({
        spec: { remediation: { cordon: false, taint: {} }, safety: { minSchedulableNodes: 1 } },
        nodes: [sick('n1').build(), sick('n2').build()],
      });
      expect(decision.actions.map(describeAction)).to.have.lengthOf(1);
      expect(decision.blocked.map(describeBlocked)).to.deep.equal(['Taint node/n2 MinSchedulableNodes']);
    });
  });
});

describe('decideRemediation properties', () => {
  const TAINTS: Taint[] = [
    OUR_TAINT,
    { ...OUR_TAINT, effect: 'PreferNoSchedule' },
    { key: 'example.com/maintenance', effect: 'NoSchedule' },
  ];
  const podArb = fc.record({
    controllerKind: fc.option(fc.constantFrom('ReplicaSet', 'StatefulSet', 'DaemonSet', 'Job'), {
      nil: undefined,
    }),
    mirror: fc.boolean(),
  });
  const nodeArb = fc.record({
    ready: fc.constantFrom(true, true, true, false),
    controlPlane: fc.constantFrom(false, false, false, false, true),
    unschedulable: fc.boolean(),
    taints: fc.subarray(TAINTS),
    stamps: fc.option(
      fc.record({
        sinceAgo: fc.integer({ min: 0, max: 900 }),
        cordoned: fc.boolean(),
        taint: fc.option(fc.constantFrom(...TAINTS.slice(0, 2)), { nil: undefined }),
      }),
      { nil: undefined },
    ),
    degradedByIo: fc.boolean(),
    io: fc.constantFrom<IoState>('High', 'Rising', 'Recovering', 'Low', 'Unknown'),
    stuck: fc.array(podArb, { maxLength: 4 }),
    heavy: fc.array(podArb, { maxLength: 3 }),
    migrated: fc.integer({ min: 0, max: 3 }),
    quietAgo: fc.option(fc.integer({ min: 0, max: 900 }), { nil: undefined }),
    lastUndoAgo: fc.option(fc.integer({ min: 0, max: 900 }), { nil: undefined }),
    // Within the window or not: a node with an eviction in it spends only down to the reserve.
    lastEvictionAgo: fc.option(fc.integer({ min: 0, max: 120 }), { nil: undefined }),
  });
  type NodeShape = typeof nodeArb extends fc.Arbitrary<infer T> ? T : never;

  const candidate = (name: string, shape: { controllerKind: string | undefined; mirror: boolean }) => {
    const c: CandidatePod = { namespace: 'default', name, uid: `uid-${name}` };
    if (shape.controllerKind) c.controllerKind = shape.controllerKind;
    if (shape.mirror) c.mirror = true;
    return c;
  };
  const toFacts = (name: string, n: NodeShape): NodeFacts => {
    const facts: NodeFacts = {
      name,
      ready: n.ready,
      controlPlane: n.controlPlane,
      unschedulable: n.unschedulable,
      taints: n.taints,
      degradedByIo: n.degradedByIo,
      io: n.io,
      ioCause: 'Unknown',
      ioStuckPods: n.stuck.map((p, i) => candidate(`${name}-stuck-${i}`, p)),
      ioHeavyPods: n.heavy.map((p, i) => ({ ...candidate(`${name}-heavy-${i}`, p), data: NO_DATA })),
      migrated: n.migrated,
    };
    if (n.stamps) {
      facts.stamps = {
        policy: 'p',
        since: ago(n.stamps.sinceAgo),
        reason: 'stuck',
        cordoned: n.stamps.cordoned,
      };
      if (n.stamps.taint) facts.stamps.taint = n.stamps.taint;
    }
    if (n.quietAgo !== undefined) facts.quietSince = ago(n.quietAgo);
    if (n.lastUndoAgo !== undefined) facts.lastUndoAt = ago(n.lastUndoAgo);
    if (n.lastEvictionAgo !== undefined) facts.lastEvictionAt = ago(n.lastEvictionAgo);
    return facts;
  };

  const specArb = fc
    .record({
      maxUnhealthyNodes: fc.oneof(
        fc.integer({ min: 0, max: 12 }),
        fc.integer({ min: 0, max: 100 }).map((p) => `${p}%`),
      ),
      minSchedulableNodes: fc.integer({ min: 0, max: 12 }),
      maxEvictionsPerMinute: fc.integer({ min: 0, max: 15 }),
      paused: fc.constantFrom(false, false, false, true),
      cooldownSeconds: fc.integer({ min: 0, max: 600 }),
      cordon: fc.boolean(),
      taint: fc.option(fc.constantFrom('NoSchedule', 'PreferNoSchedule'), { nil: undefined }),
      evictStuckPods: fc.boolean(),
      requireIoPressure: fc.boolean(),
      undoOnRecovery: fc.boolean(),
      migrate: fc.boolean(),
    })
    .map((s) =>
      SandboxPolicySpecSchema.parse({
        remediation: {
          cordon: s.cordon,
          ...(s.taint ? { taint: { effect: s.taint } } : {}),
          evictStuckPods: s.evictStuckPods,
          requireIoPressure: s.requireIoPressure,
          undoOnRecovery: s.undoOnRecovery,
          ...(s.migrate ? { migrateWorkloads: MIGRATE } : {}),
        },
        safety: {
          maxUnhealthyNodes: s.maxUnhealthyNodes,
          minSchedulableNodes: s.minSchedulableNodes,
          maxEvictionsPerMinute: s.maxEvictionsPerMinute,
          paused: s.paused,
          cooldownSeconds: s.cooldownSeconds,
        },
      }),
    );

  const inputArb = fc.record({
    spec: specArb,
    nodes: fc
      .array(nodeArb, { maxLength: 12 })
      .map((shapes) => shapes.map((shape, i) => toFacts(`n${i}`, shape))),
    recentEvictions: fc.array(fc.integer({ min: -5, max: 180 }).map(ago), { maxLength: 20 }),
    cacheReady: fc.constantFrom(true, true, true, false),
  });
  type Input = typeof inputArb extends fc.Arbitrary<infer T> ? T : never;

  const run = (input: Input) => decideRemediation({ ...input, policy: 'p', now: NOW });
  const check = (predicate: (input: Input, decision: RemediationDecision) => void) => {
    fc.assert(
      fc.property(inputArb, (input) => {
        predicate(input, run(input));
      }),
      { numRuns: 1000 },
    );
  };
  const isTriggeredHere = (n: NodeFacts, spec: SandboxPolicySpec) =>
    n.degradedByIo && (!spec.remediation.requireIoPressure || n.io === 'High');

  it('generates inputs that exercise every kind of action (the properties below are not vacuous)', () => {
    const kinds = new Set<string>();
    for (const input of fc.sample(inputArb, { numRuns: 2000, seed: 42 }))
      for (const a of run(input).actions) kinds.add(`${a.kind} ${a.reason}`);
    expect([...kinds].sort()).to.include.members([
      'Cordon SandboxCreationStuckOnIo',
      'Evict SandboxCreationStuckOnIo',
      'Migrate IoHeavyWorkload',
      'Taint SandboxCreationStuckOnIo',
      'Uncordon Recovered',
      'Uncordon UncordonedByOthers',
      'Untaint Recovered',
      'Untaint UntaintedByOthers',
    ]);
  });

  it('(a) cordons anew only within maxUnhealthyNodes and minSchedulableNodes', () => {
    check(({ spec, nodes }, decision) => {
      const byName = new Map(nodes.map((n) => [n.name, n]));
      const limit = resolveIntOrPercent(spec.safety.maxUnhealthyNodes, nodes.length);
      const unhealthy = nodes.filter((n) => n.stamps !== undefined || isTriggeredHere(n, spec)).length;
      // Schedulable: Ready, not cordoned, and not fenced by a NoSchedule/NoExecute taint with the policy's key.
      const key = spec.remediation.taint?.key;
      const taintFences = (n: NodeFacts, k: string | undefined) =>
        k !== undefined && n.taints.some((t) => t.key === k && t.effect !== 'PreferNoSchedule');
      // ... or by the taint our stamps record, whatever the spec says now.
      const fenced = (n: NodeFacts) =>
        n.unschedulable || taintFences(n, key) || taintFences(n, n.stamps?.taint?.key);
      const schedulableBefore = nodes.filter((n) => n.ready && !fenced(n)).length;
      const cordoned = decision.actions.filter((a) => a.kind === 'Cordon').map((a) => a.node);
      const fencing = decision.actions.filter((a) => a.kind === 'Cordon' || a.kind === 'Taint');
      if (fencing.length > 0) expect(unhealthy, 'unhealthy nodes when fencing anew').to.be.at.most(limit);
      const newlyFenced = new Set(
        fencing
          .filter((a) => a.kind !== 'Taint' || a.taint.effect !== 'PreferNoSchedule')
          .map((a) => a.node)
          .filter((n) => !fenced(byName.get(n)!) && byName.get(n)!.ready),
      );
      if (newlyFenced.size > 0)
        expect(schedulableBefore - newlyFenced.size, 'schedulable nodes left').to.be.at.least(
          spec.safety.minSchedulableNodes,
        );
      for (const node of cordoned) {
        const facts = byName.get(node)!;
        expect(
          isTriggeredHere(facts, spec) && facts.ready && !facts.controlPlane && !facts.unschedulable,
        ).to.equal(true);
      }
      const stampedCordoned = [...decision.stampsAfter].filter(([, s]) => s?.cordoned).map(([n]) => n);
      const newlyStamped = stampedCordoned.filter((n) => byName.get(n)!.stamps?.cordoned !== true);
      expect(newlyStamped, 'new cordon stamps match the Cordon actions').to.have.members(cordoned);
      if (stampedCordoned.length > limit) expect(newlyStamped, 'cordons over the limit are old').to.be.empty;
    });
  });

  it('(b) undoes only what our stamps record', () => {
    check(({ nodes }, decision) => {
      const byName = new Map(nodes.map((n) => [n.name, n]));
      for (const action of decision.actions) {
        const stamps = byName.get(action.node)!.stamps;
        if (action.kind === 'Uncordon')
          expect(stamps?.cordoned, `${action.target} stamped cordoned`).to.equal(true);
        if (action.kind === 'Untaint')
          expect(stamps?.taint, `${action.target} stamped taint`).to.deep.equal(action.taint);
      }
    });
  });

  it('(c) evicts and migrates at most maxEvictionsPerMinute minus the evictions of the last 60 s', () => {
    check(({ spec, recentEvictions }, decision) => {
      const recent = recentEvictions.filter((t) => t.getTime() > NOW.getTime() - 60_000).length;
      const evictions = decision.actions.filter((a) => a.kind === 'Evict' || a.kind === 'Migrate').length;
      expect(evictions).to.be.at.most(Math.max(0, spec.safety.maxEvictionsPerMinute - recent));
    });
  });

  it('(c) over the passes of one window, evicts at most maxEvictionsPerMinute, and first evictions before repeats', function () {
    this.timeout(30_000);
    // Nodes cordoned one after another, each with pods to move, passes a second apart: what each pass evicts is
    // logged as the status does, and each node's last eviction is remembered as the operator does.
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 30 }),
        fc.array(fc.record({ pods: fc.integer({ min: 1, max: 8 }), at: fc.integer({ min: 0, max: 40 }) }), {
          minLength: 1,
          maxLength: 8,
        }),
        (limit, arrivals) => {
          const start = NOW.getTime();
          const log: Date[] = [];
          const evictedOn = new Map<string, Date>();
          const left = arrivals.map((a) => a.pods);
          for (let second = 0; second < 60; second++) {
            const now = new Date(start + second * 1000);
            const nodes = arrivals.flatMap((a, i) => {
              if (a.at > second || left[i] === 0) return [];
              const facts = toFacts(`n${i}`, {
                ready: true,
                controlPlane: false,
                unschedulable: true,
                taints: [],
                stamps: { sinceAgo: 0, cordoned: true, taint: undefined },
                degradedByIo: true,
                io: 'High',
                stuck: Array.from({ length: left[i]! }, () => ({
                  controllerKind: 'ReplicaSet',
                  mirror: false,
                })),
                heavy: [],
                migrated: 0,
                quietAgo: undefined,
                lastUndoAgo: undefined,
                lastEvictionAgo: undefined,
              });
              facts.stamps!.since = new Date(start + a.at * 1000);
              // Pods already moved are gone: the rest keep their names.
              facts.ioStuckPods = facts.ioStuckPods.map((p, j) => ({ ...p, uid: `${p.uid}-${second}-${j}` }));
              const last = evictedOn.get(facts.name);
              if (last) facts.lastEvictionAt = last;
              return [facts];
            });
            const decision = decideRemediation({
              policy: 'p',
              spec: SandboxPolicySpecSchema.parse({
                safety: { maxEvictionsPerMinute: limit, maxUnhealthyNodes: 100, minSchedulableNodes: 0 },
              }),
              nodes,
              now,
              recentEvictions: log,
              cacheReady: true,
            });
            const evicted = new Set(decision.actions.filter((a) => a.kind === 'Evict').map((a) => a.node));
            // A node evicted before got more in this pass only once every node with none yet got its first.
            const repeats = [...evicted].filter((node) => evictedOn.has(node));
            const waiting = nodes.filter((n) => !evictedOn.has(n.name) && !evicted.has(n.name));
            if (repeats.length > 0)
              expect(
                waiting.map((n) => n.name),
                `second ${second}: ${repeats.join(',')} again`,
              ).to.deep.equal([]);
            for (const action of decision.actions.filter((a) => a.kind === 'Evict')) {
              log.push(now);
              evictedOn.set(action.node, now);
              left[Number(action.node.slice(1))]!--;
            }
          }
          expect(log.length, 'evictions in the window').to.be.at.most(limit);
          // Every node that came while the first of the window was fresh got its first eviction, while the budget
          // covered one each.
          if (limit >= arrivals.length && arrivals.every((a) => a.at === 0))
            expect(
              arrivals.every((_, i) => evictedOn.has(`n${i}`)),
              [...evictedOn.keys()].join(','),
            ).to.equal(true);
        },
      ),
      {
        numRuns: 1000,
        // Found by review: a node cordoned half a minute later tied on stuck pods with one evicted before, whose name
        // came first, and the last of a budget of 3 went to the latter's second eviction.
        examples: [
          [
            3,
            [
              { pods: 2, at: 0 },
              { pods: 1, at: 0 },
              { pods: 1, at: 31 },
            ],
          ],
        ],
      },
    );
  });

  it('(c) never evicts in the pass that fences the node, nor on a node it does not see fenced', () => {
    check(({ nodes }, decision) => {
      const byName = new Map(nodes.map((n) => [n.name, n]));
      const fencedNow = new Set(
        decision.actions
          .filter((a) => a.kind === 'Cordon' || (a.kind === 'Taint' && a.taint.effect !== 'PreferNoSchedule'))
          .map((a) => a.node),
      );
      for (const action of decision.actions) {
        if (action.kind !== 'Evict' && action.kind !== 'Migrate') continue;
        const facts = byName.get(action.node)!;
        expect(fencedNow.has(action.node), `${action.target} evicted in the fencing pass`).to.equal(false);
        // Key-level check only: see the pending test on same-key PreferNoSchedule taints.
        expect(facts.unschedulable || facts.taints.some((t) => t.key === OUR_TAINT.key)).to.equal(true);
      }
    });
  });

  it('(d) on an unsynced cache or while paused, only drops stamps someone else contradicted', () => {
    check(({ spec, nodes, cacheReady }, decision) => {
      if (cacheReady && !spec.safety.paused) return;
      const byName = new Map(nodes.map((n) => [n.name, n]));
      for (const action of decision.actions) {
        const facts = byName.get(action.node)!;
        if (action.kind === 'Uncordon') {
          expect(action.reason).to.equal('UncordonedByOthers');
          expect(facts.stamps?.cordoned === true && !facts.unschedulable).to.equal(true);
        } else if (action.kind === 'Untaint') {
          expect(action.reason).to.equal('UntaintedByOthers');
          expect(facts.taints.some((t) => t.key === action.taint.key)).to.equal(false);
        } else {
          expect.fail(
            `${action.kind} ${action.target} while ${cacheReady ? 'paused' : 'the cache is not synced'}`,
          );
        }
      }
      const touched = new Set(decision.actions.map((a) => a.node));
      for (const n of nodes)
        if (!touched.has(n.name)) expect(decision.stampsAfter.get(n.name)).to.equal(n.stamps);
      const guard = cacheReady ? 'Paused' : 'CacheNotSynced';
      for (const b of decision.blocked) expect(b.guard).to.equal(guard);
    });
  });
});
