// A node whose disk IO is measured per pod: a real agent process reads a crafted /proc (load-level PSI, a disk
// whose counters advance) and a crafted cgroup v2 tree (kubelet's cgroupfs layout) in which each pod of the cast
// does its share of the disk's IO, as the kernel would count it. The counters advance ten times a second (the kernel's
// advance continuously: a step once a second, at the agent's own 1 s interval, made a sample window that straddled a
// step see two seconds of one file and one of another, a 60 % share read as 30 %), for at most MAX_TICKS, so that a
// test that forgets to stop it leaves nothing running.
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentProcess } from './agent-process.js';
import { CgroupTree, type Io, type Qos } from './cgroup-tree.js';
import type { Cleanup } from './cluster.js';
import { ProcRoot } from './proc-root.js';

/** The crafted disk, as diskstats names it (the fixtures' own vda has this number too). */
const DISK = { name: 'vda', major: 254, minor: 0 };
const DEVICE = `${DISK.major}:${DISK.minor}`;
/**
 * The disk does this much a second under load (shares are of it): 100 MiB, a whole number of 512-byte sectors in
 * every tick (diskstats counts sectors, and a fraction is no diskstats line).
 */
const DISK_BYTES_PER_SECOND = 100 * 1024 * 1024;
const DISK_OPS_PER_SECOND = 1000;
const TICKS_PER_SECOND = 10;
/** Ten minutes of ticks: longer than any test that uses it. */
const MAX_TICKS = 600 * TICKS_PER_SECOND;
const RUNTIME_CGROUP = 'system.slice/containerd.service';
/**
 * The agent's culprit threshold here, well under the casts' culprits (26 % and up): a share is bytes over the disk's,
 * read from different files at different moments, and on a loaded machine the agent's reads of one sample spread
 * over a tenth of a second or more, a tick's worth of error either way. At the default 25 %, a pod doing 26 or 27 %
 * was read as a Bystander in CI (a 27 % culprit not named; a runtime-busy cause told twice as the pod went from
 * Bystander to Culprit).
 */
const CULPRIT_SHARE_PERCENT = 20;

/** What one consumer does: a percentage of the disk's bytes and operations, and (v2) its own IO pressure. */
export interface Load {
  percent: number;
  psi?: number;
}

interface Counting {
  qos: Qos;
  load: Load;
  total: { readBytes: number; writeBytes: number; reads: number; writes: number };
}

export class MeasuredNode {
  private readonly agent = new AgentProcess();
  private readonly proc = new ProcRoot();
  private cgroups = '';
  private tree: CgroupTree | undefined;
  private readonly pods = new Map<string, Counting>();
  /** The runtime's cgroup is there from the start, idle: an agent that finds none trusts its split less. */
  private runtime: Counting = { qos: 'BestEffort', load: { percent: 0 }, total: zero() };
  private disk = { sectorsWritten: 0, writes: 0, ioTicks: 0 };
  private timer: NodeJS.Timeout | undefined;
  private ticks = 0;

  constructor(
    readonly name: string,
    private readonly cleanup: Cleanup,
    private readonly version: 'v1' | 'v2' = 'v2',
    /** The agent runs with --allow-io-limits: it writes the limits the operator wants into the crafted tree. */
    private readonly allowIoLimits = false,
  ) {}

  /** Starts the agent over idle /proc and an empty tree; the disk turns busy with `pressure('load')`. */
  async start(): Promise<void> {
    const proc = await this.proc.create();
    this.cleanup.add(() => this.proc.remove());
    this.cgroups = await mkdtemp(join(tmpdir(), 'cgroups-'));
    this.cleanup.add(() => rm(this.cgroups, { recursive: true, force: true }));
    this.tree = new CgroupTree(this.cgroups, this.version, 'cgroupfs');
    await mkdir(join(proc, '1'), { recursive: true });
    await writeFile(
      join(proc, '1', 'mountinfo'),
      `22 1 ${DEVICE} / / rw,relatime shared:1 - ext4 /dev/${DISK.name} rw\n`,
    );
    this.writeDiskstats();
    this.tick();
    this.timer = setInterval(() => {
      this.tick();
    }, 1000 / TICKS_PER_SECOND);
    this.cleanup.add(() => this.stop());
    this.agent.start(this.name, [
      `--proc-root=${proc}`,
      `--cgroup-root=${this.cgroups}`,
      '--interval-seconds=1',
      '--heartbeat-seconds=3',
      `--culprit-share-percent=${CULPRIT_SHARE_PERCENT}`,
      ...(this.allowIoLimits ? ['--allow-io-limits'] : []),
    ]);
    this.cleanup.add(() => this.agent.stop());
  }

