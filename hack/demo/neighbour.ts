// The demo's noisy neighbour (issue 25, "Find the culprit"): a bounded stress-ng doing its IO inside the cgroup of one
// of the shop's pods, made on this machine's real cgroup tree at the path kubelet gives that pod's UID. The node agent
// reads the real tree with its usual path rules and finds the pod there as it finds any (no demo root, no special
// case in it); the operator resolves the UID to the pod and moves it.
//
// Which path: the systemd cgroup driver's (kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice
// for a BestEffort pod, the UID's "-" written "_"), not the cgroupfs driver's kubepods/besteffort/pod<uid>. A running
// kubelet owns its driver's tree: it takes a pod cgroup it does not know for an orphan, kills what runs in it and
// removes it. The lab's kubelet (hack/lab, on this same control plane) uses the cgroupfs driver and makes kubepods/ in
// every hierarchy, which make lab-down removes again; kubepods.slice is made only by a kubelet with the systemd driver,
// which this machine (no systemd) cannot run. So the demo runs beside the lab, and refuses to run beside a kubelet only
// when kubepods.slice is there too. It makes only the levels that are missing, records each change in a state file
// before making it, and undoes exactly those, deepest first, when it ends, on every exit path it can see (and at its
// next start after one it could not: a SIGKILL).
//
// What the kernel charges (6.18, cgroup v1, measured by hand with dd and stress-ng in a fresh cgroup): O_DIRECT reads
// and writes, and writes flushed by the writer's own fsync, are charged to the writer's cgroup; buffered writes left to
// writeback are charged to the flusher (the root cgroup: System to the agent). So the neighbour writes with O_DIRECT
// (--hdd-opts direct). And since kernel commit a3166c51702b ("blk-throttle: delay initialization until configuration")
// a disk's v1 blkio.throttle.* counters count nothing until a throttle limit has been set on that disk once since boot
// (in any cgroup; counting then goes on in all of them, even once the limit is gone): vda here had had one, and counted
// at once; a fresh loop device counted only after ensureCounted set its rule. That rule, far above any disk's speed
// (1 TiB/s), is set on the pod's cgroup only when its counters stay at zero, the demo says so, and it goes with the cgroup
// (the disk's throttling stays initialised until reboot, limiting nothing).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  openSync,
  closeSync,
  readFileSync,
  realpathSync,
  rmdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export const CGROUP_ROOT = '/sys/fs/cgroup';
/** The load: two O_DIRECT writers (charged to the pod), two sync() callers (they keep the disk's queue full). */
export const STRESS_ARGS = ['--hdd', '2', '--hdd-opts', 'direct', '--io', '2'];
/** A throttle rule no disk reaches (1 TiB/s): it limits nothing, and sets up the disk's throttling, which counts. */
const NO_LIMIT_BPS = 2 ** 40;

export type CgroupVersion = 'v1' | 'v2';

/** The hierarchy the agent reads for IO, told apart as the agent does (src/agent/cgroups.ts): v2 has cgroup.controllers. */
export function ioHierarchy(root = CGROUP_ROOT): { version: CgroupVersion; dir: string } | undefined {
  if (existsSync(`${root}/cgroup.controllers`)) return { version: 'v2', dir: root };
  if (existsSync(`${root}/blkio`)) return { version: 'v1', dir: `${root}/blkio` };
  return undefined;
}

const SLICE_ROOT = 'kubepods.slice';

/**
 * kubelet's systemd-driver path of a pod, relative to the hierarchy: Guaranteed pods directly under kubepods.slice,
 * the others under their QoS class's slice; "-" separates a slice name's levels, so the UID's are written "_".
 */
export function podCgroupPath(uid: string, qosClass: string | undefined): string {
  const pod = uid.replace(/-/g, '_');
  if (qosClass === 'Guaranteed') return `${SLICE_ROOT}/kubepods-pod${pod}.slice`;
  const qos = qosClass === 'Burstable' ? 'burstable' : 'besteffort';
  return `${SLICE_ROOT}/kubepods-${qos}.slice/kubepods-${qos}-pod${pod}.slice`;
}

/** Why the neighbour cannot be made here, or undefined when it can. */
export function refusal(): string | undefined {
  if (process.getuid?.() !== 0) return 'making a pod cgroup on the real cgroup tree needs root';
  const hierarchy = ioHierarchy();
  if (!hierarchy) return `${CGROUP_ROOT}: neither cgroup v2 nor a v1 blkio hierarchy`;
  if (existsSync(`${hierarchy.dir}/${SLICE_ROOT}`) && spawnSync('pgrep', ['-x', 'kubelet']).status === 0)
    return `a kubelet with the systemd cgroup driver runs on this machine: it owns ${hierarchy.dir}/${SLICE_ROOT} and would remove the demo's pod cgroup as an orphan, killing its load`;
  return undefined;
}

