import { expect } from 'chai';
import {
  observeRollouts,
  MAX_HANDS_OFF_MS,
  reachedNodes,
  SETTLE_DEADLINE_MS,
  withStuckUpdates,
  type SaturatedNode,
} from '../../../../src/controllers/rollouts/observe.js';
import type { Placement } from '../../../../src/policy/node-affinity.js';
import { deploymentOf, type PodView } from '../../../../src/detection/index.js';
import { aPod, aRollingDeployment, T0 } from '../../../support/builders.js';

const ofDeployment = (name: string, hash = '5d8f7c9b4'): PodView => ({
  ...aPod().named(`${name}-${hash}-x1`, 'shop').onNode('n1').build(),
  labels: { app: name, 'pod-template-hash': hash },
  controllerKind: 'ReplicaSet',
  controllerName: `${name}-${hash}`,
});
const view = aRollingDeployment;

describe('deploymentOf', () => {
  it('names the Deployment from the ReplicaSet name and the pod-template-hash label', () => {
    expect(deploymentOf(ofDeployment('web'))).to.equal('shop/web');
    expect(deploymentOf(ofDeployment('my-api-v2', 'abc12'))).to.equal('shop/my-api-v2');
  });
  it('is undefined for pods of other controllers, or when the names do not fit', () => {
    expect(deploymentOf({ ...ofDeployment('web'), controllerKind: 'StatefulSet' })).to.equal(undefined);
    expect(deploymentOf({ ...ofDeployment('web'), labels: {} })).to.equal(undefined);
    expect(deploymentOf({ ...ofDeployment('web'), controllerName: 'other-rs' })).to.equal(undefined);
    expect(deploymentOf({ ...ofDeployment('web'), controllerName: '-5d8f7c9b4' })).to.equal(undefined);
  });
});

describe('observeRollouts', () => {
  it('lists the saturated nodes each Deployment feeds, and takes dry-run pauses from status', () => {
    const simulatedStamps = { policy: 'p', since: T0, reason: 'RolloutQueued' as const, startedAt: T0 };
    const facts = observeRollouts({
      workloads: [view('web'), view('api'), view('db', { paused: true })],
      stuckOnSaturated: new Map([
        ['n2', [ofDeployment('web')]],
        ['n1', [ofDeployment('web'), ofDeployment('web', 'ffff')]],
      ]),
      simulated: new Map([['Deployment/shop/api', simulatedStamps]]),
      dryRun: true,
      startedAt: (d) => d.createdAt,
      now: T0,
      saturated: [],
      runningOn: () => undefined,
    });
    expect(facts.map((f) => [f.name, f.feeds, f.paused, f.stamps?.reason])).to.deep.equal([
      ['web', ['n1', 'n2'], false, undefined],
      ['api', [], true, 'RolloutQueued'],
      ['db', [], true, undefined],
    ]);
  });

  it('ignores simulated pauses in a real run', () => {
    const facts = observeRollouts({
      workloads: [view('api')],
      stuckOnSaturated: new Map(),
      simulated: new Map([
        ['Deployment/shop/api', { policy: 'p', since: T0, reason: 'RolloutQueued', startedAt: T0 }],
      ]),
      dryRun: false,
      startedAt: (d) => d.createdAt,
      now: T0,
      saturated: [],
      runningOn: () => undefined,
    });
    expect(facts[0]).to.include({ paused: false });
    expect(facts[0]!.stamps).to.equal(undefined);
  });

  it('lets a StatefulSet or DaemonSet that is only settling hold a slot for the progress deadline, no longer', () => {
    const settling = view('db', { kind: 'StatefulSet', settling: true });
    const at = (ms: number) =>
      observeRollouts({
        workloads: [settling, view('web')],
        stuckOnSaturated: new Map(),
        simulated: new Map(),
        dryRun: false,
        startedAt: () => T0,
        now: new Date(T0.getTime() + ms),
        saturated: [],
        runningOn: () => undefined,
      }).map((f) => f.rollingOut);
    expect(at(SETTLE_DEADLINE_MS)).to.deep.equal([true, true]);
    expect(at(SETTLE_DEADLINE_MS + 1), 'a pod that never becomes ready takes no slot').to.deep.equal([
      false,
      true,
    ]);
  });
});

describe('observeRollouts: hands off', () => {
  it('believes a hands-off-until only up to a day ahead: one further was not written by us, and is ignored', () => {
    const handsOff = (until: Date) =>
      observeRollouts({
        workloads: [view('web', { handsOffUntil: until })],
        stuckOnSaturated: new Map(),
        simulated: new Map(),
        dryRun: false,
        startedAt: () => T0,
        now: T0,
        saturated: [],
        runningOn: () => undefined,
      })[0]!.handsOffUntil;
    const hour = new Date(T0.getTime() + 3_600_000);
    expect(handsOff(hour)).to.deep.equal(hour);
    const day = new Date(T0.getTime() + MAX_HANDS_OFF_MS);
    expect(handsOff(day)).to.deep.equal(day);
    expect(handsOff(new Date(day.getTime() + 1))).to.equal(undefined);
    expect(handsOff(new Date('2099-01-01T00:00:00Z'))).to.equal(undefined);
  });
});

