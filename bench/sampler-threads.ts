// What reading the container runtime's threads costs the agent's sampler (issue 15: containerd's blocked Go threads
// were invisible while only thread-group leaders were read). Side by side in one run: the sampler at HEAD and the
// sampler before the change (its source from git, at --before), each calling sample() on the same /proc trees:
//   - a crafted node of 100 pods: 300 ordinary processes, containerd with 60 threads, 100 containerd-shim processes
//     of 10 threads and 100 pause processes, two containerd threads and one shim thread in D state (HEAD reads the
//     daemon's threads, not the shims': it finds the two);
//   - this machine's /proc (what it runs now; with `make lab` up, a real containerd and its shims).
// Prints and writes bench/results/sampler-threads.json: the median and p99 time of one sample() per tree and
// sampler, their ratio, and the D-state tasks each found.
//
//   npx tsx bench/sampler-threads.ts [--rounds 300] [--before 8a9e763]
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ProcReader } from '../src/agent/sampler.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import { percentile } from './stats.js';
import { arg } from './args.js';

const ROUNDS = Number(arg('--rounds', '300'));
const BEFORE = arg('--before', '8a9e763');

const stat = (pid: number, comm: string, state: string) =>
  `${pid} (${comm}) ${state} 1 ${pid} ${pid} 0 -1 4194560 0 0 0 0 7 3 0 0 20 0 1 0 22 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n`;

/** A crafted /proc of a 100-pod node. */
function craftedNode(root: string): void {
  writeFileSync(join(root, 'stat'), 'cpu  1 2 3 4 5 6 7 0 0 0\nprocs_running 1\nprocs_blocked 3\n');
  writeFileSync(join(root, 'diskstats'), '');
  mkdirSync(join(root, 'pressure'));
  writeFileSync(
    join(root, 'pressure', 'io'),
    'some avg10=50.00 avg60=40.00 avg300=10.00 total=1\nfull avg10=20.00 avg60=10.00 avg300=5.00 total=1\n',
  );
  let pid = 1000;
  const process = (comm: string, threads: number, dThreads = 0) => {
    const leader = pid;
    const dir = join(root, String(leader));
    mkdirSync(join(dir, 'task'), { recursive: true });
    writeFileSync(join(dir, 'stat'), stat(leader, comm, 'S'));
    writeFileSync(join(dir, 'wchan'), 'futex_wait_queue');
    for (let t = 0; t < threads; t++) {
      const tid = pid++;
      const state = t > 0 && t <= dThreads ? 'D' : 'S';
      mkdirSync(join(dir, 'task', String(tid)));
      writeFileSync(join(dir, 'task', String(tid), 'stat'), stat(tid, comm, state));
      writeFileSync(
        join(dir, 'task', String(tid), 'wchan'),
        state === 'D' ? 'submit_bio_wait' : 'futex_wait_queue',
      );
    }
  };
  for (let i = 0; i < 300; i++) process(i % 2 ? 'nginx' : 'java', 1);
  process('containerd', 60, 2);
  for (let i = 0; i < 100; i++) process('containerd-shim', 10, i === 0 ? 1 : 0);
  for (let i = 0; i < 100; i++) process('pause', 1);
}

/** The sampler as it was before the change, from git. */
async function samplerBefore(): Promise<typeof ProcReader> {
  const source = execFileSync('git', ['show', `${BEFORE}:src/agent/sampler.ts`], {
    cwd: REPO_ROOT,
    encoding: 'utf8',
  });
  // In a temporary directory (nothing is left in the source tree if the run is killed), importing today's proc.ts.
  const dir = mkdtempSync(join(tmpdir(), 'bench-sampler-'));
  const file = join(dir, `sampler-${BEFORE}.ts`);
  writeFileSync(
    file,
    source.replace("from './proc.js'", `from '${join(REPO_ROOT, 'src', 'agent', 'proc.js')}'`),
  );
  try {
    return ((await import(file)) as { ProcReader: typeof ProcReader }).ProcReader;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function time(reader: ProcReader): { medianMs: number; p99Ms: number; dState: number } {
  for (let i = 0; i < 20; i++) reader.sample(); // warm-up
  const times: number[] = [];
  let dState = 0;
  for (let i = 0; i < ROUNDS; i++) {
    const start = performance.now();
    const sample = reader.sample();
    times.push(performance.now() - start);
    dState = sample.tasks.filter((t) => t.state === 'D').length;
  }
  times.sort((a, b) => a - b);
  const round = (n: number) => Math.round(n * 1000) / 1000;
  return { medianMs: round(percentile(times, 0.5)), p99Ms: round(percentile(times, 0.99)), dState };
}

const Before = await samplerBefore();
const root = mkdtempSync(join(tmpdir(), 'bench-proc-'));
try {
  craftedNode(root);
  const results: Record<string, unknown> = { rounds: ROUNDS, before: BEFORE, at: new Date().toISOString() };
  for (const [tree, path] of [
    ['crafted 100-pod node', root],
    ['this machine', '/proc'],
  ] as const) {
    // Alternate, twice each, and keep each one's better run: neither always runs on a warmer cache or a quieter
    // machine.
    const runs = { head: [] as ReturnType<typeof time>[], before: [] as ReturnType<typeof time>[] };
    for (let i = 0; i < 2; i++) {
      runs.before.push(time(new Before(path)));
      runs.head.push(time(new ProcReader(path)));
    }
    const best = (list: ReturnType<typeof time>[]) =>
      list.reduce((a, b) => (b.medianMs < a.medianMs ? b : a));
    const head = best(runs.head);
    const before = best(runs.before);
    results[tree] = { head, before, medianRatio: Math.round((head.medianMs / before.medianMs) * 100) / 100 };
    console.log(
      `${tree}: sample() median ${head.medianMs} ms at HEAD vs ${before.medianMs} ms before (x${(head.medianMs / before.medianMs).toFixed(2)}), p99 ${head.p99Ms} vs ${before.p99Ms} ms; D-state tasks found ${head.dState} vs ${before.dState}`,
    );
  }
  writeFileSync(
    join(REPO_ROOT, 'bench', 'results', 'sampler-threads.json'),
    `${JSON.stringify(results, null, 2)}\n`,
  );
} finally {
  rmSync(root, { recursive: true, force: true });
}
