// The one rule of shares and roles every attributing source uses (the agent, Prometheus, the kubelet Summary).
import { expect } from 'chai';
import fc from 'fast-check';
import {
  CULPRIT_SHARE_PERCENT,
  podRole,
  scaleShares,
  shareOf,
  splitHundred,
  VICTIM_PSI_PERCENT,
} from '../../../src/signals/io-shares.js';

describe('splitHundred', () => {
  it('gives tenths that add up to exactly 100, each within a tenth of its value', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 1, maxLength: 8 }),
        (weights) => {
          const sum = weights.reduce((a, b) => a + b, 0);
          fc.pre(sum > 0);
          const values = weights.map((w) => (w / sum) * 100);
          const split = splitHundred(values);
          expect(Math.round(split.reduce((a, b) => a + b, 0) * 10)).to.equal(1000);
          for (const [i, s] of split.entries()) {
            expect(Math.abs(s - values[i]!)).to.be.below(0.1 + 1e-9);
            expect(Math.round(s * 10)).to.equal(s * 10);
          }
        },
      ),
    );
    expect(splitHundred([100 / 3, 100 / 3, 100 / 3])).to.deep.equal([33.4, 33.3, 33.3]);
  });
});

describe('shareOf and scaleShares', () => {
  it('takes the larger of the share of bytes and of operations, and none of a device that did nothing', () => {
    expect(shareOf({ bytes: 10, ops: 50 }, { bytes: 100, ops: 100 })).to.equal(50);
    expect(shareOf({ bytes: 60, ops: 5 }, { bytes: 100, ops: 100 })).to.equal(60);
    expect(shareOf({ bytes: 60 }, { bytes: 100, ops: 100 }), 'no ops counted: bytes alone').to.equal(60);
    expect(shareOf({ bytes: 5, ops: 5 }, { bytes: 0, ops: 0 })).to.equal(0);
  });
  it('scales shares that sum past 100 down to 100, keeps the rest, and clamps negatives to 0', () => {
    expect(scaleShares([80, 40])).to.deep.equal([(80 * 100) / 120, (40 * 100) / 120]);
    expect(scaleShares([30, 20])).to.deep.equal([30, 20]);
    expect(scaleShares([-5, 50])).to.deep.equal([0, 50]);
  });
});

describe('podRole', () => {
  it('makes a Culprit from the share threshold, a Victim from the pressure threshold, else a Bystander', () => {
    expect(podRole(CULPRIT_SHARE_PERCENT, undefined, undefined)).to.equal('Culprit');
    expect(podRole(CULPRIT_SHARE_PERCENT - 0.1, VICTIM_PSI_PERCENT, undefined)).to.equal('Victim');
    expect(podRole(CULPRIT_SHARE_PERCENT - 0.1, VICTIM_PSI_PERCENT - 0.1, undefined)).to.equal('Bystander');
    expect(podRole(0, undefined, undefined), 'no pressure known').to.equal('Bystander');
  });
  it('leaves a role only past its exit, under the threshold that entered it', () => {
    expect(podRole(21, undefined, 'Culprit'), 'a culprit at 21 % of a 25 % threshold stays').to.equal(
      'Culprit',
    );
    expect(podRole(19.9, undefined, 'Culprit')).to.equal('Bystander');
    expect(podRole(21, undefined, 'Bystander'), 'but does not enter at 21 %').to.equal('Bystander');
    expect(podRole(0, 15, 'Victim')).to.equal('Victim');
    expect(podRole(0, 13.9, 'Victim')).to.equal('Bystander');
  });
  it('takes other thresholds', () => {
    const thresholds = { culpritSharePercent: 50, victimPsiPercent: 5 };
    expect(podRole(40, 6, undefined, thresholds)).to.equal('Victim');
    expect(podRole(50, 0, undefined, thresholds)).to.equal('Culprit');
  });
});
