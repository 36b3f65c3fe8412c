// Crafted cgroup trees for the agent's attribution tests: the files kubelet's two drivers and the kernel's two
// hierarchies give a pod, written in the kernel's formats (test/fixtures/cgroups holds files from real kernels).
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { IoCounters } from '../../src/agent/cgroup-files.js';

export type Version = 'v1' | 'v2';
export type Driver = 'systemd' | 'cgroupfs';
export const QOS_CLASSES = ['Guaranteed', 'Burstable', 'BestEffort'] as const;
export type Qos = (typeof QOS_CLASSES)[number];

/** Counters by "MAJ:MIN". */
export type Io = Record<string, IoCounters>;

export const io = (readBytes: number, writeBytes: number, reads: number, writes: number): IoCounters => ({
  readBytes,
  writeBytes,
  reads,
  writes,
});

/** A pod's cgroup, relative to the hierarchy's root, as kubelet names it. */
export function podCgroup(driver: Driver, qos: Qos, uid: string): string {
  const lower = qos.toLowerCase();
  if (driver === 'cgroupfs')
    return qos === 'Guaranteed' ? `kubepods/pod${uid}` : `kubepods/${lower}/pod${uid}`;
  const escaped = uid.replace(/-/g, '_');
  return qos === 'Guaranteed'
    ? `kubepods.slice/kubepods-pod${escaped}.slice`
    : `kubepods.slice/kubepods-${lower}.slice/kubepods-${lower}-pod${escaped}.slice`;
}

export function ioStatText(counters: Io): string {
  return Object.entries(counters)
    .map(
      ([dev, c]) =>
        `${dev} rbytes=${c.readBytes} wbytes=${c.writeBytes} rios=${c.reads} wios=${c.writes} dbytes=0 dios=0\n`,
    )
    .join('');
}

/** blkio.throttle.io_service_bytes (`bytes`) or io_serviced, with the Discard line newer kernels write. */
export function blkioText(counters: Io, what: 'bytes' | 'ops'): string {
  let total = 0;
  const lines = Object.entries(counters).flatMap(([dev, c]) => {
    const [r, w] = what === 'bytes' ? [c.readBytes, c.writeBytes] : [c.reads, c.writes];
    total += r + w;
    return [
      `${dev} Read ${r}`,
      `${dev} Write ${w}`,
      `${dev} Sync ${r + w}`,
      `${dev} Async 0`,
      `${dev} Discard 0`,
      `${dev} Total ${r + w}`,
    ];
  });
  return [...lines, `Total ${total}`, ''].join('\n');
}

export const pressureText = (avg10: number) =>
  `some avg10=${avg10.toFixed(2)} avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=12\n`;

/** Writes aside and renames into place, as the kernel's files change: never half written to a reader. */
function put(path: string, text: string): void {
  writeFileSync(`${path}.next`, text);
  renameSync(`${path}.next`, path);
}

export interface PodSpec {
  uid: string;
  qos: Qos;
  io: Io;
  /** v2 io.pressure some avg10. */
  psi?: number;
}

/**
 * A cgroup root as the agent's --cgroup-root sees it. v1 writes the _recursive files (kernel 4.16+) unless
 * `recursive` is false: then each pod's IO is split between its own cgroup and two container cgroups beneath it,
 * each file counting only its own, as older kernels do.
 */
export class CgroupTree {
  readonly hierarchy: string;

  constructor(
    readonly root: string,
    readonly version: Version,
    readonly driver: Driver,
    readonly recursive = true,
  ) {
    this.hierarchy = version === 'v2' ? root : join(root, 'blkio');
    mkdirSync(this.hierarchy, { recursive: true });
    if (version === 'v2') writeFileSync(join(root, 'cgroup.controllers'), 'cpuset cpu io memory pids\n');
    else this.files(this.hierarchy, {}, undefined, recursive ? '_recursive' : '');
    mkdirSync(join(this.hierarchy, driver === 'systemd' ? 'kubepods.slice' : 'kubepods'), {
      recursive: true,
    });
  }

  /** A cgroup's counter files (and io.pressure on v2). */
  files(
    dir: string,
    counters: Io,
    psi: number | undefined,
    suffix = this.recursive ? '_recursive' : '',
  ): void {
    mkdirSync(dir, { recursive: true });
    // The limit files, empty (no limit) as the kernel shows them, and left to whoever writes them (the agent's limits).
    const limitFiles =
      this.version === 'v2'
        ? ['io.max']
        : ['read_bps', 'write_bps', 'read_iops', 'write_iops'].map((k) => `blkio.throttle.${k}_device`);
    for (const file of limitFiles) if (!existsSync(join(dir, file))) writeFileSync(join(dir, file), '');
    if (this.version === 'v2') {
      put(join(dir, 'io.stat'), ioStatText(counters));
      put(join(dir, 'io.pressure'), pressureText(psi ?? 0));
      return;
    }
    put(join(dir, `blkio.throttle.io_service_bytes${suffix}`), blkioText(counters, 'bytes'));
    put(join(dir, `blkio.throttle.io_serviced${suffix}`), blkioText(counters, 'ops'));
    if (suffix === '_recursive') {
      // Kernels with the _recursive files have the plain ones too: the agent must not sum those as well.
      put(join(dir, 'blkio.throttle.io_service_bytes'), blkioText({}, 'bytes'));
      put(join(dir, 'blkio.throttle.io_serviced'), blkioText({}, 'ops'));
    }
  }

  podDir(pod: Pick<PodSpec, 'uid' | 'qos'>): string {
    return join(this.hierarchy, podCgroup(this.driver, pod.qos, pod.uid));
  }

  pod(spec: PodSpec): void {
    const dir = this.podDir(spec);
    if (this.version === 'v2' || this.recursive) {
      this.files(dir, spec.io, spec.psi);
      return;
    }
    // Older v1: the pod cgroup counts only what its own tasks did (nothing, but the pause process), and each
    // container its own: a third here, two thirds in the first container, the rest in the second.
    const part = (f: number, g = Math.floor) =>
      Object.fromEntries(
        Object.entries(spec.io).map(([dev, c]) => [
          dev,
          io(g(c.readBytes * f), g(c.writeBytes * f), g(c.reads * f), g(c.writes * f)),
        ]),
      );
    const third = part(1 / 3);
    const twoThirds = part(2 / 3);
    const rest = Object.fromEntries(
      Object.entries(spec.io).map(([dev, c]) => {
        const [a, b] = [third[dev]!, twoThirds[dev]!];
        return [
          dev,
          io(
            c.readBytes - a.readBytes - b.readBytes,
            c.writeBytes - a.writeBytes - b.writeBytes,
            c.reads - a.reads - b.reads,
            c.writes - a.writes - b.writes,
          ),
        ];
      }),
    );
    this.files(dir, third, undefined);
    this.files(join(dir, 'cri-containerd-aaa'), twoThirds, undefined);
    this.files(join(dir, 'cri-containerd-bbb', 'nested'), rest, undefined);
    this.files(join(dir, 'cri-containerd-bbb'), {}, undefined);
  }

  /** A cgroup anywhere, e.g. the runtime's: relative to the hierarchy's root. */
  cgroup(path: string, counters: Io, psi?: number): void {
    this.files(join(this.hierarchy, path), counters, psi);
  }
}
