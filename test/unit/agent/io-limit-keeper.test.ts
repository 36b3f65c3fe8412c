// The agent's IO limits across rounds, through the report it writes and reads back (as JSON, the way the API hands
// it back), on a crafted cgroup v2 tree with the kernel's write semantics.
import { expect } from 'chai';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IoLimitReport, IoLimitsAnswer, WantedIoLimitSpec } from '../../../src/api/v1alpha1/index.js';
import { IoLimitKeeper } from '../../../src/agent/io-limit-keeper.js';
import { IoLimitSync } from '../../../src/agent/io-limit-sync.js';
import { IoLimiter, V1_THROTTLE_FILES } from '../../../src/agent/io-limits.js';
import { CgroupKernel } from '../../support/cgroup-kernel.js';

const DB = '0b1e7c1a-1111-4000-8000-000000000001';
const OTHERS = '259:0 rbps=max wbps=4096 riops=max wiops=max\n';
const NOW = new Date('2026-12-06T01:00:00Z');

const wanted = (wbps: number): WantedIoLimitSpec => ({
  podUid: DB,
  pod: 'shop/db-0',
  device: '8:0',
  limit: { wbps },
  policy: 'p',
  since: NOW.toISOString(),
});

describe('IoLimitKeeper', () => {
  let root: string;
  let ioMax: string;
  let kernel: CgroupKernel;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'io-limit-keeper-'));
    writeFileSync(join(root, 'cgroup.controllers'), 'cpu io memory\n');
    const pod = join(
      root,
      'kubepods.slice/kubepods-burstable.slice',
      `kubepods-burstable-pod${DB.replace(/-/g, '_')}.slice`,
    );
    mkdirSync(pod, { recursive: true });
    ioMax = join(pod, 'io.max');
    writeFileSync(ioMax, OTHERS);
    kernel = new CgroupKernel();
  });
  afterEach(() => {
    rmSync(root, { recursive: true, force: true });
  });

  const keeper = (allowed = true) =>
    new IoLimitKeeper(new IoLimitSync(root, allowed, new IoLimiter(kernel)), allowed, () => NOW);
  /** A round as the agent runs it: a report ahead stored before carryOut() writes; the step the round ends with. */
  function settle(k: IoLimitKeeper, answer: IoLimitsAnswer) {
    const step = k.round(answer);
    if (!step.ahead) return { ...step, ahead: undefined };
    const ahead = step.ahead;
    k.written(ahead);
    const done = k.carryOut();
    if (done.ahead) throw new Error('carryOut reported ahead');
    return { ...done, ahead };
  }
  /** The report as the API gives it back. */
  const stored = (report: IoLimitReport | undefined) =>
    report && (JSON.parse(JSON.stringify(report)) as IoLimitReport);

  it('writes nothing on a node with no limit wanted, applied or reported', () => {
    const k = keeper();
    expect(k.round({ wanted: [] })).to.deep.equal({ outcomes: [] });
    expect(k.active).to.equal(false);
    expect(kernel.writes).to.deep.equal([]);
  });

  it('sets what is wanted, reports it once, and reports again only when something changed', () => {
    const k = keeper();
    const first = settle(k, { wanted: [wanted(4000)] });
    expect(first.outcomes.map((o) => o.result)).to.deep.equal(['Set']);
    expect(first.report).to.deep.include({ allowed: true, observedTime: NOW.toISOString() });
    expect(first.report?.applied).to.deep.equal([
      {
        podUid: DB,
        device: '8:0',
        cgroupVersion: 'v2',
        cgroup: `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${DB.replace(/-/g, '_')}.slice`,
        wanted: { wbps: 4000 },
        written: { wbps: 4000 },
        before: { wbps: 'max' },
      },
    ]);
    expect(k.active).to.equal(true);
    k.written(first.report!);
    const answer: IoLimitsAnswer = { wanted: [wanted(4000)], report: stored(first.report) };
    expect(k.round(answer), 'the same again: nothing to write').to.deep.equal({ outcomes: [] });
    const step = settle(k, { ...answer, wanted: [wanted(2000)] });
    expect(step.outcomes.map((o) => o.result)).to.deep.equal(['Stepped']);
    expect(step.report?.applied?.[0]?.written).to.deep.equal({ wbps: 2000 });
  });

  it('writes the report again after a failed write, though nothing more was done', () => {
    const k = keeper();
    const first = settle(k, { wanted: [wanted(4000)] });
    // first.report never written: the API still holds the report ahead only.
    const again = settle(k, { wanted: [wanted(4000)] });
    expect(again.outcomes).to.deep.equal([]);
    expect(again.report?.applied).to.deep.equal(first.report?.applied);
    expect(again.report?.results, 'what was last done, still said').to.deep.equal(first.report?.results);
  });

  it('restarted, lifts exactly what its report says it wrote once the limit is no longer wanted', () => {
    const before = settle(keeper(), { wanted: [wanted(4000)] }).report;
    expect(readFileSync(ioMax, 'utf8')).to.equal(`${OTHERS}8:0 rbps=max wbps=4000 riops=max wiops=max\n`);
    const restarted = keeper();
    const lifted = settle(restarted, { wanted: [], report: stored(before) });
    expect(lifted.outcomes.map((o) => o.result)).to.deep.equal(['Lifted']);
    expect(readFileSync(ioMax, 'utf8')).to.equal(OTHERS);
    expect(lifted.report).to.not.have.property('applied');
    expect(restarted.active).to.equal(false);
  });

  it('without --allow-io-limits, sets nothing and says so once, while still lifting what it set before', () => {
    const before = settle(keeper(true), { wanted: [wanted(4000)] }).report;
    const k = keeper(false);
    const refused = settle(k, { wanted: [wanted(2000)], report: stored(before) });
    expect(refused.report?.allowed).to.equal(false);
    expect(refused.report?.results?.map((r) => r.result)).to.deep.equal(['Refused']);
    expect(readFileSync(ioMax, 'utf8'), 'the limit set before stays until lifted').to.contain('wbps=4000');
    k.written(refused.report!);
    expect(settle(k, { wanted: [wanted(2000)], report: stored(refused.report) }).report).to.equal(undefined);
    const lifted = settle(k, { wanted: [], report: stored(refused.report) });
    expect(lifted.outcomes.map((o) => o.result)).to.deep.equal(['Lifted']);
    expect(readFileSync(ioMax, 'utf8')).to.equal(OTHERS);
  });

  it('reports a limit before it writes one, and writes none when that report is not stored', () => {
    const k = keeper();
    const step = k.round({ wanted: [wanted(4000)] });
    expect(step.ahead?.applied?.[0]).to.deep.include({ written: { wbps: 4000 }, before: { wbps: 'max' } });
    expect(kernel.writes, 'nothing written before the report is stored').to.deep.equal([]);
    // Not stored (the write failed): the next round reports ahead again, and still writes nothing.
    expect(k.round({ wanted: [wanted(4000)] }).ahead).to.deep.include({ applied: step.ahead?.applied });
    expect(kernel.writes).to.deep.equal([]);
  });

  it('says in its report ahead that nothing is applied yet, with the last round time, and a restarted agent writes it', () => {
    const first = keeper().round({ wanted: [wanted(4000)] }).ahead!;
    expect(first.applied?.[0]?.wanted, 'a new limit wants nothing yet').to.deep.equal({});
    // Restarted before its writes: the report ahead is no record of them, and the limit is written.
    const restarted = keeper();
    const set = settle(restarted, { wanted: [wanted(4000)], report: stored(first) });
    expect(
      set.outcomes.map((o) => o.result),
      'never in force before: a Set',
    ).to.deep.equal(['Set']);
    expect(readFileSync(ioMax, 'utf8')).to.equal(`${OTHERS}8:0 rbps=max wbps=4000 riops=max wiops=max\n`);
    expect(set.report?.applied?.[0]).to.deep.include({ wanted: { wbps: 4000 }, before: { wbps: 'max' } });
    restarted.written(set.report!);
    // A step reported ahead a minute later: the limit in force still wanted, the results still the last round's.
    const later = new IoLimitKeeper(
      new IoLimitSync(root, true, new IoLimiter(kernel)),
      true,
      () => new Date(NOW.getTime() + 60_000),
    );
    const step = later.round({ wanted: [wanted(2000)], report: stored(set.report) }).ahead!;
    expect(step.applied?.[0]?.wanted, 'still the limit in force').to.deep.equal({ wbps: 4000 });
    expect(step.observedTime, 'the last round that did something').to.equal(set.report?.observedTime);
  });

  it('restarted between its report ahead and its writes, lifts nothing that is not ours', () => {
    const ahead = keeper().round({ wanted: [wanted(4000)] }).ahead;
    const lifted = settle(keeper(), { wanted: [], report: stored(ahead) });
    expect(lifted.outcomes.map((o) => o.result)).to.deep.equal(['LeftAsFound']);
    expect(readFileSync(ioMax, 'utf8')).to.equal(OTHERS);
    expect(kernel.writes).to.deep.equal([]);
  });

  it('restarted between a step reported ahead and its write, still lifts the limit the step replaces', () => {
    const k = keeper();
    const set = settle(k, { wanted: [wanted(4000)] }).report;
    const step = k.round({ wanted: [wanted(2000)], report: stored(set) }).ahead;
    expect(step?.applied?.[0]).to.deep.include({ written: { wbps: 2000 }, replacing: { wbps: 4000 } });
    expect(readFileSync(ioMax, 'utf8'), 'the step not written yet').to.contain('wbps=4000');
    const lifted = settle(keeper(), { wanted: [], report: stored(step) });
    expect(lifted.outcomes.map((o) => o.result)).to.deep.equal(['Lifted']);
    expect(readFileSync(ioMax, 'utf8')).to.equal(OTHERS);
  });
});

