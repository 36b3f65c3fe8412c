import { expect } from 'chai';
import {
  decideIoPressure,
  judgeReading,
  readingTime,
  type Judgement,
} from '../../../src/policy/io-pressure.js';
import { secondsAfter, T0 } from '../../support/builders.js';

const thresholds = {
  psiSomeAvg10Percent: 40,
  psiFullAvg10Percent: 20,
  diskBusyPercent: 90,
  blockedProcesses: 8,
};
const reading = (fields: Record<string, unknown>, at = T0) => ({
  source: 'agent',
  observedTime: at.toISOString(),
  ...fields,
});

describe('judgeReading', () => {
  const table: {
    name: string;
    reading: ReturnType<typeof reading> | undefined;
    observation: string;
    detail?: RegExp;
  }[] = [
    { name: 'no reading', reading: undefined, observation: 'Unknown', detail: /no reading/ },
    {
      name: 'a reading with nothing known',
      reading: reading({}),
      observation: 'Unknown',
      detail: /no known value/,
    },
    {
      name: 'everything low',
      reading: reading({ psiSomeAvg10Percent: 3, diskBusyPercent: 10, blockedProcesses: 0 }),
      observation: 'Under',
    },
    {
      name: 'PSI some at its threshold',
      reading: reading({ psiSomeAvg10Percent: 40 }),
      observation: 'Over',
      detail: /^PSI some avg10 >= 40%$/,
    },
    {
      name: 'PSI full over',
      reading: reading({ psiSomeAvg10Percent: 10, psiFullAvg10Percent: 25 }),
      observation: 'Over',
      detail: /^PSI full avg10 >= 20%$/,
    },
    {
      name: 'a busy disk',
      reading: reading({ diskBusyPercent: 99 }),
      observation: 'Over',
      detail: /^disk busy >= 90%$/,
    },
    {
      name: 'many blocked tasks',
      reading: reading({ blockedProcesses: 12 }),
      observation: 'Over',
      detail: /^blocked tasks >= 8$/,
    },
    { name: 'a true node condition', reading: reading({ conditionTrue: true }), observation: 'Over' },
    { name: 'a false node condition', reading: reading({ conditionTrue: false }), observation: 'Under' },
    {
      name: 'a stale high reading',
      reading: reading({ psiSomeAvg10Percent: 90 }, secondsAfter(T0, -120)),
      observation: 'Unknown',
      detail: /^the latest reading is older than 90s$/,
    },
    {
      name: 'a high reading stamped an hour ahead (a clock ahead)',
      reading: reading({ psiSomeAvg10Percent: 90 }, secondsAfter(T0, 3600)),
      observation: 'Unknown',
      detail: /^the latest reading is stamped more than 90s in the future \(a clock ahead\)$/,
    },
    {
      name: 'a high reading stamped a little ahead (within staleAfterSeconds)',
      reading: reading({ psiSomeAvg10Percent: 90 }, secondsAfter(T0, 60)),
      observation: 'Over',
    },
    {
      name: 'a low reading stamped a day ago',
      reading: reading({ psiSomeAvg10Percent: 1 }, secondsAfter(T0, -86_400)),
      observation: 'Unknown',
      detail: /^the latest reading is older than 90s$/,
    },
  ];
  for (const row of table) {
    it(`says ${row.observation} for ${row.name}`, () => {
      const judged = judgeReading(row.reading, thresholds, T0, 90);
      expect(judged.observation).to.equal(row.observation);
      if (row.detail) expect(judged.details.join('; ')).to.match(row.detail);
    });
  }
});

