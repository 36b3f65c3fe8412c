import { expect } from 'chai';
import fc from 'fast-check';
import { firstEvictionReserve, RateBudget, reserveShrinksAt } from '../../../src/policy/rate-window.js';

const NOW = new Date('2026-12-04T12:00:00Z');
const ago = (seconds: number) => new Date(NOW.getTime() - seconds * 1000);

describe('the reserve for first evictions', () => {
  it('is a third of the limit while the window is fresh, none below 3, and shrinks evenly as the window ages', () => {
    expect(firstEvictionReserve(30, [], NOW)).to.equal(10);
    expect(firstEvictionReserve(10, [], NOW)).to.equal(3);
    expect(firstEvictionReserve(2, [], NOW)).to.equal(0);
    expect(firstEvictionReserve(30, [ago(0)], NOW)).to.equal(10);
    expect(firstEvictionReserve(30, [ago(6), ago(1)], NOW)).to.equal(9);
    expect(firstEvictionReserve(30, [ago(30)], NOW)).to.equal(5);
    expect(firstEvictionReserve(30, [ago(59.9)], NOW)).to.equal(0);
    // Out of the window: a fresh one.
    expect(firstEvictionReserve(30, [ago(60)], NOW)).to.equal(10);
  });

  it('tells when it has shrunk below the budget left: a node with an eviction already may take one then', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 3, max: 200 }),
        fc.integer({ min: 0, max: 59_000 }),
        fc.integer({ min: 1, max: 70 }),
        (limit, ageMs, left) => {
          const moments = [new Date(NOW.getTime() - ageMs)];
          const at = reserveShrinksAt(limit, moments, NOW, left);
          expect(at.getTime()).to.be.at.least(NOW.getTime());
          // At that moment the reserve is below what is left; a millisecond before it, not (unless that was already so).
          expect(firstEvictionReserve(limit, moments, at)).to.be.below(left);
          const before = new Date(at.getTime() - 1);
          if (before.getTime() >= NOW.getTime())
            expect(firstEvictionReserve(limit, moments, before)).to.be.at.least(left);
        },
      ),
    );
  });
});

describe('a rate budget (the evictor and the pacer each own one)', () => {
  const iso = (d: Date) => d.toISOString();
  const budget = new RateBudget(3);
  const cases: {
    name: string;
    run: () => string[] | undefined;
    want: string[] | undefined;
  }[] = [
    {
      name: 'keeps what is still in the window',
      run: () => budget.kept([iso(ago(61)), iso(ago(59))], NOW),
      want: [iso(ago(59))],
    },
    {
      name: 'reserves nothing when nothing is to be spent',
      run: () => budget.reserve([iso(ago(5))], NOW, 0, NOW),
      want: undefined,
    },
    {
      name: 'reserves each one stamped when it will have been spent',
      run: () => budget.reserve([iso(ago(5))], NOW, 2, ago(-30)),
      want: [iso(ago(5)), iso(ago(-30)), iso(ago(-30))],
    },
    {
      name: 'keeps the newest `max` of a reservation',
      run: () => budget.reserve([iso(ago(10)), iso(ago(5))], NOW, 2, NOW),
      want: [iso(ago(5)), iso(NOW), iso(NOW)],
    },
    {
      name: 'writes what was spent oldest first, after the log',
      run: () => budget.spent([iso(ago(70)), iso(ago(20))], NOW, [ago(1), ago(3)]),
      want: [iso(ago(20)), iso(ago(3)), iso(ago(1))],
    },
  ];
  for (const { name, run, want } of cases)
    it(name, () => {
      expect(run()).to.deep.equal(want);
    });
});
