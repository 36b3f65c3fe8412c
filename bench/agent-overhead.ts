// CPU and memory of the node agent sampling every second, side by side with node_exporter (Debian's
// prometheus-node-exporter) scraped every second, on the same machine in the same run. Neither writes to an
// API server: the agent runs with --no-publish, so both do only what they do on every node.
//
//   npx tsx bench/agent-overhead.ts [--seconds 60]
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../test/support/manifests.js';
import { freePort } from '../test/support/monitoring.js';

const SECONDS = Number(process.argv[process.argv.indexOf('--seconds') + 1]) || 60;
const TICKS = 100; // getconf CLK_TCK on Linux x86_64

function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]); // utime + stime
}
function rssKiB(pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
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

const agentPort = await freePort();
const exporterPort = await freePort();
const children: ChildProcess[] = [];
try {
  // The agent as it runs in production: compiled JavaScript, no TypeScript loader in the process.
  const build = spawn('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: REPO_ROOT, stdio: 'inherit' });
  await new Promise((resolve) => build.on('exit', resolve));
  const agent = spawn(
    process.execPath,
    [
      join(REPO_ROOT, 'dist/src/main.js'),
      'agent',
      '--node-name=bench',
      '--no-publish',
      '--interval-seconds=1',
      `--metrics-bind-address=127.0.0.1:${agentPort}`,
      '--log-level=warn',
    ],
    { stdio: 'ignore' },
  );
  const exporter = spawn('prometheus-node-exporter', [`--web.listen-address=127.0.0.1:${exporterPort}`], {
    stdio: 'ignore',
  });
  children.push(agent, exporter);
  await waitFor(`http://127.0.0.1:${agentPort}/metrics`);
  await waitFor(`http://127.0.0.1:${exporterPort}/metrics`);
  await new Promise((r) => setTimeout(r, 3000)); // let both settle past start-up

  const start = { agent: cpuTicks(agent.pid!), exporter: cpuTicks(exporter.pid!) };
  const peak = { agent: 0, exporter: 0 };
  let exporterBytes = 0;
  let agentBytes = 0;
  for (let s = 0; s < SECONDS; s++) {
    // node_exporter collects at scrape time: scrape it every second, as a 1 s Prometheus job would. The agent
    // samples on its own timer; scrape it too, so both pay for serving /metrics.
    exporterBytes = (await (await fetch(`http://127.0.0.1:${exporterPort}/metrics`)).text()).length;
    agentBytes = (await (await fetch(`http://127.0.0.1:${agentPort}/metrics`)).text()).length;
    peak.agent = Math.max(peak.agent, rssKiB(agent.pid!));
    peak.exporter = Math.max(peak.exporter, rssKiB(exporter.pid!));
    await new Promise((r) => setTimeout(r, 1000));
  }
  const cpu = (pid: number, from: number) => ((cpuTicks(pid) - from) / TICKS / SECONDS) * 100;
  const result = {
    date: new Date().toISOString(),
    seconds: SECONDS,
    agent: {
      cpuPercent: Number(cpu(agent.pid!, start.agent).toFixed(2)),
      peakRssMiB: Number((peak.agent / 1024).toFixed(1)),
      metricsBytes: agentBytes,
    },
    nodeExporter: {
      cpuPercent: Number(cpu(exporter.pid!, start.exporter).toFixed(2)),
      peakRssMiB: Number((peak.exporter / 1024).toFixed(1)),
      metricsBytes: exporterBytes,
    },
  };
  const ratio = (a: number, b: number) => (b > 0 ? Number((a / b).toFixed(2)) : null);
  const withRatios = {
    ...result,
    ratioAgentToExporter: {
      cpu: ratio(result.agent.cpuPercent, result.nodeExporter.cpuPercent),
      rss: ratio(result.agent.peakRssMiB, result.nodeExporter.peakRssMiB),
    },
  };
  writeFileSync(
    join(REPO_ROOT, 'bench', 'results', 'agent-overhead.json'),
    `${JSON.stringify(withRatios, null, 2)}\n`,
  );
  console.log(
    `over ${SECONDS}s at 1 s sampling: agent ${result.agent.cpuPercent}% CPU, ${result.agent.peakRssMiB} MiB RSS; node_exporter ${result.nodeExporter.cpuPercent}% CPU, ${result.nodeExporter.peakRssMiB} MiB RSS; agent/exporter CPU ${withRatios.ratioAgentToExporter.cpu}x, RSS ${withRatios.ratioAgentToExporter.rss}x`,
  );
} finally {
  for (const child of children) child.kill('SIGTERM');
}
