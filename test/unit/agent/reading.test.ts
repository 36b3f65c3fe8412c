import { expect } from 'chai';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { computeReading } from '../../../src/agent/reading.js';
import { ProcReader, type RawSample } from '../../../src/agent/sampler.js';
import { parseDiskstats, parsePressure, parseStat, type DiskStat } from '../../../src/agent/proc.js';
import { REPO_ROOT } from '../../support/manifests.js';

const fixture = (state: string, file: string) =>
  readFileSync(join(REPO_ROOT, 'test/fixtures/proc', state, file), 'utf8');
const T = new Date('2026-11-30T10:00:00Z');

function sample(
  state: 'idle' | 'load',
  diskFile: string,
  at: number,
  tasks: RawSample['tasks'] = [],
): RawSample {
  return {
    at,
    pressure: parsePressure(fixture(state, 'pressure-io')),
    disks: parseDiskstats(fixture(state, diskFile)),
    stat: parseStat(fixture(state, 'stat')),
    tasks,
    tasksKnown: true,
    problems: [],
  };
}

describe('computeReading', () => {
  it('turns two recorded load samples into PSI, busy disk, await and blocked counts', () => {
    const reading = computeReading(sample('load', 'diskstats', 0), sample('load', 'diskstats-1s', 1000), T);
    expect(reading.source).to.equal('agent');
    expect(reading.observedTime).to.equal(T.toISOString());
    expect(reading.psiSomeAvg10Percent).to.be.greaterThan(30);
    expect(reading.diskBusyPercent).to.be.within(1, 100);
    expect(reading.devices![0]!.name).to.equal('vda');
    expect(reading.devices!.some((d) => d.name.startsWith('loop'))).to.equal(false);
    expect(reading.blockedProcesses).to.be.a('number');
  });

  it('counts a loop device as a disk only when asked: the lab node, whose runtime sits on one', () => {
    const disk = (name: string, minor: number, ioTicks: number): DiskStat => ({
      name,
      major: minor === 0 ? 7 : 254,
      minor: minor === 0 ? 0 : minor - 1,
      reads: 0,
      sectorsRead: 0,
      readTicks: 0,
      writes: ioTicks,
      sectorsWritten: ioTicks * 8,
      writeTicks: ioTicks,
      inFlight: 16,
      ioTicks,
    });
    const at = (ms: number, loopTicks: number, vdaTicks: number): RawSample => ({
      ...sample('load', 'diskstats', ms),
      disks: [disk('loop0', 0, loopTicks), disk('vda', 1, vdaTicks)],
    });
    const [before, after] = [at(0, 0, 0), at(1000, 990, 10)];
    expect(computeReading(before, after, T).devices?.map((d) => d.name)).to.deep.equal(['vda']);
    const counted = computeReading(before, after, T, 100, { loop: true });
    expect(counted.devices?.map((d) => [d.name, d.busyPercent])).to.deep.equal([
      ['loop0', 99],
      ['vda', 1],
    ]);
    expect(counted.diskBusyPercent).to.equal(99);
  });

  it('leaves rates unknown with a single sample, and never reports unknown as zero', () => {
    const reading = computeReading(undefined, sample('idle', 'diskstats', 0), T);
    expect(reading.psiSomeAvg10Percent).to.be.a('number');
    expect(reading).to.not.have.property('diskBusyPercent');
    expect(reading).to.not.have.property('kworkerCpuPercent');
    const nothing = computeReading(
      undefined,
      { at: 0, tasks: [], tasksKnown: false, problems: ['pressure/io: missing (unknown)'] },
      T,
    );
    expect(Object.keys(nothing).sort()).to.deep.equal(['observedTime', 'source']);
  });

  it('lists D-state tasks runtime first and computes kworker CPU from tick deltas', () => {
    const before = sample('idle', 'diskstats', 0, [
      { pid: 9, comm: 'kworker/u4:1', state: 'I', utime: 0, stime: 100 },
    ]);
    const after = sample(
      'idle',
      'diskstats-1s',
      2000,
      [
        { pid: 9, comm: 'kworker/u4:1', state: 'R', utime: 0, stime: 150 },
        { pid: 30, comm: 'stress-ng-io', state: 'D' },
        { pid: 20, comm: 'runc:[2:INIT]', state: 'D', wchan: 'do_mount' },
      ].map((t) => ({ utime: 0, stime: 0, ...t })),
    );
    const reading = computeReading(before, after, T, 100);
    expect(reading.dStateTasks).to.deep.equal([
      { pid: 20, comm: 'runc:[2:INIT]', runtime: true, wchan: 'do_mount' },
      { pid: 30, comm: 'stress-ng-io', runtime: false },
    ]);
    expect(reading.kworkerCpuPercent).to.equal(25); // 50 ticks at 100 Hz over 2 s
  });

  it('skips a device whose counters went backwards (reset) instead of inventing a rate', () => {
    const reading = computeReading(sample('load', 'diskstats-1s', 0), sample('load', 'diskstats', 1000), T);
    expect(reading.devices?.find((d) => d.name === 'vda')).to.equal(undefined);
  });
});

