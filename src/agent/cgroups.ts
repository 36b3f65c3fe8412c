import { existsSync, readdirSync } from 'node:fs';
import {
  addCounters,
  blkioCounters,
  parseBlkioThrottle,
  parseIoStat,
  parseSomeAvg10,
  type DeviceCounters,
} from './cgroup-files.js';
import { FileBuffer } from './file-buffer.js';
import { ProcParseError } from './proc.js';

export type CgroupVersion = 'v1' | 'v2';
export type CgroupDriver = 'systemd' | 'cgroupfs';

/** One cgroup's IO: its counters by device (its descendants' included) and, on v2, its own IO pressure. */
export interface CgroupIo {
  counters: DeviceCounters;
  /** io.pressure "some avg10": v2 only, and undefined when the file could not be read. */
  psiSomeAvg10?: number;
}

/** One look at the cgroup tree. A cgroup that could not be read or trusted is left out, the reason in problems. */
export interface CgroupSample {
  /** Monotonic milliseconds. */
  at: number;
  version?: CgroupVersion;
  driver?: CgroupDriver;
  /** The pods whose counters were read, by UID. */
  pods: Map<string, CgroupIo>;
  /** Pod cgroups found, read or not. */
  podsFound: number;
  /** The container runtime's own cgroup, relative to the hierarchy's root, when found and read. */
  runtime?: CgroupIo & { path: string };
  problems: string[];
}

/** Where the runtimes' units put them: systemd's, then a bare cgroup of the runtime's name. */
export const DEFAULT_RUNTIME_CGROUPS = [
  'system.slice/containerd.service',
  'system.slice/crio.service',
  'containerd',
  'crio',
] as const;

/**
 * kubelet's pod cgroups, per driver: Guaranteed pods directly under the kubepods cgroup, the others under their
 * QoS class's. systemd writes a pod's UID with "_" for "-" ("-" separates the levels of a slice's name).
 */
const LAYOUTS: Record<CgroupDriver, { root: string; dirs: [string, RegExp, (uid: string) => string][] }> = {
  systemd: {
    root: 'kubepods.slice',
    dirs: [
      ['', /^kubepods-pod([0-9a-fA-F_]+)\.slice$/, (uid) => `kubepods-pod${uid.replace(/-/g, '_')}.slice`],
      [
        'kubepods-burstable.slice',
        /^kubepods-burstable-pod([0-9a-fA-F_]+)\.slice$/,
        (uid) => `kubepods-burstable-pod${uid.replace(/-/g, '_')}.slice`,
      ],
      [
        'kubepods-besteffort.slice',
        /^kubepods-besteffort-pod([0-9a-fA-F_]+)\.slice$/,
        (uid) => `kubepods-besteffort-pod${uid.replace(/-/g, '_')}.slice`,
      ],
    ],
  },
  cgroupfs: {
    root: 'kubepods',
    dirs: [
      ['', /^pod([0-9a-fA-F-]+)$/, (uid) => `pod${uid}`],
      ['burstable', /^pod([0-9a-fA-F-]+)$/, (uid) => `pod${uid}`],
      ['besteffort', /^pod([0-9a-fA-F-]+)$/, (uid) => `pod${uid}`],
    ],
  },
};

/** The hierarchy IO is read and limited in under a root: the root itself on v2, its blkio on v1; none on neither. */
export function ioHierarchy(root: string): { version: CgroupVersion; hierarchy: string } | undefined {
  // Only a v2 root has cgroup.controllers (a hybrid one mounts v2 at unified/).
  if (existsSync(`${root}/cgroup.controllers`)) return { version: 'v2', hierarchy: root };
  if (existsSync(`${root}/blkio`)) return { version: 'v1', hierarchy: `${root}/blkio` };
  return undefined;
}

