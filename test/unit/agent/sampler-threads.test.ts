// Issue 15: on the real lab node, containerd stuck in an fsync showed no task in D state, because its goroutine
// blocked a thread other than the thread-group leader and /proc/PID/stat tells only the leader's state. The sampler
// now reads the threads of the runtime daemons (containerd, cri-o, dockerd), and only theirs.
import { expect } from 'chai';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { computeReading } from '../../../src/agent/reading.js';
import { ProcReader } from '../../../src/agent/sampler.js';

/** A /proc/PID/stat line of the kernel's 52 fields. */
const stat = (pid: number, comm: string, state: string) =>
  `${pid} (${comm}) ${state} 1 ${pid} ${pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 22 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n`;

describe('ProcReader: the runtime threads in D state', () => {
  let root = '';
  /** A process: its leader's stat, and each thread's under task/ (the leader's too, as the kernel lists it). */
  const process = (pid: number, comm: string, threads: [tid: number, state: string, wchan?: string][]) => {
    mkdirSync(join(root, String(pid), 'task'), { recursive: true });
    for (const [tid, state, wchan] of threads) {
      const dir = join(root, String(pid), 'task', String(tid));
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'stat'), stat(tid, comm, state));
      writeFileSync(join(dir, 'wchan'), wchan ?? '0');
      if (tid === pid) {
        writeFileSync(join(root, String(pid), 'stat'), stat(tid, comm, state));
        writeFileSync(join(root, String(pid), 'wchan'), wchan ?? '0');
      }
    }
  };
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'proc-threads-'));
    writeFileSync(join(root, 'stat'), 'cpu  1 2 3 4 5 6 7 0 0 0\nprocs_running 1\nprocs_blocked 2\n');
  });
  afterEach(() => {
    rmSync(root, { recursive: true, force: true });
  });

  it("lists a runtime daemon's D-state threads by thread id, with their wchan, while its leader sleeps", () => {
    process(4000, 'containerd', [
      [4000, 'S', 'futex_wait_queue'],
      [4007, 'D', 'submit_bio_wait'],
      [4008, 'S', 'ep_poll'],
      [4009, 'D', 'folio_wait_bit'],
    ]);
    process(5000, 'crio', [
      [5000, 'S'],
      [5003, 'D', 'do_mount'],
    ]);
    const sample = new ProcReader(root).sample();
    expect(sample.tasksKnown).to.equal(true);
    expect(sample.tasks.map((t) => [t.pid, t.comm, t.state, t.wchan])).to.have.deep.members([
      [4007, 'containerd', 'D', 'submit_bio_wait'],
      [4009, 'containerd', 'D', 'folio_wait_bit'],
      [5003, 'crio', 'D', 'do_mount'],
    ]);
    const reading = computeReading(undefined, sample, new Date('2026-12-01T10:00:00Z'));
    expect(reading.dStateTasks?.map((t) => [t.pid, t.runtime])).to.deep.equal([
      [4007, true],
      [4009, true],
      [5003, true],
    ]);
  });

  it("lists a D-state leader once, reads the daemons' threads, and no other process's, shims' included (the agent stays lean)", () => {
    process(4000, 'runc:[2:INIT]', [
      [4000, 'D', 'do_mount'],
      [4001, 'S'],
    ]);
    process(5000, 'containerd-shim', [
      [5000, 'S'],
      [5003, 'D', 'io_schedule'],
    ]);
    process(5200, 'cri-dockerd', [
      [5200, 'S'],
      [5201, 'D', 'folio_wait_bit'],
    ]);
    process(5100, 'dockerd', [
      [5100, 'D', 'do_mount'],
      [5101, 'S'],
    ]);
    process(6000, 'postgres', [
      [6000, 'S'],
      [6001, 'D', 'io_schedule'],
    ]);
    const tasks = new ProcReader(root).sample().tasks;
    expect(tasks.map((t) => [t.pid, t.state, t.wchan])).to.have.deep.members([
      [4000, 'D', 'do_mount'],
      [5100, 'D', 'do_mount'],
      [5201, 'D', 'folio_wait_bit'],
    ]);
    // Each of them counted as the runtime's (cri-dockerd too: it is a daemon whose threads are read).
    const reading = computeReading(
      undefined,
      new ProcReader(root).sample(),
      new Date('2026-12-01T10:00:00Z'),
    );
    expect(reading.dStateTasks?.every((t) => t.runtime)).to.equal(true);
  });

  it('takes a thread that vanishes between the listing and its read as gone, not as an error', () => {
    process(4000, 'containerd', [[4000, 'S']]);
    mkdirSync(join(root, '4000', 'task', '4002')); // listed, but its files are gone
    const sample = new ProcReader(root).sample();
    expect(sample.tasksKnown).to.equal(true);
    expect(sample.tasks).to.deep.equal([]);
  });
});
