// API writes per node per minute, from the apiserver's audit log (hack/cluster/audit-policy.yaml: every change,
// with its user): N kwok nodes, a SandboxPolicy over them, the operator and one agent per node, each agent reading
// a crafted /proc that drifts every second as a real node's does. First idle (PSI noise under 3 %, 0-2 blocked and
// D-state tasks, a disk busy a few %), then an incident (pods stuck with FailedCreatePodSandBox Events from
// hack/cluster/incident, PSI and disk busy high and noisy). The operator and the agents run as ServiceAccounts of
// their own, so the log tells them apart from each other and from anything else on the cluster.
//
// Each tree (a commit, checked out into a temporary worktree, or the working tree) runs the same scenario on nodes
// of its own, one after the other, so a before and an after sit side by side in one results file.
//
//   npx tsx bench/api-writes.ts [--before <commit>] [--after <commit>|.] [--nodes 10] [--pods-per-node 2]
//                               [--warmup-seconds 20] [--idle-seconds 120] [--incident-seconds 90]
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  api,
  Cleanup,
  CLUSTER_DIR,
  eventually,
  hack,
  isClusterUp,
  kubectl,
  podBoundTo,
  startCluster,
} from '../test/support/cluster.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import { auditEvents, resourceOf, succeeded, type AuditEvent } from '../test/support/audit.js';

function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1]! : fallback;
}
const NODES = Number(flag('nodes', '10'));
const PODS_PER_NODE = Number(flag('pods-per-node', '2'));
const WARMUP_SECONDS = Number(flag('warmup-seconds', '20'));
const IDLE_SECONDS = Number(flag('idle-seconds', '120'));
const INCIDENT_SECONDS = Number(flag('incident-seconds', '90'));
const BEFORE = flag('before', '');
const AFTER = flag('after', '.');
const RUN = randomBytes(2).toString('hex');
const SA_NAMESPACE = `bench-writes-${RUN}`;

const log = (msg: string) => {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);
};
const git = (...args: string[]) =>
  execFileSync('git', ['-C', REPO_ROOT, ...args], { encoding: 'utf8' }).trim();

// ---------------------------------------------------------------------------------------------------------------
// A crafted /proc per node, rewritten every second: pressure/io, stat, diskstats and 32 tasks, some in D state.

interface Level {
  psiSome: [number, number];
  psiFull: [number, number];
  diskBusy: [number, number];
  blocked: [number, number];
}
const IDLE: Level = { psiSome: [0.2, 2.8], psiFull: [0, 1.2], diskBusy: [0, 8], blocked: [0, 2] };
/** Around the default thresholds (40 %, 20 %, 90 %, 8): over most of the time, as a saturated disk reads. */
const INCIDENT: Level = { psiSome: [48, 76], psiFull: [17, 33], diskBusy: [86, 100], blocked: [8, 15] };
const TASKS = 32;

/**
 * A bounded random walk: each second a step of up to 15 % of the range, kept in range. PSI avg10 is a 10-second
 * average and moves like this, not by independent jumps; counts of blocked tasks wobble by one or two.
 */
class Walk {
  private value: number | undefined;
  next([lo, hi]: [number, number]): number {
    const range = hi - lo;
    const from =
      this.value !== undefined && this.value >= lo && this.value <= hi ? this.value : lo + range / 2;
    this.value = Math.min(hi, Math.max(lo, from + (Math.random() - 0.5) * 0.3 * range));
    return this.value;
  }
}

