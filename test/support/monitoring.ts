// node_exporter and Prometheus (Debian packages) on 127.0.0.1 for tests: node_exporter's series carry a
// `node` label naming a kwok node, as a relabel rule in a real cluster would.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLUSTER_DIR, eventually } from './cluster.js';

/**
 * A free port on 127.0.0.1 below Linux's ephemeral range (32768-60999), so that no server bound to port 0 meanwhile
 * (the operator's metrics, a probe) can be handed the same one before the caller binds it: random, tried until
 * one binds (bounded).
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (await bindable(port)) return port;
  }
  throw new Error('no free port on 127.0.0.1 in 20000-31999 after 200 tries');
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => {
      resolve(false);
    });
    server.listen(port, '127.0.0.1', () => {
      server.close(() => {
        resolve(true);
      });
    });
  });
}

export class Monitoring {
  private children: ChildProcess[] = [];
  private dir = '';
  prometheusUrl = '';
  nodeExporterUrl = '';

  /**
   * node_exporter's series as the node `nodeName`'s, under the job `node`. `extraTargets`: more scrape jobs, as a
   * cluster where a tenant can shape labels has them (job name -> target, its labels honoured).
   */
  async start(nodeName: string, extraTargets: Record<string, string> = {}): Promise<void> {
    this.dir = await mkdtemp(join(tmpdir(), 'prom-'));
    const exporterPort = await freePort();
    const prometheusPort = await freePort();
    this.nodeExporterUrl = `http://127.0.0.1:${exporterPort}`;
    this.prometheusUrl = `http://127.0.0.1:${prometheusPort}`;
    this.children.push(
      spawn(
        'prometheus-node-exporter',
        [
          `--web.listen-address=127.0.0.1:${exporterPort}`,
          '--collector.disable-defaults',
          '--collector.pressure',
          '--collector.diskstats',
          '--collector.stat',
        ],
        {
          stdio: 'ignore',
        },
      ),
    );
    await writeFile(
      join(this.dir, 'prometheus.yml'),
      [
        'global: { scrape_interval: 2s, evaluation_interval: 2s }',
        'scrape_configs:',
        '  - job_name: node',
        '    static_configs:',
        `      - targets: ['127.0.0.1:${exporterPort}']`,
        `        labels: { node: '${nodeName}' }`,
        ...Object.entries(extraTargets).flatMap(([job, target]) => [
          `  - job_name: ${job}`,
          '    honor_labels: true',
          '    static_configs:',
          `      - targets: ['${target}']`,
        ]),
      ].join('\n'),
    );
    this.children.push(
      spawn(
        'prometheus',
        [
          `--config.file=${join(this.dir, 'prometheus.yml')}`,
          `--storage.tsdb.path=${join(this.dir, 'data')}`,
          `--web.listen-address=127.0.0.1:${prometheusPort}`,
          '--storage.tsdb.retention.time=1h',
        ],
        { stdio: 'ignore' },
      ),
    );
    await eventually(
      'node_exporter to serve metrics',
      async () => (await fetch(`${this.nodeExporterUrl}/metrics`)).ok,
    );
    await eventually(
      'Prometheus to have scraped node_exporter',
      async () => {
        const res = await fetch(
          `${this.prometheusUrl}/api/v1/query?query=${encodeURIComponent('node_procs_blocked')}`,
        );
        const body = (await res.json()) as { data?: { result?: unknown[] } };
        return (body.data?.result?.length ?? 0) > 0;
      },
      { timeoutMs: 60_000, intervalMs: 1000 },
    );
  }

  async stop(): Promise<void> {
    for (const child of this.children) child.kill('SIGTERM');
    this.children = [];
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }
}

/** A bounded stress-ng disk load in a temporary directory; stops by itself after `seconds`. */
export class DiskLoad {
  private child: ChildProcess | undefined;
  private dir = '';
  async start(seconds: number): Promise<void> {
    // On the disk, not in /tmp: Debian 13 mounts /tmp as tmpfs, where the load would stay in memory.
    await mkdir(CLUSTER_DIR, { recursive: true });
    this.dir = await mkdtemp(join(CLUSTER_DIR, 'stress-'));
    this.child = spawn(
      'stress-ng',
      ['--io', '4', '--hdd', '2', '--timeout', `${seconds}s`, '--temp-path', this.dir],
      { stdio: 'ignore' },
    );
  }
  async stop(): Promise<void> {
    if (this.child && this.child.exitCode === null) {
      const exited = new Promise((resolve) => this.child?.once('exit', resolve));
      this.child.kill('SIGINT');
      await exited;
    }
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }
}
