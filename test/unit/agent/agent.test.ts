import { expect } from 'chai';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { NodeAgent, type Publisher } from '../../../src/agent/agent.js';
import type { IoReadingStatus } from '../../../src/api/v1alpha1/index.js';

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
  answer: 'published' | 'missing' = 'published';
  publish(reading: IoReadingStatus): Promise<'published' | 'missing'> {
    this.readings.push(reading);
    return Promise.resolve(this.answer);
  }
}

describe('NodeAgent publishing', () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'agent-'));
  });
  after(() => rm(root, { recursive: true, force: true }));

  function agent(heartbeatMs: number, pressuredHeartbeatMs = 10_000) {
    const publisher = new RecordingPublisher();
    const node = new NodeAgent({
      nodeName: 'n1',
      procRoot: root,
      intervalMs: 1000,
      heartbeatMs,
      pressuredHeartbeatMs,
      publisher,
      logger: quiet,
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
});