/** A pod's cgroup in a hierarchy, relative to it, by the pod's UID, under either driver and any QoS class. */
export function findPodCgroup(hierarchy: string, uid: string): string | undefined {
  for (const driver of ['systemd', 'cgroupfs'] as const) {
    const layout = LAYOUTS[driver];
    for (const [qos, , nameOf] of layout.dirs) {
      const cgroup = `${qos ? `${layout.root}/${qos}` : layout.root}/${nameOf(uid)}`;
      if (existsSync(`${hierarchy}/${cgroup}`)) return cgroup;
    }
  }
  return undefined;
}

/** Problems of the same kind in many cgroups (io.stat missing in all 5,000): one line, with the first and a count. */
class Problems {
  private readonly kinds = new Map<string, { first: string; count: number }>();
  add(kind: string, message: string): void {
    const known = this.kinds.get(kind);
    if (known) known.count++;
    else this.kinds.set(kind, { first: message, count: 1 });
  }
  list(): string[] {
    return [...this.kinds.values()].map(({ first, count }) =>
      count > 1 ? `${first} (and in ${count - 1} more cgroups)` : first,
    );
  }
}

const errorCode = (err: unknown) => (err as NodeJS.ErrnoException).code;

/**
 * Reads every pod's IO counters from the cgroup tree under a root (the host's /sys/fs/cgroup mounted into the
 * agent's pod), with ProcReader's care for CPU: synchronous reads into one reused buffer, and files read whole in
 * one read. cgroupfs, like procfs, answers from kernel memory: a read does not wait on the disk it measures.
 */
export class CgroupReader {
  private readonly files = new FileBuffer();

  constructor(
    private readonly root: string,
    /** The runtime's cgroup relative to the hierarchy's root; undefined: the first of DEFAULT_RUNTIME_CGROUPS. */
    private readonly runtimeCgroup?: string,
    private readonly now: () => number = () => performance.now(),
  ) {}

  sample(): CgroupSample {
    const problems = new Problems();
    const pods = new Map<string, CgroupIo>();
    const sample: CgroupSample = { at: 0, pods, podsFound: 0, problems: [] };
    // The tree says which it is.
    const tree = ioHierarchy(this.root);
    if (!tree) {
      problems.add(
        'version',
        `${this.root}: neither cgroup v2 (cgroup.controllers) nor a v1 blkio hierarchy`,
      );
    } else {
      const { version, hierarchy } = tree;
      sample.version = version;
      // Kernels before 4.16 have no _recursive files: a pod's own counters and its containers' are then summed.
      const read =
        version === 'v2'
          ? (dir: string, name: string) => this.readV2(dir, name, problems)
          : existsSync(`${hierarchy}/blkio.throttle.io_service_bytes_recursive`)
            ? (dir: string, name: string) => ({ counters: this.readV1(dir, name, '_recursive') })
            : (dir: string, name: string) => ({ counters: this.readV1Tree(dir, name) });
      const found = this.readPods(hierarchy, read, pods, problems);
      sample.podsFound = found.count;
      if (found.driver) sample.driver = found.driver;
      const runtime = this.readRuntime(hierarchy, read, problems);
      if (runtime) sample.runtime = runtime;
    }
    sample.problems = problems.list();
    sample.at = this.now();
    return sample;
  }

  /** Every pod cgroup of either driver; the driver is the one whose tree holds pods (systemd's on a tie). */
  private readPods(
    hierarchy: string,
    read: (dir: string, name: string) => CgroupIo,
    pods: Map<string, CgroupIo>,
    problems: Problems,
  ): { count: number; driver?: CgroupDriver } {
    let best: { count: number; driver?: CgroupDriver } = { count: 0 };
    for (const driver of ['systemd', 'cgroupfs'] as const) {
      const layout = LAYOUTS[driver];
      if (!existsSync(`${hierarchy}/${layout.root}`)) continue;
      let count = 0;
      for (const [qos, pattern] of layout.dirs) {
        const parent = qos ? `${layout.root}/${qos}` : layout.root;
        let names: string[];
        try {
          names = readdirSync(`${hierarchy}/${parent}`);
        } catch (err) {
          if (errorCode(err) !== 'ENOENT')
            problems.add(`dir ${parent}`, `${parent}: ${(err as Error).message}`);
          continue; // no pod of this QoS class yet
        }
        for (const name of names) {
          const uid = pattern.exec(name)?.[1];
          if (uid === undefined) continue;
          count++;
          const cgroup = `${parent}/${name}`;
          try {
            pods.set(
              driver === 'systemd' ? uid.replace(/_/g, '-') : uid,
              read(`${hierarchy}/${cgroup}`, cgroup),
            );
          } catch (err) {
            this.report(err, `${hierarchy}/${cgroup}`, problems);
          }
        }
      }
      if (count > best.count || !best.driver) best = { count, driver };
    }
    if (!best.driver)
      problems.add('kubepods', `${hierarchy}: no kubepods.slice or kubepods cgroup: no pod can be measured`);
    return best;
  }

