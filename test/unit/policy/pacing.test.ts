import { expect } from 'chai';
import type { Placement } from '../../../src/policy/node-affinity.js';
import {
  byNamespaceInTurn,
  decideGateReleases,
  pacingFor,
  type GatedPod,
  type PacingPolicy,
} from '../../../src/policy/pacing.js';

const NOW = new Date('2026-11-30T12:00:00Z');
const ago = (s: number) => new Date(NOW.getTime() - s * 1000);
const pod = (name: string, gatedSecondsAgo: number): GatedPod => ({
  namespace: 'shop',
  name,
  uid: `uid-${name}`,
  gatedAt: ago(gatedSecondsAgo),
});
const names = (d: ReturnType<typeof decideGateReleases>) =>
  d.releases.map((r) => `${r.pod.name} ${r.reason}`);

describe('pacingFor', () => {
  const saturated = (
    fence: { unschedulable?: boolean; taints?: { key: string; effect: string }[] } = {},
  ) => ({
    name: 'n1',
    labels: { 'kubernetes.io/hostname': 'n1', zone: 'a' },
    taints: fence.taints ?? [],
    unschedulable: fence.unschedulable ?? false,
  });
  const policy = (name: string, overrides: Partial<PacingPolicy> = {}): PacingPolicy => ({
    name,
    namespaceSelector: { matchLabels: { pacing: 'on' } },
    gating: true,
    dryRun: false,
    saturated: [saturated()],
    ...overrides,
  });
  const rows: { name: string; placement: Placement; nodes: PacingPolicy['saturated']; gated: boolean }[] = [
    { name: 'any pod, an open saturated node', placement: {}, nodes: [saturated()], gated: true },
    { name: 'no saturated node', placement: {}, nodes: [], gated: false },
    {
      name: 'a cordoned saturated node',
      placement: {},
      nodes: [saturated({ unschedulable: true })],
      gated: false,
    },
    {
      name: 'a tainted saturated node',
      placement: {},
      nodes: [saturated({ taints: [{ key: 'sandbox.remediator.io/io-pressure', effect: 'NoSchedule' }] })],
      gated: false,
    },
    {
      name: 'a pod that tolerates the taint',
      placement: { tolerations: [{ key: 'sandbox.remediator.io/io-pressure', operator: 'Exists' }] },
      nodes: [saturated({ taints: [{ key: 'sandbox.remediator.io/io-pressure', effect: 'NoSchedule' }] })],
      gated: true,
    },
    {
      name: 'a nodeSelector for another zone',
      placement: { nodeSelector: { zone: 'b' } },
      nodes: [saturated()],
      gated: false,
    },
    {
      name: 'required affinity for another node',
      placement: {
        requiredTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n2'] }] }],
      },
      nodes: [saturated()],
      gated: false,
    },
  ];
  for (const row of rows)
    it(`${row.gated ? 'gates' : 'admits ungated'} ${row.name}`, () => {
      const found = pacingFor(
        'shop',
        { pacing: 'on' },
        [policy('a', { saturated: row.nodes })],
        'ops',
        row.placement,
      );
      expect(found?.name).to.equal(row.gated ? 'a' : undefined);
    });
  it('picks the first policy whose selector takes the namespace', () => {
    expect(pacingFor('shop', { pacing: 'on' }, [policy('a'), policy('b')], 'ops')?.name).to.equal('a');
    expect(pacingFor('shop', { pacing: 'off' }, [policy('a')], 'ops')).to.equal(undefined);
  });
  it('answers for a dry-run policy (to count its decisions) but not for one neither gating nor dry', () => {
    expect(
      pacingFor('shop', { pacing: 'on' }, [policy('a', { gating: false, dryRun: true })], 'ops')?.name,
    ).to.equal('a');
    expect(pacingFor('shop', { pacing: 'on' }, [policy('a', { gating: false })], 'ops')).to.equal(undefined);
  });
  it('never paces kube-system, the operator namespace, or a namespace it does not know', () => {
    const everything = policy('a', {
      namespaceSelector: { matchExpressions: [{ key: 'x', operator: 'DoesNotExist' }] },
    });
    expect(pacingFor('kube-system', {}, [everything], 'ops')).to.equal(undefined);
    expect(pacingFor('ops', {}, [everything], 'ops')).to.equal(undefined);
    expect(pacingFor('shop', undefined, [everything], 'ops')).to.equal(undefined);
    expect(pacingFor('shop', {}, [everything], 'ops')?.name).to.equal('a');
  });
});

