import { expect } from 'chai';
import { ExponentialBackoff, jitteredDelay, TokenBucket } from '../../../src/runtime/backoff.js';
import { FakeClock } from '../../../src/runtime/clock.js';
import { WorkQueue } from '../../../src/runtime/work-queue.js';

const drain = async (queue: WorkQueue<string>) => {
  const keys: string[] = [];
  while (queue.length > 0) {
    const key = (await queue.get())!;
    keys.push(key);
    queue.done(key);
  }
  return keys;
};

describe('WorkQueue', () => {
  it('de-duplicates keys that are waiting', async () => {
    const queue = new WorkQueue<string>();
    for (const key of ['a', 'b', 'a', 'a', 'c', 'b']) queue.add(key);
    expect(await drain(queue)).to.deep.equal(['a', 'b', 'c']);
  });

  it('hands a key to one worker at a time and queues it again if it was added while in flight', async () => {
    const queue = new WorkQueue<string>();
    queue.add('a');
    const first = await queue.get();
    queue.add('a'); // while in flight: must not be handed out twice
    expect(queue.length).to.equal(0);
    queue.add('b');
    expect(await queue.get()).to.equal('b');
    queue.done('b');
    queue.done(first!);
    expect(queue.length).to.equal(1);
    expect(await queue.get()).to.equal('a');
  });

  it('wakes a waiting worker when a key arrives', async () => {
    const queue = new WorkQueue<string>();
    const waiting = queue.get();
    queue.add('x');
    expect(await waiting).to.equal('x');
    expect(queue.inFlight()).to.equal(1);
  });

  it('adds after a delay, keeping the earliest delay for a key', () => {
    const clock = new FakeClock();
    const queue = new WorkQueue<string>({ clock });
    queue.addAfter('a', 1000);
    queue.addAfter('a', 5000); // later: ignored
    queue.addAfter('b', 3000);
    queue.addAfter('b', 2000); // earlier: replaces
    clock.advance(999);
    expect(queue.length).to.equal(0);
    clock.advance(1);
    expect(queue.length).to.equal(1);
    clock.advance(1000);
    expect(queue.length).to.equal(2);
    clock.advance(10_000);
    expect(queue.length).to.equal(2);
  });

  it('backs a failing key off exponentially and forgets on success', () => {
    const clock = new FakeClock();
    const queue = new WorkQueue<string>({ clock, baseDelayMs: 10, maxDelayMs: 50 });
    expect([1, 2, 3, 4, 5].map(() => queue.addRateLimited('k'))).to.deep.equal([10, 20, 40, 50, 50]);
    expect(queue.failures('k')).to.equal(5);
    queue.forget('k');
    expect(queue.addRateLimited('k')).to.equal(10);
  });

  it('applies the global limit across keys', () => {
    const clock = new FakeClock();
    const queue = new WorkQueue<string>({ clock, baseDelayMs: 1, qps: 10, burst: 2 });
    expect(queue.addRateLimited('a')).to.equal(1);
    expect(queue.addRateLimited('b')).to.equal(1);
    expect(queue.addRateLimited('c')).to.be.closeTo(100, 0.001); // third within the burst waits for a token
  });

  it('releases waiting workers and ignores adds after shutdown', async () => {
    const clock = new FakeClock();
    const queue = new WorkQueue<string>({ clock });
    const waiting = queue.get();
    queue.addAfter('later', 100);
    queue.shutDown();
    expect(await waiting).to.equal(undefined);
    queue.add('x');
    clock.advance(1000);
    expect(queue.length).to.equal(0);
    expect(clock.pending()).to.equal(0);
  });
});

describe('backoff', () => {
  it('caps exponential growth per key', () => {
    const backoff = new ExponentialBackoff<string>(5, 1_000_000);
    const delays = Array.from({ length: 30 }, () => backoff.next('x'));
    expect(delays.slice(0, 3)).to.deep.equal([5, 10, 20]);
    expect(delays.at(-1)).to.equal(1_000_000);
    expect(backoff.next('y')).to.equal(5);
  });

  it('refills tokens over time', () => {
    let now = 0;
    const bucket = new TokenBucket(2, 1, () => now);
    expect(bucket.reserve()).to.equal(0);
    expect(bucket.reserve()).to.equal(500);
    now = 2000;
    expect(bucket.reserve()).to.equal(0);
  });

  it('jitters restart delays within the capped window', () => {
    expect(jitteredDelay(0, 500, 30_000, () => 1)).to.equal(500);
    expect(jitteredDelay(10, 500, 30_000, () => 1)).to.equal(30_000);
    expect(jitteredDelay(3, 500, 30_000, () => 0)).to.equal(0);
  });

  it('spaces a key out after a run, in proportion to how long it took, up to maxMs; changes meanwhile go in one run', async () => {
    const clock = new FakeClock(0);
    const queue = new WorkQueue<string>({ clock, spacing: { factor: 4, maxMs: 200 } });
    queue.add('p');
    queue.done((await queue.get())!, 30); // a 30 ms run: held back 120 ms
    for (let i = 0; i < 5; i++) queue.add('p');
    queue.add('q'); // another key is not held back
    expect(queue.length).to.equal(1);
    expect(await queue.get()).to.equal('q');
    queue.done('q');
    clock.advance(119);
    expect(queue.length).to.equal(0);
    clock.advance(1);
    expect(queue.length, 'the five changes, taken by one run').to.equal(1);
    queue.done((await queue.get())!, 1_000); // a long run: held back maxMs, not 4 s
    queue.add('p');
    clock.advance(199);
    expect(queue.length).to.equal(0);
    clock.advance(1);
    expect(queue.length).to.equal(1);
    queue.done((await queue.get())!, 0); // a run that cost nothing holds nothing back
    queue.add('p');
    expect(queue.length).to.equal(1);
  });
});
