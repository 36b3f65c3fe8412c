// The agent's IO limits on crafted cgroup trees with the kernel's semantics (test/support/cgroup-kernel.ts): set on
// one device, stepped down, lifted exactly; a limit of someone else's kept; a key someone changed left as found.
import { expect } from 'chai';
import fc from 'fast-check';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CgroupVersion } from '../../../src/agent/cgroups.js';
import {
  IO_LIMIT_KEYS,
  IoLimiter,
  parseIoMax,
  parseThrottleDevice,
  planLift,
  planLimit,
  V1_THROTTLE_FILES,
  type IoLimit,
  type IoLimitKey,
} from '../../../src/agent/io-limits.js';
import { ProcParseError } from '../../../src/agent/proc.js';
import { CgroupKernel, ioMaxText, throttleText } from '../../support/cgroup-kernel.js';

const MAX = { rbps: 'max', wbps: 'max', riops: 'max', wiops: 'max' } as const;

describe('IO limit files', () => {
  describe('parseIoMax', () => {
    const table: [string, string, [string, IoLimit][]][] = [
      ['no limit at all', '', []],
      [
        'several devices',
        '8:0 rbps=max wbps=1048576 riops=max wiops=120\n259:0 rbps=2097152 wbps=max riops=max wiops=max\n',
        [
          ['8:0', { ...MAX, wbps: 1048576, wiops: 120 }],
          ['259:0', { ...MAX, rbps: 2097152 }],
        ],
      ],
      ['keys left out are max', '8:16 wiops=10\n', [['8:16', { ...MAX, wiops: 10 }]]],
    ];
    for (const [what, text, devices] of table)
      it(what, () => expect([...parseIoMax(text)]).to.deep.equal(devices));

    const refused: [string, string][] = [
      ['a cut line', '8:0 rbps=max wbps=1'],
      ['an unknown key', '8:0 rbps=max lat=10\n'],
      ['a device twice', '8:0 wbps=1\n8:0 rbps=2\n'],
      ['no device', 'rbps=1\n'],
      ['a number past 2^53', '8:0 wbps=18446744073709551615\n'],
    ];
    for (const [what, text] of refused)
      it(`refuses ${what}`, () => expect(() => parseIoMax(text)).to.throw(ProcParseError));
  });

  it('parseThrottleDevice reads "MAJ:MIN value" lines and refuses others', () => {
    expect([...parseThrottleDevice('8:0 1048576\n8:16 5\n', 'f')]).to.deep.equal([
      ['8:0', 1048576],
      ['8:16', 5],
    ]);
    expect(() => parseThrottleDevice('8:0 Read 5\n', 'f')).to.throw(ProcParseError, /line 1/);
  });

  describe('planLimit: a wanted value is written only below what is held', () => {
    const table: [string, IoLimit, IoLimit, IoLimit][] = [
      ['nothing held: everything wanted', MAX, { wbps: 100, wiops: 10 }, { wbps: 100, wiops: 10 }],
      ["someone's lower limit kept", { ...MAX, wbps: 50 }, { wbps: 100, rbps: 100 }, { rbps: 100 }],
      ["someone's higher limit lowered", { ...MAX, wbps: 500 }, { wbps: 100 }, { wbps: 100 }],
      ['an equal one not written again', { ...MAX, wbps: 100 }, { wbps: 100 }, {}],
      ['max wanted writes nothing', MAX, { wbps: 'max' }, {}],
    ];
    for (const [what, held, want, write] of table)
      it(what, () => expect(planLimit(held, want)).to.deep.equal(write));
  });

  describe('planLift: what was written goes back only where it still holds', () => {
    const record = {
      device: '8:0',
      written: { wbps: 100, riops: 7 },
      before: { wbps: 500, riops: 'max' as const },
    };
    const table: [string, IoLimit, IoLimit, IoLimitKey[]][] = [
      ['untouched', { ...MAX, wbps: 100, riops: 7 }, { wbps: 500, riops: 'max' }, []],
      ['one key changed by someone', { ...MAX, wbps: 80, riops: 7 }, { riops: 'max' }, ['wbps']],
      ['the line gone (all max)', MAX, {}, ['wbps', 'riops']],
    ];
    for (const [what, now, restore, changed] of table)
      it(what, () => expect(planLift(now, record)).to.deep.equal({ restore, changed }));
    it('takes a key holding what a step reported ahead replaces for ours too, until the step lands', () => {
      const step = { device: '8:0', written: { wbps: 50 }, before: { wbps: 500 }, replacing: { wbps: 100 } };
      for (const held of [50, 100])
        expect(planLift({ ...MAX, wbps: held }, step)).to.deep.equal({ restore: { wbps: 500 }, changed: [] });
      expect(planLift({ ...MAX, wbps: 500 }, step)).to.deep.equal({ restore: {}, changed: ['wbps'] });
    });
    it('never lowers a key: a record whose before is not above what it wrote is none of ours', () => {
      const forged = {
        device: '8:0',
        written: { wbps: 'max' as const, rbps: 100 },
        before: { wbps: 1, rbps: 100 },
      };
      expect(planLift({ ...MAX, rbps: 100 }, forged)).to.deep.equal({
        restore: {},
        changed: ['rbps', 'wbps'],
      });
    });
  });
});

