// What IO limits cost the node agent (issue 44): CPU, memory and publishes of the agent keeping limits in force on
// 20 of 100 pods (MAX_IO_LIMITS_PER_NODE, the most a node holds) against the agent as shipped (no
// --allow-io-limits, no limit wanted), side by side in one window, with an identical twin of the latter (how far two
// agents differ by noise alone) and node_exporter as the peer.
//
// The agents publish to a real apiserver (make cluster-up; the CRDs applied here): the wish is the limited agent's
// SandboxHealth spec.ioLimits, written here as the operator writes it, and the agent reads it from the answer to
// each publish, writes the limits into its tree's blkio.throttle files and reports them in status.ioLimits, as
// deployed. Every agent reads a crafted cgroup v1 tree of 100 pods of its own, each with three containers' cgroups
// below it, so a limit is four records (crafted-io-node.ts: the load's
// counters advance every second, the disk's PSI reads as load, so every agent publishes on its short heartbeat), in
// /dev/shm: the files are regular files, so the figures are the agent's work, not the kernel's throttling. The
// window starts once the agent reports every limit applied: it measures limits kept in force, their steady state.
//
//   npx tsx bench/agent-io-limits.ts [--seconds 60]      (in make bench; make cluster-up first)
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { format, resolveConfig } from 'prettier';
import { V1_THROTTLE_FILES } from '../src/agent/io-limits.js';
import {
  API_VERSION,
  MAX_IO_LIMITS_PER_NODE,
  type IoLimitReport,
  type WantedIoLimitSpec,
} from '../src/api/v1alpha1/index.js';
import { isClusterUp, KUBECONFIG, kubectl } from '../test/support/cluster.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import {
  buildDeployedAgent,
  MeasuredProcesses,
  ratio,
  ratiosTo,
  runContext,
  type Measured,
} from './agent-processes.js';
import { CraftedIoNode, DISK, podUid } from './crafted-io-node.js';
import { arg } from './args.js';

const SECONDS = Number(arg('--seconds', '60'));
if (!(SECONDS > 0)) {
  console.error('usage: tsx bench/agent-io-limits.ts [--seconds N]');
  process.exit(2);
}
const PODS = 100;
const LIMITED = MAX_IO_LIMITS_PER_NODE;
/** Containers below each pod's cgroup, as kubelet makes them on v1: the sandbox's and two of the pod's. */
const CONTAINERS = ['sandbox', 'app', 'sidecar'];
/** A limit's records on v1 (its throttling is flat): the pod's cgroup and each container's. */
const RECORDS = LIMITED * (1 + CONTAINERS.length);
const DEVICE = `${DISK.major}:${DISK.minor}`;
/** Each agent: its node (and SandboxHealth) name, and whether it keeps limits. */
const AGENTS = {
  limitsOff: { node: 'bench-limits-off', limits: false },
  limitsOffTwin: { node: 'bench-limits-off-twin', limits: false },
  limitsOn: { node: 'bench-limits-on', limits: true },
} as const;
type AgentName = keyof typeof AGENTS;