/** One change made to the cgroup tree, and how it is undone. */
type Change = { kind: 'mkdir'; dir: string } | { kind: 'write'; file: string; undo: string };

const pidsIn = (dir: string): number[] =>
  existsSync(`${dir}/cgroup.procs`)
    ? readFileSync(`${dir}/cgroup.procs`, 'utf8').split('\n').filter(Boolean).map(Number)
    : [];
const napMs = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** Waits (synchronously: it runs in exit handlers too) until no task is left in `dir`; whether none is. */
function drained(dir: string, ms: number): boolean {
  for (const until = Date.now() + ms; pidsIn(dir).length > 0; napMs(100))
    if (Date.now() > until) return false;
  return true;
}

function kill(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone already
  }
}

/** The whole disk under a path, "MAJ:MIN" (a partition's parent: throttle rules are set on disks). */
export function diskOf(path: string): string {
  const dev = statSync(path).dev;
  const major = (Math.floor(dev / 256) & 0xfff) | (Math.floor(dev / 2 ** 32) & ~0xfff);
  const minor = (dev & 0xff) | (Math.floor(dev / 4096) & ~0xff);
  const sys = realpathSync(`/sys/dev/block/${major}:${minor}`);
  return existsSync(`${sys}/partition`)
    ? readFileSync(`${dirname(sys)}/dev`, 'utf8').trim()
    : `${major}:${minor}`;
}

/**
 * Undoes recorded changes, last first: the tasks in a cgroup to remove are killed (they are the demo's own load: no
 * one else puts tasks into a cgroup it made), then the directory goes. Returns what could not be undone.
 */
function undo(changes: Change[], problems: string[]): Change[] {
  const left: Change[] = [];
  for (const change of [...changes].reverse()) {
    try {
      if (change.kind === 'write') writeFileSync(change.file, change.undo);
      else if (existsSync(change.dir)) {
        for (const pid of pidsIn(change.dir)) kill(pid);
        if (!drained(change.dir, 10_000))
          throw new Error(`tasks still in it: ${pidsIn(change.dir).join(' ')}`);
        rmdirSync(change.dir);
      }
    } catch (err) {
      problems.push(`${change.kind === 'write' ? change.file : change.dir}: ${(err as Error).message}`);
      left.unshift(change);
    }
  }
  return left;
}

/** Undoes what a previous run recorded in `stateFile` and could not undo itself (it was killed). */
export function removeLeftovers(stateFile: string): string[] {
  if (!existsSync(stateFile)) return [];
  const problems: string[] = [];
  const left = undo(JSON.parse(readFileSync(stateFile, 'utf8')) as Change[], problems);
  if (left.length === 0) rmSync(stateFile, { force: true });
  else writeFileSync(stateFile, JSON.stringify(left));
  return problems;
}

export interface NeighbourOptions {
  uid: string;
  qosClass: string | undefined;
  seconds: number;
  /** On the disk the agent watches; removed at stop. */
  tempDir: string;
  /** stress-ng's output. */
  logFile: string;
  /** Where the changes to the cgroup tree are recorded before each is made. */
  stateFile: string;
}

/** The shop's pod the neighbour's load runs in, and what became of it (DEMO_TIMELINE_JSON has it, for tests). */
export interface Culprit {
  namespace: string;
  name: string;
  uid: string;
  qosClass?: string;
  cgroup: string;
  /** Its share of the disk's IO as the operator named it. */
  sharePercent?: number;
  movedAt?: string;
  replacement?: { name: string; node: string };
}
/** The neighbour's stress-ng in its pod's cgroup. stop() undoes all of it and may be called any number of times. */
export class NoisyNeighbour {
  private readonly changes: Change[] = [];
  private child: ChildProcess | undefined;
  readonly cgroup: string;
  readonly version: CgroupVersion;
  /** Set when this kernel needed a throttle rule to count the pod's IO. */
  throttleRule: string | undefined;

  private constructor(
    private readonly options: NeighbourOptions,
    hierarchy: { version: CgroupVersion; dir: string },
  ) {
    this.version = hierarchy.version;
    this.cgroup = join(hierarchy.dir, podCgroupPath(options.uid, options.qosClass));
  }

