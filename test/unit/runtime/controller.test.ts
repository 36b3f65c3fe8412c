import { expect } from 'chai';
import { setTimeout as sleep } from 'node:timers/promises';
import { Controller, TerminalError } from '../../../src/runtime/controller.js';
import { FakeClock } from '../../../src/runtime/clock.js';
import { WorkQueue } from '../../../src/runtime/work-queue.js';

const settle = () => sleep(5);

describe('Controller', () => {
  it('never runs two reconciles of one key at once, and sees every change', async () => {
    const queue = new WorkQueue<string>();
    let active = 0;
    let maxActive = 0;
    let runs = 0;
    const controller = new Controller('t', queue, async () => {
      active++;
      maxActive = Math.max(maxActive, active);
      runs++;
      await sleep(10);
      active--;
      return undefined;
    });
    controller.start(4);
    queue.add('k');
    await sleep(2);
    queue.add('k'); // arrives mid-reconcile: must run again afterwards, not alongside
    queue.add('k');
    await sleep(50);
    await controller.stop();
    expect(maxActive).to.equal(1);
    expect(runs).to.equal(2);
  });

  it('retries failures with backoff, forgets on success, and does not retry terminal errors', async () => {
    const clock = new FakeClock();
    const queue = new WorkQueue<string>({ clock, baseDelayMs: 100 });
    const calls: string[] = [];
    const errors: [string, number | undefined][] = [];
    let failuresLeft = 2;
    const controller = new Controller(
      't',
      queue,
      async (key) => {
        calls.push(key);
        if (key === 'bad') throw new TerminalError('invalid');
        if (failuresLeft-- > 0) throw new Error('transient');
        return Promise.resolve(undefined);
      },
      { onError: (key, _err, retry) => errors.push([key, retry]) },
    );
    controller.start(1);
    queue.add('flaky');
    await settle();
    clock.advance(100);
    await settle();
    clock.advance(200);
    await settle();
    expect(calls).to.deep.equal(['flaky', 'flaky', 'flaky']);
    expect(errors).to.deep.equal([
      ['flaky', 100],
      ['flaky', 200],
    ]);
    expect(queue.failures('flaky')).to.equal(0);

    queue.add('bad');
    await settle();
    clock.advance(10_000);
    await settle();
    expect(calls.filter((k) => k === 'bad')).to.have.length(1);
    expect(errors.at(-1)).to.deep.equal(['bad', undefined]);
    await controller.stop();
  });

  it('requeues after the delay a reconcile asks for', async () => {
    const clock = new FakeClock();
    const queue = new WorkQueue<string>({ clock });
    let runs = 0;
    const controller = new Controller('t', queue, () => {
      runs++;
      return Promise.resolve(runs === 1 ? { requeueAfterMs: 30_000 } : undefined);
    });
    controller.start(1);
    queue.add('wait');
    await settle();
    clock.advance(29_999);
    await settle();
    expect(runs).to.equal(1);
    clock.advance(1);
    await settle();
    expect(runs).to.equal(2);
    await controller.stop();
  });
});
