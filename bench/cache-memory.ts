// Cache memory at N Pending pods: our slim pod informer against client-node's own informer (full V1Pod objects)
// over the same server-side selection, each measured in a fresh process after a forced GC.
//
//   npx tsx bench/cache-memory.ts [--pods 5000]
import { CoreV1Api, makeInformer, type V1Pod } from '@kubernetes/client-node';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Informer } from '../src/kube/informer.js';
import { podView } from '../src/kube/views.js';
import { silentLogger } from '../src/observability/logger.js';
import {
  api,
  Cleanup,
  createNamespace,
  isClusterUp,
  kubeConfig,
  startCluster,
  uniqueName,
} from '../test/support/cluster.js';
import { REPO_ROOT } from '../test/support/manifests.js';

const arg = (name: string) => process.argv[process.argv.indexOf(name) + 1];
const FIELD_SELECTOR = 'status.phase=Pending,spec.nodeName!=';
const log = (msg: string) => {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);
};

const heapAfterGc = () => {
  (globalThis as { gc?: () => void }).gc?.();
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().heapUsed;
};

/** Child mode: measure one cache and print {objects, bytes}. */
async function measure(which: 'ours' | 'client-node'): Promise<void> {
  const kc = kubeConfig();
  const before = heapAfterGc();
  let objects: number;
  let stop: () => Promise<void> | void;
  if (which === 'ours') {
    const informer = new Informer({
      name: 'pods',
      kc,
      apiVersion: 'v1',
      kind: 'Pod',
      path: '/api/v1/pods',
      fieldSelector: FIELD_SELECTOR,
      transform: podView,
      logger: silentLogger,
    });
    informer.start();
    await informer.synced;
    objects = informer.size;
    stop = () => informer.stop();
  } else {
    const core = kc.makeApiClient(CoreV1Api);
    // client-node 1.4's makeInformer takes no field selector for its watch; the list is filtered the same, and
    // nothing changes during the measurement, so both caches hold the same pods.
    const informer = makeInformer<V1Pod>(kc, '/api/v1/pods', () =>
      core.listPodForAllNamespaces({ fieldSelector: FIELD_SELECTOR }),
    );
    await informer.start();
    objects = informer.list().length;
    stop = () => informer.stop();
  }
  const after = heapAfterGc();
  console.log(JSON.stringify({ objects, bytes: after - before }));
  await stop();
  process.exit(0);
}

function realisticPod(i: number, node: string): V1Pod {
  return {
    metadata: {
      name: `web-${i}`,
      labels: { app: 'web', 'pod-template-hash': '7d9f8c6b5d', tier: 'frontend', team: 'payments' },
      annotations: { 'prometheus.io/scrape': 'true', 'prometheus.io/port': '9090' },
    },
    spec: {
      nodeName: node,
      containers: ['app', 'sidecar'].map((name) => ({
        name,
        image: `registry.example.com/payments/${name}:1.24.${i % 7}`,
        ports: [{ containerPort: 8080, name: 'http' }],
        env: Array.from({ length: 6 }, (_, j) => ({ name: `SETTING_${j}`, value: `value-${j}-${i}` })),
        resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { cpu: '500m', memory: '256Mi' } },
        volumeMounts: [{ name: 'config', mountPath: '/etc/app' }],
      })),
      volumes: [{ name: 'config', configMap: { name: 'web-config' } }],
    },
  };
}

async function main(): Promise<void> {
  const pods = Number(arg('--pods')) || 5000;
  if (!(await isClusterUp())) await startCluster();
  const cleanup = new Cleanup();
  const { core } = api();
  try {
    const namespace = await createNamespace(cleanup, 'bench-mem');
    // A node no kwok manages: its pods stay Pending with no status, as pods whose kubelet never reported.
    const node = uniqueName('bench-unmanaged');
    await core.createNode({
      body: { metadata: { name: node, labels: { 'sandbox.remediator.io/test': 'true' } } },
    });
    cleanup.add(() => core.deleteNode({ name: node }), 'last');
    cleanup.add(() => core.deleteCollectionNamespacedPod({ namespace, gracePeriodSeconds: 0 }));
    log(`creating ${pods} pods`);
    const started = Date.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < pods) {
          const i = next++;
          await core.createNamespacedPod({ namespace, body: realisticPod(i, node) });
          if (i % 1000 === 999) log(`${i + 1} pods created`);
        }
      }),
    );
    log(
      `created ${pods} pods in ${((Date.now() - started) / 1000).toFixed(1)}s; measuring each cache in a fresh process`,
    );
    const run = (which: string) => {
      const child = spawnSync(
        process.execPath,
        ['--expose-gc', '--import', 'tsx', import.meta.filename, '--measure', which],
        {
          cwd: REPO_ROOT,
          encoding: 'utf8',
        },
      );
      if (child.status !== 0) throw new Error(`${which} failed: ${child.stderr}`);
      return JSON.parse(child.stdout.trim().split('\n').at(-1)!) as { objects: number; bytes: number };
    };
    const ours = run('ours');
    const peer = run('client-node');
    const perPod = (m: { objects: number; bytes: number }) => Math.round(m.bytes / Math.max(1, m.objects));
    const result = {
      date: new Date().toISOString(),
      pods,
      ours: { ...ours, bytesPerPod: perPod(ours) },
      clientNodeInformer: { ...peer, bytesPerPod: perPod(peer) },
      ratio: Number((perPod(peer) / perPod(ours)).toFixed(1)),
    };
    writeFileSync(
      join(REPO_ROOT, 'bench', 'results', 'cache-memory.json'),
      `${JSON.stringify(result, null, 2)}\n`,
    );
    console.log(
      `cache memory at ${ours.objects} Pending pods: ours ${perPod(ours)} B/pod (${(ours.bytes / 2 ** 20).toFixed(1)} MiB), client-node informer ${perPod(peer)} B/pod (${(peer.bytes / 2 ** 20).toFixed(1)} MiB): ${result.ratio}x smaller`,
    );
  } finally {
    await cleanup.run();
  }
}

if (process.argv.includes('--measure')) await measure(arg('--measure') as 'ours' | 'client-node');
else await main();
