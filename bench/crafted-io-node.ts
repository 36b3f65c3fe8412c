// A node whose disk is saturated, as the agent's attribution reads it: a crafted /proc (test/support/proc-root.ts)
// whose PSI reads as load (the stress-ng recording, some avg10 38 %: not quiet, so the agent reads the cgroup tree)
// and whose diskstats counters advance every second, its tasks this machine's (symlinks to /proc/PID, taken when
// it is created); and crafted cgroup trees (test/support/cgroup-tree.ts) whose every pod's counters, and the
// runtime's, advance with the disk's. One pod does 40 % of the disk's bytes, the runtime 5 %, the other pods 30 %
// between them, and System the rest. A tick rewrites every counter file the agent reads, written aside and renamed
// into place as the kernel's files change: never half written to a reader.
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  blkioText,
  CgroupTree,
  io,
  ioStatText,
  type Driver,
  type Io,
  type PodSpec,
  type Version,
} from '../test/support/cgroup-tree.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import { ProcRoot } from '../test/support/proc-root.js';

/** The saturated disk of the load fixture (test/fixtures/proc/load/diskstats). */
export const DISK = { name: 'vda', major: 254, minor: 0 };
const NUMBER = `${DISK.major}:${DISK.minor}`;
const MIB = 1024 * 1024;
/** The disk's IO per second. */
export const DISK_RATE = { readBytes: 1 * MIB, writeBytes: 60 * MIB, reads: 40, writes: 1500 };
/** Who does it: shares of the disk's bytes and operations. */
export const SHARES = { culprit: 0.4, runtime: 0.05, otherPods: 0.3 };
export const RUNTIME_CGROUP = 'system.slice/containerd.service';

const scaled = (f: number) =>
  io(DISK_RATE.readBytes * f, DISK_RATE.writeBytes * f, DISK_RATE.reads * f, DISK_RATE.writes * f);

/**
 * Counters after `seconds` at a rate per second (whole numbers, as the kernel's), from a node's worth of IO before
 * (10^12 bytes, 10^8 operations): their width, and so the files' sizes, stay the same through a run.
 */
const after = (rate: ReturnType<typeof io>, seconds: number): Io => ({
  [NUMBER]: io(
    1e12 + Math.floor(rate.readBytes * seconds),
    1e12 + Math.floor(rate.writeBytes * seconds),
    1e8 + Math.floor(rate.reads * seconds),
    1e8 + Math.floor(rate.writes * seconds),
  ),
});

/** The counter files of a cgroup, the ones the agent reads. */
const COUNTER_FILES: Record<Version, string[]> = {
  v1: ['blkio.throttle.io_service_bytes_recursive', 'blkio.throttle.io_serviced_recursive'],
  v2: ['io.stat'],
};
const READ_FILES: Record<Version, string[]> = { v1: COUNTER_FILES.v1, v2: ['io.stat', 'io.pressure'] };

function put(path: string, text: string): void {
  writeFileSync(`${path}.next`, text);
  renameSync(`${path}.next`, path);
}

