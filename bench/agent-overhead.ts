// CPU and memory of the node agent sampling every second, side by side with node_exporter (Debian's
// prometheus-node-exporter) scraped every second, on the same machine in the same run, all at once so that each
// sees the same load. The agents run as deployed: compiled JavaScript with the NODE_OPTIONS of
// config/agent/daemonset.yaml. Four processes:
//   - agent, publishing: writes its readings into its node's SandboxHealth on the local cluster (started when not
//     running), with a ServiceAccount token bound to a pod on its node, as the kubelet mounts it, so the
//     admission policy of config/agent lets it through;
//   - agent --no-publish: what an agent costs on a node no policy selects yet, and the figure of earlier runs;
//   - agent --no-publish without the NODE_OPTIONS: what the flags buy;
//   - node_exporter.
// RSS is VmRSS (what `ps` and the goal count), and also split into anonymous (the process's own heap and
// stacks) and file-backed (pages of the node or Go binary, shared with any other process mapping them).
//
//   npx tsx bench/agent-overhead.ts [--seconds 60] [--no-cluster]
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GROUP, VERSION } from '../src/api/v1alpha1/index.js';
import {
  api,
  Cleanup,
  createNodes,
  isClusterUp,
  kubectl,
  podBoundTo,
  startCluster,
  uniqueName,
} from '../test/support/cluster.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import { freePort } from '../test/support/monitoring.js';
import { applyCrds, applyRbac } from '../test/support/operator-process.js';
import { createToken, writeTokenKubeconfig } from '../test/support/tokens.js';
import { deployedEnv } from './deployed-env.js';

const SECONDS = Number(process.argv[process.argv.indexOf('--seconds') + 1]) || 60;
const WITH_CLUSTER = !process.argv.includes('--no-cluster');
const TICKS = 100; // getconf CLK_TCK on Linux x86_64

function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]); // utime + stime
}
function memoryKiB(pid: number): { rss: number; anon: number; file: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+)`).exec(status)?.[1] ?? NaN);
  return { rss: kib('VmRSS'), anon: kib('RssAnon'), file: kib('RssFile') };
}

async function waitFor(url: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      /* not listening yet */
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${url} did not answer`);
}

/**
 * A kwok node with a SandboxHealth, and a kubeconfig whose only credential is a token of the agent's
 * ServiceAccount bound to a pod on that node. No operator runs here: nothing else writes or deletes it.
 */
async function publishingTarget(
  cleanup: Cleanup,
  dir: string,
): Promise<{ node: string; kubeconfig: string }> {
  if (!(await isClusterUp())) await startCluster();
  await applyCrds();
  await applyRbac();
  const policy = await kubectl(['apply', '-f', join(REPO_ROOT, 'config/agent/admission-policy.yaml')]);
  if (policy.code !== 0) throw new Error(policy.stderr);
  const {
    names: [node = ''],
  } = await createNodes(cleanup, 1);
  const health = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: 'SandboxHealth',
    metadata: { name: node },
    spec: { nodeName: node },
  };
  const created = await kubectl(['create', '-f', '-'], JSON.stringify(health));
  if (created.code !== 0) throw new Error(created.stderr);
  cleanup.add(() => kubectl(['delete', 'sandboxhealth', node, '--ignore-not-found']));
  const namespace = 'sandbox-remediator-agent';
  const pod = podBoundTo(uniqueName('agent-bench'), node);
  pod.spec!.serviceAccountName = 'sandbox-remediator-agent';
  await api().core.createNamespacedPod({ namespace, body: pod });
  cleanup.add(() =>
    api().core.deleteNamespacedPod({ name: pod.metadata!.name!, namespace, gracePeriodSeconds: 0 }),
  );
  const token = await createToken(namespace, 'sandbox-remediator-agent', { boundToPod: pod.metadata!.name! });
  return { node, kubeconfig: await writeTokenKubeconfig(dir, 'agent-bench', token) };
}

interface Measured {
  cpuPercent: number;
  peakRssMiB: number;
  anonRssMiB: number;
  fileRssMiB: number;
  metricsBytes: number;
}