describe('judgeReading while IO limits of ours hold pods back', () => {
  // A throttled task waits on IO: the node's PSI and blocked tasks count the throttle itself (make demo-limit-io: PSI
  // some 90 % with the disk 4 % busy). The disk's busy time says whether the disk is saturated.
  const table: [string, Record<string, unknown>, string, RegExp | undefined][] = [
    [
      'the throttle stalling, the disk quiet',
      { psiSomeAvg10Percent: 92, blockedProcesses: 30, diskBusyPercent: 4 },
      'Under',
      undefined,
    ],
    [
      'the disk still saturated',
      { psiSomeAvg10Percent: 92, diskBusyPercent: 95 },
      'Over',
      /^disk busy >= 90%; PSI and blocked tasks not counted/,
    ],
    [
      'no busy time to judge on (Prometheus without it)',
      { psiSomeAvg10Percent: 92 },
      'Over',
      /^PSI some avg10 >= 40%$/,
    ],
  ];
  for (const [name, fields, observation, detail] of table)
    it(`says ${observation} for ${name}`, () => {
      const judged = judgeReading(reading(fields), thresholds, T0, 90, true);
      expect(judged.observation).to.equal(observation);
      if (detail) expect(judged.details.join('; ')).to.match(detail);
      if (name.startsWith('the throttle'))
        expect(judgeReading(reading(fields), thresholds, T0, 90).observation, 'with no limit').to.equal(
          'Over',
        );
    });
});

describe('judgeReading of an agent whose clock runs an hour ahead', () => {
  // At 12:00 it writes Over, stamped 13:00, and dies; the apiserver took it at 12:00.
  const written = {
    ...reading({ psiSomeAvg10Percent: 90 }, secondsAfter(T0, 3600)),
    writtenTime: T0.toISOString(),
  };
  for (const [label, at, observation] of [
    ['refuses it as it arrives (ClockSkew)', 30, 'Unknown'],
    ['refuses it when the operator clock reaches the stamp, an hour later', 3570, 'Unknown'],
    ['refuses it at the stamp itself', 3600, 'Unknown'],
  ] as const) {
    it(label, () => {
      expect(judgeReading(written, thresholds, secondsAfter(T0, at), 90).observation).to.equal(observation);
    });
  }
  it('takes a reading on time whose apiserver time agrees, as before', () => {
    const onTime = {
      ...reading({ psiSomeAvg10Percent: 90 }, secondsAfter(T0, -5)),
      writtenTime: secondsAfter(T0, -5).toISOString(),
    };
    expect(judgeReading(onTime, thresholds, T0, 90).observation).to.equal('Over');
    expect(readingTime(onTime)).to.equal(secondsAfter(T0, -5).getTime());
  });
});

describe('judgeReading details', () => {
  it('name the signals and thresholds that are over, never the values, so two samples read alike', () => {
    const judged = [
      { psiSomeAvg10Percent: 41.3, psiFullAvg10Percent: 2.1, diskBusyPercent: 97.5, blockedProcesses: 3 },
      { psiSomeAvg10Percent: 67.9, psiFullAvg10Percent: 3.4, diskBusyPercent: 92, blockedProcesses: 5 },
    ].map((fields) => judgeReading(reading(fields), thresholds, T0, 90));
    expect(judged[0]).to.deep.equal({
      observation: 'Over',
      details: ['PSI some avg10 >= 40%', 'disk busy >= 90%'],
    });
    expect(judged[1]).to.deep.equal(judged[0]);
    const stale = [30, 45].map((age) =>
      judgeReading(reading({ psiSomeAvg10Percent: 90 }, secondsAfter(T0, -age)), thresholds, T0, 20),
    );
    expect(stale[1]).to.deep.equal(stale[0]);
    const ahead = [600, 7200].map((skew) =>
      judgeReading(reading({ psiSomeAvg10Percent: 90 }, secondsAfter(T0, skew)), thresholds, T0, 20),
    );
    expect(ahead[1]).to.deep.equal(ahead[0]);
    expect(ahead[0]?.unknownReason).to.equal('ClockSkew');
  });
});