describe('IoLimiter on a crafted tree', () => {
  let root: string;
  let kernel: CgroupKernel;
  let limiter: IoLimiter;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'io-limits-'));
    kernel = new CgroupKernel();
    limiter = new IoLimiter(kernel);
  });
  afterEach(() => {
    rmSync(root, { recursive: true, force: true });
  });

  /** A pod's cgroup with the limit files as the kernel has them. */
  function cgroup(version: CgroupVersion, files: Record<string, string> = {}): string {
    const dir = join(root, `pod-${version}`);
    mkdirSync(dir, { recursive: true });
    const names = version === 'v2' ? ['io.max'] : Object.values(V1_THROTTLE_FILES);
    for (const name of names) writeFileSync(join(dir, name), files[name] ?? '');
    return dir;
  }
  const read = (dir: string, file: string) => readFileSync(join(dir, file), 'utf8');

  it("v2: limits one device in io.max, leaves the other devices' lines, and lifts to exactly what was there", () => {
    const other = '259:0 rbps=max wbps=4096 riops=max wiops=max\n';
    const dir = cgroup('v2', { 'io.max': other });
    const record = limiter.apply(dir, 'v2', '8:0', { wbps: 1_048_576, wiops: 200 });
    expect(read(dir, 'io.max')).to.equal(`${other}8:0 rbps=max wbps=1048576 riops=max wiops=200\n`);
    expect(record).to.deep.equal({
      device: '8:0',
      written: { wbps: 1_048_576, wiops: 200 },
      before: { wbps: 'max', wiops: 'max' },
    });
    expect(limiter.lift(dir, 'v2', record)).to.deep.equal({
      restored: ['wbps', 'wiops'],
      changed: [],
      gone: false,
    });
    expect(read(dir, 'io.max')).to.equal(other);
  });

  it("v2: keeps someone else's lower limit, never counts it as ours, and lifts only what it wrote", () => {
    const theirs = '8:0 rbps=max wbps=500 riops=max wiops=max\n';
    const dir = cgroup('v2', { 'io.max': theirs });
    const record = limiter.apply(dir, 'v2', '8:0', { wbps: 1000, rbps: 1000 });
    expect(record.written).to.deep.equal({ rbps: 1000 });
    expect(read(dir, 'io.max')).to.equal('8:0 rbps=1000 wbps=500 riops=max wiops=max\n');
    limiter.lift(dir, 'v2', record);
    expect(read(dir, 'io.max')).to.equal(theirs);
  });

  it('v2: a line someone removed is theirs: nothing written back, and it says so', () => {
    const dir = cgroup('v2');
    const record = limiter.apply(dir, 'v2', '8:0', { wbps: 1000 });
    writeFileSync(join(dir, 'io.max'), '');
    kernel.writes.length = 0;
    expect(limiter.lift(dir, 'v2', record)).to.deep.equal({ restored: [], changed: ['wbps'], gone: false });
    expect(kernel.writes).to.deep.equal([]);
  });

  it('v1: one file a key, 0 removes the line; a step down keeps what the files held first', () => {
    const dir = cgroup('v1', { [V1_THROTTLE_FILES.rbps]: '8:0 9000\n' });
    const first = limiter.apply(dir, 'v1', '8:0', { wbps: 4000, rbps: 8000 });
    expect(read(dir, V1_THROTTLE_FILES.wbps)).to.equal('8:0 4000\n');
    expect(read(dir, V1_THROTTLE_FILES.rbps)).to.equal('8:0 8000\n');
    const step = limiter.apply(dir, 'v1', '8:0', { wbps: 2000, rbps: 10_000 }, first);
    // rbps wanted above what the file held before us: ours goes, theirs comes back.
    expect(step).to.deep.equal({ device: '8:0', written: { wbps: 2000 }, before: { wbps: 'max' } });
    expect(read(dir, V1_THROTTLE_FILES.rbps)).to.equal('8:0 9000\n');
    expect(read(dir, V1_THROTTLE_FILES.wbps)).to.equal('8:0 2000\n');
    limiter.lift(dir, 'v1', step);
    expect(read(dir, V1_THROTTLE_FILES.wbps)).to.equal('');
    expect(read(dir, V1_THROTTLE_FILES.rbps)).to.equal('8:0 9000\n');
  });

  it('a cgroup gone (the pod left) is nothing to lift', () => {
    const dir = cgroup('v2');
    const record = limiter.apply(dir, 'v2', '8:0', { wiops: 5 });
    rmSync(dir, { recursive: true });
    expect(limiter.lift(dir, 'v2', record)).to.deep.equal({ restored: [], changed: [], gone: true });
  });

  it('refuses a limit of 0 or a fraction, and a device that is not MAJ:MIN', () => {
    const dir = cgroup('v2');
    expect(() => limiter.apply(dir, 'v2', '8:0', { wbps: 0 })).to.throw(/positive whole number/);
    expect(() => limiter.apply(dir, 'v2', '8:0', { wbps: 1.5 })).to.throw(/positive whole number/);
    expect(() => limiter.apply(dir, 'v2', 'sda', { wbps: 1 })).to.throw(/MAJ:MIN/);
    expect(read(dir, 'io.max')).to.equal('');
  });

  describe('properties', () => {
    const devices = ['8:0', '8:16', '259:0'];
    const value = fc.oneof(fc.constant('max' as const), fc.integer({ min: 1, max: 10_000 }));
    const limit = fc.record(
      Object.fromEntries(IO_LIMIT_KEYS.map((k) => [k, value])) as Record<IoLimitKey, typeof value>,
    );
    const wanted = fc.record(
      Object.fromEntries(IO_LIMIT_KEYS.map((k) => [k, fc.integer({ min: 1, max: 10_000 })])) as Record<
        IoLimitKey,
        fc.Arbitrary<number>
      >,
      { requiredKeys: [] },
    );
    const start = fc.dictionary(fc.constantFrom(...devices), limit);
    const writeOf = (version: CgroupVersion, files: Record<string, Required<IoLimit>>) => {
      const limited = Object.entries(files).filter(([, l]) => IO_LIMIT_KEYS.some((k) => l[k] !== 'max'));
      if (version === 'v2') return { 'io.max': ioMaxText(new Map(limited)) };
      return Object.fromEntries(
        IO_LIMIT_KEYS.map((k) => [
          V1_THROTTLE_FILES[k],
          throttleText(
            new Map(
              limited.flatMap(([d, l]) => {
                const v = l[k];
                return v === 'max' ? [] : [[d, v] as const];
              }),
            ),
          ),
        ]),
      );
    };

    for (const version of ['v2', 'v1'] as const)
      it(`${version}: set, stepped any number of times and lifted, the files are back byte for byte when no one else touched them`, () => {
        fc.assert(
          fc.property(
            start,
            fc.constantFrom(...devices),
            fc.array(wanted, { minLength: 1, maxLength: 4 }),
            (files, device, steps) => {
              rmSync(root, { recursive: true, force: true });
              const dir = cgroup(version, writeOf(version, files));
              const names = version === 'v2' ? ['io.max'] : Object.values(V1_THROTTLE_FILES);
              const before = names.map((n) => read(dir, n));
              let record = limiter.apply(dir, version, device, steps[0]!);
              for (const want of steps.slice(1)) record = limiter.apply(dir, version, device, want, record);
              // Every limit in force is the lower of the last one wanted and what was held before us.
              const held = limiter.readHeld(dir, version, device);
              const first = files[device] ?? MAX;
              for (const key of IO_LIMIT_KEYS) {
                const want = steps.at(-1)![key];
                const was = first[key];
                const expected = want === undefined ? was : was === 'max' || want < was ? want : was;
                expect(held[key], key).to.equal(expected);
              }
              limiter.lift(dir, version, record);
              expect(names.map((n) => read(dir, n))).to.deep.equal(before);
            },
          ),
          { numRuns: 150 },
        );
      });

    it('v2: a key someone changes after the limit keeps their value; every other key is restored', () => {
      fc.assert(
        fc.property(
          start,
          wanted,
          fc.constantFrom(...IO_LIMIT_KEYS),
          fc.integer({ min: 1, max: 10_000 }),
          (files, want, key, theirs) => {
            rmSync(root, { recursive: true, force: true });
            const dir = cgroup('v2', writeOf('v2', files));
            const original = files['8:0'] ?? MAX;
            const record = limiter.apply(dir, 'v2', '8:0', want);
            // Someone writing the very value written cannot be told from it: that one is put back.
            if (record.written[key] === theirs) return;
            kernel.write(join(dir, 'io.max'), `8:0 ${key}=${theirs}\n`);
            const result = limiter.lift(dir, 'v2', record);
            const after = limiter.readHeld(dir, 'v2', '8:0');
            expect(after[key]).to.equal(theirs);
            for (const other of IO_LIMIT_KEYS.filter((k) => k !== key))
              expect(after[other]).to.equal(original[other]);
            if (record.written[key] !== undefined && record.written[key] !== theirs)
              expect(result.changed).to.deep.equal([key]);
          },
        ),
        { numRuns: 150 },
      );
    });
  });
});
