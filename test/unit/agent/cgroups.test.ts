import { expect } from 'chai';
import { mkdirSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CgroupReader } from '../../../src/agent/cgroups.js';
import {
  CgroupTree,
  io,
  QOS_CLASSES,
  type Driver,
  type PodSpec,
  type Version,
} from '../../support/cgroup-tree.js';

const UIDS = [
  '0b1e2c3d-1111-4a5b-8c9d-000000000001',
  '0b1e2c3d-2222-4a5b-8c9d-000000000002',
  '0b1e2c3d-3333-4a5b-8c9d-000000000003',
];

/** One pod per QoS class, each with its own figures on the disk (8:0) and on a dm device over it (253:0). */
const PODS: PodSpec[] = QOS_CLASSES.map((qos, i) => ({
  uid: UIDS[i]!,
  qos,
  io: {
    '8:0': io(3000 * (i + 1), 6000 * (i + 1), 30 + i, 60 + i),
    '253:0': io(2900 * (i + 1), 5900, 29, 59),
  },
  psi: 10 * (i + 1),
}));

describe('CgroupReader', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'cgroups-'));
  });
  afterEach(function () {
    this.timeout(60_000); // 5,000 pod cgroups are tens of thousands of files
    rmSync(dir, { recursive: true, force: true });
  });

  const layouts: [Version, Driver, boolean][] = [
    ['v2', 'systemd', true],
    ['v2', 'cgroupfs', true],
    ['v1', 'systemd', true],
    ['v1', 'cgroupfs', true],
    ['v1', 'systemd', false],
    ['v1', 'cgroupfs', false],
  ];
  for (const [version, driver, recursive] of layouts)
    it(`reads every QoS class's pods on ${version}${recursive ? '' : ' without _recursive files'} with the ${driver} driver`, () => {
      const tree = new CgroupTree(dir, version, driver, recursive);
      for (const pod of PODS) tree.pod(pod);
      tree.cgroup('system.slice/containerd.service', { '8:0': io(100, 200, 1, 2) });
      const sample = new CgroupReader(dir).sample();
      expect(sample.problems).to.deep.equal([]);
      expect(sample.version).to.equal(version);
      expect(sample.driver).to.equal(driver);
      expect(sample.podsFound).to.equal(3);
      expect([...sample.pods.keys()].sort()).to.deep.equal([...UIDS].sort());
      for (const pod of PODS) {
        const read = sample.pods.get(pod.uid)!;
        expect(Object.fromEntries(read.counters), pod.qos).to.deep.equal(pod.io);
        expect(read.psiSomeAvg10, 'io.pressure is v2 only').to.equal(version === 'v2' ? pod.psi : undefined);
      }
      expect(sample.runtime?.path).to.equal('system.slice/containerd.service');
      expect(Object.fromEntries(sample.runtime!.counters)).to.deep.equal({ '8:0': io(100, 200, 1, 2) });
    });

  it('finds the runtime by the default names in order, or at --runtime-cgroup (the lab: containerd in its own)', () => {
    const tree = new CgroupTree(dir, 'v1', 'cgroupfs');
    tree.cgroup('containerd', { '8:0': io(1, 1, 1, 1) });
    tree.cgroup('system.slice/crio.service', { '8:0': io(2, 2, 2, 2) });
    tree.cgroup('sandbox-remediator-lab', { '7:3': io(3, 3, 3, 3) });
    expect(new CgroupReader(dir).sample().runtime?.path).to.equal('system.slice/crio.service');
    const lab = new CgroupReader(dir, 'sandbox-remediator-lab').sample();
    expect(lab.runtime?.path).to.equal('sandbox-remediator-lab');
    expect(lab.runtime?.counters.get('7:3')).to.deep.equal(io(3, 3, 3, 3));
    const missing = new CgroupReader(dir, 'system.slice/docker.service').sample();
    expect(missing.runtime).to.equal(undefined);
    expect(missing.problems.join()).to.match(/no runtime cgroup \(system\.slice\/docker\.service\)/);
  });

  it('leaves out a pod whose io.stat is missing while its io.pressure is there, and says why once for all', () => {
    const tree = new CgroupTree(dir, 'v2', 'systemd');
    for (const pod of PODS) tree.pod(pod);
    tree.cgroup('system.slice/containerd.service', {});
    // The io controller not enabled for the Burstable and BestEffort slices: their pods have no io.stat.
    for (const pod of PODS.slice(1)) unlinkSync(join(tree.podDir(pod), 'io.stat'));
    const sample = new CgroupReader(dir).sample();
    expect([...sample.pods.keys()]).to.deep.equal([PODS[0]!.uid]);
    expect(sample.podsFound).to.equal(3);
    expect(sample.problems).to.have.length(1);
    expect(sample.problems[0]).to.match(
      /^kubepods\.slice\/kubepods-(burstable|besteffort)\.slice\/.*\/io\.stat: missing \(the io controller is not enabled in the parent's cgroup\.subtree_control\) \(and in 1 more cgroups\)$/,
    );
  });

  it('leaves out a pod with a malformed io.stat, keeps one whose io.pressure alone is bad without its pressure', () => {
    const tree = new CgroupTree(dir, 'v2', 'cgroupfs');
    for (const pod of PODS) tree.pod(pod);
    tree.cgroup('containerd', {});
    writeFileSync(join(tree.podDir(PODS[0]!), 'io.stat'), '8:0 rbytes=1 wbytes=2\nrios=3 wios=4\n');
    writeFileSync(join(tree.podDir(PODS[1]!), 'io.pressure'), 'some avg10=abc\n');
    const sample = new CgroupReader(dir).sample();
    expect(sample.pods.has(PODS[0]!.uid)).to.equal(false);
    const second = sample.pods.get(PODS[1]!.uid);
    expect(second?.counters.get('8:0')).to.deep.equal(PODS[1]!.io['8:0']);
    expect(second?.psiSomeAvg10).to.equal(undefined);
    expect(sample.pods.get(PODS[2]!.uid)?.psiSomeAvg10).to.equal(30);
    expect(sample.problems).to.have.length(2);
    expect(sample.problems[0]).to.match(/^kubepods\/pod0b1e2c3d-1111-.*\/io\.stat: line 1 is not one/);
    expect(sample.problems[1]).to.match(
      /^kubepods\/burstable\/pod0b1e2c3d-2222-.*\/io\.pressure: is not "some avg10=…/,
    );
  });

  it('leaves out a v1 pod whose container has a malformed file, and ignores what is not a pod cgroup', () => {
    const tree = new CgroupTree(dir, 'v1', 'systemd', false);
    for (const pod of PODS) tree.pod(pod);
    tree.cgroup('system.slice/containerd.service', {});
    writeFileSync(
      join(tree.podDir(PODS[2]!), 'cri-containerd-aaa', 'blkio.throttle.io_serviced'),
      '8:0 Read 1\n',
    );
    const slice = join(tree.hierarchy, 'kubepods.slice');
    mkdirSync(join(slice, 'kubepods-podnot_hex_zz.slice')); // not a UID
    mkdirSync(join(slice, 'kubepods-burstable.slice', 'kubepods-besteffort-pod0b1e.slice')); // another class's name
    const sample = new CgroupReader(dir).sample();
    expect([...sample.pods.keys()].sort()).to.deep.equal([UIDS[0], UIDS[1]]);
    expect(sample.podsFound).to.equal(3);
    expect(sample.problems).to.have.length(1);
    expect(sample.problems[0]).to.match(
      /cri-containerd-aaa\/blkio\.throttle\.io_serviced: line 1 does not start one device.s/,
    );
  });

  for (const [driver, other] of [
    ['cgroupfs', 'kubepods.slice/kubepods-burstable.slice'],
    ['systemd', 'kubepods/burstable'],
  ] as const)
    it(`reports the ${driver} driver, whose tree holds the pods, beside an empty one of the other`, () => {
      const tree = new CgroupTree(dir, 'v2', driver);
      mkdirSync(join(dir, other), { recursive: true }); // left by a kubelet configured otherwise before
      for (const pod of PODS) tree.pod(pod);
      tree.cgroup('containerd', {});
      const sample = new CgroupReader(dir).sample();
      expect(sample.driver).to.equal(driver);
      expect(sample.pods.size).to.equal(3);
    });

  it('says so when the tree is neither v1 nor v2, or has no kubepods cgroup', () => {
    const none = new CgroupReader(dir).sample();
    expect(none.version).to.equal(undefined);
    expect(none.problems.join()).to.match(
      /neither cgroup v2 \(cgroup.controllers\) nor a v1 blkio hierarchy/,
    );
    writeFileSync(join(dir, 'cgroup.controllers'), 'io\n');
    const bare = new CgroupReader(dir).sample();
    expect(bare.version).to.equal('v2');
    expect(bare.driver).to.equal(undefined);
    expect(bare.problems.join()).to.match(/no kubepods.slice or kubepods cgroup: no pod can be measured/);
  });

  // How long it takes is measured in bench/agent-attribution.ts, not here: these machines are noisy.
  for (const [version, driver] of [
    ['v2', 'systemd'],
    ['v1', 'cgroupfs'],
  ] as const)
    it(`reads 5,000 pod cgroups on ${version} with the ${driver} driver, every pod right`, function () {
      this.timeout(120_000);
      const count = 5000;
      const tree = new CgroupTree(dir, version, driver);
      tree.cgroup('system.slice/containerd.service', { '8:0': io(1, 2, 3, 4) });
      const uid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
      for (let i = 0; i < count; i++)
        tree.pod({
          uid: uid(i),
          qos: QOS_CLASSES[i % 3]!,
          io: { '8:0': io(i, 2 * i, i % 7, i % 11) },
          psi: i % 100,
        });
      const sample = new CgroupReader(dir).sample();
      expect(sample.problems).to.deep.equal([]);
      expect(sample.pods.size).to.equal(count);
      for (let i = 0; i < count; i++) {
        const read = sample.pods.get(uid(i));
        expect(read?.counters.get('8:0'), uid(i)).to.deep.equal(io(i, 2 * i, i % 7, i % 11));
        if (version === 'v2') expect(read?.psiSomeAvg10).to.equal(i % 100);
      }
    });
});
