import { expect } from 'chai';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { NodeAgent, type Publisher } from '../../../src/agent/agent.js';
import { IoLimitKeeper } from '../../../src/agent/io-limit-keeper.js';
import type { AppliedIoLimit, WantedIoLimit } from '../../../src/agent/io-limit-sync.js';
import type {
  IoLimitReport,
  IoLimitsAnswer,
  IoReadingStatus,
  WantedIoLimitSpec,
} from '../../../src/api/v1alpha1/index.js';

const quiet = {
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
  debug: () => undefined,
};

/** A /proc with `dState` tasks in D state (and as many procs_blocked) and PSI some avg10 at `psi`. */
async function writeProc(root: string, dState: number, psi = 0.5): Promise<void> {
  await rm(root, { recursive: true, force: true });
  await mkdir(join(root, 'pressure'), { recursive: true });
  await writeFile(
    join(root, 'pressure/io'),
    `some avg10=${psi} avg60=0.10 avg300=0.05 total=100\nfull avg10=0.10 avg60=0.05 avg300=0.01 total=50\n`,
  );
  await writeFile(join(root, 'diskstats'), ' 254       0 vda 100 0 800 50 200 0 1600 80 0 120 130 0 0 0 0\n');
  await writeFile(join(root, 'stat'), `procs_running 2\nprocs_blocked ${dState}\n`);
  for (let i = 0; i < dState; i++) {
    const pid = 100 + i;
    await mkdir(join(root, String(pid)));
    await writeFile(join(root, String(pid), 'stat'), `${pid} (jbd2/vda1-8) D 2 0 0 0 -1 0 0 0 0 0 0 0 0 0`);
  }
}

class RecordingPublisher implements Publisher {
  readonly readings: IoReadingStatus[] = [];
  readonly reports: IoLimitReport[] = [];
  answer: IoLimitsAnswer | 'missing' = { wanted: [] };
  publish(reading: IoReadingStatus): Promise<IoLimitsAnswer | 'missing'> {
    this.readings.push(reading);
    return Promise.resolve(this.answer);
  }
  publishLimits(report: IoLimitReport): Promise<IoLimitsAnswer | 'missing'> {
    this.reports.push(report);
    return Promise.resolve(this.answer);
  }
}