describe('decideIoPressure', () => {
  const over: Judgement = { observation: 'Over', details: ['PSI some avg10 >= 40%'] };
  const under: Judgement = { observation: 'Under', details: [] };
  const unknown: Judgement = { observation: 'Unknown', details: ['no reading'] };

  /** Plays judgements at the given seconds, carrying status and tracking along as the stored status would. */
  function play(steps: [number, Judgement][]) {
    let status: 'True' | 'False' | 'Unknown' | undefined;
    let tracking: { observation: 'Over' | 'Under' | 'Unknown'; since: Date } | undefined;
    return steps.map(([at, judgement]) => {
      const d = decideIoPressure({
        previousStatus: status,
        previousTracking: tracking,
        judgement,
        now: secondsAfter(T0, at),
        sustainSeconds: 30,
        recoverySeconds: 120,
      });
      status = d.condition.status;
      tracking = d.tracking;
      return [at, d.condition.status, d.condition.reason, d.recheckAfterMs] as const;
    });
  }

  it('rises only after sustainSeconds over, and falls only after recoverySeconds under', () => {
    expect(
      play([
        [0, under],
        [10, over],
        [25, over],
        [40, over],
        [60, under],
        [100, under],
        [180, under],
      ]),
    ).to.deep.equal([
      [0, 'False', 'BelowThresholds', undefined],
      [10, 'False', 'ThresholdNotSustained', 30_000],
      [25, 'False', 'ThresholdNotSustained', 15_000],
      [40, 'True', 'ThresholdSustained', undefined],
      [60, 'True', 'RecoveryPending', 120_000],
      [100, 'True', 'RecoveryPending', 80_000],
      [180, 'False', 'Recovered', undefined],
    ]);
  });

  it('restarts the sustain window when a reading dips under', () => {
    const steps = play([
      [0, over],
      [20, under],
      [25, over],
      [50, over],
      [55, over],
    ]);
    expect(steps.map((s) => s[1])).to.deep.equal(['False', 'False', 'False', 'False', 'True']);
  });

  it('neither rises nor recovers through unknown readings', () => {
    const wasHigh = play([
      [0, over],
      [40, over],
      [50, unknown],
      [300, unknown],
      [310, under],
      [429, under],
      [430, under],
    ]);
    expect(wasHigh.map((s) => `${s[1]}/${s[2]}`)).to.deep.equal([
      'False/ThresholdNotSustained',
      'True/ThresholdSustained',
      'True/ReadingUnknown', // still known to be high: nothing may be undone on unknown readings
      'True/ReadingUnknown',
      'True/RecoveryPending', // recovery counts from the first verified reading under the thresholds
      'True/RecoveryPending',
      'False/Recovered',
    ]);
    const wasLow = play([
      [0, under],
      [10, unknown],
      [20, over],
      [45, over],
      [50, over],
    ]);
    expect(wasLow.map((s) => `${s[1]}/${s[2]}`)).to.deep.equal([
      'False/BelowThresholds',
      'Unknown/ReadingUnknown',
      'False/ThresholdNotSustained',
      'False/ThresholdNotSustained',
      'True/ThresholdSustained',
    ]);
  });
});

describe('judgeReading against the writer heartbeat', () => {
  it('takes a reading younger than 1.5 heartbeats as current, even past a shorter staleAfterSeconds', () => {
    const published = reading({ psiSomeAvg10Percent: 3, heartbeatSeconds: 60 });
    expect(judgeReading(published, thresholds, secondsAfter(T0, 80), 30).observation).to.equal('Under');
    const gone = judgeReading(published, thresholds, secondsAfter(T0, 95), 30);
    expect(gone.observation).to.equal('Unknown');
    expect(gone.details.join()).to.match(/older than 90s/);
    // Without a promised heartbeat, the policy's bound alone.
    expect(
      judgeReading(reading({ psiSomeAvg10Percent: 3 }), thresholds, secondsAfter(T0, 40), 30).observation,
    ).to.equal('Unknown');
  });
});