describe('decideGateReleases', () => {
  const base = { maxPodStartsPerMinute: 2, maxGateSeconds: 600, now: NOW };
  it('takes namespaces in turn, so one namespace cannot use up the rate', () => {
    const inNs = (namespace: string, name: string, secondsAgo: number): GatedPod => ({
      ...pod(name, secondsAgo),
      namespace,
    });
    const bulk = [1, 2, 3, 4].map((i) => inNs('bulk', `b${i}`, 100 - i));
    const d = decideGateReleases({
      ...base,
      maxPodStartsPerMinute: 3,
      pressure: true,
      gated: [...bulk, inNs('shop', 's1', 50), inNs('api', 'a1', 10)],
      recentReleases: [],
    });
    expect(names(d)).to.deep.equal(['b1 Paced', 's1 Paced', 'a1 Paced']);
    // One gate a pass: the turn goes on from the namespace last released to, pass after pass.
    const onePerPass = (lastNamespace?: string) =>
      names(
        decideGateReleases({
          ...base,
          maxPodStartsPerMinute: 1,
          pressure: true,
          gated: [...bulk, inNs('shop', 's1', 50), inNs('api', 'a1', 10)],
          recentReleases: [],
          ...(lastNamespace ? { lastNamespace } : {}),
        }),
      );
    expect([onePerPass(), onePerPass('bulk'), onePerPass('shop'), onePerPass('api')]).to.deep.equal([
      ['b1 Paced'],
      ['s1 Paced'],
      ['a1 Paced'],
      ['b1 Paced'],
    ]);
    expect(byNamespaceInTurn([...bulk, inNs('shop', 's1', 50)]).map((p) => p.name)).to.deep.equal([
      'b1',
      's1',
      'b2',
      'b3',
      'b4',
    ]);
  });
  it('lifts at most maxPodStartsPerMinute, oldest first, and says when the next may go', () => {
    const d = decideGateReleases({
      ...base,
      pressure: true,
      gated: [pod('c', 10), pod('a', 30), pod('b', 20)],
      recentReleases: [],
    });
    expect(names(d)).to.deep.equal(['a Paced', 'b Paced']);
    expect(d.nextAt).to.deep.equal(new Date(NOW.getTime() + 60_000));
  });
  it('counts the releases of the last 60 s, not older ones', () => {
    const d = decideGateReleases({
      ...base,
      pressure: true,
      gated: [pod('a', 30), pod('b', 20)],
      recentReleases: [ago(59), ago(61)],
    });
    expect(names(d)).to.deep.equal(['a Paced']);
    expect(d.nextAt, 'when the release 59 s ago leaves the window').to.deep.equal(
      new Date(NOW.getTime() + 1000),
    );
  });
  it('releases a pod held longer than maxGateSeconds anyway, outside the rate', () => {
    const d = decideGateReleases({
      ...base,
      pressure: true,
      gated: [pod('old', 601), pod('a', 30)],
      recentReleases: [ago(1), ago(2)],
    });
    expect(names(d)).to.deep.equal(['old WaitedTooLong']);
    expect(d.nextAt).to.deep.equal(new Date(ago(2).getTime() + 60_000));
  });
  it('releases every pod at once when the pressure is gone', () => {
    const d = decideGateReleases({
      ...base,
      pressure: false,
      gated: [pod('b', 5), pod('a', 9), pod('c', 1)],
      recentReleases: [ago(1), ago(2)],
    });
    expect(names(d)).to.deep.equal(['a PressureGone', 'b PressureGone', 'c PressureGone']);
    expect(d.nextAt).to.equal(undefined);
  });
  it('the next look is also when the oldest waiting pod outwaits maxGateSeconds', () => {
    const d = decideGateReleases({
      ...base,
      maxGateSeconds: 100,
      pressure: true,
      gated: [pod('a', 30), pod('b', 95)],
      recentReleases: [ago(1), ago(2)],
    });
    expect(names(d)).to.deep.equal([]);
    expect(d.nextAt).to.deep.equal(new Date(NOW.getTime() + 5_000));
  });
});
