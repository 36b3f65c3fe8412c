// The node agent and node_exporter as the agent benchmarks run them, side by side in one window so that each sees
// the same load: the agent as deployed (compiled JavaScript, no TypeScript loader in the process, the NODE_OPTIONS
// of config/agent/daemonset.yaml), node_exporter as Debian's prometheus-node-exporter. Every process is scraped
// every second: node_exporter collects at scrape time, as a 1 s Prometheus job would make it, and the agents pay
// for serving /metrics too. CPU is utime + stime from /proc/PID/stat over the window's measured length; RSS is
// VmRSS (what `ps` and the goal count), its peak sampled every second, and also split into anonymous (the
// process's own heap and stacks) and file-backed (pages of the node or Go binary, shared with any other process
// mapping them).
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism, release } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from '../test/support/manifests.js';
import { freePort } from '../test/support/monitoring.js';
import { deployedEnv } from './deployed-env.js';

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

/** Bytes the process read with read(2) and its kin (rchar in /proc/PID/io), from any file or socket. */
function bytesRead(pid: number): number {
  return Number(/^rchar: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))?.[1] ?? NaN);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

async function waitFor(url: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      /* not listening yet */
    }
    await sleep(200);
  }
  throw new Error(`${url} did not answer`);
}

/** Compiles src/ into dist/ (the agent as it runs in production) and returns the DaemonSet's NODE_OPTIONS. */
export async function buildDeployedAgent(): Promise<string> {
  const build = spawn(join(REPO_ROOT, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.build.json'], {
    cwd: REPO_ROOT,
    stdio: 'inherit',
  });
  const built = await new Promise((resolve) => build.on('exit', resolve));
  if (built !== 0) throw new Error('tsc failed');
  return deployedEnv('config/agent/daemonset.yaml', 'DaemonSet', 'agent').NODE_OPTIONS ?? '';
}

/** When and on what a run was measured: the head of the agent benches' results. */
export function runContext() {
  return {
    date: new Date().toISOString(),
    machine: `${availableParallelism()} cores`,
    node: process.version,
    kernel: release(),
    loadAverage: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number),
  };
}

export interface Measured {
  cpuPercent: number;
  peakRssMiB: number;
  anonRssMiB: number;
  fileRssMiB: number;
  metricsBytes: number;
}

/** a / b to two decimals; null without both. */
export const ratio = (a: number | undefined, b: number | undefined): number | null =>
  a !== undefined && b !== undefined && b > 0 ? Number((a / b).toFixed(2)) : null;

/** A process's CPU, peak RSS and anonymous RSS as multiples of another's (node_exporter's). */
export const ratiosTo = (m: Measured | undefined, peer: Measured | undefined) => ({
  cpu: ratio(m?.cpuPercent, peer?.cpuPercent),
  rss: ratio(m?.peakRssMiB, peer?.peakRssMiB),
  anonRss: ratio(m?.anonRssMiB, peer?.anonRssMiB),
});

export interface Window {
  /** The window's measured length. */
  seconds: number;
  measured: Record<string, Measured>;
  /** Each process's /metrics at the window's first scrape, and once it ended. */
  metricsAtStart: Map<string, string>;
  metricsAtEnd: Map<string, string>;
  /** Bytes each process read in the window (rchar). */
  bytesRead: Map<string, number>;
}

export class MeasuredProcesses {
  private readonly children: ChildProcess[] = [];
  private readonly ports = new Map<string, number>();
  private readonly pids = new Map<string, number>();

