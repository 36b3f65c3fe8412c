// Runs `sandbox-remediator operator` as its own process against the local cluster, as a user would.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { establishCrds, KUBECONFIG, kubectl } from './cluster.js';
import { createToken, writeTokenKubeconfig } from './tokens.js';
import { REPO_ROOT } from './manifests.js';
import { inspectorUrl } from './heap.js';

export interface LogLine {
  level: string;
  message: string;
  [field: string]: unknown;
}

export class OperatorProcess {
  readonly logs: LogLine[] = [];
  private child: ChildProcess | undefined;
  healthPort = 0;
  metricsPort = 0;
  exited: Promise<number | null> | undefined;

  /**
   * As the Deployment runs it (config/rbac applied first): the operator's ServiceAccount, with a token of its own in a
   * kubeconfig in a temporary directory (removed once the process has exited), and POD_NAME set to `name`.
   */
  async startAsOperatorAccount(
    name: string,
    extraArgs: string[] = [],
    options: { built?: boolean; nodeArgs?: string[] } = {},
  ): Promise<void> {
    await applyRbac();
    const dir = await mkdtemp(join(tmpdir(), `operator-${name}-`));
    const { args, env } = await operatorAccount(dir, name);
    await this.start([...args, ...extraArgs], {
      waitForStarted: !extraArgs.includes('--leader-elect'),
      env,
      ...options,
    });
    void this.exited?.finally(() => void rm(dir, { recursive: true, force: true }));
  }

  /** Resolves once it serves probes and, unless waitForStarted is false, once its controller has started. */
  async start(
    extraArgs: string[] = [],
    {
      waitForStarted = true,
      env = {},
      built = false,
      nodeArgs = [],
      root,
    }: {
      waitForStarted?: boolean;
      env?: Record<string, string>;
      /** Options for node itself, before the entry point (--cpu-prof, which NODE_OPTIONS does not take). */
      nodeArgs?: string[];
      /** Run the compiled CLI (dist/src/main.js, from `make build`) as a user would, not src through tsx. */
      built?: boolean;
      /** The checkout whose compiled CLI runs (built only): another commit's worktree, for a before and after. */
      root?: string;
    } = {},
  ): Promise<void> {
    const tsx = join(REPO_ROOT, 'node_modules', 'tsx', 'dist', 'esm', 'index.mjs');
    const entry = built
      ? [join(root ?? REPO_ROOT, 'dist', 'src', 'main.js')]
      : ['--import', tsx, join(REPO_ROOT, 'src', 'main.ts')];
    const child = spawn(
      process.execPath,
      [
        ...nodeArgs,
        ...entry,
        'operator',
        ...(extraArgs.some((a) => a.startsWith('--kubeconfig')) ? [] : [`--kubeconfig=${KUBECONFIG}`]),
        '--metrics-bind-address=127.0.0.1:0',
        '--health-probe-bind-address=127.0.0.1:0',
        '--log-level=debug',
        ...extraArgs,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } },
    );
    this.child = child;
    this.exited = new Promise((resolve) =>
      child.on('exit', (code) => {
        resolve(code);
      }),
    );
    let buffer = '';
    child.stderr.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      let newline;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        try {
          this.logs.push(JSON.parse(line) as LogLine);
        } catch {
          this.logs.push({ level: 'raw', message: line });
        }
      }
    });
    const serving = await this.waitForLog('Serving probes and metrics', 60_000);
    this.healthPort = Number(serving.healthProbePort);
    this.metricsPort = Number(serving.metricsPort);
    if (waitForStarted) await this.waitForLog('Started controller', 60_000);
  }

  async waitForLog(message: string, timeoutMs = 30_000, from = 0): Promise<LogLine> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.logs.slice(from).find((l) => l.message === message);
      if (found) return found;
      if (Date.now() > deadline) {
        throw new Error(`operator did not log "${message}" in ${timeoutMs} ms; last lines:\n${this.tail()}`);
      }
      if (this.child?.exitCode !== null && this.child?.exitCode !== undefined) {
        throw new Error(`operator exited with ${this.child.exitCode}:\n${this.tail()}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  tail(lines = 20): string {
    return this.logs
      .slice(-lines)
      .map((l) => JSON.stringify(l))
      .join('\n');
  }

  /** The inspector's WebSocket address when it was started with `--inspect=127.0.0.1:0` (see heap.ts). */
  get inspector(): string | undefined {
    for (const line of this.logs) {
      const url = line.level === 'raw' ? inspectorUrl(line.message) : undefined;
      if (url) return url;
    }
    return undefined;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  isRunning(): boolean {
    return this.child !== undefined && this.child.exitCode === null;
  }

  async get(path: string, port = this.healthPort): Promise<{ status: number; text: string }> {
    const res = await fetch(`http://127.0.0.1:${port}${path}`);
    return { status: res.status, text: await res.text() };
  }

  /** SIGSTOP: a hung process, whose sockets stay open and answer nothing; resume() ends it. */
  pause(): void {
    this.child?.kill('SIGSTOP');
  }

  resume(): void {
    this.child?.kill('SIGCONT');
  }

  /** SIGKILL: a crash, with no chance to clean up. */
  kill(): void {
    this.child?.kill('SIGKILL');
  }

  /** SIGTERM, and the exit code (null if it had to be killed). */
  async stop(timeoutMs = 20_000): Promise<number | null> {
    if (!this.child || !this.exited) return null;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child?.kill('SIGKILL'), timeoutMs);
    const code = await this.exited;
    clearTimeout(timer);
    return code;
  }
}