/** A pod UID from its index: the same on every run. */
export const podUid = (i: number) => `00000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;

/** tmpfs where there is one: cgroupfs answers from memory, and rewriting thousands of files must not load a disk. */
export const MEMORY_DIR = existsSync('/dev/shm') ? '/dev/shm' : tmpdir();

interface Tree {
  tree: CgroupTree;
  /** Each pod's cgroup and the runtime's, with its IO per second. */
  cgroups: { dir: string; rate: ReturnType<typeof io> }[];
}

/**
 * A cgroup tree in a new directory under `parent`: `count` pods (a fifth Guaranteed, half Burstable, the rest
 * BestEffort) and the runtime, each with the counters of `seconds` of the load.
 */
export function craftTree(
  parent: string,
  version: Version,
  driver: Driver,
  count: number,
  seconds = 1,
): Tree {
  const tree = new CgroupTree(mkdtempSync(join(parent, `${version}-${driver}-${count}-`)), version, driver);
  const others = count > 1 ? scaled(SHARES.otherPods / (count - 1)) : scaled(0);
  const cgroups = Array.from({ length: count }, (_, i) => {
    const rate = i === 0 ? scaled(SHARES.culprit) : others;
    const qos = i % 10 < 2 ? 'Guaranteed' : i % 10 < 7 ? 'Burstable' : 'BestEffort';
    const spec: PodSpec = { uid: podUid(i), qos, io: after(rate, seconds) };
    tree.pod(spec);
    return { dir: tree.podDir(spec), rate };
  });
  const runtime = scaled(SHARES.runtime);
  tree.cgroup(RUNTIME_CGROUP, after(runtime, seconds));
  cgroups.push({ dir: join(tree.hierarchy, RUNTIME_CGROUP), rate: runtime });
  return { tree, cgroups };
}

export class CraftedIoNode {
  private readonly procRoot = new ProcRoot();
  private readonly treesDir = mkdtempSync(join(MEMORY_DIR, 'cgroups-'));
  private readonly trees: Tree[] = [];
  private readonly diskLine: number[];
  private readonly diskstats: string[];
  private seconds = 1;
  private timer: NodeJS.Timeout | undefined;

  private constructor() {
    this.diskstats = readFileSync(join(REPO_ROOT, 'test/fixtures/proc/load/diskstats'), 'utf8').split('\n');
    const line = this.diskstats.find((l) => l.trim().split(/\s+/)[2] === DISK.name) ?? '';
    this.diskLine = line.trim().split(/\s+/).slice(3).map(Number);
  }

  /** The crafted /proc, ready: PSI at load, diskstats written, this machine's tasks linked in. */
  static async create(): Promise<CraftedIoNode> {
    const node = new CraftedIoNode();
    await node.procRoot.create();
    await node.procRoot.setPressure('load');
    for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name)))
      symlinkSync(`/proc/${pid}`, join(node.procRoot.dir, pid));
    node.writeDiskstats();
    return node;
  }

  get proc(): string {
    return this.procRoot.dir;
  }

  /** A cgroup tree (craftTree) whose counters advance with every tick; returns its root. */
  addTree(version: Version, driver: Driver, count: number): string {
    const crafted = craftTree(this.treesDir, version, driver, count, this.seconds);
    this.trees.push(crafted);
    return crafted.tree.root;
  }

  /** The bytes the agent reads in one read of the tree at `root`: every pod's files and the runtime's. */
  bytesPerRead(root: string): number {
    const crafted = this.trees.find((t) => t.tree.root === root);
    if (!crafted) throw new Error(`no tree at ${root}`);
    const files = crafted.cgroups.flatMap(({ dir }) =>
      READ_FILES[crafted.tree.version].map((f) => join(dir, f)),
    );
    return files.reduce((sum, file) => sum + statSync(file).size, 0);
  }

  /** One second more of IO: the disk's counters and every cgroup's. */
  tick(): void {
    this.seconds++;
    this.writeDiskstats();
    for (const { tree, cgroups } of this.trees) {
      for (const { dir, rate } of cgroups) {
        const counters = after(rate, this.seconds);
        const [first = '', second = ''] = COUNTER_FILES[tree.version];
        if (tree.version === 'v2') {
          put(join(dir, first), ioStatText(counters));
        } else {
          put(join(dir, first), blkioText(counters, 'bytes'));
          put(join(dir, second), blkioText(counters, 'ops'));
        }
      }
    }
  }

  /** Ticks every second until stop(); returns how long one tick took, to say what the ticker costs. */
  start(): () => number {
    let busyMs = 0;
    let ticks = 0;
    this.timer = setInterval(() => {
      const started = performance.now();
      this.tick();
      busyMs += performance.now() - started;
      ticks++;
    }, 1000);
    return () => (ticks > 0 ? busyMs / ticks : NaN);
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  async remove(): Promise<void> {
    this.stop();
    await this.procRoot.remove();
    rmSync(this.treesDir, { recursive: true, force: true });
  }

  /** diskstats with the disk's counters `seconds` into the load: 98 % busy, 40 requests in flight. */
  private writeDiskstats(): void {
    const s = this.seconds;
    const base = this.diskLine;
    const at = (i: number) => base[i] ?? 0;
    const fields = [...base];
    fields[0] = at(0) + DISK_RATE.reads * s;
    fields[2] = at(2) + (DISK_RATE.readBytes / 512) * s;
    fields[3] = at(3) + 2 * DISK_RATE.reads * s;
    fields[4] = at(4) + DISK_RATE.writes * s;
    fields[6] = at(6) + (DISK_RATE.writeBytes / 512) * s;
    fields[7] = at(7) + 10 * DISK_RATE.writes * s;
    fields[8] = 40;
    fields[9] = at(9) + 980 * s;
    fields[10] = at(10) + 16_000 * s;
    const line = `${String(DISK.major).padStart(4)} ${String(DISK.minor).padStart(7)} ${DISK.name} ${fields.join(' ')}`;
    const text = this.diskstats.map((l) => (l.trim().split(/\s+/)[2] === DISK.name ? line : l)).join('\n');
    put(join(this.procRoot.dir, 'diskstats'), text);
  }
}
