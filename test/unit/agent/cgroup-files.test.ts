import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  addCounters,
  blkioCounters,
  parseBlkioThrottle,
  parseIoStat,
  parseSomeAvg10,
} from '../../../src/agent/cgroup-files.js';
import { isPartitionOf, parseMountinfo, ProcParseError } from '../../../src/agent/proc.js';
import { REPO_ROOT } from '../../support/manifests.js';
import { io } from '../../support/cgroup-tree.js';

const fixture = (...path: string[]) =>
  readFileSync(join(REPO_ROOT, 'test', 'fixtures', 'cgroups', ...path), 'utf8');

describe('cgroup file parsers', () => {
  it('reads v2 io.stat per device, with the keys io.cost adds', () => {
    const stat = parseIoStat(fixture('v2', 'io.stat'));
    expect([...stat.keys()]).to.deep.equal(['8:16', '8:0', '253:0']);
    expect(stat.get('8:0')).to.deep.equal(io(90430464, 299008000, 8950, 1252));
    expect(parseIoStat(fixture('v2', 'io.stat-iocost')).get('8:0')).to.deep.equal(
      io(90430464, 299008000, 8950, 1252),
    );
    expect(parseIoStat('').size, 'a cgroup that did no IO yet').to.equal(0);
  });

  it('reads v1 blkio.throttle files from a real kernel: Read and Write, not Total (which counts discards)', () => {
    const dir = 'v1-linux-6.18';
    const recursive = blkioCounters(
      parseBlkioThrottle(fixture(dir, 'blkio.throttle.io_service_bytes_recursive'), 'bytes'),
      parseBlkioThrottle(fixture(dir, 'blkio.throttle.io_serviced_recursive'), 'ops'),
    );
    expect(recursive.get('254:0')).to.deep.equal(io(4222976, 4194304, 66, 64));
    const own = blkioCounters(
      parseBlkioThrottle(fixture(dir, 'blkio.throttle.io_service_bytes'), 'bytes'),
      parseBlkioThrottle(fixture(dir, 'blkio.throttle.io_serviced'), 'ops'),
    );
    expect(own.get('254:0'), "the pod's own tasks did nothing").to.deep.equal(io(0, 0, 0, 0));
    // Summed with its child's, the plain files give what the recursive ones say.
    addCounters(
      own,
      blkioCounters(
        parseBlkioThrottle(fixture(dir, 'ctr', 'blkio.throttle.io_service_bytes'), 'bytes'),
        parseBlkioThrottle(fixture(dir, 'ctr', 'blkio.throttle.io_serviced'), 'ops'),
      ),
    );
    expect(own).to.deep.equal(recursive);
    const root = parseBlkioThrottle(fixture(dir, 'root-blkio.throttle.io_service_bytes_recursive'), 'bytes');
    expect(root.get('254:0')).to.deep.equal({ read: 41824256, write: 484028416 });
    expect(parseBlkioThrottle('Total 0\n', 'f').size, 'a cgroup that did no IO').to.equal(0);
  });

  it("reads a cgroup's io.pressure some avg10, with or without the full line", () => {
    expect(parseSomeAvg10(fixture('v2', 'io.pressure'))).to.equal(31.52);
    expect(parseSomeAvg10('some avg10=100.00 avg60=0.00 avg300=0.00 total=18446744073709551615\n')).to.equal(
      100,
    );
  });

  const SDA = '8:0 Read 1\n8:0 Write 2\n8:0 Sync 3\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 3\n';
  const blkio = (text: string) => parseBlkioThrottle(text, 'f');
  it('reads v1 blkio lines without Discard (kernels before 4.19), and the other devices', () => {
    const old = SDA.replace('8:0 Discard 0\n', '');
    expect(blkio(old + old.replace(/8:0/g, '8:16').replace('Read 1', 'Read 7') + 'Total 10\n')).to.deep.equal(
      new Map([
        ['8:0', { read: 1, write: 2 }],
        ['8:16', { read: 7, write: 2 }],
      ]),
    );
  });

  const SOME = 'some avg10=1.00 avg60=0.00 avg300=0.00 total=5\n';
  const refused: [string, () => unknown, RegExp][] = [
    ['io.pressure cut short', () => parseSomeAvg10(SOME.slice(0, -1)), /is not "some avg10=/],
    ['io.pressure over 100', () => parseSomeAvg10(SOME.replace('1.00', '100.01')), /is not "some avg10=/],
    ['io.pressure with 3 decimals', () => parseSomeAvg10(SOME.replace('1.00', '1.000')), /is not/],
    ['io.pressure with full first', () => parseSomeAvg10(SOME.replace('some', 'full') + SOME), /is not/],
    [
      'io.pressure with a third line',
      () => parseSomeAvg10(SOME + SOME.replace('some', 'full') + SOME),
      /is not/,
    ],
    ['io.pressure without total', () => parseSomeAvg10('some avg10=1.00 avg60=0.00 avg300=0.00\n'), /is not/],
    ['io.stat cut short', () => parseIoStat('8:0 rbytes=1 wbytes=2 rios=3 wios=4'), /cut short/],
    ['io.stat without wios', () => parseIoStat('8:0 rbytes=1 wbytes=2 rios=3\n'), /line 1/],
    ['io.stat with a word for a count', () => parseIoStat('8:0 rbytes=x wbytes=2 rios=3 wios=4\n'), /line 1/],
    ['io.stat with a negative count', () => parseIoStat('8:0 rbytes=-1 wbytes=2 rios=3 wios=4\n'), /line 1/],
    ['io.stat with no device', () => parseIoStat('rbytes=1 wbytes=2 rios=3 wios=4\n'), /line 1/],
    [
      'io.stat with a key twice',
      () => parseIoStat('8:0 rbytes=1 rbytes=5 wbytes=2 rios=3 wios=4\n'),
      /line 1/,
    ],
    [
      'io.stat with a field without a value',
      () => parseIoStat('8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes\n'),
      /line 1/,
    ],
    [
      'io.stat with a device twice',
      () => parseIoStat('8:0 rbytes=1 wbytes=2 rios=3 wios=4\n'.repeat(2)),
      /line 2/,
    ],
    [
      'io.stat with a line broken in two',
      () => parseIoStat('8:0 rbytes=1 wbytes=2\nrios=3 wios=4\n'),
      /line 1/,
    ],
    [
      'io.stat with a count beyond a double',
      () => parseIoStat('8:0 rbytes=18446744073709551615 wbytes=2 rios=3 wios=4\n'),
      /line 1/,
    ],
    ['blkio without the final Total', () => blkio(SDA), /line 7 .*or the final "Total N"/],
    ['blkio cut short', () => blkio(SDA + 'Total 3'), /cut short/],
    ['blkio without Write', () => blkio(SDA.replace('8:0 Write 2\n', '') + 'Total 3\n'), /line 1/],
    ['blkio with a word for a count', () => blkio(SDA.replace('Read 1', 'Read one') + 'Total 3\n'), /line 1/],
    [
      'blkio with two counts on a line',
      () => blkio(SDA.replace('Read 1', 'Read 1 2') + 'Total 3\n'),
      /line 1/,
    ],
    [
      'blkio with a line twice',
      () => blkio(SDA.replace('8:0 Write 2\n', '8:0 Write 2\n'.repeat(2)) + 'Total 3\n'),
      /line 1/,
    ],
    ['blkio with a device twice', () => blkio(SDA + SDA + 'Total 6\n'), /line 7/],
    [
      'blkio with two devices mixed',
      () => blkio(SDA.replace('8:0 Sync', '8:16 Sync') + 'Total 3\n'),
      /line 1/,
    ],
    ['blkio with a bad device', () => blkio(SDA.replace(/8:0/g, 'sda') + 'Total 3\n'), /line 1/],
    ['blkio with a line after the final Total', () => blkio(SDA + 'Total 3\n' + SDA), /line 7/],
    ['mountinfo without the separator', () => parseMountinfo('27 1 259:1 / / rw ext4 /dev/x rw\n'), /line 1/],
    ['mountinfo with a bad device', () => parseMountinfo('27 1 vda / / rw - ext4 /dev/vda rw\n'), /line 1/],
  ];
  for (const [name, parse, message] of refused)
    it(`refuses ${name}, naming the line`, () => {
      expect(parse).to.throw(ProcParseError, message);
    });

  it('reads mountinfo: device, mount point (spaces unescaped) and filesystem, past the optional fields', () => {
    const mounts = parseMountinfo(fixture('mountinfo'));
    expect(mounts.find((m) => m.mountPoint === '/')).to.deep.equal({
      device: '259:1',
      mountPoint: '/',
      fsType: 'ext4',
    });
    expect(mounts.map((m) => m.mountPoint)).to.include('/var/lib/kubelet/pods/0b1e/volumes/my data');
    expect(mounts.find((m) => m.fsType === 'overlay')?.device).to.equal('0:45');
  });

  it('tells a disk’s partitions by their names', () => {
    const cases: [string, string, boolean][] = [
      ['sda1', 'sda', true],
      ['sda', 'sda', false],
      ['sdab', 'sda', false],
      ['nvme0n1p2', 'nvme0n1', true],
      ['nvme0n12', 'nvme0n1', false],
      ['mmcblk0p1', 'mmcblk0', true],
      ['vdb1', 'vda', false],
    ];
    for (const [name, disk, is] of cases)
      expect(isPartitionOf(name, disk), `${name} of ${disk}`).to.equal(is);
  });
});