describe('NodeAgent publishing', () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'agent-'));
  });
  after(() => rm(root, { recursive: true, force: true }));

  function agent(heartbeatMs: number, pressuredHeartbeatMs = 10_000, ioLimits?: IoLimitKeeper) {
    const publisher = new RecordingPublisher();
    const node = new NodeAgent({
      nodeName: 'n1',
      procRoot: root,
      intervalMs: 1000,
      heartbeatMs,
      pressuredHeartbeatMs,
      publisher,
      logger: quiet,
      ...(ioLimits ? { ioLimits } : {}),
    });
    /** Samples a /proc with this many D-state tasks; returns how many publishes it took so far. */
    const tick = async (dState: number, psi?: number) => {
      await writeProc(root, dState, psi);
      await node.tick();
      return publisher.readings.length;
    };
    return { node, publisher, tick };
  }

  it('publishes an idle node once, however its D-state count wobbles, then crosses and recrosses a band', async () => {
    const { node, tick } = agent(60_000);
    const counts: number[] = [];
    for (const n of [0, 1, 2, 0, 2, 1, 0, 2]) counts.push(await tick(n));
    // The second sample is published because disk busy becomes known (a rate needs two samples); then nothing.
    expect(counts).to.deep.equal([1, 2, 2, 2, 2, 2, 2, 2]);
    expect(await tick(9)).to.equal(3); // enters the band at 8
    expect(await tick(5)).to.equal(3); // within its exit threshold (4)
    expect(await tick(3)).to.equal(4); // below it
    expect(await tick(3, 45)).to.equal(5); // PSI some enters the band at 40
    expect(node.metrics.lastPublish.size).to.equal(1);
  });

  it('publishes on the heartbeat when nothing moved, and says how long it may go without writing', async () => {
    const { tick, publisher } = agent(1000);
    expect(await tick(1)).to.equal(1);
    expect(await tick(2)).to.equal(2); // disk busy known
    expect(await tick(1)).to.equal(2);
    await sleep(1050);
    expect(await tick(2)).to.equal(3);
    expect(publisher.readings.map((r) => r.heartbeatSeconds)).to.deep.equal([1, 1, 1]);
  });

  it('republishes a reading above idle on the short heartbeat, so a fallen value is not taken for current', async () => {
    const { tick, publisher } = agent(60_000, 400);
    expect(await tick(0)).to.equal(1);
    expect(await tick(0)).to.equal(2); // disk busy known
    await sleep(450);
    expect(await tick(0), 'idle: only the long heartbeat').to.equal(2);
    expect(await tick(0, 45)).to.equal(3); // over the 40 % edge
    expect(await tick(0, 35)).to.equal(3); // fallen, but not past the band's exit (30)
    await sleep(450);
    expect(await tick(0, 35), 'above idle: the short heartbeat').to.equal(4);
    expect(publisher.readings.at(-1)?.psiSomeAvg10Percent).to.equal(35);
  });

  it('asks again only at the next heartbeat when the SandboxHealth is missing', async () => {
    const { publisher, tick } = agent(60_000);
    publisher.answer = 'missing';
    expect(await tick(0)).to.equal(1);
    expect(await tick(0)).to.equal(1);
    expect(await tick(20, 90)).to.equal(1); // even a material change waits: nothing selects this node yet
  });

  describe('with IO limits (limitIo)', () => {
    /** A keeper over a sync that records what it was asked and applies it as asked. */
    function limits() {
      const asked: string[][] = [];
      const sync = {
        sync: (wanted: readonly WantedIoLimit[], applied: readonly AppliedIoLimit[]) => {
          asked.push(wanted.map((w) => `${w.podUid} ${String(w.limit.wbps)}`));
          const after = wanted.map((w) => ({
            podUid: w.podUid,
            device: w.device,
            version: 'v2' as const,
            cgroup: `pod${w.podUid}`,
            wanted: w.limit,
            written: w.limit,
            before: { wbps: 'max' as const },
          }));
          const outcomes = [
            ...wanted
              .filter((w) => !applied.some((a) => a.podUid === w.podUid))
              .map((w) => ({ podUid: w.podUid, result: 'Set' as const, message: '' })),
            ...applied
              .filter((a) => !wanted.some((w) => w.podUid === a.podUid))
              .map((a) => ({ podUid: a.podUid, result: 'Lifted' as const, message: '' })),
          ];
          return { applied: after, outcomes };
        },
      };
      // Nothing to report ahead of the writes: those are the keeper's own tests.
      return { asked, keeper: new IoLimitKeeper({ ...sync, ahead: () => undefined }, true) };
    }
    const want: WantedIoLimitSpec = {
      podUid: 'db',
      pod: 'shop/db-0',
      device: '8:0',
      limit: { wbps: 4000 },
      policy: 'p',
      since: '2026-12-06T00:00:00Z',
    };

    it('applies what the answer to its publish wants, reports it, and publishes on the short heartbeat meanwhile', async () => {
      const { asked, keeper } = limits();
      const { node, publisher, tick } = agent(60_000, 400, keeper);
      publisher.answer = { wanted: [want] };
      expect(await tick(0)).to.equal(1);
      expect(asked).to.deep.equal([['db 4000']]);
      expect(publisher.reports.map((r) => r.results?.map((x) => x.result))).to.deep.equal([['Set']]);
      expect(node.metrics.ioLimits.get({ result: 'Set' })).to.equal(1);
      await tick(0); // disk busy known: published again, nothing new to report
      await sleep(450);
      expect(await tick(0), 'a limit in force: the short heartbeat, idle or not').to.equal(3);
      expect(publisher.reports).to.have.length(1);
    });

    it('lifts what it applied once its SandboxHealth is gone: no policy wants a limit there', async () => {
      const { asked, keeper } = limits();
      const { node, publisher, tick } = agent(60_000, 10_000, keeper);
      publisher.answer = { wanted: [want] };
      await tick(0);
      publisher.answer = 'missing';
      await tick(20, 90);
      expect(asked).to.deep.equal([['db 4000'], []]);
      expect(node.metrics.ioLimits.get({ result: 'Lifted' })).to.equal(1);
      expect(publisher.reports, 'no SandboxHealth to report into').to.have.length(1);
      expect(keeper.active).to.equal(false);
    });
  });
});