  private readRuntime(
    hierarchy: string,
    read: (dir: string, name: string) => CgroupIo,
    problems: Problems,
  ): (CgroupIo & { path: string }) | undefined {
    const candidates = this.runtimeCgroup ? [this.runtimeCgroup] : DEFAULT_RUNTIME_CGROUPS;
    for (const path of candidates) {
      const dir = `${hierarchy}/${path}`;
      if (!existsSync(dir)) continue;
      try {
        return { path, ...read(dir, path) };
      } catch (err) {
        this.report(err, dir, problems);
        return undefined;
      }
    }
    problems.add(
      'runtime',
      `no runtime cgroup (${candidates.join(', ')}) under ${hierarchy}: its IO counts as System; see --runtime-cgroup`,
    );
    return undefined;
  }

  /** A cgroup's figures unknown: why, once per kind. A cgroup gone since the directory was listed is no problem. */
  private report(err: unknown, dir: string, problems: Problems): void {
    const basename = (path: string) => path.slice(path.lastIndexOf('/') + 1);
    if (err instanceof ProcParseError) {
      problems.add(`malformed ${basename(err.file)}`, err.message);
      return;
    }
    const { code, path = '' } = err as NodeJS.ErrnoException;
    if (code !== 'ENOENT') problems.add(`${code ?? 'error'} ${basename(path)}`, (err as Error).message);
    else if (existsSync(dir)) {
      // io.stat appears only where the parent's cgroup.subtree_control enables the io controller.
      const file = basename(path);
      const why =
        file === 'io.stat'
          ? " (the io controller is not enabled in the parent's cgroup.subtree_control)"
          : '';
      problems.add(`missing ${file}`, `${path.slice(this.root.length + 1)}: missing${why}`);
    }
  }

  private readV2(dir: string, name: string, problems: Problems): CgroupIo {
    const io: CgroupIo = {
      counters: parseIoStat(this.files.text(`${dir}/io.stat`, true), `${name}/io.stat`),
    };
    try {
      // Its own pressure only: io.pressure is there whether or not the io controller is enabled.
      io.psiSomeAvg10 = parseSomeAvg10(this.files.text(`${dir}/io.pressure`, true), `${name}/io.pressure`);
    } catch (err) {
      this.report(err, dir, problems); // the pod's IO stands; only its pressure is unknown
    }
    return io;
  }

  private readV1(dir: string, name: string, suffix: '' | '_recursive'): DeviceCounters {
    const file = (what: string) => `blkio.throttle.${what}${suffix}`;
    const bytes = parseBlkioThrottle(
      this.files.text(`${dir}/${file('io_service_bytes')}`, true),
      `${name}/${file('io_service_bytes')}`,
    );
    const ops = parseBlkioThrottle(
      this.files.text(`${dir}/${file('io_serviced')}`, true),
      `${name}/${file('io_serviced')}`,
    );
    return blkioCounters(bytes, ops);
  }

  /** A v1 cgroup and its descendants (a pod's containers sit beneath it), each counting only its own IO. */
  private readV1Tree(dir: string, name: string): DeviceCounters {
    const counters = this.readV1(dir, name, '');
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory())
        addCounters(counters, this.readV1Tree(`${dir}/${entry.name}`, `${name}/${entry.name}`));
    }
    return counters;
  }
}
