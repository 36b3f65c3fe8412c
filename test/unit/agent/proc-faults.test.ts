// Issue 12: the /proc parsers fed random, truncated and corrupted files. A parser either returns what the intact
// parts of the file say, or throws ProcParseError (the sampler's "unknown"); never NaN, a negative or imprecise
// counter, a percentage outside 0..100, or a number taken from the wrong field.
import { expect } from 'chai';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  parseDiskstats,
  parsePressure,
  parseStat,
  parseTaskStat,
  parseWchan,
  ProcParseError,
  type DiskStat,
  type Pressure,
  type StatInfo,
  type TaskStat,
} from '../../../src/agent/proc.js';
import { REPO_ROOT } from '../../support/manifests.js';

const fixture = (state: 'idle' | 'load', file: string) =>
  readFileSync(join(REPO_ROOT, 'test/fixtures/proc', state, file), 'utf8');

/** /proc/PID/stat as the kernel writes it: recorded on this machine (6.18), and a D-state runc with an odd comm. */
const TASK_STATS = [
  '10 (kworker/0:0H-kblockd) I 2 0 0 0 -1 69238880 0 0 0 0 0 688 0 0 0 -20 1 0 22 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n',
  '2297 (cat) R 2285 2285 29570 0 -1 4194304 102 0 0 0 0 0 0 0 20 0 1 0 4211851 3133440 394 18446744073709551615 94337789407232 94337789427113 140736533880448 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 94337789443120 94337789444736 94338738909184 140736533887681 140736533887701 140736533887701 140736533889003 0\n',
  '4242 (runc:[2:INIT] (x)) D 1 4242 4242 0 -1 4194560 1234 0 5 0 17 9 0 0 20 0 1 0 123456 1234567 345 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 3 0 0 0 0 0 0 0 0 0\n',
];

/** Numbers no parser may read as a number: not decimal digits, or beyond what a double holds exactly. */
const BAD_NUMBERS = [
  'NaN',
  '-1',
  '-0',
  '18446744073709551615',
  '9007199254740993',
  '1e3',
  '0x10',
  '0b1',
  'Infinity',
  '+5',
  '.5',
  '5.',
  '1,5',
  '1_0',
  '٣',
  '１２',
  '12abc',
  '1\u00a02',
  '½',
];
/** Characters to insert anywhere: non-ASCII, control characters, separators. */
const ODD_CHARACTERS = ['é', '\u00a0', '\ufeff', '😀', '\u0000', '\t', '\r', ' ', '\n', '=', '(', ')', '-'];

/** Whether text holds a field separator: any whitespace, and for PID/stat any byte up to the space. */
const hasSeparator = (text: string) => /\s/.test(text) || Array.from(text).some((c) => c.charCodeAt(0) <= 32);

/** Faults that remove text or add a separator: a line or a field fewer or more. */
const isStructural = (m: Mutation) =>
  ['cut', 'dropLine', 'dropToken'].includes(m.kind) ||
  (m.kind === 'insert' && hasSeparator(m.text)) ||
  (m.kind === 'badNumber' && (m.bad === '' || hasSeparator(m.bad)));

interface Span {
  start: number;
  end: number;
}
const spans = (text: string, pattern: RegExp): Span[] =>
  [...text.matchAll(pattern)].map((m) => ({ start: m.index, end: m.index + m[0].length }));
interface Subject<T> {
  name: string;
  samples: string[];
  parse: (text: string) => T;
  /** The parsed value as records by key, to compare with what the intact file says. */
  records: (value: T) => Map<string, unknown>;
  /** Ranges every parsed value keeps, whatever the input. */
  check: (value: T) => void;
  /** Adding or removing a whole field: invisible in /proc/PID/stat (see below). */
  fieldsFixed?: boolean;
  /** What a mutation leaves alone: names, which a valid file may spell any way (a task's comm holds any byte). */
  names?: (text: string) => Span[];
}

const isCounter = (n: number) => Number.isSafeInteger(n) && n >= 0;
const expectCounters = (what: string, ...values: number[]) => {
  for (const n of values) expect(isCounter(n), `${what}: ${n}`).to.equal(true);
};

