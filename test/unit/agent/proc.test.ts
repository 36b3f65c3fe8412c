import { expect } from 'chai';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  isRuntimeTask,
  isWholeDisk,
  parseDiskstats,
  parsePressure,
  parseStat,
  parseTaskStat,
  ProcParseError,
} from '../../../src/agent/proc.js';
import { REPO_ROOT } from '../../support/manifests.js';

const fixture = (state: 'idle' | 'load', file: string) =>
  readFileSync(join(REPO_ROOT, 'test/fixtures/proc', state, file), 'utf8');

describe('/proc parsers on files recorded from this machine', () => {
  it('reads PSI idle and under stress-ng load', () => {
    const idle = parsePressure(fixture('idle', 'pressure-io'));
    const load = parsePressure(fixture('load', 'pressure-io'));
    expect(idle.some!.avg10).to.be.lessThan(5);
    expect(load.some!.avg10).to.be.greaterThan(30);
    expect(load.full!.total).to.be.greaterThan(0);
    expect(load.some!.total).to.be.greaterThan(idle.some!.total);
  });

  it('reads diskstats and keeps whole disks apart from loop and zram devices', () => {
    const disks = parseDiskstats(fixture('load', 'diskstats'));
    const whole = disks.filter((d) => isWholeDisk(d.name)).map((d) => d.name);
    expect(whole).to.include('vda');
    expect(whole.some((n) => /^(loop|zram)/.test(n))).to.equal(false);
    const vda = disks.find((d) => d.name === 'vda')!;
    const later = parseDiskstats(fixture('load', 'diskstats-1s')).find((d) => d.name === 'vda')!;
    expect(later.ioTicks).to.be.greaterThan(vda.ioTicks);
  });

  it('reads procs_blocked and procs_running', () => {
    expect(parseStat(fixture('load', 'stat'))).to.have.keys('procsBlocked', 'procsRunning');
  });
});

describe('/proc parsers on malformed and truncated input', () => {
  const cases: { name: string; parse: () => unknown; message: RegExp }[] = [
    {
      name: 'PSI without values',
      parse: () => parsePressure('some avg10=\n'),
      message: /pressure\/io: line 1/,
    },
    {
      name: 'PSI out of range',
      parse: () => parsePressure('some avg10=140 avg60=0 avg300=0 total=1\n'),
      message: /out of range/,
    },
    {
      name: 'PSI with no some line',
      parse: () => parsePressure('full avg10=1 avg60=1 avg300=1 total=1\n'),
      message: /no "some" line/,
    },
    {
      name: 'PSI truncated mid-line',
      parse: () => parsePressure('some avg10=0.44 avg60=0.1'),
      message: /line 1/,
    },
    {
      name: 'diskstats truncated',
      parse: () => parseDiskstats(' 254 0 vda 1 2 3\n'),
      message: /fewer than 14/,
    },
    {
      name: 'diskstats with text in a counter',
      parse: () => parseDiskstats(' 254 0 vda 1 2 3 x 5 6 7 8 9 10 11\n'),
      message: /fewer than 14/,
    },
    {
      name: 'stat with a bad procs_blocked',
      parse: () => parseStat('procs_blocked -1\n'),
      message: /bad procs_blocked/,
    },
    { name: 'task stat without comm', parse: () => parseTaskStat('123 R 1 2'), message: /no "\(comm\)"/ },
    { name: 'task stat truncated', parse: () => parseTaskStat('123 (sh) S 1 2 3'), message: /fewer fields/ },
  ];
  for (const { name, parse, message } of cases) {
    it(`says what is wrong with ${name}`, () => {
      expect(parse).to.throw(ProcParseError, message);
    });
  }

  it('never throws anything but ProcParseError, whatever the bytes', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), (text) => {
        for (const parse of [parsePressure, parseDiskstats, parseStat, parseTaskStat]) {
          try {
            parse(text);
          } catch (err) {
            expect(err).to.be.instanceOf(ProcParseError);
          }
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('reads a command containing spaces and parentheses', () => {
    const task = parseTaskStat('4242 (runc:[2:INIT] (x)) D 1 1 1 0 -1 4194560 100 0 0 0 7 3 0 0 20 0');
    expect(task).to.deep.equal({ pid: 4242, comm: 'runc:[2:INIT] (x)', state: 'D', utime: 7, stime: 3 });
  });
});

describe('task and device classification', () => {
  it('flags container runtime tasks', () => {
    for (const comm of ['runc', 'runc:[2:INIT]', 'containerd', 'containerd-shim-runc-v2', 'conmon'])
      expect(isRuntimeTask(comm), comm).to.equal(true);
    for (const comm of ['kworker/u4:2', 'stress-ng-io', 'nginx'])
      expect(isRuntimeTask(comm), comm).to.equal(false);
  });
  it('keeps whole disks only', () => {
    for (const name of ['vda', 'sda', 'nvme0n1', 'dm-0', 'md0', 'xvdf'])
      expect(isWholeDisk(name), name).to.equal(true);
    for (const name of ['sda1', 'vdb2', 'nvme0n1p1', 'mmcblk0p2', 'loop3', 'zram0', 'ram1', 'sr0'])
      expect(isWholeDisk(name), name).to.equal(false);
  });
  it('keeps loop devices only when asked (--include-loop-devices), and still no ram or zram device', () => {
    for (const name of ['loop0', 'loop3', 'vda', 'dm-0'])
      expect(isWholeDisk(name, { loop: true }), name).to.equal(true);
    for (const name of ['zram0', 'ram1', 'sr0', 'sda1'])
      expect(isWholeDisk(name, { loop: true }), name).to.equal(false);
  });
});
