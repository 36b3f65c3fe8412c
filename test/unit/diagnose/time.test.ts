import { expect } from 'chai';
import { ageSeconds, formatAgo, formatDuration } from '../../../src/diagnose/time.js';

describe('diagnose times', () => {
  const durations: [number, string][] = [
    [0, '0s'],
    [59, '59s'],
    [60, '1m00s'],
    [252, '4m12s'],
    [3599, '59m59s'],
    [3600, '1h00m'],
    [3 * 3600 + 5 * 60 + 59, '3h05m'],
    [86_400, '1d00h'],
    [2 * 86_400 + 7 * 3600, '2d07h'],
    [-252, '4m12s'],
  ];
  for (const [seconds, text] of durations)
    it(`formatDuration(${seconds}) is ${text}`, () => {
      expect(formatDuration(seconds)).to.equal(text);
    });

  it('says "ago" for the past and "in" for what lies ahead', () => {
    expect(formatAgo(252)).to.equal('4m12s ago');
    expect(formatAgo(-65)).to.equal('in 1m05s');
  });

  it('counts whole seconds from a time to now, negative ahead, 0 for a time that does not parse', () => {
    const now = new Date('2026-12-01T04:00:00Z');
    expect(ageSeconds('2026-12-01T03:55:47.900Z', now)).to.equal(252);
    expect(ageSeconds(new Date('2026-12-01T04:01:00Z'), now)).to.equal(-60);
    expect(ageSeconds('not a time', now)).to.equal(0);
  });
});
