import { expect } from 'chai';
import { BackgroundQueue } from '../../../src/runtime/background.js';

describe('BackgroundQueue', () => {
  it('runs what it is given out of the caller’s way, in order of arrival, under its concurrency', async () => {
    const done: number[] = [];
    let inFlight = 0;
    let peak = 0;
    const queue = new BackgroundQueue<number>({
      concurrency: 2,
      limit: 100,
      run: async (n) => {
        inFlight++;
        peak = Math.max(peak, inFlight);
        await new Promise((r) => setTimeout(r, 2));
        done.push(n);
        inFlight--;
      },
      onError: () => undefined,
      onDrop: () => undefined,
    });
    for (let i = 0; i < 6; i++) queue.push(i);
    expect(done, 'push returns before any item is done').to.deep.equal([]);
    await queue.drain(1_000);
    expect(done).to.have.members([0, 1, 2, 3, 4, 5]);
    expect(peak).to.equal(2);
    expect(queue.size).to.equal(0);
  });

  it('drops the oldest waiting item beyond its limit, and reports failures without stopping', async () => {
    const dropped: number[] = [];
    const failed: number[] = [];
    const done: number[] = [];
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    const queue = new BackgroundQueue<number>({
      concurrency: 1,
      limit: 2,
      run: async (n) => {
        await gate;
        if (n === 3) throw new Error('refused');
        done.push(n);
      },
      onError: (n) => failed.push(n),
      onDrop: (n) => dropped.push(n),
    });
    for (let i = 0; i < 5; i++) queue.push(i); // 0 runs; 1, 2 wait; 3 drops 1; 4 drops 2
    expect(dropped).to.deep.equal([1, 2]);
    release();
    await queue.drain(1_000);
    expect(done).to.deep.equal([0, 4]);
    expect(failed).to.deep.equal([3]);
  });

  it('gives up draining after the timeout', async () => {
    const queue = new BackgroundQueue<number>({
      concurrency: 1,
      limit: 10,
      run: () => new Promise(() => undefined), // never settles
      onError: () => undefined,
      onDrop: () => undefined,
    });
    queue.push(1);
    await queue.drain(20); // resolves (mocha's timeout would catch a hang), with the item still running
    expect(queue.size).to.equal(1);
  });
});
