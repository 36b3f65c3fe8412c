// /healthz: alive until a reconcile runs past wedgedAfterMs, said once per wedged key, and alive again once it ends.
import { expect } from 'chai';
import { Liveness } from '../../../../src/controllers/manager/liveness.js';
import { Controller } from '../../../../src/runtime/controller.js';
import { WorkQueue } from '../../../../src/runtime/work-queue.js';

describe('Liveness', () => {
  it('is not alive while a reconcile runs past the limit, says so once, and is alive once it ends', async () => {
    const errors: string[] = [];
    let finish: () => void = () => undefined;
    const queue = new WorkQueue<string>();
    const controller = new Controller('sandboxpolicy', queue, () => {
      return new Promise((resolve) => {
        finish = () => {
          resolve(undefined);
        };
      });
    });
    const liveness = new Liveness({ error: (m, f) => errors.push(`${m} ${JSON.stringify(f)}`) }, 50);
    controller.start(1);
    expect(liveness.check([controller]), 'nothing running').to.equal(true);
    queue.add('web');
    await new Promise((r) => setTimeout(r, 20));
    expect(liveness.check([controller]), 'running, within the limit').to.equal(true);
    await new Promise((r) => setTimeout(r, 60));
    expect(liveness.check([controller]), 'past the limit').to.equal(false);
    expect(liveness.check([controller]), 'still').to.equal(false);
    expect(errors).to.have.length(1);
    expect(errors[0]).to.contain('"reconcile":"sandboxpolicy/web"');
    finish();
    await new Promise((r) => setTimeout(r, 10));
    expect(liveness.check([controller]), 'ended').to.equal(true);
    await controller.stop();
  });
});
