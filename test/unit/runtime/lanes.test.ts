import { expect } from 'chai';
import fc from 'fast-check';
import { Lanes } from '../../../src/runtime/lanes.js';

/** Lanes whose writes wait until the test lets each go, recording starts, ends and what settled said. */
function held(concurrency: number) {
  const started: string[] = [];
  const settled: { key: string; wanted: boolean; error?: string }[] = [];
  /** Starts and settlements in order (`start a`, `settled a wanted`), for the test to put its asks beside. */
  const log: string[] = [];
  const release = new Map<string, (error?: Error) => void>();
  let inFlight = 0;
  let peak = 0;
  const lanes = new Lanes<string>({
    concurrency,
    run: (key) => {
      started.push(key);
      log.push(`start ${key}`);
      peak = Math.max(peak, ++inFlight);
      return new Promise<void>((resolve, reject) => {
        release.set(key, (error) => {
          inFlight--;
          release.delete(key);
          if (error) reject(error);
          else resolve();
        });
      });
    },
    settled: (key, wanted, error) => {
      settled.push({ key, wanted, ...(error instanceof Error ? { error: error.message } : {}) });
      if (wanted) log.push(`settled ${key} wanted`);
    },
  });
  const finish = async (key: string, error?: Error) => {
    const done = release.get(key);
    if (!done) throw new Error(`${key} is not in flight`);
    done(error);
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { lanes, started, settled, log, finish, peak: () => peak, inFlight: () => [...release.keys()] };
}

describe('Lanes', () => {
  it('runs at most `concurrency` writes, urgent ones first, each kind in the order asked', async () => {
    const { lanes, started, finish } = held(1);
    lanes.submit('a', false); // starts at once
    lanes.submit('b', false);
    lanes.submit('c', true);
    lanes.submit('d', false);
    lanes.submit('e', true);
    expect(started).to.deep.equal(['a']);
    expect(lanes.waiting).to.equal(4);
    for (const key of ['a', 'c', 'e', 'b']) await finish(key);
    expect(started).to.deep.equal(['a', 'c', 'e', 'b', 'd']);
  });

  it('keeps a waiting key in its place, raised to urgent when asked again so', async () => {
    const { lanes, started, finish } = held(1);
    lanes.submit('a', false);
    lanes.submit('b', false);
    lanes.submit('c', false);
    lanes.submit('b', false); // no second place
    lanes.submit('c', true); // jumps the routine line
    expect(lanes.waiting).to.equal(2);
    await finish('a');
    await finish('c');
    await finish('b');
    expect(started).to.deep.equal(['a', 'c', 'b']);
    expect(lanes.size).to.equal(0);
  });

  it('never runs one key twice at once: asked while in flight, it is noted and settled says it was wanted', async () => {
    const { lanes, started, settled, finish } = held(4);
    expect(lanes.submit('a', false)).to.equal(true);
    expect(lanes.submit('a', true)).to.equal(false);
    expect(lanes.busy('a')).to.equal(true);
    expect(started).to.deep.equal(['a']);
    await finish('a');
    expect(settled).to.deep.equal([{ key: 'a', wanted: true }]);
    expect(started).to.deep.equal(['a'], 'the caller looks again: the lane does not rerun a stale write');
    lanes.submit('a', false);
    await finish('a');
    expect(settled.at(-1)).to.deep.equal({ key: 'a', wanted: false });
  });

  it('goes on after a write fails, and tells the failure', async () => {
    const { lanes, started, settled, finish } = held(1);
    lanes.submit('a', false);
    lanes.submit('b', false);
    await finish('a', new Error('boom'));
    expect(settled[0]).to.deep.equal({ key: 'a', wanted: false, error: 'boom' });
    expect(started).to.deep.equal(['a', 'b']);
  });

  it('drops a waiting key, and resolves idle once nothing waits or runs', async () => {
    const { lanes, started, finish } = held(1);
    lanes.submit('a', false);
    lanes.submit('b', false);
    lanes.drop('b');
    let idle = false;
    void lanes.idle().then(() => (idle = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(idle).to.equal(false);
    await finish('a');
    expect(idle).to.equal(true);
    expect(started).to.deep.equal(['a']);
  });

  it('holds its bounds for any sequence of asks and ends: one per key, `concurrency` in all, every key run', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 4 }),
        fc.array(fc.tuple(fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f'), fc.boolean(), fc.boolean()), {
          maxLength: 40,
        }),
        async (concurrency, steps) => {
          const { lanes, log, finish, peak, inFlight } = held(concurrency);
          const asked = new Set<string>();
          for (const [key, urgent, end] of steps) {
            log.push(`ask ${key}`);
            lanes.submit(key, urgent);
            asked.add(key);
            const running = inFlight();
            expect(new Set(running).size).to.equal(running.length);
            if (end && running.length > 0) await finish(running[0]!);
          }
          while (inFlight().length > 0) await finish(inFlight()[0]!);
          expect(peak()).to.be.at.most(concurrency);
          expect(lanes.size).to.equal(0);
          // Every key ran after it was last asked, or was in flight then and settled saying it was wanted again.
          for (const key of asked) {
            const after = log.slice(log.lastIndexOf(`ask ${key}`));
            expect(
              after.some((e) => e === `start ${key}` || e === `settled ${key} wanted`),
              key,
            ).to.equal(true);
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  describe('with overlaps (a write fenced on the one in flight)', () => {
    /** Lanes whose key may overlap while `allow` holds; writes end when the test says, oldest first per key. */
    function overlapping(concurrency: number, allow: (key: string, urgent: boolean) => boolean) {
      const ends: { key: string; end: () => void }[] = [];
      const settled: { key: string; wanted: boolean }[] = [];
      const lanes = new Lanes<string>({
        concurrency,
        run: (key) => new Promise<void>((resolve) => ends.push({ key, end: resolve })),
        settled: (key, wanted) => settled.push({ key, wanted }),
        overlaps: allow,
      });
      const finish = async (key: string) => {
        const at = ends.findIndex((e) => e.key === key);
        if (at < 0) throw new Error(`${key} is not in flight`);
        ends.splice(at, 1)[0]!.end();
        await new Promise((resolve) => setImmediate(resolve));
      };
      const flying = () => ends.map((e) => e.key);
      return { lanes, settled, finish, flying };
    }

    it('sends a second write of a key in flight when overlaps allows it, never a third', async () => {
      const { lanes, settled, finish, flying } = overlapping(4, (_key, urgent) => urgent);
      lanes.submit('a', true);
      expect(lanes.submit('a', false), 'a routine one waits').to.equal(false);
      expect(flying()).to.deep.equal(['a']);
      expect(lanes.submit('a', true)).to.equal(true);
      expect(flying()).to.deep.equal(['a', 'a']);
      expect(lanes.flying('a')).to.equal(2);
      expect(lanes.submit('a', true), 'two at most').to.equal(false);
      expect(flying()).to.deep.equal(['a', 'a']);
      await finish('a');
      expect(settled, 'the wanted one is told with the first back').to.deep.equal([
        { key: 'a', wanted: true },
      ]);
      await finish('a');
      expect(settled).to.deep.equal([
        { key: 'a', wanted: true },
        { key: 'a', wanted: false },
      ]);
      expect(lanes.size).to.equal(0);
    });

    it('counts an overlapping write against the concurrency: it waits for a slot, first among the urgent', async () => {
      const { lanes, finish, flying } = overlapping(2, () => true);
      lanes.submit('a', false);
      lanes.submit('b', false);
      lanes.submit('c', false);
      expect(lanes.submit('a', true)).to.equal(true);
      expect(flying()).to.deep.equal(['a', 'b']);
      await finish('b');
      expect(flying(), 'the urgent follow-up before c').to.deep.equal(['a', 'a']);
      await finish('a');
      expect(flying()).to.deep.equal(['a', 'c']);
    });

    it('never overlaps without the option', () => {
      let running = 0;
      const lanes = new Lanes<string>({
        concurrency: 4,
        run: () => {
          running++;
          return new Promise<void>(() => undefined);
        },
        settled: () => undefined,
      });
      lanes.submit('a', true);
      expect(lanes.submit('a', true)).to.equal(false);
      expect(running).to.equal(1);
      expect(lanes.flying('a')).to.equal(1);
    });
  });
});