const pressure: Subject<Pressure> = {
  name: 'pressure/io',
  samples: [fixture('idle', 'pressure-io'), fixture('load', 'pressure-io')],
  parse: (text) => parsePressure(text),
  records: (p) =>
    new Map(
      Object.entries(p).filter((entry): entry is [string, NonNullable<Pressure['some']>] => !!entry[1]),
    ),
  check: (p) => {
    expect(p.some).to.not.equal(undefined);
    for (const line of [p.some, p.full]) {
      if (!line) continue;
      for (const avg of [line.avg10, line.avg60, line.avg300]) expect(avg).to.be.within(0, 100);
      expectCounters('total', line.total);
    }
  },
};

const diskstats: Subject<DiskStat[]> = {
  name: 'diskstats',
  samples: ['diskstats', 'diskstats-1s'].flatMap((f) => [fixture('idle', f), fixture('load', f)]),
  parse: (text) => parseDiskstats(text),
  records: (disks) => new Map(disks.map((d) => [d.name, d])),
  names: (text) => spans(text, /(?<=^ *\d+ +\d+ +)\S+/gm),
  check: (disks) => {
    expect(new Set(disks.map((d) => d.name)).size, 'one line per device').to.equal(disks.length);
    for (const d of disks) {
      expect(d.name).to.match(/^\S+$/);
      expectCounters(d.name, d.reads, d.readTicks, d.writes, d.writeTicks, d.inFlight, d.ioTicks);
    }
  },
};

const stat: Subject<StatInfo> = {
  name: 'stat',
  samples: [fixture('idle', 'stat'), fixture('load', 'stat')],
  parse: (text) => parseStat(text),
  records: (info) => new Map(Object.entries(info)),
  check: (info) => {
    expectCounters('procs', ...Object.values(info as Record<string, number>));
  },
};

const taskStat: Subject<TaskStat> = {
  name: 'PID/stat',
  samples: TASK_STATS,
  parse: (text) => parseTaskStat(text),
  records: (task) => new Map([['task', task]]),
  check: (task) => {
    expectCounters('pid, utime, stime', task.pid, task.utime, task.stime);
    expect(task.state).to.match(/^[A-Za-z]$/);
    expect(task.comm.length).to.be.at.most(64);
  },
  // The kernel writes 52 fields; an extra or missing one before utime shifts it, and only a hard-coded field count
  // would show that. The agent does not count (it cuts 13 fields, docs/adr/0011-lean-agent.md), so the
  // mutations here replace, swap and cut fields but never add or remove one.
  fieldsFixed: true,
  names: (text) => [{ start: text.indexOf('('), end: text.lastIndexOf(')') + 1 }],
};

type Mutation =
  | { kind: 'cut'; at: number }
  | { kind: 'dropLine'; at: number }
  | { kind: 'dropToken'; at: number }
  | { kind: 'badNumber'; at: number; bad: string }
  | { kind: 'swap'; at: number }
  | { kind: 'insert'; at: number; text: string }
  | { kind: 'crlf' }
  | { kind: 'duplicateLine'; at: number; bump: number };

const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('cut' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('dropLine' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('dropToken' as const), at: fc.nat() }),
  fc.record({
    kind: fc.constant('badNumber' as const),
    at: fc.nat(),
    // Without digits, so that the text put in a number's place cannot itself be a valid, different number.
    bad: fc.oneof(
      fc.constantFrom('', ...BAD_NUMBERS),
      fc.string({ unit: 'grapheme', maxLength: 4 }).filter((s) => !/\d/.test(s)),
    ),
  }),
  fc.record({ kind: fc.constant('swap' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), text: fc.constantFrom(...ODD_CHARACTERS) }),
  fc.record({ kind: fc.constant('crlf' as const) }),
  fc.record({
    kind: fc.constant('duplicateLine' as const),
    at: fc.nat(),
    bump: fc.integer({ min: 1, max: 9 }),
  }),
);

const replace = (text: string, { start, end }: Span, by: string) =>
  text.slice(0, start) + by + text.slice(end);