  /**
   * `sandbox-remediator agent` at 1 s sampling, its metrics on 127.0.0.1, with `args` after the common ones;
   * `nodeArgs` go to node itself (--cpu-prof, which NODE_OPTIONS may not hold).
   */
  async startAgent(
    name: string,
    nodeOptions: string,
    args: string[],
    nodeArgs: string[] = [],
  ): Promise<void> {
    const port = await freePort();
    const child = spawn(
      process.execPath,
      [
        ...nodeArgs,
        join(REPO_ROOT, 'dist/src/main.js'),
        'agent',
        '--interval-seconds=1',
        `--metrics-bind-address=127.0.0.1:${port}`,
        '--log-level=warn',
        ...args,
      ],
      { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, NODE_OPTIONS: nodeOptions } },
    );
    this.add(name, child, port);
  }

  async startNodeExporter(name = 'nodeExporter'): Promise<void> {
    const port = await freePort();
    const child = spawn('prometheus-node-exporter', [`--web.listen-address=127.0.0.1:${port}`], {
      stdio: 'ignore',
    });
    this.add(name, child, port);
  }

  private add(name: string, child: ChildProcess, port: number): void {
    this.children.push(child);
    if (child.pid === undefined) throw new Error(`${name} did not start`);
    this.ports.set(name, port);
    this.pids.set(name, child.pid);
  }

  pid(name: string): number | undefined {
    return this.pids.get(name);
  }

  /** Waits until every process serves /metrics, then `settleMs` more, past start-up. */
  async ready(settleMs = 3000): Promise<void> {
    for (const port of this.ports.values()) await waitFor(`http://127.0.0.1:${port}/metrics`);
    await sleep(settleMs);
  }

  /**
   * Every process scraped at the start of each of `seconds` seconds, CPU and bytes read over the whole window, and
   * one scrape more once it ended (not in the figures), so that its counters at the start and at the end bound it.
   */
  async measure(seconds: number): Promise<Window> {
    const names = [...this.ports.keys()];
    const pid = (name: string) => this.pids.get(name) ?? NaN;
    const scrape = async (name: string) =>
      (await fetch(`http://127.0.0.1:${this.ports.get(name)}/metrics`)).text();
    const startTicks = new Map(names.map((n) => [n, cpuTicks(pid(n))]));
    const startBytes = new Map(names.map((n) => [n, bytesRead(pid(n))]));
    const started = performance.now();
    const peak = new Map(names.map((n) => [n, 0]));
    const metricsAtStart = new Map<string, string>();
    const metricsBytes = new Map<string, number>();
    for (let s = 0; s < seconds; s++) {
      for (const name of names) {
        const text = await scrape(name);
        if (s === 0) metricsAtStart.set(name, text);
        metricsBytes.set(name, text.length);
        peak.set(name, Math.max(peak.get(name) ?? 0, memoryKiB(pid(name)).rss));
      }
      await sleep(started + (s + 1) * 1000 - performance.now());
    }
    const elapsed = (performance.now() - started) / 1000;
    const mib = (kib: number) => Number((kib / 1024).toFixed(1));
    const measured: Record<string, Measured> = {};
    const bytes = new Map<string, number>();
    for (const name of names) {
      const memory = memoryKiB(pid(name));
      const ticks = cpuTicks(pid(name)) - (startTicks.get(name) ?? NaN);
      bytes.set(name, bytesRead(pid(name)) - (startBytes.get(name) ?? NaN));
      measured[name] = {
        cpuPercent: Number(((ticks / TICKS / elapsed) * 100).toFixed(2)),
        peakRssMiB: mib(peak.get(name) ?? NaN),
        anonRssMiB: mib(memory.anon),
        fileRssMiB: mib(memory.file),
        metricsBytes: metricsBytes.get(name) ?? 0,
      };
    }
    const metricsAtEnd = new Map<string, string>();
    for (const name of names) metricsAtEnd.set(name, await scrape(name));
    return {
      seconds: Number(elapsed.toFixed(1)),
      measured,
      metricsAtStart,
      metricsAtEnd,
      bytesRead: bytes,
    };
  }

  /** SIGTERM to every process started, and waits until each has exited. */
  async stop(): Promise<void> {
    await Promise.all(
      this.children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) {
              resolve();
              return;
            }
            child.once('exit', () => {
              resolve();
            });
            child.kill('SIGTERM');
          }),
      ),
    );
  }
}
