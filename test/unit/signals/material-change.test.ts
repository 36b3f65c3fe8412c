import { expect } from 'chai';
import type { IoReadingStatus } from '../../../src/api/v1alpha1/index.js';
import { BANDS, isMaterialChange, nextLevel } from '../../../src/signals/material-change.js';
import { T0 } from '../../support/builders.js';

const reading = (fields: Partial<IoReadingStatus>): IoReadingStatus => ({
  source: 'agent',
  observedTime: T0.toISOString(),
  ...fields,
});
const dState = (n: number) =>
  Array.from({ length: n }, (_, i) => ({ pid: 100 + i, comm: 'jbd2/vda1-8', runtime: false }));

/** Feeds readings through isMaterialChange as the agent does; returns the indexes of those it would publish. */
function published(readings: IoReadingStatus[]): number[] {
  let last: IoReadingStatus | undefined;
  return readings.flatMap((r, i) => {
    if (!isMaterialChange(last, r)) return [];
    last = r;
    return [i];
  });
}

describe('isMaterialChange', () => {
  it('publishes an idle node whose D-state count, blocked tasks and PSI wobble once', () => {
    const wobble = [0, 1, 2, 0, 2, 1, 1, 0, 2, 2, 0].map((n, i) =>
      reading({
        psiSomeAvg10Percent: [0.4, 1.9, 0.7, 2.8][i % 4],
        psiFullAvg10Percent: [0.1, 0.9][i % 2],
        diskBusyPercent: [0, 3.2, 11.5, 1][i % 4],
        blockedProcesses: n,
        dStateTasks: dState(n),
      }),
    );
    expect(published(wobble)).to.deep.equal([0]);
  });

  it('publishes crossing into a band, and coming back only past its exit threshold', () => {
    // D-state tasks: 9 enters the band at 8; 7, 5 and 4 stay in it (its exit is 4); 3 leaves it; 5 is back in the
    // band at 4, which 3 does not leave (its exit is 2) and 1 does.
    const counts = [1, 9, 7, 5, 4, 8, 3, 5, 3, 1];
    expect(published(counts.map((n) => reading({ dStateTasks: dState(n) })))).to.deep.equal([0, 1, 6, 7, 9]);
    // PSI some: 39.9 enters the band at 20, 40 the one at 40; 35 and 30 stay (exit 30), 29.9 leaves, 41 re-enters.
    const psi = [12, 39.9, 40, 35, 30, 29.9, 41];
    expect(published(psi.map((p) => reading({ psiSomeAvg10Percent: p })))).to.deep.equal([0, 1, 2, 5, 6]);
  });

  it('has an edge at every default policy threshold', () => {
    const enters = (bands: readonly { enter: number }[], value: number) =>
      bands.some((b) => b.enter === value);
    expect(enters(BANDS.psi, 40), 'PSI some 40%').to.equal(true);
    expect(enters(BANDS.psi, 20), 'PSI full 20%').to.equal(true);
    expect(enters(BANDS.diskBusy, 90), 'disk busy 90%').to.equal(true);
    expect(enters(BANDS.tasks, 8), '8 blocked tasks').to.equal(true);
    for (const bands of Object.values(BANDS))
      for (const b of bands) expect(b.exit, `${b.enter}`).to.be.below(b.enter);
  });

  it('jumps several bands at once in either direction', () => {
    expect(nextLevel(85, 0, BANDS.psi)).to.equal(BANDS.psi.length);
    expect(nextLevel(0.5, BANDS.psi.length, BANDS.psi)).to.equal(0);
  });

  it('publishes a value that becomes known or unknown, and a node condition that turns', () => {
    const base = reading({ psiSomeAvg10Percent: 1, diskBusyPercent: 2 });
    const { diskBusyPercent: _drop, ...unknownDisk } = base;
    expect(isMaterialChange(undefined, base)).to.equal(true);
    expect(isMaterialChange(base, unknownDisk)).to.equal(true);
    expect(isMaterialChange(unknownDisk, base)).to.equal(true);
    expect(isMaterialChange(reading({ conditionTrue: false }), reading({ conditionTrue: true }))).to.equal(
      true,
    );
    expect(isMaterialChange(reading({ conditionTrue: true }), reading({ conditionTrue: true }))).to.equal(
      false,
    );
  });
});
