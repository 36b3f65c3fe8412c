import { expect } from 'chai';
import { FakeClock } from '../../../src/runtime/clock.js';
import { Expectations } from '../../../src/runtime/expectations.js';

describe('Expectations (read-your-writes fence)', () => {
  it('holds an object until the cache shows our version or a newer one', () => {
    const expectations = new Expectations(new FakeClock(0), 30_000);
    expectations.expect('Node/n1', '120');
    expect(expectations.isSettled('Node/n1', undefined)).to.equal(false);
    expect(expectations.isSettled('Node/n1', '119')).to.equal(false);
    expect(expectations.isSettled('Node/n1', '1000')).to.equal(true); // numeric, not text: "1000" > "120"
    expect(expectations.size).to.equal(0);
    expect(expectations.isSettled('Node/n1', '1'), 'met once, forgotten').to.equal(true);
  });

  it('compares resourceVersions that are not integers for equality only', () => {
    const expectations = new Expectations(new FakeClock(0));
    expectations.expect('SandboxHealth/n1', 'abc');
    expect(expectations.isSettled('SandboxHealth/n1', 'abd')).to.equal(false);
    expect(expectations.isSettled('SandboxHealth/n1', 'abc')).to.equal(true);
  });

  it('lets go after its TTL, so a lost watch event cannot hold a node forever, and on forget()', () => {
    const clock = new FakeClock(0);
    const expectations = new Expectations(clock, 30_000);
    expectations.expect('Node/n1', '5');
    clock.advance(29_999);
    expect(expectations.isSettled('Node/n1', '4')).to.equal(false);
    clock.advance(1);
    expect(expectations.isSettled('Node/n1', '4')).to.equal(true);
    expectations.expect('Node/n2', '5');
    expectations.forget('Node/n2');
    expect(expectations.isSettled('Node/n2', undefined)).to.equal(true);
  });

  it('ignores a write that returned no version', () => {
    const expectations = new Expectations(new FakeClock(0));
    expectations.expect('Node/n1', undefined);
    expect(expectations.isSettled('Node/n1', undefined)).to.equal(true);
  });
});
