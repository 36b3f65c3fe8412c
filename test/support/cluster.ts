// The real local control plane for integration tests: reuse a running one or start one, and give each test
// its own namespace and kwok nodes, removed afterwards.
import {
  AppsV1Api,
  CoreV1Api,
  KubernetesObjectApi,
  type KubeConfig,
  type V1Pod,
} from '@kubernetes/client-node';
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { loadKubeConfig } from '../../src/kube/client.js';
import { describeError } from '../../src/kube/errors.js';
import { REPO_ROOT } from './manifests.js';

const run = promisify(execFile);
export const CLUSTER_DIR = process.env.CLUSTER_DIR ?? join(REPO_ROOT, '.cluster');
export const KUBECONFIG = join(CLUSTER_DIR, 'kubeconfig');

/** The kubectl `make tools` builds beside the control plane (hack/cluster/build.sh), when it is there. */
function builtKubectl(): string | undefined {
  const versions = readFileSync(join(REPO_ROOT, 'hack', 'cluster', 'versions.env'), 'utf8');
  const version = /^KUBERNETES_VERSION=(\S+)$/m.exec(versions)?.[1];
  const cache = process.env.SANDBOX_REMEDIATOR_CACHE ?? join(homedir(), '.cache', 'sandbox-remediator');
  const path = version ? join(cache, 'bin', `kubernetes-v${version}`, 'kubectl') : undefined;
  return path && existsSync(path) ? path : undefined;
}

/** kubectl matching the apiserver: the one built beside it, else the machine's pinned 1.33, else kubectl. */
export function resolveKubectl(): string {
  if (process.env.KUBECTL) return process.env.KUBECTL;
  const built = builtKubectl();
  if (built) return built;
  for (const dir of (process.env.PATH ?? '').split(':')) {
    const plain = join(dir, 'kubectl');
    if (existsSync(join(dir, 'kubectl.1.33'))) return join(dir, 'kubectl.1.33');
    if (existsSync(plain)) {
      const pinned = join(dirname(realpathSync(plain)), 'kubectl.1.33');
      return existsSync(pinned) ? pinned : plain;
    }
  }
  return 'kubectl';
}
const KUBECTL = resolveKubectl();

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs kubectl against the local cluster; never throws on a non-zero exit. */
export async function kubectl(args: string[], input?: string): Promise<CommandResult> {
  return new Promise((resolve) => {
    const child = spawn(KUBECTL, [`--kubeconfig=${KUBECONFIG}`, ...args], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => {
      resolve({ code: code ?? -1, stdout, stderr });
    });
    child.stdin.end(input ?? '');
  });
}

export async function hack(script: string, args: string[] = []): Promise<CommandResult> {
  try {
    const { stdout, stderr } = await run(join(REPO_ROOT, 'hack', 'cluster', script), args, {
      env: { ...process.env, CLUSTER_DIR },
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

export async function isClusterUp(): Promise<boolean> {
  return existsSync(KUBECONFIG) && (await kubectl(['get', '--raw=/readyz'])).code === 0;
}

/** One run of hack/cluster/up.sh, its progress on stderr; rejects with the end of that progress. */
function upOnce(): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const child = spawn(join(REPO_ROOT, 'hack', 'cluster', 'up.sh'), [], {
      stdio: ['ignore', 'inherit', 'pipe'],
      env: { ...process.env, CLUSTER_DIR },
    });
    let output = '';
    child.stderr.on('data', (d: Buffer) => {
      process.stderr.write(d);
      output = (output + d.toString()).slice(-64_000);
    });
    child.on('close', (code) => {
      if (code === 0) {
        resolve();
        return;
      }
      // Its "waiting for ..." progress says nothing the line that gave up does not; that line (up.sh's own, not a
      // component log's, which follow it indented) is kept however long the logs' ends are.
      const said = output
        .split('\n')
        .filter((line) => line !== '' && !/^\[cluster-up [\d:]+\] waiting for /.test(line));
      const why = said.filter((line) => /^\[[\w-]+ [\d:]+\] (ERROR|gave up|\S+ exited while)/.test(line));
      const end = said.slice(-50);
      reject(
        new Error(
          `hack/cluster/up.sh exited with ${code}: ${why.join('; ') || 'see below'}; the end of its output:\n${end.join('\n')}`,
        ),
      );
    });
  });
}

/**
 * Starts the cluster with hack/cluster/up.sh. A start that fails is stopped and tried once more: two clusters start
 * at once on a 2-core machine in make test-integration, and one bad start should not fail a whole shard. The first
 * failure's output stays on stderr; a second failure rejects with the end of its output, which CI shows.
 */
export async function startCluster(): Promise<void> {
  try {
    await upOnce();
  } catch (err) {
    process.stderr.write(
      `[integration] ${describeError(err)}\n[integration] stopping it and starting again\n`,
    );
    await hack('down.sh');
    await upOnce();
  }
}

export function kubeConfig(): KubeConfig {
  return loadKubeConfig(KUBECONFIG);
}

export const api = () => {
  const kc = kubeConfig();
  return {
    kc,
    core: kc.makeApiClient(CoreV1Api),
    apps: kc.makeApiClient(AppsV1Api),
    objects: KubernetesObjectApi.makeApiClient(kc),
  };
};

/** Polls until `check` returns a value other than undefined/false, or fails with what it last saw. */
export async function eventually<T>(
  what: string,
  check: () => Promise<T | undefined | false>,
  { timeoutMs = 30_000, intervalMs = 250 } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined && value !== false) return value;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${describeError(lastError)}` : ''}`,
      );
    }
    await sleep(intervalMs);
  }
}

