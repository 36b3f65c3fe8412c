// Issue 12: the sampler and the agent over a /proc tree that turns to garbage, is cut short, goes missing, is
// replaced by directories and links, and loses tasks while it is read. A reading's fields are unknown or right,
// never wrong; they are right again as soon as the files are; and nothing escapes the agent's loop.
import { expect } from 'chai';
import fc from 'fast-check';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { NodeAgent, type Publisher } from '../../../src/agent/agent.js';
import { computeReading } from '../../../src/agent/reading.js';
import { ProcReader, type RawSample } from '../../../src/agent/sampler.js';
import type { IoReadingStatus } from '../../../src/api/v1alpha1/index.js';
import { silentLogger } from '../../../src/observability/log.js';
import { REPO_ROOT } from '../../support/manifests.js';

const OBSERVED = new Date('2026-12-01T10:00:00Z');

/** A /proc/PID/stat line of the kernel's 52 fields. */
const taskStat = (pid: number, comm: string, state: string, utime: number, stime: number) =>
  `${pid} (${comm}) ${state} 1 ${pid} ${pid} 0 -1 4194560 0 0 0 0 ${utime} ${stime} 0 0 20 0 1 0 22 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n`;

interface Task {
  pid: number;
  comm: string;
  state: string;
  /** utime and stime at tick t. */
  times: (t: number) => [number, number];
  wchan?: string;
}

/** The node the files describe at tick t (one tick = 1000 ms): what a reading of valid files must say. */
const TASKS: Task[] = [
  { pid: 100, comm: 'runc:[2:INIT]', state: 'D', times: (t) => [t, t], wchan: 'do_mount' },
  { pid: 101, comm: 'stress-ng-io', state: 'D', times: (t) => [2 * t, t], wchan: 'io_schedule' },
  { pid: 200, comm: 'kworker/u4:2', state: 'I', times: (t) => [0, 1000 + 20 * t] }, // 20 ticks a second
  { pid: 201, comm: 'kworker/1:1H-kblockd', state: 'R', times: (t) => [5 * t, 15 * t] }, // 20 too
  { pid: 300, comm: 'nginx', state: 'S', times: (t) => [t, t] },
];
const KWORKER_PERCENT = 20; // each kworker: 20 ticks at 100 Hz in 1 s

const disk = (major: number, minor: number, name: string, c: number[]) =>
  `${String(major).padStart(4)} ${String(minor).padStart(7)} ${name} ${c.join(' ')} 0 0 0 0 0 0\n`;

const truth = (t: number) => ({
  files: {
    'pressure/io':
      `some avg10=${((t * 7) % 100).toFixed(2)} avg60=${((t * 3) % 100).toFixed(2)} avg300=1.00 total=${1000 + t}\n` +
      `full avg10=${((t * 5) % 100).toFixed(2)} avg60=0.50 avg300=0.25 total=${500 + t}\n`,
    // reads, merged, sectors, readTicks, writes, merged, sectors, writeTicks, inFlight, ioTicks, weighted
    diskstats:
      disk(7, 0, 'loop0', [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]) +
      disk(254, 0, 'vda', [
        100 * t,
        0,
        8 * t,
        300 * t,
        100 * t,
        0,
        8 * t,
        100 * t,
        t % 5,
        1000 + 500 * t,
        0,
      ]) +
      disk(254, 1, 'vda1', [50 * t, 0, 4 * t, 10 * t, 0, 0, 0, 0, 0, 900 * t, 0]) +
      disk(8, 16, 'sdb', [5, 0, 8, 7, 9, 0, 8, 11, 0, 200 * t, 0]),
    stat: readFileSync(join(REPO_ROOT, 'test/fixtures/proc/idle/stat'), 'utf8')
      .replace(/^procs_running \d+$/m, `procs_running ${t % 3}`)
      .replace(/^procs_blocked \d+$/m, `procs_blocked ${t % 7}`),
  } as Record<string, string>,
  stats: new Map(TASKS.map((k) => [k.pid, taskStat(k.pid, k.comm, k.state, ...k.times(t))])),
  psiSomeAvg10Percent: (t * 7) % 100,
  psiSomeAvg60Percent: (t * 3) % 100,
  psiFullAvg10Percent: (t * 5) % 100,
  blockedProcesses: t % 7,
  // Rates over one tick: vda busy 500 of 1000 ms, 200 IOs in 400 ms; sdb busy 200 ms, no IO completed.
  devices: [
    { name: 'vda', busyPercent: 50, inFlight: t % 5, awaitMs: 2 },
    { name: 'sdb', busyPercent: 20, inFlight: 0 },
  ],
});

