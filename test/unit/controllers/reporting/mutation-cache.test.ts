// The mutation cache alone: our own status writes are read in place of what the watch has not shown yet, until it shows that
// version or a newer one, never for a time.
import { expect } from 'chai';
import type { SandboxHealthStatus, SandboxPolicyStatus } from '../../../../src/api/v1alpha1/index.js';
import { MutationCache } from '../../../../src/controllers/reporting/mutation-cache.js';
import type { PolicyObject } from '../../../../src/ports/cluster.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { Expectations } from '../../../../src/runtime/expectations.js';
import { T0 } from '../../../support/builders.js';

function aCache() {
  const versions = new Map<string, string>();
  const clock = new FakeClock(T0.getTime());
  const cache = new MutationCache(
    { observedVersion: (kind, name) => versions.get(`${kind}/${name}`) },
    new Expectations(clock),
  );
  return { versions, cache, clock };
}

const policy = (status: Partial<SandboxPolicyStatus>): PolicyObject => ({
  name: 'p',
  uid: 'uid-p',
  generation: 1,
  createdAt: T0,
  spec: {},
  status,
});

const P = { name: 'p', uid: 'uid-p' };

describe('the mutation cache', () => {
  const policyCases = [
    { name: 'stands in while the cache shows an older version', cached: '10', want: 'ours' },
    { name: 'gives way once the cache shows our version', cached: '12', want: 'cached' },
    { name: 'gives way once the cache shows a newer version', cached: '13', want: 'cached' },
    { name: 'stands in while the cache shows none', cached: undefined, want: 'ours' },
  ] as const;
  for (const { name, cached, want } of policyCases) {
    it(`a policy status written, then the watch's event: ${name}`, () => {
      const { versions, cache } = aCache();
      cache.wrotePolicyStatus(P, '12', { actionCount: 1 }, { actionCount: 2 });
      if (cached) versions.set('SandboxPolicy/p', cached);
      cache.policyObserved('p', cached);
      const status = cache.policyStatus(policy({ actionCount: 1 }));
      expect(status?.actionCount).to.equal(want === 'ours' ? 2 : 1);
    });

    it(`a policy status written after the watch's event: ${name}`, () => {
      const { versions, cache } = aCache();
      if (cached) versions.set('SandboxPolicy/p', cached);
      cache.policyObserved('p', cached);
      cache.wrotePolicyStatus(P, '12', { actionCount: 1 }, { actionCount: 2 });
      const status = cache.policyStatus(policy({ actionCount: 1 }));
      expect(status?.actionCount).to.equal(want === 'ours' ? 2 : 1);
    });
  }

  it('merges each patch of the policy status over the last one it stands in for, and stands for nothing with no version', () => {
    const { cache } = aCache();
    cache.wrotePolicyStatus(P, '12', { actionCount: 1, degradedNodes: 3 }, { actionCount: 2 });
    cache.wrotePolicyStatus(P, '13', undefined, { degradedNodes: 0 });
    expect(cache.policyStatus(policy({}))).to.include({ actionCount: 2, degradedNodes: 0 });
    cache.wrotePolicyStatus(P, undefined, undefined, { actionCount: 5 });
    expect(cache.policyStatus(policy({ actionCount: 1 }))?.actionCount).to.equal(1);
  });

  it('caches a policy status for its own object: one made again under the name reads its own, and none once forgotten', () => {
    const { cache } = aCache();
    cache.wrotePolicyStatus(P, '12', { actionCount: 1 }, { actionCount: 2 });
    expect(cache.policyStatus({ ...policy({ actionCount: 0 }), uid: 'uid-q' })?.actionCount).to.equal(0);
    cache.wrotePolicyStatus({ name: 'p', uid: 'uid-q' }, '14', { actionCount: 0 }, { degradedNodes: 1 });
    expect(cache.policyStatus({ ...policy({}), uid: 'uid-q' })).to.deep.include({
      actionCount: 0,
      degradedNodes: 1,
    });
    cache.forgetPolicy('p');
    expect(cache.policyStatus({ ...policy({ actionCount: 7 }), uid: 'uid-q' })?.actionCount).to.equal(7);
  });

  it("stands in for a node's SandboxHealth until the cache shows our write, and waits when a write has nothing to stand in for it", () => {
    const { versions, cache } = aCache();
    const status = { policy: 'p', state: 'Healthy' } as SandboxHealthStatus;
    cache.wroteHealth('n1', '20', status);
    versions.set('SandboxHealth/n1', '19');
    expect(cache.health('n1')).to.equal(status);
    versions.set('SandboxHealth/n1', '20');
    expect(cache.health('n1'), 'the cache shows it: read the cache').to.equal(undefined);
    cache.wroteHealth('n2', '30', undefined); // answered with no status to stand in
    versions.set('SandboxHealth/n2', '29');
    expect(cache.health('n2'), 'wait for the watch').to.equal(null);
    cache.forgetHealth('n2'); // deleted meanwhile: our write will never show
    expect(cache.health('n2')).to.equal(undefined);
  });
});