/**
 * Waits until every named CRD is Established. `kubectl wait` fails at once, rather than waiting, on a CRD the
 * apiserver has given no condition yet ("status.conditions accessor error: <nil>"): asked again until it waits.
 */
export async function establishCrds(names: readonly string[], timeoutMs = 60_000): Promise<void> {
  let last = '';
  await eventually(
    `CRDs ${names.join(', ')} established`,
    async () => {
      const waited = await kubectl([
        'wait',
        '--for=condition=Established',
        '--timeout=30s',
        ...names.map((n) => `crd/${n}`),
      ]);
      last = waited.stderr;
      return waited.code === 0;
    },
    { timeoutMs, intervalMs: 250 },
  ).catch((err: unknown) => {
    throw new Error(`${err instanceof Error ? err.message : String(err)}: ${last}`);
  });
}

export const uniqueName = (prefix: string) => `${prefix}-${randomBytes(3).toString('hex')}`;

/** A namespace of its own, ready for pods (its default ServiceAccount exists), deleted by cleanup(). */
export async function createNamespace(cleanup: Cleanup, prefix = 'it'): Promise<string> {
  const { core } = api();
  const name = uniqueName(prefix);
  await core.createNamespace({
    body: { metadata: { name, labels: { 'sandbox.remediator.io/test': 'true' } } },
  });
  cleanup.add(async () => {
    await core.deleteNamespace({ name }).catch(() => undefined);
  });
  await eventually(`serviceaccount ${name}/default`, async () =>
    core.readNamespacedServiceAccount({ name: 'default', namespace: name }),
  );
  return name;
}

/** kwok nodes of its own, Ready, labelled with a pool label for nodeSelectors, deleted by cleanup(). */
export async function createNodes(
  cleanup: Cleanup,
  count: number,
  options: { labels?: Record<string, string>; annotations?: Record<string, string> } = {},
): Promise<{ pool: string; names: string[] }> {
  const { core } = api();
  const pool = uniqueName('pool');
  const names = Array.from({ length: count }, (_, i) => `${pool}-n${i}`);
  for (const name of names) {
    await core.createNode({
      body: {
        metadata: {
          name,
          annotations: { 'kwok.x-k8s.io/node': 'fake', ...options.annotations },
          labels: {
            type: 'kwok',
            'kubernetes.io/hostname': name,
            'kubernetes.io/os': 'linux',
            'sandbox.remediator.io/test-pool': pool,
            ...options.labels,
          },
        },
      },
    });
    cleanup.add(async () => {
      await core.deleteNode({ name }).catch(() => undefined);
    }, 'last');
  }
  // Ready, and free of the node lifecycle controller's taints: a new node carries node.kubernetes.io/not-ready until
  // the controller has seen it Ready, a few seconds later under load, and meanwhile the scheduler places no pod there
  // (a pod that prefers it lands on another node).
  await eventually(`${count} Ready nodes in ${pool}, untainted`, async () => {
    const list = await core.listNode({ labelSelector: `sandbox.remediator.io/test-pool=${pool}` });
    const ready = list.items.filter(
      (n) =>
        n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') &&
        !(n.spec?.taints ?? []).some((t) => t.key.startsWith('node.kubernetes.io/')),
    );
    return ready.length === count;
  });
  return { pool, names };
}

/** Cleanup steps run in reverse order of registration; 'last' steps (nodes) after the rest. */
export class Cleanup {
  private steps: (() => Promise<unknown>)[] = [];
  private lastSteps: (() => Promise<unknown>)[] = [];
  add(step: () => Promise<unknown>, when: 'normal' | 'last' = 'normal') {
    (when === 'last' ? this.lastSteps : this.steps).push(step);
  }
  async run() {
    for (const step of [...this.steps.reverse(), ...this.lastSteps.reverse()]) {
      await step().catch(() => undefined);
    }
    this.steps = [];
    this.lastSteps = [];
  }
}

/** A pod pinned to a node through the scheduler (nodeSelector), as a user would write it. */
export function podOn(name: string, node: string, labels: Record<string, string> = {}): V1Pod {
  return {
    metadata: { name, labels },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': node },
      containers: [{ name: 'app', image: 'registry.local/app:1' }],
    },
  };
}

/** A pod bound to a node directly, bypassing the scheduler. */
export function podBoundTo(name: string, node: string): V1Pod {
  return {
    metadata: { name },
    spec: { nodeName: node, containers: [{ name: 'app', image: 'registry.local/app:1' }] },
  };
}

export const waitingReasons = (pod: V1Pod) =>
  (pod.status?.containerStatuses ?? []).map((s) => s.state?.waiting?.reason);