const EXPECTED_D_TASKS = [
  { pid: 100, comm: 'runc:[2:INIT]', runtime: true, wchan: 'do_mount' },
  { pid: 101, comm: 'stress-ng-io', runtime: false, wchan: 'io_schedule' },
];

const FILES = ['pressure/io', 'diskstats', 'stat'] as const;
const FILE_FAULTS = [
  'valid',
  'mode000',
  'cut',
  'badNumber',
  'garbage',
  'missing',
  'directory',
  'dangling',
  'loop',
];
/** Mode 000 stops only a reader that is not root: then the file is unreadable, and a task's stat absent. */
const ROOT = process.getuid?.() === 0;
/** Faults after which a file must read right. */
const READABLE = new Set(['valid', ...(ROOT ? ['mode000'] : [])]);
const TASK_FAULTS = ['valid', 'mode000', 'vanished', 'noStat', 'statDir', 'garbage', 'cut', 'badTimes'];
/** Faults after which a task is simply not there: the list stays known. */
const ABSENT = new Set(['vanished', 'noStat', 'statDir', ...(ROOT ? [] : ['mode000'])]);
const WCHAN_FAULTS = ['valid', 'missing', 'garbage', 'zero', 'directory'];

interface Tick {
  rootGone: boolean;
  files: Record<string, { fault: string; cut: number; garbage: string; bad: string }>;
  tasks: Record<number, { fault: string; cut: number; garbage: string; wchan: string }>;
}

const garbage = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 120 }),
  fc.constantFrom('', '\n', 'some\n', '(x) D\n', ' 8 0 sda 1 2 3\n', 'procs_blocked -1\n'),
);
const tickArb: fc.Arbitrary<Tick> = fc.record({
  rootGone: fc.nat({ max: 5 }).map((n) => n === 0),
  files: fc.record(
    Object.fromEntries(
      FILES.map((f) => [
        f,
        fc.record({
          fault: fc.oneof({ arbitrary: fc.constant('valid'), weight: 3 }, fc.constantFrom(...FILE_FAULTS)),
          cut: fc.nat(),
          garbage,
          bad: fc.constantFrom('NaN', '-1', '18446744073709551615', '1e3', '0x10', '٣', ''),
        }),
      ]),
    ),
  ),
  tasks: fc.record(
    Object.fromEntries(
      TASKS.map((k) => [
        k.pid,
        fc.record({
          fault: fc.oneof({ arbitrary: fc.constant('valid'), weight: 4 }, fc.constantFrom(...TASK_FAULTS)),
          cut: fc.nat(),
          garbage,
          wchan: fc.constantFrom(...WCHAN_FAULTS),
        }),
      ]),
    ),
  ),
});

const ALL_VALID: Tick = {
  rootGone: false,
  files: Object.fromEntries(FILES.map((f) => [f, { fault: 'valid', cut: 0, garbage: '', bad: '' }])),
  tasks: Object.fromEntries(
    TASKS.map((k) => [k.pid, { fault: 'valid', cut: 0, garbage: '', wchan: 'valid' }]),
  ),
};

