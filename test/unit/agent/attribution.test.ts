import { expect } from 'chai';
import {
  computeAttribution,
  judgeConfidence,
  type AttributionContext,
  type AttributionSample,
} from '../../../src/agent/attribution.js';
import { filesystemOn } from '../../../src/agent/attributor.js';
import type { CgroupIo, CgroupSample } from '../../../src/agent/cgroups.js';
import type { DiskStat, Mount } from '../../../src/agent/proc.js';
import type { IoAttribution, IoConsumer } from '../../../src/api/v1alpha1/index.js';
import { io, type Io } from '../../support/cgroup-tree.js';

const MB = 1_000_000;

const disk = (
  name: string,
  major: number,
  minor: number,
  bytes: [number, number],
  ops: [number, number],
): DiskStat => ({
  name,
  major,
  minor,
  reads: ops[0],
  sectorsRead: bytes[0] / 512,
  readTicks: 0,
  writes: ops[1],
  sectorsWritten: bytes[1] / 512,
  writeTicks: 0,
  inFlight: 0,
  ioTicks: 0,
});

interface Look {
  /** sda's (8:0) bytes read and written, and reads and writes, so far; dm-0 (253:0) is stacked on it. */
  sda: [number, number, number, number];
  pods: Record<string, { io: Io; psi?: number }>;
  runtime?: Io;
  version?: 'v1' | 'v2';
  podsFound?: number;
}

/** One look at second `t`: diskstats and the cgroups read together. */
function look(t: number, l: Look): AttributionSample {
  const [rb, wb, r, w] = l.sda;
  const pods = new Map<string, CgroupIo>(
    Object.entries(l.pods).map(([uid, p]) => [
      uid,
      { counters: new Map(Object.entries(p.io)), ...(p.psi !== undefined ? { psiSomeAvg10: p.psi } : {}) },
    ]),
  );
  const cgroups: CgroupSample = {
    at: t * 1000 + 5,
    version: l.version ?? 'v2',
    driver: 'systemd',
    pods,
    podsFound: l.podsFound ?? pods.size,
    problems: [],
  };
  if (l.runtime)
    cgroups.runtime = {
      path: 'system.slice/containerd.service',
      counters: new Map(Object.entries(l.runtime)),
    };
  return {
    disks: [
      disk('sda', 8, 0, [rb, wb], [r, w]),
      disk('sda1', 8, 1, [rb, wb], [r, w]),
      disk('dm-0', 253, 0, [rb, wb], [r, w]),
    ],
    disksAt: t * 1000,
    cgroups,
  };
}

const CONTEXT: AttributionContext = {
  device: 'sda',
  filesystem: 'xfs',
  culpritSharePercent: 25,
  victimPsiPercent: 20,
};

/** IO on sda, and the same IO again on dm-0 stacked on it, as io.stat shows a pod that writes through LVM. */
const viaDm = (c: ReturnType<typeof io>): Io => ({ '8:0': c, '253:0': c });

const shares = (a: IoAttribution | undefined) =>
  a?.consumers.map((c) => [c.kind === 'Pod' ? c.podUid : c.kind, c.sharePercent, c.role]);