describe("reachedNodes: the saturated nodes a rollout's new pods could land on", () => {
  const node = (name: string, fence: Partial<SaturatedNode> = {}): SaturatedNode => ({
    name,
    labels: { 'kubernetes.io/hostname': name, disk: 'ssd' },
    taints: [],
    unschedulable: false,
    ...fence,
  });
  const ourTaint = { key: 'sandbox.remediator.io/io-pressure', value: 'true', effect: 'NoSchedule' };
  const rows: {
    name: string;
    kind?: 'Deployment' | 'DaemonSet';
    placement?: Placement;
    feeds?: string[];
    nodes: SaturatedNode[];
    running?: Record<string, string[]>;
    reaches: string[];
  }[] = [
    { name: 'stuck there', feeds: ['n1'], nodes: [node('n1', { unschedulable: true })], reaches: ['n1'] },
    { name: 'running there, unfenced', nodes: [node('n1')], running: { n1: ['web'] }, reaches: ['n1'] },
    {
      name: 'running there, cordoned',
      nodes: [node('n1', { unschedulable: true })],
      running: { n1: ['web'] },
      reaches: [],
    },
    {
      name: 'running there, tainted',
      nodes: [node('n1', { taints: [ourTaint] })],
      running: { n1: ['web'] },
      reaches: [],
    },
    {
      name: 'running there, tainted, tolerated',
      placement: { tolerations: [{ key: 'sandbox.remediator.io/io-pressure', operator: 'Exists' }] },
      nodes: [node('n1', { taints: [ourTaint] })],
      running: { n1: ['web'] },
      reaches: ['n1'],
    },
    { name: 'running elsewhere only', nodes: [node('n1')], running: { n1: ['other'] }, reaches: [] },
    { name: 'where running was not read', nodes: [node('n1')], reaches: [] },
    {
      name: 'a DaemonSet covering a cordoned node',
      kind: 'DaemonSet',
      nodes: [node('n1', { unschedulable: true })],
      reaches: ['n1'],
    },
    {
      name: 'a DaemonSet whose selector leaves the node out',
      kind: 'DaemonSet',
      placement: { nodeSelector: { disk: 'hdd' } },
      nodes: [node('n1')],
      reaches: [],
    },
    {
      name: 'a DaemonSet that does not tolerate our taint',
      kind: 'DaemonSet',
      nodes: [node('n1', { taints: [ourTaint] }), node('n2')],
      reaches: ['n2'],
    },
  ];
  for (const row of rows)
    it(`${row.reaches.length > 0 ? 'reaches' : 'does not reach'} a node: ${row.name}`, () => {
      const kind = row.kind ?? 'Deployment';
      const key = `${kind}/shop/web`;
      const running = new Map(
        Object.entries(row.running ?? {}).map(([n, names]) => [
          n,
          new Set(names.map((x) => `${kind}/shop/${x}`)),
        ]),
      );
      const reached = reachedNodes(
        { kind, ...(row.placement ? { placement: row.placement } : {}) },
        key,
        new Set(row.feeds ?? []),
        row.nodes,
        (n) => running.get(n),
      );
      expect(reached).to.deep.equal(row.reaches);
    });
});

describe('withStuckUpdates: a StatefulSet as its hold sees it', () => {
  const sts = view('db', { kind: 'StatefulSet', replicas: 5, updatedReplicas: 1, revision: 'new' });
  const podOf = (ordinal: number, revision: string, owner = 'db'): PodView => ({
    ...aPod().named(`${owner}-${ordinal}`, 'shop').onNode('n1').build(),
    labels: { 'controller-revision-hash': revision },
    controllerKind: 'StatefulSet',
    controllerName: owner,
  });
  const rows: { name: string; stuck: PodView[]; updated: number | undefined }[] = [
    { name: 'no stuck pod', stuck: [], updated: 1 },
    { name: 'its status already counts the stuck pod', stuck: [podOf(4, 'new')], updated: 1 },
    { name: 'a stuck pod its status does not count yet', stuck: [podOf(3, 'new')], updated: 2 },
    { name: 'a stuck pod at the old revision', stuck: [podOf(2, 'old')], updated: 1 },
    { name: "another StatefulSet's pod", stuck: [podOf(2, 'new', 'cache')], updated: 1 },
  ];
  for (const row of rows)
    it(`counts ${row.updated} updated with ${row.name}`, () => {
      expect(withStuckUpdates(sts, row.stuck).updatedReplicas).to.equal(row.updated);
    });
});