/** Writes the tree of tick t with its faults. */
function writeTree(root: string, t: number, tick: Tick): void {
  rmSync(root, { recursive: true, force: true });
  if (tick.rootGone) {
    writeFileSync(root, 'not a directory');
    return;
  }
  mkdirSync(join(root, 'pressure'), { recursive: true });
  const now = truth(t);
  const put = (path: string, fault: string, text: string, cut: number, junk: string, bad = '') => {
    if (fault === 'valid' || fault === 'mode000') writeFileSync(path, text);
    if (fault === 'mode000') chmodSync(path, 0o000);
    if (fault === 'cut') writeFileSync(path, text.slice(0, cut % text.length));
    if (fault === 'badNumber') {
      const numbers = [...text.matchAll(/(?<![^ =\n])\d+(?:\.\d+)?(?![^ \n])/g)];
      const n = numbers[cut % numbers.length]!;
      writeFileSync(path, text.slice(0, n.index) + bad + text.slice(n.index + n[0].length));
    }
    if (fault === 'garbage') writeFileSync(path, junk);
    if (fault === 'directory' || fault === 'statDir') mkdirSync(path);
    if (fault === 'dangling') symlinkSync(join(root, 'nowhere'), path);
    if (fault === 'loop') symlinkSync(path, path);
    // 'missing', 'vanished': nothing there
  };
  for (const file of FILES) {
    const f = tick.files[file]!;
    put(join(root, file), f.fault, now.files[file]!, f.cut, f.garbage, f.bad);
  }
  for (const task of TASKS) {
    const f = tick.tasks[task.pid]!;
    if (f.fault === 'vanished') continue;
    const dir = join(root, String(task.pid));
    mkdirSync(dir);
    if (f.fault === 'noStat') continue;
    const stat = now.stats.get(task.pid)!;
    if (f.fault === 'badTimes') {
      // utime replaced by something no count is
      writeFileSync(join(dir, 'stat'), stat.replace(/^(\S+ \(.*\) \S+(?: \S+){10}) \d+/, '$1 -5'));
    } else put(join(dir, 'stat'), f.fault, stat, f.cut, f.garbage);
    if (task.wchan)
      put(
        join(dir, 'wchan'),
        f.wchan === 'zero' ? 'valid' : f.wchan,
        f.wchan === 'zero' ? '0' : task.wchan,
        0,
        '\u0000\u00ff garbage(',
      );
  }
}

/** The reading of tick t, after tick t-1 (undefined at the first), against what the files said. */
function expectUnknownOrRight(
  reading: IoReadingStatus,
  t: number,
  tick: Tick,
  prior: Tick | undefined,
): void {
  const want = truth(t);
  const readable = (f: string) => !tick.rootGone && READABLE.has(tick.files[f]!.fault);
  const field = (name: keyof IoReadingStatus, file: string) => {
    const expected = want[name as keyof typeof want];
    if (readable(file)) expect(reading[name], `${name} from a readable ${file}`).to.deep.equal(expected);
    else if (reading[name] !== undefined) expect(reading[name], name).to.deep.equal(expected);
  };
  field('psiSomeAvg10Percent', 'pressure/io');
  field('psiSomeAvg60Percent', 'pressure/io');
  field('psiFullAvg10Percent', 'pressure/io');
  field('blockedProcesses', 'stat');

  // Disk rates: exact when both samples read diskstats whole; otherwise unknown, or right for the devices listed.
  const bothDisks =
    prior && !prior.rootGone && READABLE.has(prior.files.diskstats!.fault) && readable('diskstats');
  if (bothDisks) expect(reading.devices, 'devices').to.deep.equal(want.devices);
  for (const device of reading.devices ?? [])
    expect(device).to.deep.equal(want.devices.find((d) => d.name === device.name));
  expect(reading.diskBusyPercent).to.equal(reading.devices?.[0]?.busyPercent);
  if (!prior) expect(reading).to.not.have.property('devices');

  // D-state tasks: exact when every task either read or is simply absent; otherwise unknown, or right as far
  // as the list goes (garbage can look like the stat of a task in another state).
  const clean = (tk: Tick) =>
    !tk.rootGone && Object.values(tk.tasks).every((f) => READABLE.has(f.fault) || ABSENT.has(f.fault));
  const expectedTask = (pid: number) => {
    const { wchan, ...task } = EXPECTED_D_TASKS.find((d) => d.pid === pid)!;
    return tick.tasks[pid]!.wchan === 'valid' ? { ...task, wchan } : task;
  };
  if (tick.rootGone) expect(reading).to.not.have.property('dStateTasks');
  if (clean(tick)) {
    const present = EXPECTED_D_TASKS.filter((d) => READABLE.has(tick.tasks[d.pid]!.fault));
    expect(reading.dStateTasks, 'dStateTasks').to.deep.equal(present.map((d) => expectedTask(d.pid)));
  }
  for (const task of reading.dStateTasks ?? []) expect(task).to.deep.equal(expectedTask(task.pid));

  // kworker CPU: 20 % for each kworker read in both samples, or unknown.
  const kworkers = TASKS.filter((k) => k.comm.startsWith('kworker')).map((k) => k.pid);
  if (!prior || prior.rootGone || tick.rootGone) expect(reading).to.not.have.property('kworkerCpuPercent');
  if (prior && clean(prior) && clean(tick)) {
    const counted = kworkers.filter(
      (pid) => READABLE.has(prior.tasks[pid]!.fault) && READABLE.has(tick.tasks[pid]!.fault),
    );
    expect(reading.kworkerCpuPercent, 'kworkerCpuPercent').to.equal(KWORKER_PERCENT * counted.length);
  }
  if (reading.kworkerCpuPercent !== undefined) {
    expect(reading.kworkerCpuPercent % KWORKER_PERCENT, 'whole kworkers only').to.equal(0);
    expect(reading.kworkerCpuPercent).to.be.within(0, KWORKER_PERCENT * kworkers.length);
  }
}

