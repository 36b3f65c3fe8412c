import { expect } from 'chai';
import type { IoConsumer, IoReadingStatus } from '../../../src/api/v1alpha1/index.js';
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

describe('isMaterialChange on the attribution', () => {
  type Row = [uid: string, share: number, role?: IoConsumer['role']];
  /** Pods by UID with their shares (and roles, Bystander by default), then the runtime's and System's. */
  const attribution = (
    pods: Row[],
    runtime = 5,
    system = 100 - runtime - pods.reduce((a, p) => a + p[1], 0),
  ) =>
    reading({
      psiSomeAvg10Percent: 45,
      attribution: {
        confidence: 'High',
        confidenceReason: 'cgroup v2 with ext4: writeback is charged to the cgroup that wrote',
        podsMeasured: pods.length,
        consumers: [
          ...pods.map(([podUid, sharePercent, role = 'Bystander']): IoConsumer => ({
            kind: 'Pod',
            podUid,
            sharePercent,
            role,
          })),
          { kind: 'Runtime', sharePercent: runtime, role: 'Runtime' },
          { kind: 'System', sharePercent: system, role: 'System' },
        ],
      },
    });
  const { attribution: _none, ...withoutAttribution } = attribution([]);

  it('publishes an attribution that becomes known, not one that goes (the other bands say when that is written)', () => {
    expect(isMaterialChange(withoutAttribution, attribution([['a', 10]]))).to.equal(true);
    expect(isMaterialChange(attribution([['a', 10]]), withoutAttribution)).to.equal(false);
  });

  it('publishes a wobbling attribution once: pods near each other swap the top, shares move within a band', () => {
    const wobble = [
      attribution([
        ['a', 31],
        ['b', 29],
        ['c', 3],
      ]),
      attribution([
        ['b', 31],
        ['a', 29],
        ['c', 4],
      ]),
      attribution(
        [
          ['a', 33],
          ['b', 30],
          ['c', 2],
        ],
        7,
      ),
      attribution(
        [
          ['b', 32],
          ['a', 28],
        ],
        4,
      ),
      attribution(
        [
          ['a', 27],
          ['b', 27],
          ['c', 1],
        ],
        6,
      ),
    ];
    expect(published(wobble)).to.deep.equal([0]);
  });

  const cases: [string, IoReadingStatus, IoReadingStatus, boolean][] = [
    [
      'a pod takes the top by 5 points',
      attribution([
        ['a', 30],
        ['b', 28],
      ]),
      attribution([
        ['b', 34],
        ['a', 29],
      ]),
      true,
    ],
    [
      'the top pod leaves the list',
      attribution([
        ['a', 30],
        ['b', 10],
      ]),
      attribution([['b', 12]]),
      true,
    ],
    ['a first pod is listed', attribution([]), attribution([['a', 3]]), true],
    [
      'a pod turns Culprit',
      attribution([
        ['a', 30, 'Bystander'],
        ['b', 20],
      ]),
      attribution([
        ['a', 30, 'Culprit'],
        ['b', 20],
      ]),
      true,
    ],
    [
      'a Victim comes onto the list (the fifth place changes hands at every look)',
      attribution([['a', 10]]),
      attribution([
        ['a', 10],
        ['v', 0, 'Victim'],
      ]),
      false,
    ],
    [
      'a listed pod turns Victim',
      attribution([
        ['a', 10],
        ['v', 1],
      ]),
      attribution([
        ['a', 10],
        ['v', 1, 'Victim'],
      ]),
      true,
    ],
    [
      'a Culprit comes onto the list',
      attribution([['a', 10]]),
      attribution([
        ['a', 10],
        ['c', 30, 'Culprit'],
      ]),
      true,
    ],
    [
      'a Bystander leaves the list',
      attribution([
        ['a', 10],
        ['b', 1],
      ]),
      attribution([['a', 10]]),
      false,
    ],
    [
      'a Culprit leaves the list',
      attribution([
        ['a', 60, 'Culprit'],
        ['b', 1],
      ]),
      attribution([['b', 2]]),
      true,
    ],
    ['the top share crosses 25', attribution([['a', 24]]), attribution([['a', 25]]), true],
    ['the top share falls to 21 (exit 20)', attribution([['a', 26]]), attribution([['a', 21]]), false],
    ['the top share falls below 20', attribution([['a', 26]]), attribution([['a', 19.9]]), true],
    ['the top share crosses 50 and 75 at once', attribution([['a', 40]]), attribution([['a', 80]]), true],
    ['the runtime crosses 50', attribution([['a', 10]], 45), attribution([['a', 10]], 55), true],
    ['System falls past 65 from 80', attribution([['a', 15]], 5, 80), attribution([['a', 31]], 5, 64), true],
  ];
  for (const [name, from, to, material] of cases)
    it(`${material ? 'publishes' : 'does not publish'} when ${name}`, () => {
      expect(isMaterialChange(from, to)).to.equal(material);
    });
  it('publishes once while a victim at the fifth place comes and goes at every look', () => {
    const look = (i: number) =>
      attribution([
        ['big', 60, 'Culprit'],
        ['p1', 5],
        ['p2', 5],
        ['p3', 5],
        i % 2 === 0 ? ['v', 4.5, 'Victim'] : ['p4', 4.6],
      ]);
    let published = look(0);
    let writes = 0;
    for (let i = 1; i < 20; i++)
      if (isMaterialChange(published, look(i))) {
        writes++;
        published = look(i);
      }
    expect(writes).to.equal(0);
  });

  it('tells pods a source names but gives no UID (Prometheus) by their namespace and name', () => {
    const named = (rows: [string, number, IoConsumer['role']][]) => {
      const r = attribution([]);
      r.attribution!.consumers = [
        ...rows.map(([name, sharePercent, role]): IoConsumer => ({
          kind: 'Pod',
          namespace: 'db',
          name,
          sharePercent,
          role,
        })),
        { kind: 'System', sharePercent: 100 - rows.reduce((a, x) => a + x[1], 0), role: 'System' },
      ];
      return r;
    };
    expect(
      isMaterialChange(named([['a', 60, 'Culprit']]), named([['b', 60, 'Culprit']])),
      'another pod on top',
    ).to.equal(true);
    expect(
      isMaterialChange(named([['a', 60, 'Culprit']]), named([['a', 62, 'Culprit']])),
      'the same pod',
    ).to.equal(false);
    expect(
      isMaterialChange(
        named([
          ['a', 30, 'Culprit'],
          ['b', 28, 'Bystander'],
        ]),
        named([
          ['a', 30, 'Culprit'],
          ['b', 28, 'Culprit'],
        ]),
      ),
      "the second pod's role",
    ).to.equal(true);
  });
});