describe('computeAttribution', () => {
  it('splits the device between pods, the runtime and System: shares add up to 100, each on its own device line', () => {
    const before = look(0, {
      sda: [0, 0, 0, 0],
      pods: { db: { io: viaDm(io(0, 0, 0, 0)) }, web: { io: viaDm(io(0, 0, 0, 0)), psi: 30 } },
      runtime: { '8:0': io(0, 0, 0, 0) },
    });
    // In 1 s: sda read 20 MB and wrote 80 MB in 1,000 operations. db wrote 60 MB in 100 writes (60 % of the bytes),
    // web read 2 MB in 300 reads (30 % of the operations); containerd wrote 5 MB in 50.
    const after = look(1, {
      sda: [20 * MB, 80 * MB, 400, 600],
      pods: { db: { io: viaDm(io(0, 60 * MB, 0, 100)) }, web: { io: viaDm(io(2 * MB, 0, 300, 0)), psi: 30 } },
      runtime: { '8:0': io(0, 5 * MB, 0, 50) },
    });
    const a = computeAttribution(before, after, CONTEXT);
    expect(a).to.include({
      cgroupVersion: 'v2',
      driver: 'systemd',
      device: 'sda',
      deviceNumber: '8:0',
      filesystem: 'xfs',
      confidence: 'High',
      totalBytesPerSecond: 100 * MB,
      totalOpsPerSecond: 1000,
      podsMeasured: 2,
    });
    // Counted on dm-0's line too, db alone would be 120 % of the device.
    expect(shares(a)).to.deep.equal([
      ['db', 60, 'Culprit'],
      ['web', 30, 'Culprit'],
      ['Runtime', 5, 'Runtime'],
      ['System', 5, 'System'],
    ]);
    const db = a!.consumers[0]!;
    expect(db).to.include({ readBytesPerSecond: 0, writeBytesPerSecond: 60 * MB, opsPerSecond: 100 });
    // Apart too, as io.max limits them: the database only writes.
    expect(db).to.include({ readOpsPerSecond: 0, writeOpsPerSecond: 100 });
    expect(a!.consumers[1]!.psiSomeAvg10Percent).to.equal(30);
    expect(a!.consumers.at(-1)).to.include({
      kind: 'System',
      readBytesPerSecond: 18 * MB,
      writeBytesPerSecond: 15 * MB,
      opsPerSecond: 550,
      readOpsPerSecond: 100,
      writeOpsPerSecond: 450,
    });
    expect(a!.consumers[1]).to.include({ readOpsPerSecond: 300, writeOpsPerSecond: 0 });
  });

  it('scales the cgroups down to 100 when their shares exceed the device (bios as submitted, not as merged)', () => {
    const before = look(0, {
      sda: [0, 0, 0, 0],
      pods: { a: { io: { '8:0': io(0, 0, 0, 0) } }, b: { io: { '8:0': io(0, 0, 0, 0) } } },
    });
    // a: 90 % of the bytes; b: 90 % of the operations (small writes, merged by the block layer before they completed).
    const after = look(1, {
      sda: [0, 100 * MB, 0, 100],
      pods: { a: { io: { '8:0': io(0, 90 * MB, 0, 10) } }, b: { io: { '8:0': io(0, 10 * MB, 0, 90) } } },
    });
    expect(shares(computeAttribution(before, after, CONTEXT))).to.deep.equal([
      ['a', 50, 'Culprit'],
      ['b', 50, 'Culprit'],
      ['System', 0, 'System'],
    ]);
  });

  it('gives a cgroup whose counters went back (recreated) no rate this time, never a negative one', () => {
    const before = look(0, {
      sda: [0, 50 * MB, 0, 500],
      pods: { reborn: { io: { '8:0': io(0, 40 * MB, 0, 400) } }, steady: { io: { '8:0': io(0, 0, 0, 0) } } },
    });
    // The new cgroup has written fewer bytes than the old one had, in more operations: only one counter went back.
    const after = look(1, {
      sda: [0, 100 * MB, 0, 1000],
      pods: {
        reborn: { io: { '8:0': io(0, 10 * MB, 0, 900) } },
        steady: { io: { '8:0': io(0, 20 * MB, 0, 200) } },
      },
    });
    const a = computeAttribution(before, after, CONTEXT)!;
    expect(shares(a)).to.deep.equal([
      ['steady', 40, 'Culprit'],
      ['System', 60, 'System'],
    ]);
    for (const c of a.consumers)
      for (const n of [c.readBytesPerSecond, c.writeBytesPerSecond, c.opsPerSecond])
        expect(n).to.be.at.least(0);
    // The next look compares with the new life's counters: a rate again.
    const later = look(2, {
      sda: [0, 150 * MB, 0, 1500],
      pods: {
        reborn: { io: { '8:0': io(0, 30 * MB, 0, 1100) } },
        steady: { io: { '8:0': io(0, 20 * MB, 0, 200) } },
      },
    });
    expect(shares(computeAttribution(after, later, CONTEXT))?.[0]).to.deep.equal(['reborn', 40, 'Culprit']);
  });

  it('has no attribution when the device is unknown, new or reset', () => {
    const base = { pods: {} };
    const a = look(0, { ...base, sda: [10, 10, 10, 10] });
    const b = look(1, { ...base, sda: [20, 20, 20, 20] });
    expect(computeAttribution(a, b, { ...CONTEXT, device: 'vdb' })).to.equal(undefined);
    expect(computeAttribution(b, look(2, { ...base, sda: [5, 30, 30, 30] }), CONTEXT), 'reset').to.equal(
      undefined,
    );
    expect(computeAttribution(b, a, CONTEXT), 'back in time').to.equal(undefined);
    expect(computeAttribution(a, a, CONTEXT), 'no time between').to.equal(undefined);
  });

  it('leaves out a pod that is new since the last look: its IO is in System this time', () => {
    const before = look(0, { sda: [0, 0, 0, 0], pods: {} });
    const after = look(1, {
      sda: [0, 10 * MB, 0, 100],
      pods: { fresh: { io: { '8:0': io(0, 10 * MB, 0, 100) } } },
    });
    expect(shares(computeAttribution(before, after, CONTEXT))).to.deep.equal([['System', 100, 'System']]);
  });

  it('lists the top five pods by share, then the runtime and System, which holds the pods beyond', () => {
    const uids = ['p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7'];
    const zero = Object.fromEntries(uids.map((u) => [u, { io: { '8:0': io(0, 0, 0, 0) } }]));
    // p1 does 7 MB, p2 6 MB, ... p7 1 MB of the device's 100 MB.
    const pods = Object.fromEntries(uids.map((u, i) => [u, { io: { '8:0': io(0, (7 - i) * MB, 0, 0) } }]));
    const a = computeAttribution(
      look(0, { sda: [0, 0, 0, 0], pods: zero, runtime: { '8:0': io(0, 0, 0, 0) } }),
      look(1, { sda: [0, 100 * MB, 0, 1000], pods, runtime: { '8:0': io(0, 2 * MB, 0, 0) } }),
      CONTEXT,
    );
    expect(shares(a)).to.deep.equal([
      ['p1', 7, 'Bystander'],
      ['p2', 6, 'Bystander'],
      ['p3', 5, 'Bystander'],
      ['p4', 4, 'Bystander'],
      ['p5', 3, 'Bystander'],
      ['Runtime', 2, 'Runtime'],
      ['System', 73, 'System'],
    ]);
  });

  it('lists only the pods waiting on IO, with no share, when the device did no IO', () => {
    const pods = { waiting: { io: {}, psi: 45 }, calm: { io: {}, psi: 2 } };
    const a = computeAttribution(
      look(0, { sda: [5, 5, 5, 5], pods, runtime: {} }),
      look(1, { sda: [5, 5, 5, 5], pods, runtime: {} }),
      CONTEXT,
    );
    expect(a?.consumers).to.deep.equal([
      {
        kind: 'Pod',
        podUid: 'waiting',
        readBytesPerSecond: 0,
        writeBytesPerSecond: 0,
        opsPerSecond: 0,
        readOpsPerSecond: 0,
        writeOpsPerSecond: 0,
        psiSomeAvg10Percent: 45,
        role: 'Victim',
      },
    ]);
  });

  describe('roles', () => {
    /** A pod `p` with `share` % of the device's bytes and its own PSI, once published as `was`. */
    const roleOf = (share: number, psi: number | undefined, was?: IoConsumer['role']) => {
      const published: IoAttribution | undefined = was && {
        confidence: 'High',
        confidenceReason: '',
        podsMeasured: 1,
        consumers: [{ kind: 'Pod', podUid: 'p', role: was }],
      };
      const a = computeAttribution(
        look(0, {
          sda: [0, 0, 0, 0],
          pods: { p: { io: { '8:0': io(0, 0, 0, 0) }, ...(psi !== undefined ? { psi } : {}) } },
        }),
        look(1, {
          sda: [0, 100 * MB, 0, 0],
          pods: { p: { io: { '8:0': io(0, share * MB, 0, 0) }, ...(psi !== undefined ? { psi } : {}) } },
        }),
        { ...CONTEXT, ...(published ? { published } : {}) },
      );
      return a?.consumers.find((c) => c.kind === 'Pod')?.role;
    };
    const table: [string, number, number | undefined, IoConsumer['role'] | undefined, IoConsumer['role']][] =
      [
        ['a quarter of the device', 25, 0, undefined, 'Culprit'],
        ['just under a quarter', 24, 0, undefined, 'Bystander'],
        ['high pressure with a small share', 3, 20, undefined, 'Victim'],
        ['high pressure with a large share', 60, 90, undefined, 'Culprit'],
        ['pressure just under the bar', 3, 19.99, undefined, 'Bystander'],
        ['no pressure known (cgroup v1)', 3, undefined, undefined, 'Bystander'],
        ['a published Culprit down to 21 % (exit 20)', 21, 0, 'Culprit', 'Culprit'],
        ['a published Culprit down to 19 %', 19, 0, 'Culprit', 'Bystander'],
        ['a published Victim whose pressure fell to 15 (exit 14)', 3, 15, 'Victim', 'Victim'],
        ['a published Victim whose pressure fell to 13', 3, 13, 'Victim', 'Bystander'],
        ['a published Bystander at 21 %', 21, 0, 'Bystander', 'Bystander'],
      ];
    for (const [name, share, psi, was, role] of table)
      it(`${name}: ${role}`, () => {
        expect(roleOf(share, psi, was)).to.equal(role);
      });
  });
});

