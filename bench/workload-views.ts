// Bytes per cached object of each kind that rolls out: the slim view the operator's informers keep (the kube views of
// src/kube/workload-views.ts) against the object as the API sends it (what an informer keeping whole objects holds),
// for the same objects, each measured in a fresh process after a forced GC. No cluster: the objects are built here,
// shaped as the apiserver returns them (a pod template of two containers with env, probes, resources and volumes,
// managedFields of two managers, a status with conditions), so the ratio, not the absolute size, is the finding.
//
//   npx tsx bench/workload-views.ts [--objects 5000]
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { RawObject } from '../src/kube/informer.js';
import {
  argoRolloutView,
  daemonSetView,
  deploymentView,
  statefulSetView,
} from '../src/kube/workload-views.js';
import { REPO_ROOT } from '../test/support/manifests.js';

const KINDS = ['Deployment', 'StatefulSet', 'DaemonSet', 'Rollout'] as const;
type Kind = (typeof KINDS)[number];
const arg = (name: string) =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : undefined;

const heapAfterGc = () => {
  (globalThis as { gc?: () => void }).gc?.();
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().heapUsed;
};

function container(name: string, i: number) {
  return {
    name,
    image: `registry.example.com/team/${name}:v1.${i % 50}.3`,
    ports: [{ name: 'http', containerPort: 8080, protocol: 'TCP' }],
    env: Array.from({ length: 8 }, (_, k) => ({ name: `SETTING_${k}`, value: `value-${k}-${i}` })),
    resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '256Mi' } },
    readinessProbe: { httpGet: { path: '/ready', port: 8080 }, periodSeconds: 5 },
    volumeMounts: [{ name: 'data', mountPath: '/data' }],
  };
}

/** One object as the apiserver returns it from a list or watch (JSON, dates as strings). */
function raw(kind: Kind, i: number): Record<string, unknown> {
  const name = `${kind.toLowerCase()}-${i}`;
  const template = {
    metadata: {
      labels: { app: name, team: 'payments' },
      annotations: { 'kubectl.kubernetes.io/restartedAt': '2026-12-01T00:00:00Z' },
    },
    spec: {
      containers: [container('app', i), container('sidecar', i)],
      volumes: [{ name: 'data', emptyDir: {} }],
    },
  };
  const managedFields = ['kubectl-client-side-apply', 'kube-controller-manager'].map((manager) => ({
    manager,
    operation: 'Update',
    apiVersion: 'apps/v1',
    time: '2026-12-01T00:00:00Z',
    fieldsType: 'FieldsV1',
    fieldsV1: {
      'f:spec': { 'f:template': { 'f:spec': { 'f:containers': { 'k:{"name":"app"}': { '.': {} } } } } },
    },
  }));
  const metadata = {
    name,
    namespace: 'shop',
    uid: `00000000-0000-0000-0000-${String(i).padStart(12, '0')}`,
    resourceVersion: String(100000 + i),
    generation: 3,
    creationTimestamp: '2026-11-01T00:00:00Z',
    labels: { app: name },
    annotations: { 'deprecated.daemonset.template.generation': '3' },
    managedFields,
  };
  const conditions = [
    {
      type: 'Available',
      status: 'True',
      lastTransitionTime: '2026-12-01T00:00:00Z',
      reason: 'MinimumReplicasAvailable',
      message: 'ok',
    },
  ];
  const selector = { matchLabels: { app: name } };
  switch (kind) {
    case 'Deployment':
      return {
        apiVersion: 'apps/v1',
        kind,
        metadata,
        spec: { replicas: 3, selector, template },
        status: { observedGeneration: 3, replicas: 3, updatedReplicas: 3, availableReplicas: 3, conditions },
      };
    case 'StatefulSet':
      return {
        apiVersion: 'apps/v1',
        kind,
        metadata,
        spec: {
          replicas: 3,
          serviceName: name,
          selector,
          template,
          updateStrategy: { type: 'RollingUpdate', rollingUpdate: { partition: 0 } },
        },
        status: {
          observedGeneration: 3,
          replicas: 3,
          readyReplicas: 3,
          updatedReplicas: 3,
          currentRevision: `${name}-5d4f`,
          updateRevision: `${name}-5d4f`,
        },
      };
    case 'DaemonSet':
      return {
        apiVersion: 'apps/v1',
        kind,
        metadata,
        spec: {
          selector,
          template,
          updateStrategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1, maxSurge: 0 } },
        },
        status: {
          observedGeneration: 3,
          desiredNumberScheduled: 100,
          updatedNumberScheduled: 100,
          numberAvailable: 100,
        },
      };
    case 'Rollout':
      return {
        apiVersion: 'argoproj.io/v1alpha1',
        kind,
        metadata,
        spec: {
          replicas: 3,
          selector,
          template,
          strategy: { canary: { steps: [{ setWeight: 20 }, { pause: {} }] } },
        },
        status: {
          currentPodHash: '5d4f',
          stableRS: '5d4f',
          updatedReplicas: 3,
          availableReplicas: 3,
          phase: 'Healthy',
          conditions,
        },
      };
  }
}

const VIEW = {
  Deployment: deploymentView,
  StatefulSet: statefulSetView,
  DaemonSet: daemonSetView,
  Rollout: argoRolloutView,
};

/** Child mode: bytes per object held, for one kind, kept as views or as the raw objects. */
function measure(kind: Kind, keep: 'view' | 'raw', objects: number): void {
  const before = heapAfterGc();
  const held: unknown[] = [];
  for (let i = 0; i < objects; i++) {
    // Parsed from text, as a watch delivers it: no sharing with the builder's constants.
    const object = JSON.parse(JSON.stringify(raw(kind, i))) as RawObject;
    held.push(keep === 'view' ? VIEW[kind](object) : object);
  }
  const bytes = heapAfterGc() - before;
  console.log(JSON.stringify({ bytesPerObject: Math.round(bytes / held.length) }));
}

function main(): void {
  const objects = Number(arg('--objects') ?? 5000);
  const child = (kind: Kind, keep: 'view' | 'raw') => {
    const run = spawnSync(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', import.meta.filename, '--measure', kind, keep, String(objects)],
      { encoding: 'utf8' },
    );
    if (run.status !== 0) throw new Error(`measure ${kind} ${keep}: ${run.stderr}`);
    return (JSON.parse(run.stdout.trim().split('\n').at(-1)!) as { bytesPerObject: number }).bytesPerObject;
  };
  const kinds = Object.fromEntries(
    KINDS.map((kind) => {
      const view = child(kind, 'view');
      const whole = child(kind, 'raw');
      return [kind, { viewBytes: view, wholeBytes: whole, ratio: Number((whole / view).toFixed(1)) }];
    }),
  );
  const result = { objects, date: new Date().toISOString().slice(0, 10), kinds };
  console.log(JSON.stringify(result, null, 2));
  writeFileSync(
    join(REPO_ROOT, 'bench', 'results', 'workload-views.json'),
    `${JSON.stringify(result, null, 2)}\n`,
  );
}

if (process.argv.includes('--measure')) {
  const i = process.argv.indexOf('--measure');
  measure(process.argv[i + 1] as Kind, process.argv[i + 2] as 'view' | 'raw', Number(process.argv[i + 3]));
} else main();
