// What the node agent's IO attribution costs (issue 25): CPU and memory of the agent attributing against the agent
// with --no-attribution, side by side in one window, with node_exporter as the peer, at 100 and 1,000 pod cgroups;
// and the time of one read of the cgroup tree at 100, 1,000 and 5,000 pods.
//
// The agent reads the cgroup tree only while its reading is not quiet, so every agent reads the same crafted node
// (crafted-io-node.ts): a /proc whose PSI reads as load and whose disk's counters advance every second, its tasks
// this machine's, and cgroup trees whose every pod's counters advance with the disk's, rewritten every second by a
// ticker in this process. One phase per cgroup version, each its own window: v1 with the cgroupfs driver and the
// _recursive files (this machine and the lab, kernel 4.16+), v2 with the systemd driver. In each, five processes:
//   - the agent with --no-attribution (it reads no cgroup: one for both sizes), and its twin: how far two identical
//     agents' figures differ in the same window is the noise floor;
//   - the agent attributing over 100 pods, and over 1,000;
//   - node_exporter.
// All run as deployed and are scraped every second (agent-processes.ts), the agents with --no-publish at
// --interval-seconds=1. Attribution's cost is CPU(with) - CPU(without) in % of a core. The agent spaces its reads
// to keep them at half a percent of a core (readSpacingMs in src/agent/attributor.ts), so it does not read every
// second: its reads are counted from what it read (rchar in /proc/PID/io) beyond what the agent without attribution
// read in as many ticks, in reads of its tree (the crafted counters keep their width, so a read is always the same
// bytes), and their interval reported.
// Before the agents start, the bench itself attributes each tree once (CgroupReader and computeAttribution over two
// looks a second apart), so the figures are of reads that name the culprit, not of reads that find nothing.
//
// The tree read: CgroupReader.sample() in a process of its own, compiled and under the DaemonSet's NODE_OPTIONS as
// the agent runs it, median wall and CPU time of --read-rounds reads, and what readSpacingMs makes of that time.
//
//   npx tsx bench/agent-attribution.ts [--seconds 60] [--versions v1,v2] [--read-rounds 9] [--cpu-prof DIR]
//
// --cpu-prof DIR: every agent under node --cpu-prof, its profile in DIR and summarised (cpu-profile.ts); the
// profiler's cost is in every figure then, so no results file is written.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { format, resolveConfig } from 'prettier';
import { computeAttribution } from '../src/agent/attribution.js';
import { readSpacingMs } from '../src/agent/attributor.js';
import { CgroupReader } from '../src/agent/cgroups.js';
import { ProcReader } from '../src/agent/sampler.js';
import type { Driver, Version } from '../test/support/cgroup-tree.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import {
  buildDeployedAgent,
  MeasuredProcesses,
  ratio,
  ratiosTo,
  runContext,
  type Measured,
  type Window,
} from './agent-processes.js';
import { craftTree, CraftedIoNode, DISK, DISK_RATE, MEMORY_DIR, podUid, SHARES } from './crafted-io-node.js';
import { summarizeProfile } from './cpu-profile.js';
import { percentile } from './stats.js';
import { arg } from './args.js';

const SECONDS = Number(arg('--seconds', '60'));
const VERSION_ARG = arg('--versions', 'v1,v2').split(',');
const READ_ROUNDS = Number(arg('--read-rounds', '9'));
const CPU_PROF = arg('--cpu-prof', '');
const isVersion = (v: string): v is Version => v === 'v1' || v === 'v2';
const VERSIONS = VERSION_ARG.filter(isVersion);
const SIZES = [100, 1000] as const;
const READ_SIZES = [100, 1000, 5000] as const;
const DRIVER: Record<Version, Driver> = { v1: 'cgroupfs', v2: 'systemd' };
const LAYOUT: Record<Version, string> = {
  v1: 'cgroup v1, cgroupfs driver, blkio.throttle.*_recursive files',
  v2: 'cgroup v2, systemd driver, io.stat and io.pressure',
};
if (!(SECONDS > 0) || !(READ_ROUNDS > 0) || VERSIONS.length !== VERSION_ARG.length) {
  console.error('usage: tsx bench/agent-attribution.ts [--seconds N] [--versions v1,v2] [--read-rounds N]');
  process.exit(2);
}