describe('ProcReader and computeReading over a /proc tree with faults', () => {
  let base: string;
  before(() => {
    base = mkdtempSync(join(tmpdir(), 'proc-faults-'));
  });
  after(() => {
    rmSync(base, { recursive: true, force: true });
  });

  it('reads every field right from valid files, the second sample on', () => {
    const root = join(base, 'valid');
    let now = 0;
    const reader = new ProcReader(root, () => now);
    writeTree(root, 1, ALL_VALID);
    const first = reader.sample();
    now = 1000;
    writeTree(root, 2, ALL_VALID);
    const second = reader.sample();
    expect(second.problems).to.deep.equal([]);
    const want = truth(2);
    expect(computeReading(first, second, OBSERVED)).to.deep.equal({
      source: 'agent',
      observedTime: OBSERVED.toISOString(),
      psiSomeAvg10Percent: want.psiSomeAvg10Percent,
      psiSomeAvg60Percent: want.psiSomeAvg60Percent,
      psiFullAvg10Percent: want.psiFullAvg10Percent,
      blockedProcesses: want.blockedProcesses,
      devices: want.devices,
      diskBusyPercent: 50,
      dStateTasks: EXPECTED_D_TASKS,
      kworkerCpuPercent: 2 * KWORKER_PERCENT,
    });
  });

  it('never reads a field wrong through ticks of faults, and reads all right again once the files are', () => {
    let run = 0;
    fc.assert(
      fc.property(fc.array(tickArb, { minLength: 1, maxLength: 4 }), (ticks) => {
        const root = join(base, `run-${run++}`);
        let now = 0;
        const reader = new ProcReader(root, () => now);
        let previous: RawSample | undefined;
        let last: Tick | undefined;
        // The faulty ticks, then two valid ones: the first reads one-sample fields right, the second the rates too.
        for (const [i, tick] of [...ticks, ALL_VALID, ALL_VALID].entries()) {
          const t = i + 1;
          now = t * 1000;
          writeTree(root, t, tick);
          const sample = reader.sample();
          const reading = computeReading(previous, sample, OBSERVED);
          expectUnknownOrRight(reading, t, tick, last);
          previous = sample;
          last = tick;
        }
        rmSync(root, { recursive: true, force: true });
      }),
      { numRuns: 25 },
    );
  });

  it('reads a diskstats that procfs hands out a page per read to its end', async () => {
    // A seq_file answers each read with about a page of whole lines, however much room the reader has: a short
    // read is not the end. A FIFO fed in two parts, with a pause between, does the same.
    const root = join(base, 'paged');
    mkdirSync(root);
    const lines = Array.from({ length: 60 }, (_, i) =>
      disk(8, i * 16, `sd${String.fromCharCode(97 + (i % 26))}${i}x`, [1, 0, 8, 1, 2, 0, 16, 2, 0, 3, 3]),
    );
    writeFileSync(join(base, 'page1'), lines.slice(0, 40).join(''));
    writeFileSync(join(base, 'page2'), lines.slice(40).join(''));
    execFileSync('mkfifo', [join(root, 'diskstats')]);
    const writer = spawn(
      'sh',
      [
        '-c',
        'exec > "$0"; cat "$1"; sleep 0.3; cat "$2"',
        join(root, 'diskstats'),
        join(base, 'page1'),
        join(base, 'page2'),
      ],
      { stdio: 'ignore' },
    );
    const exited = once(writer, 'exit');
    const sample = new ProcReader(root, () => 0).sample();
    await exited;
    expect(sample.disks?.length).to.equal(60);
  });

  it('makes the task list unknown for a stat that reads but does not parse, and known again once it does', () => {
    const root = join(base, 'bad-stat');
    writeTree(root, 1, ALL_VALID);
    const reader = new ProcReader(root, () => 0);
    const cutInStime = taskStat(101, 'stress-ng-io', 'D', 1234, 5678).replace(/ 5678 .*/s, ' 56');
    for (const stat of ['', '101 (stress-ng-io)', '101 (stress-ng-io) 7 1 2', cutInStime]) {
      writeFileSync(join(root, '101', 'stat'), stat);
      const sample = reader.sample();
      expect(sample.tasksKnown, JSON.stringify(stat)).to.equal(false);
      expect(sample.problems.join()).to.match(/^101\/stat: /);
      expect(computeReading(undefined, sample, OBSERVED)).to.not.have.property('dStateTasks');
    }
    writeFileSync(join(root, '101', 'stat'), truth(1).stats.get(101)!);
    const sample = reader.sample();
    expect(sample.tasksKnown).to.equal(true);
    expect(computeReading(undefined, sample, OBSERVED).dStateTasks).to.deep.equal(EXPECTED_D_TASKS);
  });

  it('leaves out a wchan that is not a kernel symbol', () => {
    const root = join(base, 'wchan');
    writeTree(root, 1, ALL_VALID);
    const reader = new ProcReader(root, () => 0);
    expect(reader.sample().tasks.find((k) => k.pid === 100)?.wchan).to.equal('do_mount');
    for (const wchan of ['0', '0\n', '', '\u00ff\u0000', 'do_mount extra', 'x'.repeat(600)]) {
      writeFileSync(join(root, '100', 'wchan'), wchan);
      const task = reader.sample().tasks.find((k) => k.pid === 100);
      expect(task, JSON.stringify(wchan)).to.not.have.property('wchan');
    }
  });

  it('keeps the task list known while task directories come and go under it', async () => {
    // Another process creates and removes a task's directory as fast as it can: the reader sees it listed and
    // then gone, whole, or not at all; never a problem, and never a wrong task. (The stat is renamed into place:
    // procfs never shows half a file.)
    const root = join(base, 'churn');
    writeTree(root, 1, ALL_VALID);
    const stat = taskStat(500, 'kworker/9:9', 'D', 7, 3);
    const churn = spawn(
      process.execPath,
      [
        '-e',
        `const fs = require('node:fs');
        const [root, stat] = process.argv.slice(1);
        for (;;) {
          fs.writeFileSync(root + '/.stat', stat);
          fs.mkdirSync(root + '/500');
          fs.renameSync(root + '/.stat', root + '/500/stat');
          fs.rmSync(root + '/500', { recursive: true });
        }`,
        root,
        stat,
      ],
      { stdio: 'ignore' },
    );
    try {
      const reader = new ProcReader(root, () => 0);
      const seen = new Set<boolean>();
      let samples = 0;
      // Until the task was seen there and gone, over many samples; a loaded machine may take its time to start it.
      for (
        const until = Date.now() + 10_000;
        Date.now() < until && (seen.size < 2 || samples < 200);
        samples++
      ) {
        const sample = reader.sample();
        expect(sample.problems).to.deep.equal([]);
        expect(sample.tasksKnown).to.equal(true);
        const task = sample.tasks.find((k) => k.pid === 500);
        if (task)
          expect(task).to.deep.equal({ pid: 500, comm: 'kworker/9:9', state: 'D', utime: 7, stime: 3 });
        seen.add(task !== undefined);
        await sleep(0); // let the writer run on a one-core machine
      }
      expect([...seen].sort(), 'saw the task there and gone').to.deep.equal([false, true]);
    } finally {
      churn.kill();
      await once(churn, 'exit');
    }
  });
});

