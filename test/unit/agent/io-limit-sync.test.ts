// The agent's level-based IO limits (issue 44) on crafted trees with the kernel's semantics: what the operator wants
// is set, stepped and lifted until the cgroups hold it; a restarted agent lifts from its report; nothing is written
// without --allow-io-limits, or for a pod whose cgroup is not on this node.
import { expect } from 'chai';
import fc from 'fast-check';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  IoLimitSync,
  type AppliedIoLimit,
  type IoLimitSyncResult,
  type WantedIoLimit,
} from '../../../src/agent/io-limit-sync.js';
import { IoLimiter, V1_THROTTLE_FILES } from '../../../src/agent/io-limits.js';
import { CgroupKernel } from '../../support/cgroup-kernel.js';

const UIDS = ['0b1e7c1a-1111-4000-8000-000000000001', '0b1e7c1a-2222-4000-8000-000000000002'] as const;
const [DB, WEB] = UIDS;
const OTHERS = '259:0 rbps=max wbps=4096 riops=max wiops=max\n';

describe('IoLimitSync', () => {
  let root: string;
  let kernel: CgroupKernel;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'io-limit-sync-'));
    kernel = new CgroupKernel();
  });
  afterEach(() => {
    rmSync(root, { recursive: true, force: true });
  });

  /** A v2 tree (systemd's layout) with the pods' cgroups, each io.max holding `OTHERS`; the pod directory of each. */
  function v2Tree(uids: readonly string[] = UIDS): Record<string, string> {
    writeFileSync(join(root, 'cgroup.controllers'), 'cpu io memory\n');
    return Object.fromEntries(
      uids.map((uid) => {
        const dir = join(
          root,
          'kubepods.slice/kubepods-burstable.slice',
          `kubepods-burstable-pod${uid.replace(/-/g, '_')}.slice`,
        );
        mkdirSync(dir, { recursive: true });
        writeFileSync(join(dir, 'io.max'), OTHERS);
        return [uid, dir];
      }),
    );
  }

  /**
   * A v1 tree (cgroupfs' layout), a Guaranteed pod's cgroup with empty throttle files, and a cgroup for each of
   * `containers` below it (kubelet's on v1), whose wbps file holds `containerWbps`.
   */
  function v1Pod(uid: string, containers: readonly string[] = [], containerWbps = ''): string {
    const dir = join(root, 'blkio', 'kubepods', `pod${uid}`);
    for (const cgroup of ['', ...containers]) {
      mkdirSync(join(dir, cgroup), { recursive: true });
      for (const file of Object.values(V1_THROTTLE_FILES))
        writeFileSync(
          join(dir, cgroup, file),
          cgroup && file === V1_THROTTLE_FILES.wbps ? containerWbps : '',
        );
    }
    return dir;
  }

  const sync = (allowed = true) => new IoLimitSync(root, allowed, new IoLimiter(kernel));
  const results = (r: IoLimitSyncResult) =>
    r.outcomes.map((o) => `${o.podUid === DB ? 'db' : 'web'} ${o.result}`);
  const wantDb = (wbps: number): WantedIoLimit => ({
    podUid: DB,
    device: '8:0',
    limit: { wbps, wiops: 100 },
  });
  const ioMax = (dir: string) => readFileSync(join(dir, 'io.max'), 'utf8');

  it('sets, leaves alone while the same is wanted, steps down, and lifts to exactly what was there', () => {
    const dirs = v2Tree();
    const agent = sync();
    const set = agent.sync([wantDb(4000)], []);
    expect(results(set)).to.deep.equal(['db Set']);
    expect(ioMax(dirs[DB]!)).to.equal(`${OTHERS}8:0 rbps=max wbps=4000 riops=max wiops=100\n`);
    expect(ioMax(dirs[WEB]!), 'another pod untouched').to.equal(OTHERS);
    const writes = kernel.writes.length;
    const same = agent.sync([wantDb(4000)], set.applied);
    expect(same.outcomes).to.deep.equal([]);
    expect(kernel.writes).to.have.length(writes);
    const step = agent.sync([wantDb(2000)], same.applied);
    expect(results(step)).to.deep.equal(['db Stepped']);
    expect(step.applied[0]).to.deep.include({
      written: { wbps: 2000, wiops: 100 },
      before: { wbps: 'max', wiops: 'max' },
    });
    const lifted = agent.sync([], step.applied);
    expect(results(lifted)).to.deep.equal(['db Lifted']);
    expect(lifted.applied).to.deep.equal([]);
    expect(ioMax(dirs[DB]!)).to.equal(OTHERS);
  });

  it('a restarted agent lifts exactly from the limits its report carries', () => {
    const dirs = v2Tree();
    const { applied } = sync().sync([wantDb(4000)], []);
    const report = JSON.parse(JSON.stringify(applied)) as AppliedIoLimit[];
    expect(results(sync().sync([], report))).to.deep.equal(['db Lifted']);
    expect(ioMax(dirs[DB]!)).to.equal(OTHERS);
  });

  it('writes nothing for a record naming another cgroup than the pod own (a forged report read back)', () => {
    const dirs = v2Tree();
    const runtime = join(root, 'system.slice/containerd.service');
    mkdirSync(runtime, { recursive: true });
    writeFileSync(join(runtime, 'io.max'), '8:0 rbps=max wbps=1000 riops=max wiops=max\n');
    const forged: AppliedIoLimit = {
      podUid: DB,
      device: '8:0',
      version: 'v2',
      cgroup: 'system.slice/containerd.service',
      wanted: { wbps: 1000 },
      written: { wbps: 1000 },
      before: { wbps: 'max' },
    };
    const lifted = sync().sync([], [forged]);
    expect(results(lifted)).to.deep.equal(['db LeftAsFound']);
    expect(lifted.applied).to.deep.equal([]);
    // Wanted, the limit goes to the pod's own cgroup, as a first limit (the forged record is not carried on).
    const set = sync().sync([wantDb(4000)], [forged]);
    expect(results(set)).to.deep.equal(['db Set']);
    expect(set.applied[0]?.cgroup).to.not.equal(forged.cgroup);
    expect(ioMax(dirs[DB]!)).to.contain('wbps=4000');
    expect(kernel.writes.filter((w) => w.startsWith(runtime))).to.deep.equal([]);
    expect(readFileSync(join(runtime, 'io.max'), 'utf8')).to.contain('wbps=1000');
  });

  it('writes nothing without --allow-io-limits, and says so for each limit wanted', () => {
    const dirs = v2Tree();
    const r = sync(false).sync([wantDb(4000)], []);
    expect(r.outcomes).to.deep.equal([
      {
        podUid: DB,
        device: '8:0',
        result: 'Refused',
        message: 'this agent runs without --allow-io-limits: it sets no limit',
      },
    ]);
    expect(kernel.writes).to.deep.equal([]);
    expect(ioMax(dirs[DB]!)).to.equal(OTHERS);
  });

  it('still lifts, without --allow-io-limits, what it applied before (restarted with writing off)', () => {
    const dirs = v2Tree();
    const { applied } = sync().sync([wantDb(4000)], []);
    const off = sync(false);
    const wanted = off.sync([wantDb(2000)], applied);
    expect(results(wanted), 'no step').to.deep.equal(['db Refused']);
    expect(wanted.applied).to.deep.equal(applied);
    expect(results(off.sync([], wanted.applied))).to.deep.equal(['db Lifted']);
    expect(ioMax(dirs[DB]!)).to.equal(OTHERS);
  });

  it('v1: a write that fails part of the way keeps what landed, sets the rest next round, and lifts it all', () => {
    const dir = v1Pod(DB);
    kernel.failing = (file) => file === V1_THROTTLE_FILES.wiops;
    const failed = sync().sync([wantDb(4000)], []);
    expect(results(failed)).to.deep.equal(['db Failed']);
    expect(failed.applied.map((a) => a.written)).to.deep.equal([{ wbps: 4000 }]);
    kernel.failing = () => false;
    const set = sync().sync([wantDb(4000)], failed.applied);
    expect(results(set), 'never in force as wanted before: a Set').to.deep.equal(['db Set']);
    expect(readFileSync(join(dir, V1_THROTTLE_FILES.wiops), 'utf8')).to.equal('8:0 100\n');
    kernel.failing = (file) => file === V1_THROTTLE_FILES.wiops;
    const half = sync().sync([], set.applied);
    expect(results(half)).to.deep.equal(['db Failed']);
    expect(
      half.applied.map((a) => a.written),
      'wbps put back, wiops still ours',
    ).to.deep.equal([{ wiops: 100 }]);
    kernel.failing = () => false;
    expect(results(sync().sync([], half.applied))).to.deep.equal(['db Lifted']);
    for (const file of Object.values(V1_THROTTLE_FILES))
      expect(readFileSync(join(dir, file), 'utf8'), file).to.equal('');
  });

  it("v1: writes the limit in the pod's cgroup and each container's below it (blkio.throttle is flat), and puts each back", () => {
    // A container's wbps file holds someone's limit on the device, far above ours: kept as theirs, put back after.
    const dir = v1Pod(DB, ['aaa', 'bbb'], '8:0 1099511627776\n');
    const wbps = (cgroup: string) => readFileSync(join(dir, cgroup, V1_THROTTLE_FILES.wbps), 'utf8');
    const set = sync().sync([wantDb(4000)], []);
    expect(results(set)).to.deep.equal(['db Set']);
    expect(set.outcomes[0]!.message).to.match(/; the same in 2 other cgroup\(s\) of the pod/);
    const cgroup = `kubepods/pod${DB}`;
    expect(set.applied.map((a) => a.cgroup)).to.deep.equal([cgroup, `${cgroup}/aaa`, `${cgroup}/bbb`]);
    for (const c of ['', 'aaa', 'bbb']) expect(wbps(c), c || 'the pod').to.equal('8:0 4000\n');
    expect(set.applied[1]!.before).to.deep.equal({ wbps: 1099511627776, wiops: 'max' });
    // A container started since (a restart): limited on the next round, the others not written again.
    mkdirSync(join(dir, 'ccc'));
    for (const file of Object.values(V1_THROTTLE_FILES)) writeFileSync(join(dir, 'ccc', file), '');
    const writes = kernel.writes.length;
    const next = sync().sync([wantDb(4000)], set.applied);
    expect(results(next)).to.deep.equal(['db Set']);
    expect(kernel.writes.slice(writes)).to.deep.equal([
      `${V1_THROTTLE_FILES.wbps} 8:0 4000`,
      `${V1_THROTTLE_FILES.wiops} 8:0 100`,
    ]);
    expect(wbps('ccc')).to.equal('8:0 4000\n');
    // A container gone: its record goes, and nothing is said of it.
    rmSync(join(dir, 'aaa'), { recursive: true });
    const gone = sync().sync([wantDb(4000)], next.applied);
    expect(gone.outcomes).to.deep.equal([]);
    expect(gone.applied.map((a) => a.cgroup)).to.deep.equal([cgroup, `${cgroup}/bbb`, `${cgroup}/ccc`]);
    const lifted = sync().sync([], gone.applied);
    expect(results(lifted)).to.deep.equal(['db Lifted']);
    expect(lifted.applied).to.deep.equal([]);
    expect([wbps(''), wbps('bbb'), wbps('ccc')]).to.deep.equal(['', '8:0 1099511627776\n', '']);
    for (const c of ['', 'bbb', 'ccc'])
      expect(readFileSync(join(dir, c, V1_THROTTLE_FILES.wiops), 'utf8'), `${c || 'the pod'} wiops`).to.equal(
        '',
      );
  });

  it('v1: a pod with more cgroups than a limit is written in says those past the bound are not limited', () => {
    const containers = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'];
    v1Pod(DB, containers);
    const set = sync().sync([wantDb(4000)], []);
    expect(set.applied, 'the pod and the 7 nearest').to.have.length(8);
    expect(results(set)).to.deep.equal(['db Set', 'db Failed']);
    expect(set.outcomes[1]!.message).to.match(
      /^at least 2 cgroup\(s\) below the pod past the 8 a limit is written in are not limited/,
    );
    expect(
      sync().sync([wantDb(4000)], set.applied).outcomes,
      'said once, while nothing changes',
    ).to.deep.equal([]);
  });

  it("v1: a container's cgroup that no stored report names yet is not written this round, but on the next", () => {
    const dir = v1Pod(DB, ['aaa']);
    const cgroup = `kubepods/pod${DB}`;
    // The report ahead named the pod's cgroup and aaa; bbb appeared after it.
    const reported = new Set([`${DB} 8:0 ${cgroup}`, `${DB} 8:0 ${cgroup}/aaa`]);
    mkdirSync(join(dir, 'bbb'));
    for (const file of Object.values(V1_THROTTLE_FILES)) writeFileSync(join(dir, 'bbb', file), '');
    const first = sync().sync([wantDb(4000)], [], reported);
    expect(first.applied.map((a) => a.cgroup)).to.deep.equal([cgroup, `${cgroup}/aaa`]);
    expect(readFileSync(join(dir, 'bbb', V1_THROTTLE_FILES.wbps), 'utf8')).to.equal('');
    const next = sync().sync([wantDb(4000)], first.applied);
    expect(next.applied.map((a) => a.cgroup)).to.include(`${cgroup}/bbb`);
    expect(readFileSync(join(dir, 'bbb', V1_THROTTLE_FILES.wbps), 'utf8')).to.equal('8:0 4000\n');
  });

  it("v1: a container's cgroup whose first write lands nothing keeps the limit from reading as applied, and is set next round", () => {
    const dir = v1Pod(DB, ['aaa']);
    kernel.failing = (_file, _line, path) => path.includes('/aaa/');
    const failed = sync().sync([wantDb(4000)], []);
    expect(results(failed)).to.deep.equal(['db Set', 'db Failed']);
    const marker = failed.applied.find((a) => a.cgroup.endsWith('/aaa'));
    expect(marker, 'a record of nothing for aaa').to.deep.include({ written: {}, before: {}, wanted: {} });
    kernel.failing = () => false;
    const set = sync().sync([wantDb(4000)], failed.applied);
    expect(results(set), 'aaa never held it: a Set').to.deep.equal(['db Set']);
    expect(readFileSync(join(dir, 'aaa', V1_THROTTLE_FILES.wbps), 'utf8')).to.equal('8:0 4000\n');
    expect(results(sync().sync([], set.applied))).to.deep.equal(['db Lifted']);
    for (const c of ['', 'aaa'])
      for (const file of Object.values(V1_THROTTLE_FILES))
        expect(readFileSync(join(dir, c, file), 'utf8'), `${c} ${file}`).to.equal('');
  });

  it('v1: a record naming a path out of the pod (a forged report) is written neither on lift nor on step', () => {
    const dir = v1Pod(DB, ['aaa']);
    const outside = join(root, 'blkio', 'system.slice');
    mkdirSync(outside, { recursive: true });
    writeFileSync(join(outside, V1_THROTTLE_FILES.wbps), '8:0 1000\n');
    const forged: AppliedIoLimit = {
      podUid: DB,
      device: '8:0',
      version: 'v1',
      cgroup: `kubepods/pod${DB}/../../system.slice`,
      wanted: { wbps: 1000 },
      written: { wbps: 1000 },
      before: { wbps: 'max' },
    };
    expect(results(sync().sync([], [forged]))).to.deep.equal(['db LeftAsFound']);
    const set = sync().sync([wantDb(4000)], [forged]);
    expect(set.applied.map((a) => a.cgroup)).to.deep.equal([`kubepods/pod${DB}`, `kubepods/pod${DB}/aaa`]);
    expect(readFileSync(join(outside, V1_THROTTLE_FILES.wbps), 'utf8')).to.equal('8:0 1000\n');
    expect(readFileSync(join(dir, 'aaa', V1_THROTTLE_FILES.wbps), 'utf8')).to.equal('8:0 4000\n');
  });

  it('limits a pod on two devices apart, and lifts one while the other stays', () => {
    const dirs = v2Tree();
    const onSda = wantDb(4000);
    const onNvme: WantedIoLimit = { podUid: DB, device: '259:0', limit: { wbps: 1000 } };
    const both = sync().sync([onSda, onNvme], []);
    expect(results(both)).to.deep.equal(['db Set', 'db Set']);
    const one = sync().sync([onSda], both.applied);
    expect(results(one)).to.deep.equal(['db Lifted']);
    expect(ioMax(dirs[DB]!)).to.equal(`${OTHERS}8:0 rbps=max wbps=4000 riops=max wiops=100\n`);
  });

  it('limits no pod whose cgroup is not under this node (bound elsewhere): nothing written', () => {
    v2Tree([WEB]);
    const r = sync().sync([wantDb(4000)], []);
    expect(results(r)).to.deep.equal(['db NoCgroup']);
    expect(r.applied).to.deep.equal([]);
    expect(kernel.writes).to.deep.equal([]);
  });

  it('v1: a pod that left the node is nothing to lift, and its record goes', () => {
    const dir = v1Pod(DB);
    const { applied } = sync().sync([wantDb(4000)], []);
    expect(readFileSync(join(dir, V1_THROTTLE_FILES.wbps), 'utf8')).to.equal('8:0 4000\n');
    rmSync(dir, { recursive: true });
    const r = sync().sync([], applied);
    expect(results(r)).to.deep.equal(['db PodGone']);
    expect(r.applied).to.deep.equal([]);
  });

  it("v1: a lift where a container's cgroup went meanwhile says the pod's lift, not that the pod is gone", () => {
    const dir = v1Pod(DB, ['aaa']);
    const { applied } = sync().sync([wantDb(4000)], []);
    expect(applied).to.have.length(2);
    rmSync(join(dir, 'aaa'), { recursive: true });
    const r = sync().sync([], applied);
    expect(results(r)).to.deep.equal(['db Lifted']);
    expect(r.applied).to.deep.equal([]);
  });

  it("names each outcome's device: a lift that fails on one device is not said of the pod's other", () => {
    v2Tree();
    const both = sync().sync([wantDb(4000), { ...wantDb(4000), device: '259:0' }], []);
    expect(both.outcomes.map((o) => `${o.device} ${o.result}`).sort()).to.deep.equal([
      '259:0 Set',
      '8:0 Set',
    ]);
    const lifted = sync().sync([wantDb(4000)], both.applied);
    expect(lifted.outcomes.map((o) => `${o.device} ${o.result}`)).to.deep.equal(['259:0 Lifted']);
  });

  it('leaves a key someone changed since as they set it, and says so', () => {
    const dirs = v2Tree();
    const { applied } = sync().sync([wantDb(4000)], []);
    kernel.write(join(dirs[DB]!, 'io.max'), '8:0 wbps=3000\n');
    const r = sync().sync([], applied);
    expect(results(r)).to.deep.equal(['db LeftAsFound']);
    expect(r.outcomes[0]!.message).to.match(
      /^wbps no longer held our limit \(changed by someone since, or never written\): left as found; wiops put back$/,
    );
    expect(ioMax(dirs[DB]!)).to.equal(`${OTHERS}8:0 rbps=max wbps=3000 riops=max wiops=max\n`);
  });

  it('keeps a limit it could not lift, and lifts it on a later round', () => {
    const dirs = v2Tree();
    const { applied } = sync().sync([wantDb(4000)], []);
    const good = ioMax(dirs[DB]!);
    writeFileSync(join(dirs[DB]!, 'io.max'), 'garbage\n');
    const failed = sync().sync([], applied);
    expect(results(failed)).to.deep.equal(['db Failed']);
    expect(failed.applied).to.deep.equal(applied);
    writeFileSync(join(dirs[DB]!, 'io.max'), good);
    expect(results(sync().sync([], failed.applied))).to.deep.equal(['db Lifted']);
    expect(ioMax(dirs[DB]!)).to.equal(OTHERS);
  });

  it('property, v1: containers starting and going between rounds, writes failing among them, wanting none puts every file back byte for byte', () => {
    const SOMEONES = '8:0 1099511627776\n';
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            want: fc.array(
              fc.record({ podUid: fc.constantFrom(...UIDS), wbps: fc.integer({ min: 1, max: 9000 }) }),
              {
                maxLength: 2,
              },
            ),
            // The containers each pod has this round (a, b, c), each with someone's line in its wbps file.
            containers: fc.subarray(['a', 'b', 'c']),
          }),
          { minLength: 1, maxLength: 5 },
        ),
        fc.array(fc.boolean(), { maxLength: 40 }),
        (rounds, faults) => {
          rmSync(root, { recursive: true, force: true });
          mkdirSync(root);
          const dirs = Object.fromEntries(UIDS.map((uid) => [uid, v1Pod(uid)]));
          let write = 0;
          kernel.failing = () => faults[write++] === true;
          let applied: AppliedIoLimit[] = [];
          for (const round of rounds) {
            for (const uid of UIDS)
              for (const c of ['a', 'b', 'c']) {
                const there = join(dirs[uid]!, c);
                if (round.containers.includes(c) && !existsSync(there)) {
                  mkdirSync(there);
                  for (const file of Object.values(V1_THROTTLE_FILES))
                    writeFileSync(join(there, file), file === V1_THROTTLE_FILES.wbps ? SOMEONES : '');
                } else if (!round.containers.includes(c)) rmSync(there, { recursive: true, force: true });
              }
            const wanted = round.want.map(({ podUid, wbps }) => ({
              podUid,
              device: '8:0',
              limit: { wbps, wiops: 100 },
            }));
            applied = sync().sync(wanted, applied).applied;
          }
          kernel.failing = () => false;
          const last = sync().sync([], applied);
          expect(last.applied).to.deep.equal([]);
          for (const uid of UIDS) {
            for (const file of Object.values(V1_THROTTLE_FILES))
              expect(readFileSync(join(dirs[uid]!, file), 'utf8'), `the pod's ${file}`).to.equal('');
            for (const c of ['a', 'b', 'c'].filter((c) => existsSync(join(dirs[uid]!, c))))
              for (const file of Object.values(V1_THROTTLE_FILES))
                expect(readFileSync(join(dirs[uid]!, c, file), 'utf8'), `${c}'s ${file}`).to.equal(
                  file === V1_THROTTLE_FILES.wbps ? SOMEONES : '',
                );
          }
        },
      ),
      { numRuns: 150 },
    );
  });

  it('property: after any rounds of wanted limits, writes failing among them, wanting none puts every file back byte for byte', () => {
    const wanted = fc.array(
      fc.record({
        podUid: fc.constantFrom(...UIDS),
        device: fc.constantFrom('8:0', '259:0'),
        limit: fc.record(
          {
            rbps: fc.integer({ min: 1, max: 9000 }),
            wbps: fc.integer({ min: 1, max: 9000 }),
            wiops: fc.integer({ min: 1, max: 500 }),
          },
          { requiredKeys: [] },
        ),
      }),
      { maxLength: 4 },
    );
    fc.assert(
      fc.property(
        fc.array(wanted, { minLength: 1, maxLength: 5 }),
        fc.array(fc.boolean(), { minLength: 5, maxLength: 5 }),
        fc.array(fc.boolean(), { maxLength: 40 }),
        (rounds, allowed, faults) => {
          rmSync(root, { recursive: true, force: true });
          mkdirSync(root);
          const dirs = v2Tree();
          // Writes fail as `faults` says while the rounds run, writing on or off round by round; the last round,
          // with writing off and nothing failing, wants none.
          let write = 0;
          kernel.failing = () => faults[write++] === true;
          let applied: AppliedIoLimit[] = [];
          rounds.forEach((round, i) => {
            applied = sync(allowed[i]).sync(round, applied).applied;
          });
          kernel.failing = () => false;
          const last = sync(false).sync([], applied);
          expect(last.applied).to.deep.equal([]);
          for (const uid of UIDS) expect(ioMax(dirs[uid]!)).to.equal(OTHERS);
        },
      ),
      { numRuns: 150 },
    );
  });
});
