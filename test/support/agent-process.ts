import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { KUBECONFIG } from './cluster.js';
import { REPO_ROOT } from './manifests.js';

/** `sandbox-remediator agent` as its own process, reading this machine's /proc for a kwok node. */
export class AgentProcess {
  private child: ChildProcess | undefined;
  output = '';
  start(nodeName: string, extraArgs: string[] = []): void {
    this.child = spawn(
      process.execPath,
      [
        '--import',
        join(REPO_ROOT, 'node_modules', 'tsx', 'dist', 'esm', 'index.mjs'),
        join(REPO_ROOT, 'src', 'main.ts'),
        'agent',
        `--node-name=${nodeName}`,
        ...(extraArgs.some((a) => a.startsWith('--kubeconfig')) ? [] : [`--kubeconfig=${KUBECONFIG}`]),
        '--metrics-bind-address=127.0.0.1:0',
        ...extraArgs,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    this.child.stderr?.on('data', (d: Buffer) => (this.output += d.toString()));
  }
  /**
   * Resolves once the agent said it started (its first reading is on its way); rejects when it exits first or says
   * nothing for timeoutMs. Its start-up (tsx compiling src/ first) is the busiest second of its life: a measurement
   * should not begin inside it.
   */
  async started(timeoutMs = 60_000): Promise<void> {
    // The agent's own log line (src/cli/agent.ts): keep the two in step.
    const deadline = Date.now() + timeoutMs;
    while (!this.output.includes('Started node agent')) {
      if (!this.child || this.child.exitCode !== null || this.child.signalCode !== null)
        throw new Error(`the agent exited before it started:\n${this.output.slice(-2000)}`);
      if (Date.now() > deadline)
        throw new Error(`the agent did not start in ${timeoutMs} ms:\n${this.output.slice(-2000)}`);
      await sleep(100);
    }
  }
  async stop(): Promise<number | null> {
    const child = this.child;
    if (!child || child.exitCode !== null) return child?.exitCode ?? null;
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    return exited;
  }
}