const pick = <T>(items: T[], at: number): T | undefined => items[at % Math.max(1, items.length)];

/** A number that is a whole field (or a key's value), not the digits of a name such as loop0 or avg10. */
const WHOLE_NUMBER = /(?<![^ \t\n=])\d+(?:\.\d+)?(?![^ \t\r\n])/g;

/**
 * The text with one fault. Every fault leaves the file invalid or saying the same as before, except a cut or a
 * dropped line at a line boundary, which leaves fewer records: so what a parser returns must be a subset of the
 * intact file's records.
 */
function mutate<T>(subject: Subject<T>, text: string, m: Mutation): string {
  const names = subject.names?.(text) ?? [];
  const free = (s: Span) => names.every((name) => s.end <= name.start || s.start >= name.end);
  switch (m.kind) {
    case 'cut':
      return text.slice(0, m.at % (text.length + 1));
    case 'dropLine': {
      const lines = text.split('\n');
      lines.splice(m.at % lines.length, 1);
      return lines.join('\n');
    }
    case 'dropToken': {
      if (subject.fieldsFixed) return text;
      const token = pick(spans(text, /[^ \t\n]+/g), m.at);
      return token ? replace(text, token, '') : text;
    }
    case 'badNumber': {
      const inField = (c: string) => (c.charCodeAt(0) <= 32 || c === '(' || c === ')' ? 'x' : c);
      const bad = subject.fieldsFixed ? Array.from(m.bad).map(inField).join('') || 'x' : m.bad;
      const number = pick(spans(text, WHOLE_NUMBER).filter(free), m.at);
      return number ? replace(text, number, bad) : text;
    }
    case 'swap': {
      // Two neighbours on one line of different kinds (number, key=value, word): two numbers swapped are a valid
      // file, and so are two of PSI's key=value pairs.
      const tokens = spans(text, /[^ \t\n]+/g).filter(free);
      const i = m.at % Math.max(1, tokens.length - 1);
      const [a, b] = [tokens[i], tokens[i + 1]];
      if (!a || !b || text.slice(a.end, b.start).includes('\n')) return text;
      const [x, y] = [text.slice(a.start, a.end), text.slice(b.start, b.end)];
      const kind = (token: string) =>
        /^\d+$/.test(token) ? 'number' : token.includes('=') ? 'pair' : 'word';
      if (kind(x) === kind(y)) return text;
      return text.slice(0, a.start) + y + text.slice(a.end, b.start) + x + text.slice(b.end);
    }
    case 'insert': {
      // In PID/stat a separator or parenthesis adds a field or moves the end of comm: see fieldsFixed.
      if (subject.fieldsFixed && (hasSeparator(m.text) || /[()]/.test(m.text))) return text;
      const at = m.at % (text.length + 1);
      if (!free({ start: at - 1, end: at + 1 })) return text; // not glued to a name either
      return text.slice(0, at) + m.text + text.slice(at);
    }
    case 'crlf':
      return text.replace(/\n/g, '\r\n');
    case 'duplicateLine': {
      // A PID/stat line cut short and then doubled reads as one task whose comm holds a newline, as a comm may:
      // two lines are refused because the first is longer than a comm, so only whole lines are doubled here.
      if (subject.fieldsFixed && !text.endsWith('\n')) return text;
      const lines = text.split('\n');
      const i = m.at % lines.length;
      const line = lines[i] ?? '';
      const number = spans(line, WHOLE_NUMBER).find((s) => !line.slice(s.start, s.end).includes('.'));
      const copy = number
        ? replace(line, number, String(Number(line.slice(number.start, number.end)) + m.bump))
        : line;
      lines.splice(i + 1, 0, copy);
      return lines.join('\n');
    }
  }
}

/** The parser read `text` as the intact `original` says, or refused it. */
function expectAgrees<T>(subject: Subject<T>, original: string, text: string): void {
  let value: T;
  try {
    value = subject.parse(text);
  } catch (err) {
    expect(err, JSON.stringify(text)).to.be.instanceOf(ProcParseError);
    return;
  }
  subject.check(value);
  const intact = subject.records(subject.parse(original));
  for (const [key, record] of subject.records(value))
    expect(record, `${subject.name} ${key} from ${JSON.stringify(text)}`).to.deep.equal(intact.get(key));
}