describe('judgeConfidence', () => {
  const facts = {
    version: 'v2' as const,
    device: 'sda',
    filesystem: 'ext4' as string | undefined,
    podsFound: 10,
    podsRead: 10,
    runtimeFound: true,
    countedOnDevice: true,
  };
  const table: [string, Partial<typeof facts>, string, RegExp][] = [
    ['v2 with ext4', {}, 'High', /^cgroup v2 with ext4: writeback is charged to the cgroup that wrote$/],
    ['v2 with xfs', { filesystem: 'xfs' }, 'High', /xfs/],
    ['v2 with btrfs', { filesystem: 'btrfs' }, 'High', /btrfs/],
    ['v2 with f2fs', { filesystem: 'f2fs' }, 'Medium', /f2fs, which may charge writeback to the flusher/],
    ['v2 with no filesystem found', { filesystem: undefined }, 'Medium', /no filesystem found on sda/],
    ['v2 without a runtime cgroup', { runtimeFound: false }, 'Medium', /no container runtime cgroup found/],
    [
      'v2 with pods unreadable',
      { podsRead: 7 },
      'Low',
      /^3 of 10 pod cgroups unreadable: their IO shows as System$/,
    ],
    [
      'v1',
      { version: 'v1' as never },
      'Low',
      /^cgroup v1: buffered writeback is charged to the flusher.*System$/,
    ],
    [
      'v1 counting nothing on the device',
      { version: 'v1' as never, countedOnDevice: false },
      'Low',
      /no pod or runtime cgroup has counters for sda: .* a blkio\.throttle limit/,
    ],
  ];
  for (const [name, change, confidence, reason] of table)
    it(`${name}: ${confidence}`, () => {
      const judged = judgeConfidence({ ...facts, ...change });
      expect(judged.confidence).to.equal(confidence);
      expect(judged.confidenceReason).to.match(reason);
      expect(judged.confidenceReason.length).to.be.at.most(256);
    });
});

describe('filesystemOn', () => {
  const mounts: Mount[] = [
    { device: '259:5', mountPoint: '/boot/efi', fsType: 'vfat' },
    { device: '259:1', mountPoint: '/', fsType: 'ext4' },
    { device: '259:9', mountPoint: '/var/lib/kubelet', fsType: 'xfs' },
    { device: '253:0', mountPoint: '/data', fsType: 'btrfs' },
  ];
  const nvme = (name: string, minor: number) => disk(name, 259, minor, [0, 0], [0, 0]);
  const disks = [
    nvme('nvme0n1', 0),
    nvme('nvme0n1p1', 1),
    nvme('nvme0n1p15', 5),
    nvme('nvme1n1', 9),
    disk('dm-0', 253, 0, [0, 0], [0, 0]),
  ];
  it("names the filesystem of the disk's shortest mount point, on it or a partition", () => {
    expect(filesystemOn(disks[0]!, disks, mounts)).to.equal('ext4');
    expect(filesystemOn(disks[3]!, disks, mounts)).to.equal('xfs');
    expect(filesystemOn(disk('sdb', 8, 16, [0, 0], [0, 0]), disks, mounts), 'nothing mounted').to.equal(
      undefined,
    );
  });
});