const round = (n: number, digits = 2) => Number(n.toFixed(digits));

/** One tree's read times in a process of its own, as the agent runs (compiled, the deployed NODE_OPTIONS). */
function timeTreeRead(root: string, nodeOptions: string) {
  const script = `
    const { CgroupReader } = await import(${JSON.stringify(join(REPO_ROOT, 'dist/src/agent/cgroups.js'))});
    const reader = new CgroupReader(process.env.TREE_ROOT);
    reader.sample();
    reader.sample();
    const wall = [], cpu = [];
    let sample;
    for (let i = 0; i < Number(process.env.ROUNDS); i++) {
      const usage = process.cpuUsage();
      const started = performance.now();
      sample = reader.sample();
      wall.push(performance.now() - started);
      const { user, system } = process.cpuUsage(usage);
      cpu.push((user + system) / 1000);
    }
    console.log(JSON.stringify({ wall, cpu, pods: sample.pods.size, problems: sample.problems }));`;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: nodeOptions, TREE_ROOT: root, ROUNDS: String(READ_ROUNDS) },
  });
  if (run.status !== 0) throw new Error(`tree read failed: ${run.stderr}`);
  const out = JSON.parse(run.stdout) as { wall: number[]; cpu: number[]; pods: number; problems: string[] };
  if (out.problems.length > 0) throw new Error(`tree read: ${out.problems.join('; ')}`);
  const median = (values: number[]) =>
    percentile(
      [...values].sort((a, b) => a - b),
      0.5,
    );
  const wallMs = median(out.wall);
  const cpuMs = median(out.cpu);
  // What the agent makes of it: it spaces the next read by the read's CPU time.
  const spacingMs = readSpacingMs(cpuMs, 1000);
  return {
    podsRead: out.pods,
    medianWallMs: round(wallMs, 1),
    medianCpuMs: round(cpuMs, 1),
    cpuMsPerPod: round(cpuMs / out.pods, 3),
    readSpacingSeconds: round(spacingMs / 1000, 1),
    readsCostPercentOfCore: round((cpuMs / spacingMs) * 100),
  };
}

/** The bench's own attribution of a tree from two looks a second apart: the agents read a tree that names someone. */
async function attributeOnce(proc: string, roots: Map<number, string>) {
  const procReader = new ProcReader(proc);
  const readers = new Map([...roots].map(([size, root]) => [size, new CgroupReader(root)]));
  let psiSomeAvg10Percent = NaN;
  const look = () => {
    const sample = procReader.sample();
    const disks = sample.disks ?? [];
    psiSomeAvg10Percent = sample.pressure?.some?.avg10 ?? NaN;
    return new Map(
      [...readers].map(([size, reader]) => [
        size,
        { disks, disksAt: performance.now(), cgroups: reader.sample() },
      ]),
    );
  };
  const first = look();
  await new Promise((r) => setTimeout(r, 1500));
  const second = look();
  const attributed = new Map<
    number,
    { topPodShare: number; role: string; confidence: string; pods: number }
  >();
  for (const [size, current] of second) {
    const previous = first.get(size);
    const a =
      previous &&
      computeAttribution(previous, current, {
        device: DISK.name,
        culpritSharePercent: 25,
        victimPsiPercent: 20,
      });
    const top = a?.consumers[0];
    if (!a || top?.kind !== 'Pod' || top.podUid !== podUid(0))
      throw new Error(`the ${size}-pod tree did not name its culprit: ${JSON.stringify(a)}`);
    attributed.set(size, {
      topPodShare: top.sharePercent ?? NaN,
      role: top.role,
      confidence: a.confidence,
      pods: a.podsMeasured,
    });
  }
  return { psiSomeAvg10Percent, bySize: attributed };
}

