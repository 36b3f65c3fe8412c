// Detection latency: how long after a pod's first FailedCreatePodSandBox Event (once the stuck threshold has
// passed) the operator lists it, with the classified cause, in the node's SandboxHealth. Operator as its own process, real cluster, the
// incident injector posting kubelet-style Events. Times are wall-clock on this machine: Event and SandboxHealth
// at watch receipt here (so the figure includes the round trips the operator and this observer both make), the
// start of the wait from the pod's own API timestamp, as the operator counts it.
//
//   npx tsx bench/detection-latency.ts [--pods 50]
import { Watch, type CoreV1Event, type V1Pod } from '@kubernetes/client-node';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SandboxHealthStatus } from '../src/api/v1alpha1/index.js';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  hack,
  isClusterUp,
  kubeConfig,
  kubectl,
  podBoundTo,
  startCluster,
} from '../test/support/cluster.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import { OperatorProcess } from '../test/support/operator-process.js';
import { percentile } from './stats.js';

const PODS = Number(process.argv[process.argv.indexOf('--pods') + 1]) || 50;
const THRESHOLD_SECONDS = 1;
const log = (msg: string) => {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);
};

if (!(await isClusterUp())) await startCluster();
await kubectl(['apply', '--server-side', '--force-conflicts', '-f', join(REPO_ROOT, 'crds')]);
await kubectl(['wait', '--for=condition=Established', 'crd/sandboxhealths.sandbox.remediator.io']);
const cleanup = new Cleanup();
const operator = new OperatorProcess();
try {
  const namespace = await createNamespace(cleanup, 'bench');
  const { pool, names } = await createNodes(cleanup, 1);
  const node = names[0]!;
  const policy = `bench-${pool}`;
  await kubectl(
    ['apply', '-f', '-'],
    JSON.stringify({
      apiVersion: 'sandbox.remediator.io/v1alpha1',
      kind: 'SandboxPolicy',
      metadata: { name: policy },
      spec: {
        nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
        detection: { stuckThresholdSeconds: THRESHOLD_SECONDS },
      },
    }),
  );
  cleanup.add(() => kubectl(['delete', 'sandboxpolicy', policy]));
  await hack('incident', [
    'start',
    '--node',
    node,
    '--interval-seconds',
    '5',
    '--max-duration-seconds',
    '600',
  ]);
  cleanup.add(() => hack('incident', ['stop', '--node', node]));
  log('starting the operator');
  await operator.start(['--log-level=debug']);

  const firstEvent = new Map<string, number>();
  const bound = new Map<string, number>();
  const detected = new Map<string, number>();
  const kc = kubeConfig();
  const watches = await Promise.all([
    new Watch(kc).watch(
      `/api/v1/namespaces/${namespace}/events`,
      { fieldSelector: 'reason=FailedCreatePodSandBox' },
      (_t, e: CoreV1Event) => {
        const uid = e.involvedObject.uid;
        if (uid && !firstEvent.has(uid)) firstEvent.set(uid, Date.now());
      },
      () => undefined,
    ),
    new Watch(kc).watch(
      `/api/v1/namespaces/${namespace}/pods`,
      {},
      (_t, p: V1Pod) => {
        const uid = p.metadata?.uid;
        // The wait starts when the API says the pod was scheduled (or created): the operator's reference too.
        const scheduled = p.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'True');
        const since = scheduled?.lastTransitionTime ?? p.metadata?.creationTimestamp;
        if (uid && since && !bound.has(uid)) bound.set(uid, new Date(since).getTime());
      },
      () => undefined,
    ),
    new Watch(kc).watch(
      '/apis/sandbox.remediator.io/v1alpha1/sandboxhealths',
      { fieldSelector: `metadata.name=${node}` },
      (_t, h: { status?: SandboxHealthStatus }) => {
        const now = Date.now();
        for (const p of h.status?.stuckPods ?? [])
          if (p.cause !== 'Unknown' && !detected.has(p.uid)) detected.set(p.uid, now);
      },
      () => undefined,
    ),
  ]);

  log(`creating ${PODS} pods on ${node} (incident on, threshold ${THRESHOLD_SECONDS}s)`);
  const { core } = api();
  for (let i = 0; i < PODS; i++) {
    await core.createNamespacedPod({ namespace, body: podBoundTo(`p-${i}`, node) });
    await new Promise((r) => setTimeout(r, 100)); // a rollout, not a burst: pods arrive over 5 s
  }
  const deadline = Date.now() + 120_000;
  while (detected.size < PODS && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
  for (const w of watches) w.abort();

  const latencies: number[] = [];
  for (const [uid, seenAt] of detected) {
    const event = firstEvent.get(uid);
    const boundAt = bound.get(uid);
    if (event === undefined || boundAt === undefined) continue;
    latencies.push(seenAt - Math.max(event, boundAt + THRESHOLD_SECONDS * 1000));
  }
  latencies.sort((a, b) => a - b);
  const result = {
    date: new Date().toISOString(),
    pods: PODS,
    detected: detected.size,
    measured: latencies.length,
    thresholdSeconds: THRESHOLD_SECONDS,
    p50Ms: Math.round(percentile(latencies, 0.5)),
    p99Ms: Math.round(percentile(latencies, 0.99)),
    maxMs: Math.round(latencies.at(-1) ?? NaN),
    minMs: Math.round(latencies[0] ?? NaN),
    machine: `${(await import('node:os')).cpus().length} cores`,
  };
  writeFileSync(
    join(REPO_ROOT, 'bench', 'results', 'detection-latency.json'),
    `${JSON.stringify(result, null, 2)}\n`,
  );
  console.log(
    `detection latency over ${result.measured}/${PODS} pods: p50 ${result.p50Ms} ms, p99 ${result.p99Ms} ms, max ${result.maxMs} ms (min ${result.minMs} ms)`,
  );
  if (detected.size < PODS) process.exitCode = 1;
} finally {
  writeFileSync(
    join(REPO_ROOT, '.cluster', 'logs', 'detection-latency-operator.log'),
    operator.logs.map((l) => JSON.stringify(l)).join('\n'),
  );
  await operator.stop();
  await cleanup.run();
}
