import { expect } from 'chai';
import { forEachLimit } from '../../../src/runtime/limit.js';

describe('forEachLimit', () => {
  it('runs every item, never more than the limit at once, starting them in order', async () => {
    let inFlight = 0;
    let peak = 0;
    const started: number[] = [];
    await forEachLimit([1, 2, 3, 4, 5, 6, 7], 3, async (n) => {
      started.push(n);
      inFlight++;
      peak = Math.max(peak, inFlight);
      await new Promise((r) => setTimeout(r, 8 - n)); // later items finish sooner
      inFlight--;
    });
    expect(started).to.deep.equal([1, 2, 3, 4, 5, 6, 7]);
    expect(peak).to.equal(3);
  });

  it('does nothing for no items, and runs one at a time with limit 1', async () => {
    await forEachLimit([], 4, () => Promise.reject(new Error('never called')));
    let inFlight = 0;
    let peak = 0;
    await forEachLimit([1, 2, 3], 1, async () => {
      inFlight++;
      peak = Math.max(peak, inFlight);
      await Promise.resolve();
      inFlight--;
    });
    expect(peak).to.equal(1);
  });
});