const round = (n: number, digits = 2) => Number(n.toFixed(digits));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function run(args: string[], input?: string): Promise<string> {
  const result = await kubectl(args, input);
  if (result.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${result.stderr}`);
  return result.stdout;
}

/**
 * Empty blkio.throttle files in every pod's cgroup of a crafted v1 tree (the crafted tree has only the counters), and
 * the containers' cgroups below each with theirs; the pods found.
 */
function addThrottleFiles(dir: string): number {
  let pods = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    const path = join(dir, entry.name);
    if (/^pod[0-9a-f-]{36}$/.test(entry.name)) {
      for (const cgroup of ['', ...CONTAINERS]) {
        mkdirSync(join(path, cgroup), { recursive: true });
        for (const file of Object.values(V1_THROTTLE_FILES)) writeFileSync(join(path, cgroup, file), '');
      }
      pods++;
    } else pods += addThrottleFiles(path);
  }
  return pods;
}

/** The limits the operator would want on the first LIMITED pods: a tenth of the crafted disk's writes each. */
function wish(): WantedIoLimitSpec[] {
  const now = new Date().toISOString();
  return Array.from({ length: LIMITED }, (_, i) => ({
    podUid: podUid(i),
    pod: `bench/pod-${i}`,
    device: DEVICE,
    limit: { wbps: 6 * 2 ** 20, wiops: 150 },
    policy: 'bench',
    since: now,
    changedAt: now,
    floor: { wbps: 2 ** 20, wiops: 50 },
  }));
}

async function readReport(node: string): Promise<IoLimitReport | undefined> {
  const object = JSON.parse(await run(['get', 'sandboxhealth', node, '-o', 'json'])) as {
    status?: { ioLimits?: IoLimitReport };
  };
  return object.status?.ioLimits;
}

/** A counter of an agent's /metrics text (summed over its series), NaN when absent. */
function counter(text: string | undefined, name: string): number {
  const values = [...(text ?? '').matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))];
  return values.length === 0 ? NaN : values.reduce((sum, m) => sum + Number(m[1]), 0);
}

if (!(await isClusterUp()))
  throw new Error(`no cluster answers at ${KUBECONFIG}: make cluster-up (or make bench-agent-io-limits)`);
await run(['apply', '--server-side', '-f', join(REPO_ROOT, 'crds')]);
const nodeOptions = await buildDeployedAgent();
const node = await CraftedIoNode.create();
const processes = new MeasuredProcesses();
try {
  const roots = new Map<AgentName, string>();
  for (const name of Object.keys(AGENTS) as AgentName[]) {
    const root = node.addTree('v1', 'cgroupfs', PODS);
    const pods = addThrottleFiles(join(root, 'blkio'));
    if (pods !== PODS) throw new Error(`${name}'s tree has ${pods} pod cgroups, not ${PODS}`);
    roots.set(name, root);
  }
  node.start();
  // The SandboxHealths the agents publish into (the operator makes them; an agent writes only into one that exists),
  // the limited one with the wish in its spec.
  for (const [name, { node: nodeName, limits }] of Object.entries(AGENTS)) {
    const health = {
      apiVersion: API_VERSION,
      kind: 'SandboxHealth',
      metadata: { name: nodeName },
      spec: { nodeName, ...(limits ? { ioLimits: wish() } : {}) },
    };
    await run(['delete', 'sandboxhealth', nodeName, '--ignore-not-found']);
    await run(['create', '-f', '-'], JSON.stringify(health));
    console.log(`${name}: SandboxHealth ${nodeName}${limits ? `, ${LIMITED} limits wanted` : ''}`);
  }
  for (const [name, { node: nodeName, limits }] of Object.entries(AGENTS) as [
    AgentName,
    (typeof AGENTS)[AgentName],
  ][])
    await processes.startAgent(name, nodeOptions, [
      `--node-name=${nodeName}`,
      `--kubeconfig=${KUBECONFIG}`,
      `--proc-root=${node.proc}`,
      `--cgroup-root=${roots.get(name)}`,
      ...(limits ? ['--allow-io-limits'] : []),
    ]);
  await processes.startNodeExporter();
  await processes.ready();
  // Measured once every limit is in force, as the agent reports it and as its tree's files hold it.
  let report: IoLimitReport | undefined;
  for (let waited = 0; ; waited += 1000) {
    report = await readReport(AGENTS.limitsOn.node);
    if ((report?.applied?.length ?? 0) === RECORDS) break;
    if (waited > 60_000)
      throw new Error(
        `the agent reported ${report?.applied?.length ?? 0} of ${RECORDS} records applied: ${JSON.stringify(report?.results)}`,
      );
    await sleep(1000);
  }
  const firstLimited = report!.applied![0]!;
  const file = join(roots.get('limitsOn')!, 'blkio', firstLimited.cgroup, V1_THROTTLE_FILES.wbps);
  const held = readFileSync(file, 'utf8');
  if (held !== `${DEVICE} ${6 * 2 ** 20}\n`) throw new Error(`${file} holds ${JSON.stringify(held)}`);
  console.log(`${LIMITED} limits in force; measuring ${SECONDS} s`);
  const window = await processes.measure(SECONDS);
  const after = await readReport(AGENTS.limitsOn.node);
  if ((after?.applied?.length ?? 0) !== RECORDS)
    throw new Error(`limits left after the window: ${JSON.stringify(after)}`);

  const measured = (name: string): Measured => {
    const m = window.measured[name];
    if (!m) throw new Error(`${name} was not measured`);
    return m;
  };
  const delta = (name: string, metric: string) =>
    counter(window.metricsAtEnd.get(name), metric) - counter(window.metricsAtStart.get(name), metric);
  const agent = (name: AgentName) => ({
    ...measured(name),
    publishesPerMinute: round(
      (delta(name, 'sandbox_remediator_agent_publishes_total') / window.seconds) * 60,
      1,
    ),
    limitActions: delta(name, 'sandbox_remediator_agent_io_limits_total') || 0,
  });
  const off = agent('limitsOff');
  const twin = agent('limitsOffTwin');
  const on = agent('limitsOn');
  const ne = measured('nodeExporter');
  const result = {
    ...runContext(),
    nodeOptions,
    windowSeconds: window.seconds,
    crafted: {
      layout: 'cgroup v1, cgroupfs driver',
      pods: PODS,
      containersPerPod: CONTAINERS.length,
      limited: LIMITED,
      cgroupsLimited: RECORDS,
      device: DEVICE,
    },
    limitsOn: on,
    limitsOff: off,
    limitsOffTwin: twin,
    nodeExporter: ne,
    // Limits kept against none: the issue's figure. The twin's against its sibling is the noise in the same window.
    onToOff: {
      cpu: ratio(on.cpuPercent, off.cpuPercent),
      rss: ratio(on.peakRssMiB, off.peakRssMiB),
      anonRss: ratio(on.anonRssMiB, off.anonRssMiB),
      publishes: ratio(on.publishesPerMinute, off.publishesPerMinute),
    },
    noise: {
      cpu: ratio(twin.cpuPercent, off.cpuPercent),
      rss: ratio(twin.peakRssMiB, off.peakRssMiB),
      anonRss: ratio(twin.anonRssMiB, off.anonRssMiB),
    },
    costPercentOfCore: round(on.cpuPercent - off.cpuPercent),
    limitsOnToNodeExporter: ratiosTo(on, ne),
    limitsOffToNodeExporter: ratiosTo(off, ne),
  };
  const out = join(REPO_ROOT, 'bench', 'results', 'agent-io-limits.json');
  mkdirSync(join(REPO_ROOT, 'bench', 'results'), { recursive: true });
  writeFileSync(out, await format(JSON.stringify(result), { ...(await resolveConfig(out)), filepath: out }));
  const line = (name: string, m: Measured & { publishesPerMinute?: number }) =>
    `${name.padEnd(16)} ${m.cpuPercent.toFixed(2).padStart(5)}% CPU  ${m.peakRssMiB.toFixed(1).padStart(5)} MiB RSS (anon ${m.anonRssMiB})${m.publishesPerMinute === undefined ? '' : `  ${m.publishesPerMinute} publishes/min`}`;
  console.log(line('limits on', on));
  console.log(line('limits off', off));
  console.log(line('limits off twin', twin));
  console.log(line('node_exporter', ne));
  console.log(`on/off: ${JSON.stringify(result.onToOff)}; noise (twin/off): ${JSON.stringify(result.noise)}`);
} finally {
  await processes.stop();
  await node.remove();
  for (const { node: nodeName } of Object.values(AGENTS))
    await kubectl(['delete', 'sandboxhealth', nodeName, '--ignore-not-found']);
}
