import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CgroupReader } from '../../../src/agent/cgroups.js';
import { ioHierarchy, podCgroupPath } from '../../../hack/demo/neighbour.js';
import { CgroupTree, io, podCgroup, QOS_CLASSES, type Version } from '../../support/cgroup-tree.js';

const UID = '0b1e2c3d-1111-4a5b-8c9d-000000000001';

describe("demo's noisy neighbour", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'neighbour-'));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("names a pod's cgroup as kubelet's systemd driver does, for every QoS class", () => {
    for (const qos of QOS_CLASSES)
      expect(podCgroupPath(UID, qos), qos).to.equal(podCgroup('systemd', qos, UID));
    expect(podCgroupPath(UID, 'BestEffort')).to.equal(
      'kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b1e2c3d_1111_4a5b_8c9d_000000000001.slice',
    );
  });

  for (const version of ['v1', 'v2'] as const satisfies readonly Version[])
    it(`makes a cgroup the agent finds by its usual path rules, by the pod's UID (${version})`, () => {
      const tree = new CgroupTree(dir, version, 'systemd');
      const hierarchy = ioHierarchy(dir);
      expect(hierarchy).to.deep.equal({ version, dir: tree.hierarchy });
      tree.files(join(tree.hierarchy, podCgroupPath(UID, 'BestEffort')), { '8:0': io(0, 4096, 0, 1) }, 0);
      const sample = new CgroupReader(dir).sample();
      expect(sample.driver).to.equal('systemd');
      expect(sample.pods.get(UID)?.counters.get('8:0')?.writeBytes).to.equal(4096);
    });
});