describe('ProcReader on a /proc tree', () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'proc-'));
    await mkdir(join(root, 'pressure'));
    await writeFile(join(root, 'pressure/io'), fixture('load', 'pressure-io'));
    await writeFile(join(root, 'diskstats'), fixture('load', 'diskstats'));
    await writeFile(join(root, 'stat'), 'procs_running 3\nprocs_blocked 5\n');
    const task = async (pid: number, stat: string, wchan?: string) => {
      await mkdir(join(root, String(pid)));
      await writeFile(join(root, String(pid), 'stat'), stat);
      if (wchan) await writeFile(join(root, String(pid), 'wchan'), wchan);
    };
    await task(100, '100 (runc:[2:INIT]) D 1 1 1 0 -1 0 0 0 0 0 1 2 0 0', 'do_mount');
    await task(200, '200 (kworker/u4:2) I 2 0 0 0 -1 0 0 0 0 0 0 40 0 0');
    await task(300, '300 (nginx) S 1 1 1 0 -1 0 0 0 0 0 5 5 0 0');
  });
  after(() => rm(root, { recursive: true, force: true }));

  it('reads PSI, disks, blocked tasks, D-state tasks with wchan, and kworkers', () => {
    const s = new ProcReader(root, () => 0).sample();
    expect(s.problems).to.deep.equal([]);
    expect(s.stat).to.deep.equal({ procsRunning: 3, procsBlocked: 5 });
    expect(s.tasks.map((t) => [t.pid, t.state, t.wchan]).sort()).to.deep.equal([
      [100, 'D', 'do_mount'],
      [200, 'I', undefined],
    ]);
  });

  it('reports a missing PSI file (old kernel) as unknown, with the reason', async () => {
    await rm(join(root, 'pressure'), { recursive: true });
    const s = new ProcReader(root, () => 0).sample();
    expect(s.pressure).to.equal(undefined);
    expect(s.problems).to.deep.equal(['pressure/io: missing (unknown)']);
    expect(computeReading(undefined, s, T)).to.not.have.property('psiSomeAvg10Percent');
  });

  it('reports a malformed file with a clear error, never a crash', async () => {
    await writeFile(join(root, 'diskstats'), ' 254 0 vda 1 2\n');
    const s = new ProcReader(root, () => 0).sample();
    expect(s.disks).to.equal(undefined);
    expect(s.problems.join()).to.match(/diskstats: line 1 has fewer than 14 numeric columns/);
  });

  it('reports an unreadable /proc as unknown tasks', () => {
    const s = new ProcReader(join(root, 'nope'), () => 0).sample();
    expect(s.tasksKnown).to.equal(false);
    expect(computeReading(undefined, s, T)).to.not.have.property('dStateTasks');
  });

  it('reuses its buffer without reading one file through another: a file longer than the buffer, then shorter ones', async () => {
    const reader = new ProcReader(root, () => 0);
    // Longer than the 16 KiB buffer it starts with, and a task whose stat is longer than the ones read after it.
    const disks = Array.from({ length: 400 }, (_, i) => ` 8 ${i} sd${i}x 1 0 8 1 2 0 16 2 0 3 3 0 0 0 0`);
    await writeFile(join(root, 'diskstats'), `${disks.join('\n')}\n`);
    await writeFile(
      join(root, '200', 'stat'),
      '200 (kworker/u4:2-events_unbound_long_name) D 2 0 0 0 -1 0 0 0 0 0 0 40 0 0',
    );
    expect(reader.sample().disks).to.have.length(400);
    await writeFile(join(root, 'diskstats'), fixture('load', 'diskstats'));
    // A short stat after the long one: "(nginx) S" must not pick up the D or the kworker left in the buffer.
    await writeFile(join(root, '200', 'stat'), '200 (nginx) S 1 1 1 0 -1 0 0 0 0 0 5 5 0 0');
    const s = reader.sample();
    expect(s.disks?.length).to.be.lessThan(400);
    expect(s.tasks.map((t) => t.pid)).to.deep.equal([100]);
  });
});