const SUBJECTS = [pressure, diskstats, stat, taskStat] as Subject<unknown>[];

describe('/proc parsers on cut and corrupted copies of real files', () => {
  it('read every valid sample whole', () => {
    for (const subject of SUBJECTS)
      for (const sample of subject.samples)
        expect(subject.records(subject.parse(sample)).size).to.be.above(0);
  });

  for (const subject of SUBJECTS) {
    it(`${subject.name}: a file cut at any offset reads as its intact lines or not at all`, () => {
      for (const sample of subject.samples)
        for (let at = 0; at <= sample.length; at++) expectAgrees(subject, sample, sample.slice(0, at));
    });

    it(`${subject.name}: one to three faults read as the intact parts or not at all`, () => {
      fc.assert(
        fc.property(
          fc.nat({ max: subject.samples.length - 1 }),
          fc.array(mutationArb, { minLength: 1, maxLength: 3 }),
          (which, faults) => {
            const original = subject.samples[which]!;
            // At most one structural fault: two can cancel out, and no parser could tell the result from the
            // kernel's (one field lost and another split in two shift the numbers between them; a number split by
            // a newline and then cut after it is a shorter number).
            const mutations = faults.filter(
              (m, i) => !isStructural(m) || !faults.slice(0, i).some(isStructural),
            );
            // Swaps first, of the file's own fields: a swap after a bad number moves the bad word out of the
            // fields read and a good number in. A doubled line differs from its original by a number: it is a
            // fault only next to it, so it comes last.
            const rank = (m: Mutation) => (m.kind === 'swap' ? 0 : m.kind === 'duplicateLine' ? 2 : 1);
            mutations.sort((a, b) => rank(a) - rank(b));
            const text = mutations.reduce((t, m) => mutate(subject, t, m), original);
            expectAgrees(subject, original, text);
          },
        ),
        { numRuns: 400 },
      );
    });
  }
});

/** Text that looks like /proc: its words, keys, numbers good and bad, and separators, in any order. */
const procLikeText = fc
  .array(
    fc.oneof(
      fc.constantFrom(
        'some',
        'full',
        'avg10=',
        'avg60=',
        'avg300=',
        'total=',
        'procs_blocked',
        'procs_running',
        'vda',
        'loop0',
        '254',
        '(',
        ')',
        '(kworker/0:1)',
        'D',
        'I',
        '=',
        ' ',
        ' ',
        ' ',
        '\n',
        '\r\n',
        '\t',
        ...BAD_NUMBERS,
      ),
      fc.nat().map(String),
      fc.float({ min: 0, max: 200, noNaN: true }).map((n) => n.toFixed(2)),
    ),
    { maxLength: 60 },
  )
  .map((parts) => parts.join(''));