  /** Makes the pod's cgroup (and the levels above it that are missing) and starts the load in it. */
  static start(options: NeighbourOptions): NoisyNeighbour {
    const why = refusal();
    const hierarchy = ioHierarchy();
    if (why || !hierarchy) throw new Error(`no noisy neighbour: ${why}`);
    const neighbour = new NoisyNeighbour(options, hierarchy);
    try {
      neighbour.makeCgroup(hierarchy.dir);
      neighbour.spawnLoad();
    } catch (err) {
      neighbour.stop();
      throw err;
    }
    return neighbour;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  private record(change: Change, make: () => void): void {
    this.changes.push(change);
    writeFileSync(this.options.stateFile, JSON.stringify(this.changes));
    make();
  }

  private makeCgroup(root: string): void {
    if (existsSync(this.cgroup)) throw new Error(`${this.cgroup} exists already: whose is it?`);
    const levels = this.cgroup.slice(root.length + 1).split('/');
    levels.forEach((_, i) => {
      const dir = join(root, ...levels.slice(0, i + 1));
      // v2 counts a cgroup's IO (io.stat) only where its parent enables the io controller for its children.
      if (this.version === 'v2') this.enableIo(dirname(dir));
      if (!existsSync(dir))
        this.record({ kind: 'mkdir', dir }, () => {
          mkdirSync(dir);
        });
    });
  }

  private enableIo(parent: string): void {
    const file = `${parent}/cgroup.subtree_control`;
    if (readFileSync(file, 'utf8').split(/\s+/).includes('io')) return;
    this.record({ kind: 'write', file, undo: '-io' }, () => {
      writeFileSync(file, '+io');
    });
  }

  /** stress-ng, in the cgroup before it does any IO: the shell puts itself there, then becomes stress-ng. */
  private spawnLoad(): void {
    mkdirSync(this.options.tempDir, { recursive: true });
    const out = openSync(this.options.logFile, 'a');
    const args = [
      ...STRESS_ARGS,
      '--timeout',
      `${this.options.seconds}s`,
      '--temp-path',
      this.options.tempDir,
    ];
    this.child = spawn(
      'sh',
      ['-c', 'echo $$ >"$1/cgroup.procs" || exit 97; shift; exec stress-ng "$@"', 'sh', this.cgroup, ...args],
      { stdio: ['ignore', out, out] },
    );
    closeSync(out);
  }

  /**
   * Waits until the kernel counts the pod's IO on the disk under tempDir. When it does not within a few seconds (v1
   * counts nothing on a disk whose throttling was never set up since boot: see the top), sets a rule far above the
   * disk's speed on the pod's cgroup, once, and waits again.
   */
  async ensureCounted(): Promise<void> {
    const disk = diskOf(this.options.tempDir);
    const counted = () => {
      if (!this.running)
        throw new Error(`stress-ng exited (${this.child?.exitCode}): see ${this.options.logFile}`);
      const file = this.version === 'v2' ? 'io.stat' : 'blkio.throttle.io_service_bytes';
      const text = readFileSync(`${this.cgroup}/${file}`, 'utf8');
      return this.version === 'v2'
        ? new RegExp(`^${disk} rbytes=\\d+ wbytes=[1-9]`, 'm').test(text)
        : new RegExp(`^${disk} Write [1-9]`, 'm').test(text);
    };
    for (let i = 0; i < 2; i++) {
      for (const until = Date.now() + 5000; Date.now() < until;) {
        if (counted()) return;
        await sleep(250);
      }
      if (this.version === 'v2' || this.throttleRule) break;
      this.throttleRule = `${disk} ${NO_LIMIT_BPS}`;
      for (const what of ['read', 'write'])
        writeFileSync(`${this.cgroup}/blkio.throttle.${what}_bps_device`, this.throttleRule);
    }
    throw new Error(
      `the kernel does not count ${this.cgroup}'s IO on ${disk}: the agent could not measure the culprit`,
    );
  }

  /** Stops the load (SIGINT, then SIGKILL for what is left) and undoes every change; returns what could not be undone. */
  stop(): string[] {
    const problems: string[] = [];
    if (this.running) this.child?.kill('SIGINT');
    if (existsSync(this.cgroup)) drained(this.cgroup, 5000);
    this.child = undefined;
    const left = undo(this.changes.splice(0), problems);
    this.changes.push(...left);
    if (left.length === 0) rmSync(this.options.stateFile, { force: true });
    else writeFileSync(this.options.stateFile, JSON.stringify(left));
    rmSync(this.options.tempDir, { recursive: true, force: true });
    return problems;
  }
}
