// How the limiter reads a node's lists: the limits the agent did not apply (its report, or no answer in time), a list
// as a refusal judges it (who is limited, not to what), and two lists compared entry by entry.
import { expect } from 'chai';
import type { WantedIoLimitSpec } from '../../../../src/api/v1alpha1/index.js';
import { fingerprint, notAppliedOf, sameList } from '../../../../src/controllers/iolimits/lists.js';
import type { PodLimit } from '../../../../src/policy/io-limit.js';
import type { LimitState } from '../../../../src/policy/io-limit-wish.js';
import { secondsAfter, T0 } from '../../../support/builders.js';

const limit: PodLimit = {
  uid: 'u1',
  namespace: 'shop',
  name: 'db-0',
  device: '8:0',
  limit: { rbps: 1_000, wbps: 1_000, riops: 100, wiops: 100 },
  floor: { rbps: 100, wbps: 100, riops: 10, wiops: 10 },
  since: T0,
  changedAt: T0,
};
const UNREPORTED_MS = 60_000;

describe('notAppliedOf', () => {
  const cases: { state: LimitState | undefined; after: number; want: string | undefined }[] = [
    { state: 'Applied', after: 3_600, want: undefined },
    { state: 'Refused', after: 0, want: 'Refused' },
    { state: 'NoCgroup', after: 0, want: 'NoCgroup' },
    { state: 'Failed', after: 0, want: 'Failed' },
    { state: 'Pending', after: 59, want: undefined },
    { state: 'Pending', after: 60, want: 'Unreported' },
    { state: undefined, after: 3_600, want: undefined },
  ];
  for (const c of cases)
    it(`a limit ${c.state ?? 'with no state'} ${c.after} s after it changed: ${c.want ?? 'applied, or not yet known'}`, () => {
      const got = notAppliedOf([limit], () => c.state, secondsAfter(T0, c.after), UNREPORTED_MS);
      expect(got.map((n) => n.state)).to.deep.equal(c.want ? [c.want] : []);
    });
});

const entry = (overrides: Partial<WantedIoLimitSpec> = {}): WantedIoLimitSpec => ({
  podUid: 'u1',
  pod: 'shop/db-0',
  device: '8:0',
  policy: 'p',
  limit: { wbps: 1_000 },
  since: T0.toISOString(),
  ...overrides,
});

describe('fingerprint: a list as a refusal judges it', () => {
  const cases: { name: string; other: WantedIoLimitSpec; same: boolean }[] = [
    { name: 'the same whatever the rates', other: entry({ limit: { wbps: 9 } }), same: true },
    {
      name: 'the same whatever the time',
      other: entry({ since: secondsAfter(T0, 5).toISOString() }),
      same: true,
    },
    { name: 'another pod', other: entry({ podUid: 'u2' }), same: false },
    { name: 'another device', other: entry({ device: '8:16' }), same: false },
    { name: 'another policy', other: entry({ policy: 'q' }), same: false },
    { name: 'handed on (exhausted)', other: entry({ exhausted: true }), same: false },
  ];
  for (const c of cases)
    it(`${c.same ? 'is' : 'is not'} the same list for ${c.name}`, () => {
      expect(fingerprint([entry()]) === fingerprint([c.other])).to.equal(c.same);
    });
});

describe('sameList', () => {
  it('takes an absent list as an empty one', () => {
    expect(sameList(undefined, [])).to.equal(true);
    expect(sameList(undefined, [entry()])).to.equal(false);
  });
  it('compares every field, rates included', () => {
    expect(sameList([entry()], [entry()])).to.equal(true);
    expect(sameList([entry()], [entry({ limit: { wbps: 9 } })])).to.equal(false);
  });
});