  /**
   * A pod of the cast (by its UID and QoS class, as the apiserver gave them) doing `load` from now on; one already
   * there keeps its counters, as the kernel's only grow.
   */
  pod(uid: string, qos: Qos, load: Load): void {
    this.pods.set(uid, { qos, load, total: this.pods.get(uid)?.total ?? zero() });
  }

  /** The pod's io.max (v2) as the agent left it: its limit lines, empty when it has none. */
  ioMax(uid: string, qos: Qos): string {
    if (!this.tree) return '';
    return readFileSync(join(this.tree.podDir({ uid, qos }), 'io.max'), 'utf8');
  }

  /** The pod left the node (evicted): kubelet removes its cgroup, and its IO stops. */
  async removePod(uid: string, qos: Qos): Promise<void> {
    this.pods.delete(uid);
    if (this.tree) await rm(this.tree.podDir({ uid, qos }), { recursive: true, force: true });
  }

  /** The container runtime's own IO (image pulls, unpacking): its cgroup under system.slice. */
  runtimeLoad(load: Load): void {
    this.runtime = { ...this.runtime, load };
  }

  pressure(which: 'load' | 'idle'): Promise<void> {
    this.loaded = which === 'load';
    return this.proc.setPressure(which);
  }

  private loaded = false;

  stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    return Promise.resolve();
  }

  /**
   * A tenth of a second of IO: every consumer's counters and the disk's advance by their rates (none while idle),
   * all written at once, synchronously, so that the agent's reads fall between whole ticks as often as can be.
   */
  private tick(): void {
    if (++this.ticks > MAX_TICKS) {
      void this.stop();
      return;
    }
    const tree = this.tree;
    if (!tree) return;
    const scale = this.loaded ? 1 / TICKS_PER_SECOND : 0;
    const advance = (c: Counting) => {
      c.total.writeBytes += Math.round((DISK_BYTES_PER_SECOND * c.load.percent * scale) / 100);
      c.total.writes += Math.round((DISK_OPS_PER_SECOND * c.load.percent * scale) / 100);
      const counters: Io = { [DEVICE]: { ...c.total } };
      return counters;
    };
    for (const [uid, pod] of this.pods)
      tree.pod({
        uid,
        qos: pod.qos,
        io: advance(pod),
        ...(pod.load.psi === undefined ? {} : { psi: pod.load.psi }),
      });
    tree.cgroup(RUNTIME_CGROUP, advance(this.runtime));
    this.disk.sectorsWritten += (DISK_BYTES_PER_SECOND * scale) / 512; // whole: see DISK_BYTES_PER_SECOND
    this.disk.writes += DISK_OPS_PER_SECOND * scale;
    this.disk.ioTicks += 900 * scale;
    try {
      this.writeDiskstats();
    } catch (err) {
      console.error(`      [measured-node] diskstats not written: ${String(err)}`);
    }
  }

  private writeDiskstats(): void {
    const d = this.disk;
    // major minor name reads merged sectors ms writes merged sectors ms in-flight io_ticks weighted-ms
    const line = `${DISK.major} ${DISK.minor} ${DISK.name} 1000 0 8000 500 ${d.writes} 0 ${d.sectorsWritten} ${d.writes * 5} 4 ${d.ioTicks} ${d.ioTicks * 4} 0 0 0 0\n`;
    const file = join(this.proc.dir, 'diskstats');
    writeFileSync(`${file}.next`, line);
    renameSync(`${file}.next`, file);
  }
}

const zero = () => ({ readBytes: 0, writeBytes: 0, reads: 0, writes: 0 });
