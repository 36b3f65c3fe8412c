// The culprit's IO limit, decided (issue 44): set from a fraction of what it does, stepped down while the pressure
// outlasts it, exhausted at the floor, lifted when it wants no more, when the pod or the policy is gone, or late.
import { expect } from 'chai';
import fc from 'fast-check';
import {
  decideLimits,
  type IoRates,
  type LimitInput,
  type LimitIoSettings,
  type MeasuredPodIo,
  type PodLimit,
} from '../../../src/policy/io-limit.js';

const MiB = 1_048_576;
const settings: LimitIoSettings = {
  minSharePercent: 25,
  startPercent: 50,
  stepPercent: 50,
  floor: { bytesPerSecond: MiB, opsPerSecond: 20, percent: 10 },
  cooldownSeconds: 300,
  maxLimitSeconds: 3600,
  sustainSeconds: 30,
  recoverySeconds: 120,
  podPsiPercent: 10,
};
const t = (s: number) => new Date(Date.UTC(2026, 11, 5, 12, 0, s));
const rates = (mib: number, iops: number): IoRates => ({ rbps: 0, wbps: mib * MiB, riops: 0, wiops: iops });
const db = (over: Partial<MeasuredPodIo> = {}): MeasuredPodIo => ({
  uid: 'u-db',
  namespace: 'shop',
  name: 'db-0',
  sharePercent: 70,
  rates: rates(80, 2000),
  exempt: false,
  ...over,
});
const limitOf = (over: Partial<PodLimit> = {}): PodLimit => ({
  uid: 'u-db',
  namespace: 'shop',
  name: 'db-0',
  device: '8:0',
  limit: { rbps: MiB, wbps: 40 * MiB, riops: 20, wiops: 1000 },
  floor: { rbps: MiB, wbps: 8 * MiB, riops: 20, wiops: 200 },
  since: t(0),
  changedAt: t(0),
  ...over,
});
const input = (over: Partial<LimitInput> = {}): LimitInput => ({
  settings,
  now: t(0),
  active: true,
  io: 'High',
  ioStuck: true,
  device: '8:0',
  pods: [db()],
  running: new Set(['u-db', 'u-web']),
  limits: [],
  liftedAt: new Map(),
  budget: 10,
  ...over,
});
const kinds = (i: LimitInput) =>
  decideLimits(i).decisions.map((d) =>
    d.kind === 'Held' ? `Held ${d.why}` : d.kind === 'Lift' ? `Lift ${d.reason}` : d.kind,
  );

