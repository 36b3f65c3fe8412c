// The agent attributing a node's IO end to end: a crafted /proc and cgroup tree whose counters advance, read by
// NodeAgent.tick() as it runs, published through a recording publisher.
import { expect } from 'chai';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeAgent, type Publisher } from '../../../src/agent/agent.js';
import { readSpacingMs } from '../../../src/agent/attributor.js';
import type { IoLimitsAnswer, IoReadingStatus } from '../../../src/api/v1alpha1/index.js';
import type { Logger } from '../../../src/observability/log.js';
import { CgroupTree, io } from '../../support/cgroup-tree.js';

const MB = 1 << 20; // sectors of 512 bytes: a whole number of them
const DB = '11111111-2222-4333-8444-555555555555';
const WEB = '66666666-7777-4888-9999-000000000000';

class RecordingPublisher implements Publisher {
  readonly readings: IoReadingStatus[] = [];
  publish(reading: IoReadingStatus): Promise<IoLimitsAnswer> {
    this.readings.push(reading);
    return Promise.resolve({ wanted: [] });
  }
  publishLimits(): Promise<IoLimitsAnswer> {
    return Promise.resolve({ wanted: [] });
  }
}

describe('NodeAgent attributing IO', () => {
  let dir: string;
  let proc: string;
  let cgroups: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'attributor-'));
    proc = join(dir, 'proc');
    cgroups = join(dir, 'cgroup');
    mkdirSync(join(proc, 'pressure'), { recursive: true });
    mkdirSync(join(proc, '1'));
    writeFileSync(join(proc, '1', 'mountinfo'), '27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n');
    writeFileSync(join(proc, 'stat'), 'procs_running 1\nprocs_blocked 0\n');
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  /**
   * The node at second t: sda (8:0) has written 100 MiB a second, its partition sda1 and dm-0 on it the same; busy (io_ticks up
   * by more than the time between two ticks) while the PSI is high, idle while it is low.
   */
  let ioTicks: number;
  beforeEach(() => {
    ioTicks = 0;
  });
  function node(t: number, psi: number) {
    if (psi >= 10) ioTicks += 1000;
    writeFileSync(
      join(proc, 'pressure', 'io'),
      `some avg10=${psi.toFixed(2)} avg60=1.00 avg300=1.00 total=${t}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n`,
    );
    const sectors = (t * 100 * MB) / 512;
    const line = (minor: number, name: string) =>
      `   8       ${minor} ${name} 0 0 0 0 ${1000 * t} 0 ${sectors} 0 0 ${ioTicks} 0 0 0 0 0\n`;
    // An LVM volume over sda, just as busy: diskstats lists it first (by name, on a tie), io.stat counts its IO twice.
    writeFileSync(
      join(proc, 'diskstats'),
      line(0, 'sda') + line(1, 'sda1') + line(0, 'dm-0').replace('   8       0', ' 253       0'),
    );
  }

  function agent(attribution = true) {
    const warnings: unknown[][] = [];
    const logger: Logger = {
      error: () => undefined,
      info: () => undefined,
      debug: () => undefined,
      warn: (...args) => warnings.push(args),
    };
    let clock = 0;
    const publisher = new RecordingPublisher();
    const agent = new NodeAgent({
      nodeName: 'n1',
      procRoot: proc,
      intervalMs: 1000,
      heartbeatMs: 60_000,
      pressuredHeartbeatMs: 60_000,
      publisher,
      logger,
      // A second a tick, however fast the test runs.
      sampleClock: () => clock,
      ...(attribution
        ? {
            attribution: {
              cgroupRoot: cgroups,
              culpritSharePercent: 25,
              victimPsiPercent: 20,
            },
          }
        : {}),
    });
    const tick = async (t: number, psi: number) => {
      clock = t * 1000;
      node(t, psi);
      return agent.tick();
    };
    return { tick, warnings, publisher };
  }

  /** db writes 60 MB a second in 600 writes; web reads a little and waits on IO (its own PSI 35). */
  function pods(tree: CgroupTree, t: number) {
    const both = (c: ReturnType<typeof io>) => ({ '8:0': c, '253:0': c });
    tree.pod({ uid: DB, qos: 'Burstable', io: both(io(0, 60 * MB * t, 0, 600 * t)), psi: 4 });
    tree.pod({ uid: WEB, qos: 'Guaranteed', io: both(io(MB * t, 0, 10 * t, 0)), psi: 35 });
    tree.cgroup('system.slice/containerd.service', { '8:0': io(0, 5 * MB * t, 0, 20 * t) });
  }

  it('reads no cgroup while the node is quiet, then names the culprit and the victim once it is not', async () => {
    const { tick, warnings, publisher } = agent();
    // No cgroup tree at all: a read would say so.
    for (const t of [1, 2, 3]) expect((await tick(t, 0.5)).attribution).to.equal(undefined);
    expect(warnings, 'nothing read while quiet').to.deep.equal([]);

    const tree = new CgroupTree(cgroups, 'v2', 'systemd');
    pods(tree, 4);
    expect((await tick(4, 45)).attribution, 'one look: no rate yet').to.equal(undefined);
    pods(tree, 5);
    const reading = await tick(5, 45);
    expect(reading.attribution).to.deep.include({
      cgroupVersion: 'v2',
      driver: 'systemd',
      device: 'sda',
      deviceNumber: '8:0',
      filesystem: 'ext4',
      confidence: 'High',
      podsMeasured: 2,
    });
    expect(
      reading.attribution?.consumers.map((c) => [c.podUid ?? c.kind, c.sharePercent, c.role]),
    ).to.deep.equal([
      [DB, 60, 'Culprit'],
      [WEB, 1, 'Victim'],
      ['Runtime', 5, 'Runtime'],
      ['System', 34, 'System'],
    ]);
    expect(warnings).to.deep.equal([]);
    // Published: the first reading, disk busy known, the PSI and busy bands crossed, the attribution known.
    expect(publisher.readings.map((r) => r.attribution !== undefined)).to.deep.equal([
      false,
      false,
      false,
      true,
    ]);

    pods(tree, 6);
    expect((await tick(6, 45)).attribution?.consumers[0]?.sharePercent).to.equal(60);
    expect(publisher.readings, 'the same split: nothing to write').to.have.length(4);
    const quiet = await tick(7, 0.5);
    expect(quiet.attribution, 'quiet again').to.equal(undefined);
    expect(publisher.readings.at(-1)?.attribution, 'written with the PSI band it left').to.equal(undefined);
  });

  it('logs a pod it cannot read once, leaves it out, and says the split is less sure', async () => {
    const { tick, warnings } = agent();
    const tree = new CgroupTree(cgroups, 'v2', 'cgroupfs');
    for (const t of [1, 2, 3, 4]) {
      pods(tree, t);
      writeFileSync(join(tree.podDir({ uid: DB, qos: 'Burstable' }), 'io.stat'), '8:0 rbytes=1 wbytes=\n');
      const reading = await tick(t, 45);
      if (t < 3) continue;
      expect(reading.attribution?.consumers.map((c) => c.podUid ?? c.kind)).to.deep.equal([
        WEB,
        'Runtime',
        'System',
      ]);
      expect(reading.attribution).to.include({ confidence: 'Low', podsMeasured: 1 });
      expect(reading.attribution?.confidenceReason).to.equal(
        '1 of 2 pod cgroups unreadable: their IO shows as System',
      );
    }
    expect(warnings).to.have.length(1);
    expect(JSON.stringify(warnings[0])).to.match(
      /kubepods\/burstable\/pod1111.*\/io\.stat: line 1 is not one/,
    );
  });

  it('attributes nothing with --no-attribution', async () => {
    const { tick } = agent(false);
    const tree = new CgroupTree(cgroups, 'v2', 'systemd');
    for (const t of [1, 2, 3]) {
      pods(tree, t);
      expect((await tick(t, 45)).attribution).to.equal(undefined);
    }
  });
});

describe('readSpacingMs', () => {
  it('reads every interval while a read is cheap, less often as it costs more, and at least every 30 s', () => {
    const table: [number, number, number][] = [
      [1, 1000, 1000],
      [5, 1000, 1000],
      [50, 1000, 10_000],
      [250, 1000, 30_000],
      [2000, 1000, 30_000],
      [1, 60_000, 60_000],
    ];
    for (const [readMs, intervalMs, spacing] of table)
      expect(readSpacingMs(readMs, intervalMs), `${readMs} ms at ${intervalMs}`).to.equal(spacing);
  });
});