describe('computeReading when a part is unknown in one of two samples', () => {
  const sample = (at: number, tasksKnown: boolean, stime: number): RawSample => ({
    at,
    tasks: tasksKnown ? [{ pid: 9, comm: 'kworker/0:1', state: 'I', utime: 0, stime }] : [],
    tasksKnown,
    problems: [],
  });

  it('leaves kworker CPU unknown when either task list could not be read, not 0', () => {
    expect(computeReading(sample(0, false, 0), sample(1000, true, 50), OBSERVED)).to.not.have.property(
      'kworkerCpuPercent',
    );
    expect(computeReading(sample(0, true, 0), sample(1000, false, 50), OBSERVED)).to.not.have.property(
      'kworkerCpuPercent',
    );
    expect(computeReading(sample(0, true, 0), sample(1000, true, 50), OBSERVED).kworkerCpuPercent).to.equal(
      50,
    );
  });

  it('gives no await for a device one of whose counters went back', () => {
    const stats = (
      reads: number,
      writes: number,
      readTicks: number,
      writeTicks: number,
      ioTicks: number,
    ) => ({
      at: 0,
      tasks: [],
      tasksKnown: true,
      problems: [],
      disks: [
        {
          name: 'vda',
          major: 254,
          minor: 0,
          reads,
          sectorsRead: 8 * reads,
          readTicks,
          writes,
          sectorsWritten: 8 * writes,
          writeTicks,
          inFlight: 0,
          ioTicks,
        },
      ],
    });
    // reads reset, writes up: 1000 reads "lost" and 1010 writes gained would read as 10 IOs in 4000 ms
    const reset = computeReading(
      stats(1000, 0, 0, 0, 0),
      { ...stats(0, 1010, 0, 4000, 500), at: 1000 },
      OBSERVED,
    );
    expect(reset.devices).to.deep.equal([{ name: 'vda', busyPercent: 50, inFlight: 0 }]);
    const forward = computeReading(
      stats(1000, 0, 0, 0, 0),
      { ...stats(1000, 10, 0, 40, 500), at: 1000 },
      OBSERVED,
    );
    expect(forward.devices?.[0]?.awaitMs).to.equal(4);
  });
});

