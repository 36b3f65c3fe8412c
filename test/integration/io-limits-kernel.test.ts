// The agent's IO limits on this machine's real cgroup v1 blkio hierarchy (issue 44): the kernel's files read back as
// test/support/cgroup-kernel.ts says they do (so the crafted trees the unit tests use are the kernel's), a limit set,
// stepped and lifted leaves the files byte for byte as they were, a lower limit someone set is kept, and the limit
// throttles a writer: O_DIRECT writes in the cgroup go no faster than the limit. No cluster is needed.
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IoLimiter, KERNEL_CGROUP_FILES, V1_THROTTLE_FILES } from '../../src/agent/io-limits.js';
import { diskOf } from '../../hack/demo/neighbour.js';
import { CgroupKernel } from '../support/cgroup-kernel.js';

const BLKIO = '/sys/fs/cgroup/blkio';
const MiB = 1_048_576;

describe('IO limits on the real cgroup v1 blkio hierarchy', function () {
  this.timeout(60_000);
  const cgroup = join(BLKIO, `sandbox-remediator-io-limits-${process.pid}`);
  let crafted: string;
  let scratch: string;

  before(function () {
    // This project's machines run cgroup v1 with blkio, as root (the demo's noisy neighbour needs the same).
    expect(existsSync(`${BLKIO}/blkio.throttle.write_bps_device`), `${BLKIO} (cgroup v1 blkio)`).to.equal(
      true,
    );
    expect(process.getuid?.(), 'root, to make a cgroup').to.equal(0);
    mkdirSync(cgroup);
    crafted = mkdtempSync(join(tmpdir(), 'io-limits-crafted-'));
    scratch = mkdtempSync(join(tmpdir(), 'io-limits-scratch-'));
  });
  after(() => {
    if (existsSync(cgroup)) rmdirSync(cgroup); // no task is left in it: each writer has exited
    rmSync(crafted, { recursive: true, force: true });
    rmSync(scratch, { recursive: true, force: true });
  });

  const files = Object.values(V1_THROTTLE_FILES);
  const read = (dir: string) => files.map((f) => readFileSync(join(dir, f), 'utf8'));

  it('reads back as the crafted trees have it, and a set, a step and a lift leave the files as they were', () => {
    const disk = diskOf(tmpdir());
    // Someone's limit on reads, above what we will want, and one below.
    writeFileSync(join(cgroup, V1_THROTTLE_FILES.rbps), `${disk} ${64 * MiB}\n`);
    writeFileSync(join(cgroup, V1_THROTTLE_FILES.riops), `${disk} 50\n`);
    // Read and written, not copied: cgroupfs files say their size is 0.
    for (const file of files) writeFileSync(join(crafted, file), readFileSync(join(cgroup, file)));
    const before = read(cgroup);
    expect(read(crafted)).to.deep.equal(before);
    const real = new IoLimiter(KERNEL_CGROUP_FILES);
    const emulated = new IoLimiter(new CgroupKernel());
    const want = { rbps: 8 * MiB, wbps: 4 * MiB, riops: 200, wiops: 300 };
    let ours = real.apply(cgroup, 'v1', disk, want);
    let theirs = emulated.apply(crafted, 'v1', disk, want);
    expect(ours.written, 'their lower riops kept').to.deep.equal({
      rbps: 8 * MiB,
      wbps: 4 * MiB,
      wiops: 300,
    });
    expect(ours).to.deep.equal(theirs);
    expect(read(cgroup)).to.deep.equal(read(crafted));
    expect(readFileSync(join(cgroup, V1_THROTTLE_FILES.wbps), 'utf8')).to.equal(`${disk} ${4 * MiB}\n`);
    const step = { rbps: 4 * MiB, wbps: 2 * MiB, wiops: 150 };
    ours = real.apply(cgroup, 'v1', disk, step, ours);
    theirs = emulated.apply(crafted, 'v1', disk, step, theirs);
    expect(ours).to.deep.equal(theirs);
    expect(read(cgroup)).to.deep.equal(read(crafted));
    expect(real.lift(cgroup, 'v1', ours)).to.deep.equal(emulated.lift(crafted, 'v1', theirs));
    expect(read(cgroup), 'byte for byte as before').to.deep.equal(before);
    expect(read(crafted)).to.deep.equal(before);
    for (const file of files) writeFileSync(join(cgroup, file), `${disk} 0\n`); // theirs gone too
  });

  it('throttles a writer in the cgroup to the limit, and lets it go once lifted', () => {
    const disk = diskOf(tmpdir());
    const record = new IoLimiter().apply(cgroup, 'v1', disk, { wbps: MiB });
    // 2 MiB in O_DIRECT writes from a task in the cgroup: at 1 MiB/s, no sooner than about 2 s (bounded: dd stops).
    const write = (name: string) => {
      const started = Date.now();
      const dd = spawnSync(
        'sh',
        [
          '-c',
          'echo $$ >"$1/cgroup.procs" && exec dd if=/dev/zero of="$2" bs=64k count=32 oflag=direct status=none',
          'sh',
          cgroup,
          join(scratch, name),
        ],
        { encoding: 'utf8', timeout: 30_000 },
      );
      expect(dd.status, dd.stderr).to.equal(0);
      return Date.now() - started;
    };
    const limited = write('limited');
    expect(limited, 'ms for 2 MiB at 1 MiB/s').to.be.at.least(1_500);
    expect(new IoLimiter().lift(cgroup, 'v1', record).restored).to.deep.equal(['wbps']);
    expect(readFileSync(join(cgroup, V1_THROTTLE_FILES.wbps), 'utf8')).to.equal('');
  });
});