class CraftedProc {
  private ioTicks = 0;
  private ios = 0;
  private readonly walks = { some: new Walk(), full: new Walk(), disk: new Walk(), blocked: new Walk() };
  constructor(readonly dir: string) {}
  private write(file: string, text: string) {
    const tmp = join(this.dir, `.${file.replaceAll('/', '_')}.tmp`);
    writeFileSync(tmp, text);
    renameSync(tmp, join(this.dir, file)); // atomic: the agent never reads half a file
  }
  init(): void {
    mkdirSync(join(this.dir, 'pressure'), { recursive: true });
    for (let i = 0; i < TASKS; i++) mkdirSync(join(this.dir, String(1000 + i)), { recursive: true });
  }
  step(level: Level): void {
    const some = this.walks.some.next(level.psiSome).toFixed(2);
    const full = this.walks.full.next(level.psiFull).toFixed(2);
    this.write(
      'pressure/io',
      `some avg10=${some} avg60=${some} avg300=${some} total=1\nfull avg10=${full} avg60=${full} avg300=${full} total=1\n`,
    );
    const blocked = Math.round(this.walks.blocked.next(level.blocked));
    this.write('stat', `procs_running 2\nprocs_blocked ${blocked}\n`);
    this.ioTicks += Math.round(this.walks.disk.next(level.diskBusy) * 10); // ms busy in this second
    this.ios += 50;
    const d = this.ioTicks;
    this.write(
      'diskstats',
      ` 254       0 vda ${this.ios} 0 ${this.ios * 8} ${d} ${this.ios} 0 ${this.ios * 8} ${d} 0 ${d} ${2 * d} 0 0 0 0\n`,
    );
    for (let i = 0; i < TASKS; i++) {
      const pid = 1000 + i;
      const state = i < blocked ? 'D' : 'S';
      const comm = i % 4 === 0 ? 'containerd' : 'jbd2/vda1-8';
      this.write(join(String(pid), 'stat'), `${pid} (${comm}) ${state} 1 1 1 0 -1 0 0 0 0 0 0 0 0 0`);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Identities: a ServiceAccount each for the operator and the agents, bound to cluster-admin (what is measured is
// how often they write, not their RBAC), with a kubeconfig that uses its token.

async function kubeconfigFor(account: string, dir: string): Promise<string> {
  const must = async (args: string[], input?: string) => {
    const r = await kubectl(args, input);
    if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${r.stderr}`);
    return r.stdout.trim();
  };
  await must(['create', 'serviceaccount', account, '-n', SA_NAMESPACE]);
  await must([
    'create',
    'clusterrolebinding',
    `${SA_NAMESPACE}-${account}`,
    '--clusterrole=cluster-admin',
    `--serviceaccount=${SA_NAMESPACE}:${account}`,
  ]);
  const token = await must(['create', 'token', account, '-n', SA_NAMESPACE, '--duration=2h']);
  const server = await must(['config', 'view', '--minify', '-o', 'jsonpath={.clusters[0].cluster.server}']);
  const file = join(dir, `${account}.kubeconfig`);
  const kc = (...args: string[]) => must([...args, `--kubeconfig=${file}`]);
  await kc(
    'config',
    'set-cluster',
    'local',
    `--server=${server}`,
    `--certificate-authority=${join(CLUSTER_DIR, 'pki', 'ca.crt')}`,
    '--embed-certs',
  );
  await kc('config', 'set-credentials', account, `--token=${token}`);
  await kc('config', 'set-context', 'local', '--cluster=local', `--user=${account}`);
  await kc('config', 'use-context', 'local');
  return file;
}

// ---------------------------------------------------------------------------------------------------------------
// Processes of one tree: `node --import tsx <tree>/src/main.ts ...`.

function startProcess(tree: string, args: string[], onLine?: (line: string) => void): ChildProcess {
  const child = spawn(
    process.execPath,
    [
      '--import',
      join(tree, 'node_modules', 'tsx', 'dist', 'esm', 'index.mjs'),
      join(tree, 'src', 'main.ts'),
      ...args,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'], cwd: tree },
  );
  let buffer = '';
  child.stderr.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    let newline;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      onLine?.(buffer.slice(0, newline));
      buffer = buffer.slice(newline + 1);
    }
  });
  return child;
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  await exited;
  clearTimeout(timer);
}

/** A worktree of `commit` in a temporary directory, sharing this checkout's node_modules; '.' is this checkout. */
function checkout(name: string, commit: string, cleanup: Cleanup): { dir: string; commit: string } {
  if (commit === '.') {
    const dirty = git('status', '--porcelain', '--untracked-files=no') !== '';
    return { dir: REPO_ROOT, commit: `${git('rev-parse', 'HEAD')}${dirty ? '+dirty' : ''}` };
  }
  const sha = git('rev-parse', `${commit}^{commit}`);
  const dir = join(tmpdir(), `api-writes-${name}-${sha.slice(0, 7)}-${RUN}`);
  git('worktree', 'add', '--detach', dir, sha);
  symlinkSync(join(REPO_ROOT, 'node_modules'), join(dir, 'node_modules'));
  cleanup.add(() => Promise.resolve(git('worktree', 'remove', '--force', dir)));
  return { dir, commit: sha };
}

// ---------------------------------------------------------------------------------------------------------------
// Counting.

const WRITE_VERBS = new Set(['create', 'update', 'patch', 'delete', 'deletecollection']);

interface WindowCounts {
  seconds: number;
  /** Write requests per node per minute, by writer, by resource (events, sandboxhealths/status, ...). */
  perNodePerMinute: Record<string, { total: number; byResource: Record<string, number> }>;
  /** Raw request counts in the window, by writer; failed = not 2xx. */
  requests: Record<string, { total: number; failed: number }>;
}

function count(
  events: AuditEvent[],
  users: Record<string, string>,
  ours: (e: AuditEvent) => boolean,
  from: Date,
  to: Date,
  nodes: number,
): WindowCounts {
  const seconds = (to.getTime() - from.getTime()) / 1000;
  const perMinute = (n: number) => Number(((n / nodes / seconds) * 60).toFixed(3));
  const raw: Record<string, Record<string, number>> = {};
  const requests: WindowCounts['requests'] = {};
  for (const writer of [...Object.keys(users), 'others']) {
    raw[writer] = {};
    requests[writer] = { total: 0, failed: 0 };
  }
  for (const e of events) {
    const at = new Date(e.requestReceivedTimestamp);
    if (at < from || at >= to || !WRITE_VERBS.has(e.verb) || !ours(e)) continue;
    const writer = Object.keys(users).find((w) => users[w] === e.user.username) ?? 'others';
    const resource = resourceOf(e);
    raw[writer]![resource] = (raw[writer]![resource] ?? 0) + 1;
    requests[writer]!.total++;
    if (!succeeded(e)) requests[writer]!.failed++;
  }
  const perNodePerMinute: WindowCounts['perNodePerMinute'] = {};
  for (const [writer, byResource] of Object.entries(raw)) {
    const total = Object.values(byResource).reduce((a, b) => a + b, 0);
    perNodePerMinute[writer] = {
      total: perMinute(total),
      byResource: Object.fromEntries(
        Object.entries(byResource)
          .sort()
          .map(([r, n]) => [r, perMinute(n)]),
      ),
    };
  }
  return { seconds, perNodePerMinute, requests };
}

// ---------------------------------------------------------------------------------------------------------------
// One tree's scenario.

interface TreeResult {
  commit: string;
  idle: WindowCounts;
  incident: WindowCounts;
}

async function runTree(
  name: string,
  tree: { dir: string; commit: string },
  kubeconfigs: Record<string, string>,
  users: Record<string, string>,
): Promise<TreeResult> {
  const cleanup = new Cleanup();
  const children: ChildProcess[] = [];
  const procs: CraftedProc[] = [];
  let level = IDLE;
  const drift = setInterval(() => {
    for (const p of procs) p.step(level);
  }, 1000);
  const prefix = `bench-writes-${RUN}-${name}`;
  const nodes = Array.from({ length: NODES }, (_, i) => `${prefix}-${i}`);
  const { core } = api();
  try {
    log(`${name} (${tree.commit.slice(0, 12)}): ${NODES} nodes ${prefix}-*`);
    for (const node of nodes) {
      await core.createNode({
        body: {
          metadata: {
            name: node,
            annotations: { 'kwok.x-k8s.io/node': 'fake' },
            labels: {
              type: 'kwok',
              'kubernetes.io/hostname': node,
              'kubernetes.io/os': 'linux',
              'sandbox.remediator.io/bench-pool': prefix,
            },
          },
        },
      });
      cleanup.add(() => core.deleteNode({ name: node }).catch(() => undefined), 'last');
      cleanup.add(() => hack('incident', ['stop', '--node', node]));
    }
    await eventually(
      `${NODES} Ready nodes`,
      async () => {
        const list = await core.listNode({ labelSelector: `sandbox.remediator.io/bench-pool=${prefix}` });
        return (
          list.items.filter((n) =>
            n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
          ).length === NODES
        );
      },
      { timeoutMs: 60_000 },
    );
    const namespace = prefix;
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    cleanup.add(() => core.deleteNamespace({ name: namespace }).catch(() => undefined));
    await eventually(`serviceaccount ${namespace}/default`, () =>
      core.readNamespacedServiceAccount({ name: 'default', namespace }),
    );

    // The policy's defaults, but a dry run (the figures are of detection and reporting, not of moving pods) and a
    // short stuck threshold, so the incident window is all incident.
    const policy = {
      apiVersion: 'sandbox.remediator.io/v1alpha1',
      kind: 'SandboxPolicy',
      metadata: { name: prefix },
      spec: {
        nodeSelector: { matchLabels: { 'sandbox.remediator.io/bench-pool': prefix } },
        detection: { stuckThresholdSeconds: 10 },
        safety: { dryRun: true },
      },
    };
    const applied = await kubectl(['apply', '-f', '-'], JSON.stringify(policy));
    if (applied.code !== 0) throw new Error(applied.stderr);
    cleanup.add(() => kubectl(['delete', 'sandboxpolicy', prefix, '--ignore-not-found']));

    const procRoot = await mkdtemp(join(tmpdir(), `${prefix}-proc-`));
    cleanup.add(() => rm(procRoot, { recursive: true, force: true }));
    for (const node of nodes) {
      const p = new CraftedProc(join(procRoot, node));
      p.init();
      p.step(level);
      procs.push(p);
    }

    let started = false;
    const tail: string[] = [];
    const operator = startProcess(
      tree.dir,
      [
        'operator',
        `--kubeconfig=${kubeconfigs.operator}`,
        '--metrics-bind-address=0',
        '--health-probe-bind-address=0',
      ],
      (line) => {
        if (line.includes('"Started controller"')) started = true;
        tail.push(line);
        if (tail.length > 20) tail.shift();
      },
    );
    children.push(operator);
    await eventually('the operator to start', () => Promise.resolve(started), { timeoutMs: 90_000 }).catch(
      (err: unknown) => {
        throw new Error(`${(err as Error).message}; its last lines:\n${tail.join('\n')}`);
      },
    );
    await eventually(
      `${NODES} SandboxHealths`,
      async () => {
        const r = await kubectl(['get', 'sandboxhealths', '-o', 'name']);
        return nodes.every((n) => r.stdout.includes(`/${n}\n`));
      },
      { timeoutMs: 60_000 },
    );
    for (const [i, node] of nodes.entries())
      children.push(
        startProcess(tree.dir, [
          'agent',
          `--node-name=${node}`,
          `--proc-root=${procs[i]!.dir}`,
          `--kubeconfig=${kubeconfigs.agent}`,
          '--metrics-bind-address=0',
        ]),
      );
    await eventually(
      `a reading in every SandboxHealth`,
      async () => {
        const r = await kubectl([
          'get',
          'sandboxhealths',
          '-o',
          'jsonpath={range .items[*]}{.metadata.name} {.status.ioReading.source}{"\\n"}{end}',
        ]);
        return nodes.every((n) => r.stdout.includes(`${n} agent`));
      },
      { timeoutMs: 120_000 },
    );

    log(`${name}: warm-up ${WARMUP_SECONDS}s, then idle for ${IDLE_SECONDS}s`);
    await sleep(WARMUP_SECONDS * 1000);
    const idleFrom = new Date();
    await sleep(IDLE_SECONDS * 1000);
    const idleTo = new Date();

    log(
      `${name}: incident on every node for ${INCIDENT_SECONDS}s (${PODS_PER_NODE} stuck pods each, high IO)`,
    );
    const incidentFrom = new Date();
    level = INCIDENT;
    for (const node of nodes) {
      const r = await hack('incident', [
        'start',
        '--node',
        node,
        '--interval-seconds',
        '10',
        '--max-duration-seconds',
        String(INCIDENT_SECONDS + 120),
      ]);
      if (r.code !== 0) throw new Error(`incident start: ${r.stderr}`);
    }
    for (const node of nodes)
      for (let i = 0; i < PODS_PER_NODE; i++)
        await core.createNamespacedPod({
          namespace,
          body: podBoundTo(`n${node.slice(prefix.length + 1)}-pod-${i}`, node),
        });
    await sleep(Math.max(0, incidentFrom.getTime() + INCIDENT_SECONDS * 1000 - Date.now()));
    const incidentTo = new Date();

    const events = await auditEvents(idleFrom);
    const ours = (e: AuditEvent) =>
      (e.objectRef?.name ?? '').startsWith(prefix) || e.objectRef?.namespace === namespace;
    return {
      commit: tree.commit,
      idle: count(events, users, ours, idleFrom, idleTo, NODES),
      incident: count(events, users, ours, incidentFrom, incidentTo, NODES),
    };
  } finally {
    clearInterval(drift);
    for (const child of children.reverse()) await stopProcess(child);
    await cleanup.run();
  }
}

// ---------------------------------------------------------------------------------------------------------------

function table(results: Record<string, TreeResult>): string {
  const rows: string[][] = [['tree', 'window', 'writer', 'writes/node/min', 'by resource']];
  for (const [name, r] of Object.entries(results))
    for (const window of ['idle', 'incident'] as const)
      for (const [writer, c] of Object.entries(r[window].perNodePerMinute))
        rows.push([
          name,
          window,
          writer,
          c.total.toFixed(2),
          Object.entries(c.byResource)
            .map(([res, n]) => `${res} ${n.toFixed(2)}`)
            .join(', '),
        ]);
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  return rows.map((row) => row.map((cell, i) => cell.padEnd(widths[i]!)).join('  ')).join('\n');
}

const ratio = (a: number, b: number) => (b === 0 ? null : Number((a / b).toFixed(3)));

if (!(await isClusterUp())) await startCluster();
await kubectl(['apply', '--server-side', '--force-conflicts', '-f', join(REPO_ROOT, 'crds')]);
await kubectl(['wait', '--for=condition=Established', 'crd/sandboxhealths.sandbox.remediator.io']);
if (!existsSync(join(CLUSTER_DIR, 'logs', 'audit.log')))
  throw new Error('no audit log: restart the cluster with hack/cluster/up.sh');

const cleanup = new Cleanup();
const results: Record<string, TreeResult> = {};
try {
  await kubectl(['create', 'namespace', SA_NAMESPACE]);
  cleanup.add(() => kubectl(['delete', 'namespace', SA_NAMESPACE, '--wait=false']));
  cleanup.add(() =>
    kubectl([
      'delete',
      'clusterrolebinding',
      `${SA_NAMESPACE}-operator`,
      `${SA_NAMESPACE}-agent`,
      '--ignore-not-found',
    ]),
  );
  const dir = await mkdtemp(join(tmpdir(), 'bench-writes-'));
  cleanup.add(() => rm(dir, { recursive: true, force: true }));
  const kubeconfigs = {
    operator: await kubeconfigFor('operator', dir),
    agent: await kubeconfigFor('agent', dir),
  };
  const users = {
    operator: `system:serviceaccount:${SA_NAMESPACE}:operator`,
    agent: `system:serviceaccount:${SA_NAMESPACE}:agent`,
  };
  const trees: [string, string][] = BEFORE
    ? [
        ['before', BEFORE],
        ['after', AFTER],
      ]
    : [['after', AFTER]];
  for (const [name, commit] of trees)
    results[name] = await runTree(name, checkout(name, commit, cleanup), kubeconfigs, users);
} finally {
  await cleanup.run();
}

const total = (r: TreeResult | undefined, window: 'idle' | 'incident', writer: string) =>
  r?.[window].perNodePerMinute[writer]?.total ?? 0;
const result = {
  date: new Date().toISOString(),
  nodes: NODES,
  podsPerNode: PODS_PER_NODE,
  warmupSeconds: WARMUP_SECONDS,
  idleSeconds: IDLE_SECONDS,
  incidentSeconds: INCIDENT_SECONDS,
  policy:
    'defaults (source agent, PSI some 40%, full 20%, disk busy 90%, 8 blocked; stale after 90 s), stuckThresholdSeconds 10, dryRun',
  unit: 'write requests (create, update, patch, delete) per node per minute, from the audit log; others = any other user writing these objects',
  trees: results,
  ...(results.before && results.after
    ? {
        ratioAfterToBefore: Object.fromEntries(
          (['idle', 'incident'] as const).map((w) => [
            w,
            Object.fromEntries(
              ['operator', 'agent'].map((writer) => [
                writer,
                ratio(total(results.after, w, writer), total(results.before, w, writer)),
              ]),
            ),
          ]),
        ),
      }
    : {}),
  machine: `${execFileSync('nproc', { encoding: 'utf8' }).trim()} cores`,
};
const file = join(REPO_ROOT, 'bench', 'results', 'api-writes.json');
writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
console.log(table(results));
console.log(`\nwrote ${file}`);