describe('decideLimits', () => {
  it('sets the first limit at startPercent of what the culprit does, and its floor: floor.percent of it, at least the minimum', () => {
    const plan = decideLimits(input());
    expect(plan.decisions.map((d) => d.kind)).to.deep.equal(['Set']);
    expect(plan.limits[0]!.limit).to.deep.equal({ rbps: MiB, wbps: 40 * MiB, riops: 20, wiops: 1000 });
    expect(plan.limits[0]!.floor).to.deep.equal({ rbps: MiB, wbps: 8 * MiB, riops: 20, wiops: 200 });
    expect(plan.limits[0]).to.deep.include({ device: '8:0', since: t(0), changedAt: t(0) });
  });

  describe('when a limit is set, and when not', () => {
    const table: [string, Partial<LimitInput>, string[]][] = [
      ['a culprit on a saturated node', {}, ['Set']],
      ['under minSharePercent', { pods: [db({ sharePercent: 20 })] }, []],
      ['pressure not sustained', { io: 'Rising' }, []],
      ['nothing stuck (the pressure alone is no cause)', { ioStuck: false }, []],
      ['labelled no-limit, or the operator’s own', { pods: [db({ exempt: true })] }, ['Held Exempt']],
      ['no device attributed', { device: '' }, ['Held NoDevice']],
      ['lifted within cooldownSeconds', { liftedAt: new Map([['u-db', t(-299)]]) }, ['Held Cooldown']],
      ['lifted cooldownSeconds ago', { liftedAt: new Map([['u-db', t(-300)]]) }, ['Set']],
      ['no rate left', { budget: 0 }, ['Held Rate']],
      ['a pod not running on the node (measured, gone since)', { running: new Set() }, []],
      ['the policy paused or gone', { active: false }, []],
    ];
    for (const [what, over, expected] of table)
      it(what, () => expect(kinds(input(over))).to.deep.equal(expected));

    it('the biggest culprits first when the rate allows only some', () => {
      const small = db({ uid: 'u-web', name: 'web-0', sharePercent: 30 });
      const plan = decideLimits(input({ pods: [small, db()], budget: 1 }));
      expect(
        plan.decisions.map((d) => (d.kind === 'Held' ? `${d.uid} held` : `${d.pod.uid} ${d.kind}`)),
      ).to.deep.equal(['u-db Set', 'u-web held']);
    });

    it('no more limits than the node may hold: a culprit past them is held (Full)', () => {
      const small = db({ uid: 'u-web', name: 'web-0', sharePercent: 30 });
      expect(kinds(input({ pods: [small, db()], maxLimits: 1 }))).to.deep.equal(['Set', 'Held Full']);
    });
  });

  describe('step down', () => {
    const table: [string, Partial<LimitInput>, string[], IoRates | undefined][] = [
      [
        'sustainSeconds after the last change, still saturated: stepPercent of the limit, floors kept',
        { now: t(30) },
        ['Step'],
        { rbps: MiB, wbps: 20 * MiB, riops: 20, wiops: 500 },
      ],
      [
        'before sustainSeconds: kept',
        { now: t(29) },
        [],
        { rbps: MiB, wbps: 40 * MiB, riops: 20, wiops: 1000 },
      ],
      ['the node no longer stuck: kept, not stepped', { now: t(30), ioStuck: false }, [], undefined],
      ['another device saturated now: kept, not stepped', { now: t(30), device: '259:0' }, [], undefined],
      ['no device attributed now: kept, not stepped', { now: t(30), device: '' }, [], undefined],
      [
        'no rate left: held, kept',
        { now: t(30), budget: 0 },
        ['Held Rate'],
        { rbps: MiB, wbps: 40 * MiB, riops: 20, wiops: 1000 },
      ],
    ];
    for (const [what, over, expected, after] of table)
      it(what, () => {
        const plan = decideLimits(input({ limits: [limitOf()], ...over }));
        expect(kinds(input({ limits: [limitOf()], ...over }))).to.deep.equal(expected);
        if (after) expect(plan.limits[0]!.limit).to.deep.equal(after);
      });

    it("steps no lower than the pod's floor", () => {
      const near = limitOf({ limit: { rbps: MiB, wbps: 10 * MiB, riops: 20, wiops: 300 } });
      const plan = decideLimits(input({ now: t(30), limits: [near] }));
      expect(plan.limits[0]!.limit).to.deep.equal({ rbps: MiB, wbps: 8 * MiB, riops: 20, wiops: 200 });
    });

    it('at the floor and still saturated: exhausted once, the limit kept for the next remedy', () => {
      const floor = { rbps: MiB, wbps: 8 * MiB, riops: 20, wiops: 200 };
      const first = decideLimits(input({ now: t(30), limits: [limitOf({ limit: floor })] }));
      expect(first.decisions.map((d) => d.kind)).to.deep.equal(['Exhausted']);
      expect(first.limits[0]).to.deep.include({ exhausted: true, limit: floor });
      expect(kinds(input({ now: t(90), limits: first.limits }))).to.deep.equal([]);
    });
  });

  describe('lift', () => {
    const quietDb = db({ rates: rates(10, 100), psiPercent: 2 });
    const table: [string, Partial<LimitInput>, string[]][] = [
      ['the policy paused or gone', { active: false }, ['Lift PolicyGone']],
      ['the pod gone', { running: new Set(), pods: [] }, ['Lift PodGone']],
      ['labelled no-limit since', { pods: [db({ exempt: true })] }, ['Lift Exempted']],
      [
        'maxLimitSeconds after it was set',
        { now: t(3600), io: 'Low', ioStuck: false, pods: [db()] },
        ['Lift MaxDuration'],
      ],
      [
        'quiet for recoverySeconds',
        { now: t(120), io: 'Low', ioStuck: false, pods: [quietDb] },
        ['Lift NoLongerNeeded'],
      ],
      ['quiet, not yet for recoverySeconds', { now: t(119), io: 'Low', ioStuck: false, pods: [quietDb] }, []],
      [
        'at its cap (it wants more)',
        { now: t(120), io: 'Low', ioStuck: false, pods: [db({ rates: rates(39, 100), psiPercent: 2 })] },
        [],
      ],
      [
        'its own pressure high',
        { now: t(120), io: 'Low', ioStuck: false, pods: [db({ rates: rates(10, 100), psiPercent: 30 })] },
        [],
      ],
      ['quiet but the node still saturated: stepped, not lifted', { now: t(120), pods: [quietDb] }, ['Step']],
    ];
    for (const [what, over, expected] of table)
      it(what, () =>
        expect(kinds(input({ limits: [limitOf({ quietSince: t(0) })], ...over }))).to.deep.equal(expected),
      );

    it('quiet counts from the first quiet pass, and a pass that wants more starts it again', () => {
      const quiet = { io: 'Low' as const, ioStuck: false, pods: [db({ rates: rates(10, 100) })] };
      const first = decideLimits(input({ ...quiet, now: t(10), limits: [limitOf()] }));
      expect(first.limits[0]!.quietSince).to.deep.equal(t(10));
      const busy = decideLimits(input({ ...quiet, pods: [db()], now: t(20), limits: first.limits }));
      expect(busy.limits[0]!.quietSince).to.equal(undefined);
      expect(kinds(input({ ...quiet, now: t(129), limits: busy.limits }))).to.deep.equal([]);
    });
  });

  describe('properties', () => {
    const rate = fc.integer({ min: 0, max: 500 * MiB });
    const ratesArb = fc.record({ rbps: rate, wbps: rate, riops: rate, wiops: rate });
    const pod = fc
      .record({
        uid: fc.constantFrom('a', 'b', 'c'),
        namespace: fc.constant('ns'),
        name: fc.constant('p'),
        sharePercent: fc.integer({ min: 0, max: 100 }),
        rates: ratesArb,
        psi: fc.option(fc.integer({ min: 0, max: 100 }), { nil: undefined }),
        exempt: fc.boolean(),
      })
      .map(({ psi, ...p }): MeasuredPodIo => (psi === undefined ? p : { ...p, psiPercent: psi }));
    const limit = fc.record({
      uid: fc.constantFrom('a', 'b', 'c', 'd'),
      namespace: fc.constant('ns'),
      name: fc.constant('p'),
      device: fc.constant('8:0'),
      limit: ratesArb.map((r) => ({
        rbps: r.rbps + MiB,
        wbps: r.wbps + MiB,
        riops: r.riops + 20,
        wiops: r.wiops + 20,
      })),
      floor: fc.constant({ rbps: MiB, wbps: MiB, riops: 20, wiops: 20 }),
      since: fc.integer({ min: -4000, max: 0 }).map(t),
      changedAt: fc.integer({ min: -100, max: 0 }).map(t),
    });
    const inputs = fc.record({
      active: fc.boolean(),
      io: fc.constantFrom('High', 'Rising', 'Recovering', 'Low', 'Unknown' as const),
      ioStuck: fc.boolean(),
      pods: fc.uniqueArray(pod, { selector: (p) => p.uid, maxLength: 3 }),
      running: fc.subarray(['a', 'b', 'c', 'd']).map((u) => new Set(u)),
      limits: fc.uniqueArray(limit, { selector: (l) => l.uid, maxLength: 4 }),
      budget: fc.integer({ min: 0, max: 3 }),
    });

    it('a limit is never left on a pod once the policy is gone: each is lifted, none is kept or set', () => {
      fc.assert(
        fc.property(inputs, (over) => {
          const plan = decideLimits(input({ ...over, active: false }));
          expect(plan.limits).to.deep.equal([]);
          const lifted = plan.decisions.filter((d) => d.kind === 'Lift').map((d) => d.pod.uid);
          expect(lifted).to.deep.equal(over.limits.map((l) => l.uid));
          expect(plan.decisions).to.have.length(over.limits.length);
        }),
      );
    });

    it('no limit under the floor, none raised by a step, at most budget set or stepped, and one limit a pod', () => {
      fc.assert(
        fc.property(inputs, (over) => {
          const i = input(over);
          const plan = decideLimits(i);
          for (const l of plan.limits)
            for (const k of ['rbps', 'wbps', 'riops', 'wiops'] as const) {
              expect(l.limit[k]).to.be.at.least(l.floor[k]);
              expect(l.floor[k]).to.be.at.least(k.endsWith('bps') ? MiB : 20);
            }
          for (const d of plan.decisions)
            if (d.kind === 'Step')
              for (const k of ['rbps', 'wbps', 'riops', 'wiops'] as const)
                expect(d.pod.limit[k]).to.be.at.most(d.before[k]);
          const spent = plan.decisions.filter((d) => d.kind === 'Set' || d.kind === 'Step').length;
          expect(spent).to.be.at.most(i.budget);
          expect(new Set(plan.limits.map((l) => l.uid)).size).to.equal(plan.limits.length);
        }),
      );
    });
  });
});