/**
 * Mocha hooks for a describe block that needs the CRDs applied and one operator process running: started
 * before its tests, stopped after them, and required to exit 0 on SIGTERM.
 */
export function useOperator(
  extraArgs: string[] = [],
  { serviceAccount }: { serviceAccount?: string } = {},
): OperatorProcess {
  const operator = new OperatorProcess();
  before(async function () {
    this.timeout(180_000);
    await applyCrds();
    if (serviceAccount) await operator.startAsOperatorAccount(serviceAccount, extraArgs);
    else await operator.start(extraArgs);
  });
  after(async function () {
    this.timeout(30_000);
    const code = await operator.stop();
    if (code !== 0) throw new Error(`operator exited with ${code} on SIGTERM:\n${operator.tail()}`);
    if (!operator.logs.some((l) => l.message === 'Stopped'))
      throw new Error('operator did not log "Stopped"');
  });
  return operator;
}

export async function applyCrds(): Promise<void> {
  const applied = await kubectl([
    'apply',
    '--server-side',
    '--force-conflicts',
    '-f',
    join(REPO_ROOT, 'crds'),
  ]);
  if (applied.code !== 0) throw new Error(`kubectl apply -f crds/ failed: ${applied.stderr}`);
  await establishCrds(['sandboxpolicies.sandbox.remediator.io', 'sandboxhealths.sandbox.remediator.io']);
}

/** The operator's namespaces and config/rbac (ServiceAccounts, roles, the Lease Role), as config/default has them. */
export async function applyRbac(): Promise<void> {
  for (const args of [
    ['apply', '-f', join(REPO_ROOT, 'config/default/namespace.yaml')],
    ['apply', '-k', join(REPO_ROOT, 'config/rbac')],
  ]) {
    const result = await kubectl(args);
    if (result.code !== 0) throw new Error(`kubectl ${args.join(' ')} failed: ${result.stderr}`);
  }
}

/** Removes what applyRbac applied (the lab's tests leave its cluster as they found it, for the chart's install). */
export async function removeRbac(): Promise<void> {
  for (const args of [
    ['delete', '-k', join(REPO_ROOT, 'config/rbac'), '--ignore-not-found', '--wait'],
    ['delete', '-f', join(REPO_ROOT, 'config/default/namespace.yaml'), '--ignore-not-found', '--wait'],
  ]) {
    const result = await kubectl(args);
    if (result.code !== 0) throw new Error(`kubectl ${args.join(' ')} failed: ${result.stderr}`);
  }
}

/**
 * An operator as the Deployment runs it: the operator's ServiceAccount (config/rbac applied: applyRbac) with a token
 * of its own, written into `dir`, and POD_NAME set; with --leader-elect it is not waited for to lead.
 */
export async function startAsServiceAccount(
  dir: string,
  name: string,
  args: string[] = [],
  options: { built?: boolean; nodeArgs?: string[] } = {},
): Promise<OperatorProcess> {
  const account = await operatorAccount(dir, name);
  const operator = new OperatorProcess();
  await operator.start([...account.args, ...args], {
    waitForStarted: !args.includes('--leader-elect'),
    env: account.env,
    ...options,
  });
  return operator;
}

/** The flags and environment of an operator run with a token of its ServiceAccount, written into `dir`. */
async function operatorAccount(
  dir: string,
  name: string,
): Promise<{ args: string[]; env: Record<string, string> }> {
  const namespace = 'sandbox-remediator-system';
  const token = await createToken(namespace, 'sandbox-remediator-operator');
  const kubeconfig = await writeTokenKubeconfig(dir, name, token);
  return {
    args: [`--kubeconfig=${kubeconfig}`, `--operator-namespace=${namespace}`],
    env: { POD_NAME: name },
  };
}

/** config/webhook: the pacing webhook's configuration, which the operator fills in and never creates. */
export async function applyWebhookConfig(): Promise<void> {
  const result = await kubectl(['apply', '-k', join(REPO_ROOT, 'config/webhook')]);
  if (result.code !== 0) throw new Error(`kubectl apply -k config/webhook failed: ${result.stderr}`);
}

export async function deleteWebhookConfig(): Promise<void> {
  await kubectl(['delete', '-k', join(REPO_ROOT, 'config/webhook'), '--ignore-not-found']);
}