describe('NodeAgent running over a /proc tree with faults', () => {
  let root: string;
  before(() => {
    root = join(mkdtempSync(join(tmpdir(), 'agent-faults-')), 'proc');
  });
  after(() => {
    rmSync(join(root, '..'), { recursive: true, force: true });
  });

  it('keeps ticking through garbage, a vanished /proc and a failing publisher, and reads right again', async () => {
    const escaped: unknown[] = [];
    const onEscape = (err: unknown) => escaped.push(err);
    process.on('unhandledRejection', onEscape);
    process.on('uncaughtException', onEscape);
    let calls = 0;
    const publisher: Publisher = {
      publish: () => {
        calls++;
        if (calls % 2) return Promise.reject(new Error('apiserver said no'));
        throw new Error('thrown, not rejected');
      },
      publishLimits: () => Promise.reject(new Error('not asked for')),
    };
    const agent = new NodeAgent({
      nodeName: 'n1',
      procRoot: root,
      intervalMs: 2,
      heartbeatMs: 1,
      publisher,
      logger: silentLogger,
    });
    writeTree(root, 1, ALL_VALID);
    agent.start();
    try {
      const samples = () => agent.metrics.sampleSeconds.observations;
      const ticks = fc.sample(tickArb, { numRuns: 40, seed: 12 });
      for (const [i, tick] of ticks.entries()) {
        writeTree(root, i + 2, tick);
        const at = samples();
        while (samples() === at) await sleep(1);
      }
      expect(agent.metrics.readProblems.get()).to.be.above(0);
      writeTree(root, 50, ALL_VALID);
      const at = samples();
      while (samples() < at + 2) await sleep(1);
      const want = truth(50);
      expect(agent.latest).to.include({
        psiSomeAvg10Percent: want.psiSomeAvg10Percent,
        psiSomeAvg60Percent: want.psiSomeAvg60Percent,
        psiFullAvg10Percent: want.psiFullAvg10Percent,
        blockedProcesses: want.blockedProcesses,
        kworkerCpuPercent: 0, // the same files twice: no CPU used between
        diskBusyPercent: 0,
      });
      expect(agent.latest?.dStateTasks).to.deep.equal(EXPECTED_D_TASKS);
      expect(agent.metrics.publishes.get({ result: 'error' })).to.be.above(0);
    } finally {
      await agent.stop();
      process.off('unhandledRejection', onEscape);
      process.off('uncaughtException', onEscape);
    }
    expect(escaped).to.deep.equal([]);
  });
});
