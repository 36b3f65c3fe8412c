import { expect } from 'chai';
import { fenced, NotActingError } from '../../../src/runtime/fence.js';

describe('fenced', () => {
  it('passes calls through while the replica acts, and refuses every one from the moment it stops', async () => {
    const calls: string[] = [];
    const actuator = {
      dryRun: false,
      async patchNode(name: string) {
        calls.push(name);
        return Promise.resolve(`rv-${name}`);
      },
    };
    let acting = true;
    const guarded = fenced(actuator, () => acting);
    expect(guarded.dryRun).to.equal(false);
    expect(await guarded.patchNode('n1')).to.equal('rv-n1');
    acting = false;
    const refused = await guarded.patchNode('n2').then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused).to.be.instanceOf(NotActingError);
    expect(calls).to.deep.equal(['n1']);
  });
});