describe('IoLimitKeeper on cgroup v1, where a limit goes in each container cgroup', () => {
  let root: string;
  let pod: string;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'io-limit-keeper-v1-'));
    pod = join(root, 'blkio', 'kubepods', `pod${DB}`);
    cgroupAt(pod);
  });
  afterEach(() => {
    rmSync(root, { recursive: true, force: true });
  });

  function cgroupAt(dir: string): void {
    mkdirSync(dir, { recursive: true });
    for (const file of Object.values(V1_THROTTLE_FILES)) writeFileSync(join(dir, file), '');
  }
  const wbpsOf = (dir: string) => readFileSync(join(dir, V1_THROTTLE_FILES.wbps), 'utf8');

  it('writes no cgroup its stored report does not name: a container started after the report ahead waits for the next', () => {
    const k = new IoLimitKeeper(
      new IoLimitSync(root, true, new IoLimiter(new CgroupKernel())),
      true,
      () => NOW,
    );
    const first = k.round({ wanted: [wanted(4000)] });
    expect(first.ahead?.applied?.map((a) => a.cgroup)).to.deep.equal([`kubepods/pod${DB}`]);
    // Between the report ahead and its writes, a container starts.
    cgroupAt(join(pod, 'late'));
    k.written(first.ahead!);
    const done = k.carryOut();
    if (done.ahead || !done.report) throw new Error('the round wrote no report of what it did');
    expect(wbpsOf(pod)).to.equal('8:0 4000\n');
    expect(wbpsOf(join(pod, 'late')), 'not in the stored report: not written').to.equal('');
    k.written(done.report);
    const next = k.round({
      wanted: [wanted(4000)],
      report: JSON.parse(JSON.stringify(done.report)) as IoLimitReport,
    });
    expect(next.ahead?.applied?.map((a) => a.cgroup)).to.include(`kubepods/pod${DB}/late`);
    k.written(next.ahead!);
    k.carryOut();
    expect(wbpsOf(join(pod, 'late'))).to.equal('8:0 4000\n');
  });
});
