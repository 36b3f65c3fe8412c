// Kept-alive API connections (docs/adr/0025-kept-alive-connections.md), on the local cluster's real apiserver:
//
// 1. The cost of one request, side by side and interleaved round by round: client-node's own KubeConfig (a new
//    https.Agent, so a new TLS connection, per request) against loadKubeConfig's pooled one. A GET of a Node and a
//    merge patch of a ConfigMap; this process's CPU per request (user + system), the wall time, and the TLS
//    connections opened (counted at tls.connect, not by the code measured).
// 2. The operator at rest, as a Deployment runs it (its ServiceAccount, --leader-elect): TLS handshakes per minute
//    from its own /metrics against its Lease writes from the audit log, over --idle-seconds after a warm-up.
//
// Prints and writes bench/results/keep-alive.json.
//
//   npx tsx bench/keep-alive.ts [--requests 300] [--rounds 3] [--warmup-seconds 20] [--idle-seconds 60]
import { CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadKubeConfig } from '../src/kube/client.js';
import { auditEvents } from '../test/support/audit.js';
import { isClusterUp, KUBECONFIG, kubectl, startCluster } from '../test/support/cluster.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import { applyCrds, OperatorProcess } from '../test/support/operator-process.js';
import { percentile } from './stats.js';
import { arg } from './args.js';

const REQUESTS = Number(arg('--requests', '300'));
const ROUNDS = Number(arg('--rounds', '3'));
const WARMUP_S = Number(arg('--warmup-seconds', '20'));
const IDLE_S = Number(arg('--idle-seconds', '60'));
const NAMESPACE = 'sandbox-remediator-system';
const LEASE = 'sandbox-remediator-operator';

// Every TLS connection either client opens goes through tls.connect (https.Agent's createConnection calls it on the
// module object at each call): counted here, outside the code measured.
let connections = 0;
const tls = createRequire(import.meta.url)('node:tls') as typeof import('node:tls');
const tlsConnect = tls.connect.bind(tls);
tls.connect = ((...args: Parameters<typeof tls.connect>) => {
  connections++;
  return tlsConnect(...args);
}) as typeof tls.connect;

interface Sample {
  cpuMs: number[];
  wallMs: number[];
  connections: number;
  requests: number;
}
const empty = (): Sample => ({ cpuMs: [], wallMs: [], connections: 0, requests: 0 });

/** Runs `requests` calls one after another, recording each one's CPU and wall time. */
async function measure(sample: Sample, call: () => Promise<unknown>): Promise<void> {
  const opened = connections;
  for (let i = 0; i < REQUESTS; i++) {
    const cpu = process.cpuUsage();
    const started = performance.now();
    await call();
    const used = process.cpuUsage(cpu);
    sample.wallMs.push(performance.now() - started);
    sample.cpuMs.push((used.user + used.system) / 1000);
  }
  sample.connections += connections - opened;
  sample.requests += REQUESTS;
}

const summary = (s: Sample) => {
  const wall = [...s.wallMs].sort((a, b) => a - b);
  return {
    cpuMsPerRequest: s.cpuMs.reduce((a, b) => a + b, 0) / s.cpuMs.length,
    wallP50Ms: percentile(wall, 0.5),
    wallP99Ms: percentile(wall, 0.99),
    connectionsPerRequest: s.connections / s.requests,
  };
};

async function perRequest() {
  const stock = new KubeConfig();
  stock.loadFromFile(KUBECONFIG);
  const clients = {
    stock: stock.makeApiClient(CoreV1Api),
    pooled: loadKubeConfig(KUBECONFIG).makeApiClient(CoreV1Api),
  };
  const node = (await clients.stock.listNode({ limit: 1 })).items[0]?.metadata?.name;
  if (!node) throw new Error('the cluster has no node');
  const configMap = 'keep-alive-bench';
  await kubectl(['create', 'configmap', configMap, '-n', 'default']);
  const samples = { stock: { get: empty(), patch: empty() }, pooled: { get: empty(), patch: empty() } };
  let n = 0;
  for (let round = 0; round < ROUNDS; round++) {
    for (const tree of ['stock', 'pooled'] as const) {
      const core = clients[tree];
      await measure(samples[tree].get, () => core.readNode({ name: node }));
      await measure(samples[tree].patch, () =>
        core.patchNamespacedConfigMap(
          { name: configMap, namespace: 'default', body: { data: { n: String(n++) } } },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        ),
      );
      console.error(`round ${round + 1}/${ROUNDS}: ${tree} done`);
    }
  }
  await kubectl(['delete', 'configmap', configMap, '-n', 'default', '--ignore-not-found']);
  const result = {
    stock: { get: summary(samples.stock.get), patch: summary(samples.stock.patch) },
    pooled: { get: summary(samples.pooled.get), patch: summary(samples.pooled.patch) },
  };
  return {
    ...result,
    ratios: {
      getCpu: result.pooled.get.cpuMsPerRequest / result.stock.get.cpuMsPerRequest,
      patchCpu: result.pooled.patch.cpuMsPerRequest / result.stock.patch.cpuMsPerRequest,
      getWallP50: result.pooled.get.wallP50Ms / result.stock.get.wallP50Ms,
      patchWallP50: result.pooled.patch.wallP50Ms / result.stock.patch.wallP50Ms,
    },
  };
}

/** The sum of a counter's samples on a /metrics page. */
async function counter(port: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`) || line.startsWith(`${name} `))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
}

async function atRest() {
  await applyCrds();
  const operator = new OperatorProcess();
  await operator.startAsOperatorAccount('keep-alive-bench', ['--leader-elect']);
  try {
    await operator.waitForLog('Started controller', 60_000);
    await sleep(WARMUP_S * 1000);
    const since = new Date();
    const before = await counter(operator.metricsPort, 'sandbox_remediator_api_tls_handshakes_total');
    await sleep(IDLE_S * 1000);
    const after = await counter(operator.metricsPort, 'sandbox_remediator_api_tls_handshakes_total');
    const leaseWrites = (await auditEvents(since)).filter(
      (e) =>
        e.objectRef?.resource === 'leases' &&
        e.objectRef.name === LEASE &&
        e.objectRef.namespace === NAMESPACE,
    ).length;
    const minutes = IDLE_S / 60;
    return {
      idleSeconds: IDLE_S,
      handshakesPerMinute: (after - before) / minutes,
      leaseWritesPerMinute: leaseWrites / minutes,
    };
  } finally {
    await operator.stop();
  }
}

if (!(await isClusterUp())) await startCluster();
const requests = await perRequest();
const rest = await atRest();
const result = {
  date: new Date().toISOString(),
  requestsPerRound: REQUESTS,
  rounds: ROUNDS,
  perRequest: requests,
  atRest: rest,
};
console.log(JSON.stringify(result, null, 2));
mkdirSync(join(REPO_ROOT, 'bench', 'results'), { recursive: true });
writeFileSync(join(REPO_ROOT, 'bench', 'results', 'keep-alive.json'), `${JSON.stringify(result, null, 2)}\n`);
