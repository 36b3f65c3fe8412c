// The operator's IO limits written into a SandboxHealth's spec.ioLimits and read back (as JSON, the way the API
// hands them back): the same limits, each in the state the agent's report gives it.
import { expect } from 'chai';
import fc from 'fast-check';
import type { IoLimitReport, WantedIoLimitSpec } from '../../../src/api/v1alpha1/index.js';
import type { PodLimit } from '../../../src/policy/io-limit.js';
import { readBack, wishOf, type LimitState } from '../../../src/policy/io-limit-wish.js';

const T0 = new Date('2026-12-06T02:00:00Z');
const db: PodLimit = {
  uid: 'u-db',
  namespace: 'shop',
  name: 'db-0',
  device: '8:0',
  limit: { rbps: 4_000_000, wbps: 2_000_000, riops: 400, wiops: 200 },
  floor: { rbps: 1_048_576, wbps: 1_048_576, riops: 50, wiops: 50 },
  since: T0,
  changedAt: new Date(T0.getTime() + 30_000),
};
const viaApi = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;

describe('wishOf and readBack', () => {
  it('reads back what was written, this policy only: another policy entries are to be lifted', () => {
    const mine = wishOf([db, { ...db, uid: 'u-logs', name: 'logs-x', exhausted: true }], 'p');
    const theirs = { ...wishOf([{ ...db, uid: 'u-old' }], 'gone')[0]! };
    const back = readBack(viaApi([...mine, theirs]), undefined, 'p');
    expect(back.limits).to.deep.equal([db, { ...db, uid: 'u-logs', name: 'logs-x', exhausted: true }]);
    expect(back.others).to.deep.equal([theirs]);
    expect(back.problems).to.deep.equal([]);
  });

  describe("a limit's state, by the agent's report", () => {
    const [wish] = wishOf([db], 'p');
    const applied = (wanted: WantedIoLimitSpec['limit']) => ({
      podUid: 'u-db',
      device: '8:0',
      cgroupVersion: 'v2' as const,
      cgroup: 'kubepods.slice/x',
      wanted,
      written: wanted,
      before: {},
    });
    // After the limit's last change (T0 + 30 s), unless a row says otherwise.
    const report = (r: Partial<IoLimitReport>): IoLimitReport => ({
      allowed: true,
      observedTime: new Date(T0.getTime() + 60_000).toISOString(),
      ...r,
    });
    const said = (result: NonNullable<IoLimitReport['results']>[number]['result']) => [
      { podUid: 'u-db', result, message: '' },
    ];
    const table: [string, IoLimitReport | undefined, LimitState][] = [
      ['no report yet', undefined, 'Pending'],
      ['applied as wanted', report({ applied: [applied(wish!.limit)] }), 'Applied'],
      [
        'applied, but an older limit (a step not yet applied)',
        report({ applied: [applied({ wbps: 9 })] }),
        'Pending',
      ],
      [
        "v1: applied in the pod's cgroup, a container's still at the older limit",
        report({
          applied: [{ ...applied({ wbps: 9 }), cgroup: 'kubepods.slice/x/c1' }, applied(wish!.limit)],
        }),
        'Pending',
      ],
      [
        "v1: set in the pod's cgroup, failed in a container's (the failure said first)",
        report({
          results: [...said('Failed'), ...said('Set')],
          applied: [applied(wish!.limit), { ...applied({}), cgroup: 'kubepods.slice/x/c1' }],
        }),
        'Failed',
      ],
      [
        "v1: set in the pod's cgroup, failed in a container's (the failure said last, as the agent orders them)",
        report({
          results: [...said('Set'), ...said('Failed')],
          applied: [applied(wish!.limit), { ...applied({}), cgroup: 'kubepods.slice/x/c1' }],
        }),
        'Failed',
      ],
      [
        'v1: every cgroup written holds it, but the pod has more than a limit is written in (said Failed)',
        report({ results: [...said('Set'), ...said('Failed')], applied: [applied(wish!.limit)] }),
        'Failed',
      ],
      [
        "a failure said of the pod's other device (its lift failed): this limit, applied, stays so",
        report({
          results: [{ podUid: 'u-db', device: '259:0', result: 'Failed', message: '' }],
          applied: [applied(wish!.limit)],
        }),
        'Applied',
      ],
      [
        'a failure said of this device, every record holding it',
        report({
          results: [{ podUid: 'u-db', device: '8:0', result: 'Failed', message: '' }],
          applied: [applied(wish!.limit)],
        }),
        'Failed',
      ],
      ['refused: no --allow-io-limits', report({ allowed: false, results: said('Refused') }), 'Refused'],
      ['no cgroup of the pod on the node', report({ results: said('NoCgroup') }), 'NoCgroup'],
      ['a write failed', report({ results: said('Failed') }), 'Failed'],
      [
        'a failure reported before the limit last changed (it answers an earlier limit)',
        report({ results: said('Failed'), observedTime: new Date(T0.getTime() + 10_000).toISOString() }),
        'Pending',
      ],
      [
        'the last thing done for the pod was a lift of an older limit',
        report({ results: said('Lifted') }),
        'Pending',
      ],
    ];
    for (const [what, r, state] of table)
      it(what, () => expect(readBack([wish!], r, 'p').states.get('u-db 8:0')).to.equal(state));
  });

  it('leaves alone, and says, an entry the operator did not write: a rate of max or missing, a time unreadable', () => {
    const [wish] = wishOf([db], 'p');
    const entries: WantedIoLimitSpec[] = [
      { ...wish!, podUid: 'a', limit: { ...wish!.limit, wbps: 'max' } },
      { ...wish!, podUid: 'b', floor: { rbps: 1 } },
      { ...wish!, podUid: 'c', changedAt: 'yesterday' },
    ];
    const back = readBack(entries, undefined, 'p');
    expect(back.limits).to.deep.equal([]);
    expect(back.problems).to.have.length(3);
    expect(back.problems[0]).to.match(/^shop\/db-0 \(a 8:0\): not a limit the operator wrote/);
  });

  it('property: any limits written read back the same', () => {
    const rate = fc.integer({ min: 1, max: 2 ** 40 });
    const rates = fc.record({ rbps: rate, wbps: rate, riops: rate, wiops: rate });
    const at = fc.integer({ min: 0, max: 4_102_444_800_000 }).map((ms) => new Date(ms));
    const limit = fc.record(
      {
        uid: fc.uuid(),
        namespace: fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/),
        name: fc.stringMatching(/^[a-z][a-z0-9.-]{0,30}$/),
        device: fc.tuple(fc.nat(4095), fc.nat(1_000_000)).map(([a, b]) => `${a}:${b}`),
        limit: rates,
        floor: rates,
        since: at,
        changedAt: at,
        exhausted: fc.constant(true as const),
      },
      { requiredKeys: ['uid', 'namespace', 'name', 'device', 'limit', 'floor', 'since', 'changedAt'] },
    );
    fc.assert(
      fc.property(fc.uniqueArray(limit, { selector: (l) => l.uid, maxLength: 6 }), (limits) => {
        const back = readBack(viaApi(wishOf(limits, 'p')), undefined, 'p');
        expect(back.limits).to.deep.equal(limits);
        expect(back.problems).to.deep.equal([]);
      }),
    );
  });
});
