import { expect } from 'chai';
import type { PodData } from '../../../src/detection/index.js';
import { guardData } from '../../../src/policy/guards.js';

describe('guardData: a running pod is not moved if it would lose its data or could not start elsewhere', () => {
  const none: PodData = { localVolumes: [], claims: [], nodeBoundClaims: [] };
  const rows: {
    name: string;
    data: PodData | undefined;
    allow?: { evictLocalStoragePods?: boolean; evictSystemCriticalPods?: boolean };
    guard: string | undefined;
  }[] = [
    { name: 'nothing on the node', data: none, guard: undefined },
    { name: 'volumes not read', data: undefined, guard: 'PodDataUnknown' },
    { name: 'claims not resolved', data: { localVolumes: [], claims: ['data'] }, guard: 'PodDataUnknown' },
    {
      name: 'claims on volumes that admit other nodes',
      data: { ...none, claims: ['data'] },
      guard: undefined,
    },
    {
      name: 'a claim bound to the node',
      data: { ...none, claims: ['data'], nodeBoundClaims: ['data'] },
      guard: 'NodeBoundVolume',
    },
    {
      name: 'a claim bound to the node, local storage allowed',
      data: { ...none, claims: ['data'], nodeBoundClaims: ['data'] },
      allow: { evictLocalStoragePods: true },
      guard: 'NodeBoundVolume',
    },
    { name: 'local storage', data: { ...none, localVolumes: ['scratch'] }, guard: 'LocalStorage' },
    {
      name: 'local storage, allowed',
      data: { ...none, localVolumes: ['scratch'] },
      allow: { evictLocalStoragePods: true },
      guard: undefined,
    },
    {
      name: 'system-cluster-critical',
      data: { ...none, priorityClassName: 'system-cluster-critical' },
      guard: 'SystemCritical',
    },
    {
      name: 'system-node-critical',
      data: { ...none, priorityClassName: 'system-node-critical' },
      guard: 'SystemCritical',
    },
    { name: 'priority 2000000000', data: { ...none, priority: 2_000_000_000 }, guard: 'SystemCritical' },
    { name: 'priority 1999999999', data: { ...none, priority: 1_999_999_999 }, guard: undefined },
    {
      name: 'system-critical, allowed',
      data: { ...none, priority: 2_000_001_000 },
      allow: { evictSystemCriticalPods: true },
      guard: undefined,
    },
  ];
  for (const row of rows)
    it(`${row.guard ? `holds (${row.guard})` : 'allows'} a pod with ${row.name}`, () => {
      const allow = { evictLocalStoragePods: false, evictSystemCriticalPods: false, ...row.allow };
      const pod = row.data ? { data: row.data } : {};
      expect(guardData(allow, pod)?.guard).to.equal(row.guard);
    });

  it('names the volumes that hold it', () => {
    const hold = guardData(undefined, { data: { ...none, localVolumes: ['scratch', 'cache'] } });
    expect(hold?.message).to.equal(
      'its local storage (scratch, cache) would be lost; migrateWorkloads.evictLocalStoragePods allows it',
    );
  });
});