describe('/proc parsers on random text', () => {
  it('return only values in range, or refuse with ProcParseError', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'binary', maxLength: 300 }), procLikeText), (text) => {
        for (const subject of SUBJECTS) {
          let value: unknown;
          try {
            value = subject.parse(text);
          } catch (err) {
            expect(err).to.be.instanceOf(ProcParseError);
            continue;
          }
          subject.check(value);
        }
      }),
      { numRuns: 1500 },
    );
  });

  it('read a wchan only as a kernel symbol name', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ unit: 'binary', maxLength: 80 }),
          fc.constantFrom('do_mount', 'foo.isra.0', '0'),
        ),
        (text) => {
          const wchan = parseWchan(text);
          if (wchan === undefined) return;
          expect(wchan).to.equal(text.trim());
          expect(wchan).to.match(/^[A-Za-z_][\w.]*$/);
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('/proc parsers: the faults the properties found, one each', () => {
  const PSI = 'some avg10=0.72 avg60=0.16 avg300=0.11 total=14587130\n';
  const FULL = 'full avg10=0.42 avg60=0.10 avg300=0.08 total=8415516\n';
  const VDA =
    ' 254 0 vda 194089 16049 5455810 154199 44107 183293 29782328 56763 2 30476 216607 47771 39 18248216 5634 251 9\n';
  const LOOP = '   7 0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n';
  const TASK = TASK_STATS[0]!;
  const cases: [string, () => unknown][] = [
    ['PSI cut inside total, the last line', () => parsePressure(PSI.slice(0, 50))],
    ['PSI with a number split by a space', () => parsePressure(PSI.replace('0.72', '0.7 2'))],
    ['PSI with a number split by a newline', () => parsePressure(PSI.replace('total=145', 'total=145\n'))],
    ['PSI with a second some line', () => parsePressure(PSI + PSI.replace('0.72', '9.72') + FULL)],
    ['PSI with a key given twice', () => parsePressure(PSI.replace('avg60=0.16', 'avg60=0.16 avg60=9.00'))],
    [
      'PSI with a number split by a tab before its "="',
      () => parsePressure(PSI.replace('total=145', 'total=1\t=45')),
    ],
    ['PSI with an exponent', () => parsePressure(PSI.replace('0.72', '7e-1'))],
    ['PSI with a total past 2^53', () => parsePressure(PSI.replace('14587130', '18446744073709551615'))],
    ['diskstats with a device listed twice', () => parseDiskstats(VDA + VDA.replace('194089', '1'))],
    ['diskstats with a column missing', () => parseDiskstats(LOOP + VDA.replace(' 16049', ''))],
    ['diskstats with a number for a name', () => parseDiskstats(LOOP.replace('loop0', '0') + VDA)],
    ['diskstats with a word for minor', () => parseDiskstats(VDA.replace(' 0 vda', ' vda 0'))],
    ['diskstats with a hexadecimal counter', () => parseDiskstats(VDA.replace('194089', '0x10'))],
    [
      'diskstats with a counter past 2^53',
      () => parseDiskstats(VDA.replace('194089', '18446744073709551615')),
    ],
    ['stat cut inside procs_blocked', () => parseStat('procs_running 2\nprocs_blocked 12\n'.slice(0, -2))],
    ['stat with a line broken in two', () => parseStat('procs_running 1\n0\nprocs_blocked 1\n')],
    ['stat with a no-break space in a number', () => parseStat('procs_blocked 1\u00a02\n')],
    ['stat with two numbers for one', () => parseStat('procs_blocked 1 2\n')],
    ['stat with procs_blocked twice', () => parseStat('procs_blocked 1\nprocs_blocked 7\n')],
    ['stat with an exponent', () => parseStat('procs_blocked 1e1\n')],
    ['PID/stat cut inside stime', () => parseTaskStat(TASK.slice(0, TASK.indexOf(' 688') + 2))],
    ['PID/stat with a negative utime', () => parseTaskStat(TASK.replace(' 0 688 ', ' -5 688 '))],
    ['PID/stat with an exponent in stime', () => parseTaskStat(TASK.replace(' 688 ', ' 6e2 '))],
    ['PID/stat with a number for the state', () => parseTaskStat(TASK.replace(') I 2 ', ') 2 I '))],
    ['PID/stat with a word among the numbers', () => parseTaskStat(TASK.replace(' 69238880 ', ' x '))],
    ['PID/stat with two lines in one', () => parseTaskStat(TASK + TASK.replace(' 688 ', ' 9 '))],
    ['PID/stat with a broken pid', () => parseTaskStat(TASK.replace('10 (', '1(0 ('))],
  ];
  for (const [name, parse] of cases) {
    it(`refuses ${name}`, () => {
      expect(parse).to.throw(ProcParseError);
    });
  }

  it('reads "0" and garbage in wchan as no wchan, and a symbol as itself', () => {
    expect(['0', '0\n', '', 'do_mount x', '\u00ff', 'x'.repeat(513)].map(parseWchan)).to.deep.equal(
      Array(6).fill(undefined),
    );
    expect(['do_mount', 'folio_wait_bit_common\n', 'ext4_sync_file.cold'].map(parseWchan)).to.deep.equal([
      'do_mount',
      'folio_wait_bit_common',
      'ext4_sync_file.cold',
    ]);
  });
});