/** The agent's sample_duration_seconds over the window: its samples, their mean, and how many took over 10 ms. */
function sampleDurations(window: Window, name: string) {
  const value = (text: string | undefined, series: string) =>
    Number(
      new RegExp(`^sandbox_remediator_agent_sample_duration_seconds${series} (\\S+)$`, 'm').exec(
        text ?? '',
      )?.[1],
    );
  const delta = (series: string) =>
    value(window.metricsAtEnd.get(name), series) - value(window.metricsAtStart.get(name), series);
  const count = delta('_count');
  return {
    samples: count,
    meanSampleMs: round((delta('_sum') / count) * 1000),
    samplesOver10Ms: count - delta('_bucket\\{le="0.01"\\}'),
  };
}

async function phase(version: Version, nodeOptions: string) {
  const node = await CraftedIoNode.create();
  const processes = new MeasuredProcesses();
  try {
    const roots = new Map(SIZES.map((size) => [size, node.addTree(version, DRIVER[version], size)]));
    const tickMs = node.start();
    const attributed = await attributeOnce(node.proc, roots);
    const common = ['--node-name=bench', '--no-publish', `--proc-root=${node.proc}`];
    const profile = (name: string) =>
      CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${join(CPU_PROF, `${version}-${name}`)}`] : [];
    for (const name of ['withoutAttribution', 'withoutAttributionTwin'])
      await processes.startAgent(name, nodeOptions, [...common, '--no-attribution'], profile(name));
    for (const [size, root] of roots) {
      const name = `pods${size}`;
      await processes.startAgent(name, nodeOptions, [...common, `--cgroup-root=${root}`], profile(name));
    }
    await processes.startNodeExporter();
    await processes.ready();
    console.log(`${version}: measuring ${SECONDS} s`);
    const window = await processes.measure(SECONDS);
    const measured = (name: string): Measured => {
      const m = window.measured[name];
      if (!m) throw new Error(`${name} was not measured`);
      return m;
    };
    const without = measured('withoutAttribution');
    const twin = measured('withoutAttributionTwin');
    const ne = measured('nodeExporter');
    // What an agent read beyond what the agent without attribution read in as many ticks: a tick reads /proc,
    // its tasks' stat among it (tens of KiB), and two agents' windows hold one tick more or less.
    const ticks = (name: string) => sampleDurations(window, name).samples;
    const procBytesPerTick =
      (window.bytesRead.get('withoutAttribution') ?? NaN) / ticks('withoutAttribution');
    const beyondProc = (name: string) =>
      Math.round((window.bytesRead.get(name) ?? NaN) - procBytesPerTick * ticks(name));
    const bySize = (size: (typeof SIZES)[number]) => {
      const agent = measured(`pods${size}`);
      // In reads of its tree, whose files keep their size. Left in: 1/mountinfo (a few KiB, once a minute at most).
      const extraBytes = beyondProc(`pods${size}`);
      const bytesPerRead = node.bytesPerRead(roots.get(size) ?? '');
      const reads = Math.round(extraBytes / bytesPerRead);
      return {
        agent: { ...agent, ...sampleDurations(window, `pods${size}`) },
        attributionCpuPercent: round(agent.cpuPercent - without.cpuPercent),
        cpuRatioToWithout: ratio(agent.cpuPercent, without.cpuPercent),
        rssDeltaMiB: round(agent.peakRssMiB - without.peakRssMiB, 1),
        anonRssDeltaMiB: round(agent.anonRssMiB - without.anonRssMiB, 1),
        treeReads: reads,
        extraBytesRead: extraBytes,
        bytesPerTreeRead: bytesPerRead,
        readIntervalSeconds: reads > 0 ? round(window.seconds / reads, 1) : null,
        ratioToNodeExporter: ratiosTo(agent, ne),
        attributedOnce: attributed.bySize.get(size),
      };
    };
    return {
      layout: LAYOUT[version],
      psiSomeAvg10Percent: attributed.psiSomeAvg10Percent,
      windowSeconds: window.seconds,
      tickerMsPerTick: round(tickMs(), 1),
      withoutAttribution: { ...without, ...sampleDurations(window, 'withoutAttribution') },
      // Two identical agents: how far apart this window's figures are by noise alone.
      noiseFloor: {
        cpuPercent: round(Math.abs(twin.cpuPercent - without.cpuPercent)),
        bytesRead: Math.abs(beyondProc('withoutAttributionTwin')),
      },
      pods100: bySize(100),
      pods1000: bySize(1000),
      nodeExporter: ne,
      withoutAttributionToNodeExporter: ratiosTo(without, ne),
    };
  } finally {
    await processes.stop();
    await node.remove();
  }
}

const nodeOptions = await buildDeployedAgent();
const readDir = mkdtempSync(join(MEMORY_DIR, 'tree-read-'));
const treeRead: Record<string, Record<string, ReturnType<typeof timeTreeRead>>> = {};
try {
  for (const version of VERSIONS) {
    treeRead[version] = {};
    for (const size of READ_SIZES) {
      const { tree } = craftTree(readDir, version, DRIVER[version], size);
      const timed = timeTreeRead(tree.root, nodeOptions);
      treeRead[version][`pods${size}`] = timed;
      rmSync(tree.root, { recursive: true, force: true });
      console.log(`${version} tree read, ${size} pods: ${JSON.stringify(timed)}`);
    }
  }
} finally {
  rmSync(readDir, { recursive: true, force: true });
}
const phases: Record<string, Awaited<ReturnType<typeof phase>>> = {};
for (const version of VERSIONS) {
  phases[version] = await phase(version, nodeOptions);
  console.log(`${version}: ${JSON.stringify(phases[version], null, 1)}`);
}
const at100 = phases.v1?.pods100 ?? phases.v2?.pods100;
const result = {
  ...runContext(),
  nodeOptions,
  seconds: SECONDS,
  crafted: {
    disk: DISK.name,
    diskWriteMiBPerSecond: DISK_RATE.writeBytes / 2 ** 20,
    diskReadMiBPerSecond: DISK_RATE.readBytes / 2 ** 20,
    diskOpsPerSecond: DISK_RATE.reads + DISK_RATE.writes,
    culpritSharePercent: SHARES.culprit * 100,
    runtimeSharePercent: SHARES.runtime * 100,
    otherPodsSharePercent: SHARES.otherPods * 100,
  },
  goal: {
    what: 'attribution at 100 pods, 1 s sampling: CPU(with) - CPU(without) under 0.5 % of a core',
    layout: phases.v1 ? 'v1' : 'v2',
    limitPercentOfCore: 0.5,
    measuredPercentOfCore: at100?.attributionCpuPercent ?? null,
    met: at100 ? at100.attributionCpuPercent < 0.5 : null,
  },
  ...phases,
  treeRead,
};
if (CPU_PROF) {
  // The profiler's own cost is in every figure: say where the time went, and keep the results of a real run.
  for (const version of VERSIONS)
    for (const name of ['withoutAttribution', ...SIZES.map((size) => `pods${size}`)]) {
      const dir = join(CPU_PROF, `${version}-${name}`);
      for (const file of readdirSync(dir))
        console.log(`${version} ${name}: ${JSON.stringify(summarizeProfile(join(dir, file)), null, 1)}`);
    }
} else {
  // As prettier writes it, so that `make verify` passes on the file as the bench left it.
  const file = join(REPO_ROOT, 'bench', 'results', 'agent-attribution.json');
  writeFileSync(
    file,
    await format(JSON.stringify(result), { ...(await resolveConfig(file)), filepath: file }),
  );
}
for (const [version, p] of Object.entries(phases)) {
  const line = (name: string, m: Measured) =>
    `${version} ${name.padEnd(20)} ${m.cpuPercent.toFixed(2).padStart(5)}% CPU  ${m.peakRssMiB.toFixed(1).padStart(5)} MiB RSS (anon ${m.anonRssMiB}, file ${m.fileRssMiB})`;
  console.log(line('without attribution', p.withoutAttribution));
  for (const size of SIZES) {
    const s = p[`pods${size}`];
    console.log(
      `${line(`${size} pods`, s.agent)}  cost ${s.attributionCpuPercent} % of a core, x${s.cpuRatioToWithout}; ${s.treeReads} reads, every ${s.readIntervalSeconds} s`,
    );
  }
  console.log(line('node_exporter', p.nodeExporter));
}
console.log(
  `goal (< 0.5 % of a core at 100 pods): ${result.goal.met ? 'met' : 'NOT met'} (${result.goal.measuredPercentOfCore} %)`,
);