const cleanup = new Cleanup();
const dir = mkdtempSync(join(tmpdir(), 'agent-overhead-'));
const children: ChildProcess[] = [];
try {
  // The agent as it runs in production: compiled JavaScript, no TypeScript loader in the process.
  const build = spawn(join(REPO_ROOT, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.build.json'], {
    cwd: REPO_ROOT,
    stdio: 'inherit',
  });
  const built = await new Promise((resolve) => build.on('exit', resolve));
  if (built !== 0) throw new Error('tsc failed');
  const nodeOptions = deployedEnv('config/agent/daemonset.yaml', 'DaemonSet', 'agent').NODE_OPTIONS ?? '';
  const target = WITH_CLUSTER ? await publishingTarget(cleanup, dir) : undefined;

  const ports = new Map<string, number>();
  const pids = new Map<string, number>();
  const startAgent = async (name: string, options: string, args: string[]) => {
    const port = await freePort();
    const child = spawn(
      process.execPath,
      [
        join(REPO_ROOT, 'dist/src/main.js'),
        'agent',
        '--interval-seconds=1',
        `--metrics-bind-address=127.0.0.1:${port}`,
        '--log-level=warn',
        ...args,
      ],
      { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, NODE_OPTIONS: options } },
    );
    children.push(child);
    ports.set(name, port);
    pids.set(name, child.pid!);
  };
  if (target)
    await startAgent('agent', nodeOptions, [
      `--node-name=${target.node}`,
      `--kubeconfig=${target.kubeconfig}`,
    ]);
  await startAgent('agentNoPublish', nodeOptions, ['--node-name=bench', '--no-publish']);
  await startAgent('agentNoPublishNoFlags', '', ['--node-name=bench', '--no-publish']);
  const exporterPort = await freePort();
  const exporter = spawn('prometheus-node-exporter', [`--web.listen-address=127.0.0.1:${exporterPort}`], {
    stdio: 'ignore',
  });
  children.push(exporter);
  ports.set('nodeExporter', exporterPort);
  pids.set('nodeExporter', exporter.pid!);
  for (const port of ports.values()) await waitFor(`http://127.0.0.1:${port}/metrics`);
  await new Promise((r) => setTimeout(r, 3000)); // let every process settle past start-up

  const names = [...ports.keys()];
  const start = new Map(names.map((n) => [n, cpuTicks(pids.get(n)!)]));
  const peak = new Map(names.map((n) => [n, 0]));
  const bytes = new Map<string, number>();
  const metrics = new Map<string, string>();
  for (let s = 0; s < SECONDS; s++) {
    // node_exporter collects at scrape time: scrape it every second, as a 1 s Prometheus job would. The agents
    // sample on their own timers; scrape them too, so every process pays for serving /metrics.
    for (const name of names) {
      const text = await (await fetch(`http://127.0.0.1:${ports.get(name)}/metrics`)).text();
      bytes.set(name, text.length);
      metrics.set(name, text);
      peak.set(name, Math.max(peak.get(name)!, memoryKiB(pids.get(name)!).rss));
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  const mib = (kib: number) => Number((kib / 1024).toFixed(1));
  const measured: Record<string, Measured> = {};
  for (const name of names) {
    const pid = pids.get(name)!;
    const memory = memoryKiB(pid);
    measured[name] = {
      cpuPercent: Number((((cpuTicks(pid) - start.get(name)!) / TICKS / SECONDS) * 100).toFixed(2)),
      peakRssMiB: mib(peak.get(name)!),
      anonRssMiB: mib(memory.anon),
      fileRssMiB: mib(memory.file),
      metricsBytes: bytes.get(name)!,
    };
  }
  const ratio = (a: number | undefined, b: number) =>
    a !== undefined && b > 0 ? Number((a / b).toFixed(2)) : null;
  const ne = measured.nodeExporter!;
  const ratios = (m: Measured | undefined) => ({
    cpu: ratio(m?.cpuPercent, ne.cpuPercent),
    rss: ratio(m?.peakRssMiB, ne.peakRssMiB),
    anonRss: ratio(m?.anonRssMiB, ne.anonRssMiB),
  });
  const publishes = [
    ...(metrics.get('agent') ?? '').matchAll(
      /^sandbox_remediator_agent_publishes_total\{result="(\w+)"\} (\d+)/gm,
    ),
  ];
  const result = {
    date: new Date().toISOString(),
    seconds: SECONDS,
    loadAverage: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number),
    nodeOptions,
    ...(measured.agent
      ? {
          agent: {
            ...measured.agent,
            publishes: Object.fromEntries(publishes.map((m) => [m[1] ?? '', Number(m[2])])),
          },
        }
      : {
          agent: null,
          agentSkipped: 'run with --no-cluster: only the agents that do not publish were measured',
        }),
    agentNoPublish: measured.agentNoPublish,
    agentNoPublishWithoutNodeOptions: measured.agentNoPublishNoFlags,
    nodeExporter: ne,
    ratioToNodeExporter: {
      agent: measured.agent ? ratios(measured.agent) : null,
      agentNoPublish: ratios(measured.agentNoPublish),
      agentNoPublishWithoutNodeOptions: ratios(measured.agentNoPublishNoFlags),
    },
  };
  writeFileSync(
    join(REPO_ROOT, 'bench', 'results', 'agent-overhead.json'),
    `${JSON.stringify(result, null, 2)}\n`,
  );
  for (const name of names) {
    const m = measured[name]!;
    console.log(
      `${name.padEnd(22)} ${m.cpuPercent.toFixed(2).padStart(5)}% CPU  ${m.peakRssMiB.toFixed(1).padStart(5)} MiB RSS (anon ${m.anonRssMiB}, file ${m.fileRssMiB})  vs node_exporter: CPU ${ratio(m.cpuPercent, ne.cpuPercent)}x, RSS ${ratio(m.peakRssMiB, ne.peakRssMiB)}x`,
    );
  }
  if (result.agent)
    console.log(`publishing agent wrote ${JSON.stringify(result.agent.publishes)} in ${SECONDS}s`);
} finally {
  for (const child of children) child.kill('SIGTERM');
  await cleanup.run();
  rmSync(dir, { recursive: true, force: true });
}
