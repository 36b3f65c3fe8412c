// medik8s node-healthcheck-operator (NHC), the real peer that acts on our Node condition, run as a process against the
// local cluster: built by hack/cluster/build.sh node-healthcheck (make tools), with its CRD from the same module and a
// remediator of our own (test/fixtures/node-healthcheck: TestRemediation and its template), which nothing acts on.
//
//   const nhc = await startNodeHealthcheck();
//   const name = await createNodeHealthCheck(cleanup, nhc, { nodes: [node], durationSeconds: 15 });
//   await setNodeCondition(node, { status: 'True', reason: 'IoSaturated' });
//   ... (await listRemediations(nhc, name)).map((r) => r.nodeName) ...
//   await cleanup.run(); await nhc.stop();
//
// One at a time per cluster: it runs without leader election.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { NODE_CONDITION_TYPE } from '../../src/api/v1alpha1/node-condition.js';
import { freePort } from './monitoring.js';
import { establishCrds, eventually, KUBECONFIG, kubectl, uniqueName, type Cleanup } from './cluster.js';
import { REPO_ROOT } from './manifests.js';

const versions = readFileSync(join(REPO_ROOT, 'hack', 'cluster', 'versions.env'), 'utf8');
const NHC_VERSION = /^NHC_VERSION=(\S+)$/m.exec(versions)?.[1] ?? '';
/** Where hack/cluster/build.sh node-healthcheck puts the binary and its CRD (-nowebhooks: see build.sh). */
export const NHC_DIR = join(
  process.env.SANDBOX_REMEDIATOR_CACHE ?? join(homedir(), '.cache', 'sandbox-remediator'),
  'bin',
  `node-healthcheck-v${NHC_VERSION}-nowebhooks`,
);
const FIXTURES = join(REPO_ROOT, 'test', 'fixtures', 'node-healthcheck');
const NHC_CRD = 'nodehealthchecks.remediation.medik8s.io';
const TEST_CRDS = ['testremediationtemplates', 'testremediations'].map(
  (r) => `${r}.test.sandbox.remediator.io`,
);
/** What NHC makes on every start (its RBAC aggregation), removed again by stop(). */
const NHC_AGGREGATION = 'node-healthcheck-operator-aggregation';
/** medik8s' shared node leases: NHC takes `node-<node>` here before it creates a remediation. */
export const MEDIK8S_LEASES = 'medik8s-leases';

/** The TestRemediation NHC creates for an unhealthy node. */
export interface Remediation {
  name: string;
  /** From NHC's remediation.medik8s.io/node-name annotation. */
  nodeName: string | undefined;
  /** The NodeHealthCheck that owns it. */
  owner: string | undefined;
  createdAt: Date;
  spec: Record<string, unknown>;
}

export interface NhcLogLine {
  level?: string;
  msg?: string;
  [field: string]: unknown;
}

export interface NodeHealthcheck {
  /** Its DEPLOYMENT_NAMESPACE, where the remediation template and so the remediations live. */
  readonly namespace: string;
  /** The remediationTemplate reference a NodeHealthCheck of this harness names. */
  readonly template: { apiVersion: string; kind: string; name: string; namespace: string };
  readonly logs: NhcLogLine[];
  tail(lines?: number): string;
  /** SIGTERM (SIGKILL after 20 s), then what it left: its namespace, aggregation role, leases, CRDs. Exit code. */
  stop(): Promise<number | null>;
}

async function must(args: string[], input?: string): Promise<string> {
  const result = await kubectl(args, input);
  if (result.code !== 0) throw new Error(`kubectl ${args.join(' ')} failed: ${result.stderr}`);
  return result.stdout;
}

/** Applies the CRDs (NHC's, the test remediator's), a namespace with the template, and starts NHC on 127.0.0.1. */
export async function startNodeHealthcheck(): Promise<NodeHealthcheck> {
  const binary = join(NHC_DIR, 'node-healthcheck-operator');
  if (!existsSync(binary) || !existsSync(join(NHC_DIR, 'crds')))
    throw new Error(
      `no node-healthcheck-operator in ${NHC_DIR}: run hack/cluster/build.sh node-healthcheck (make tools does)`,
    );
  await must([
    'apply',
    '--server-side',
    '--force-conflicts',
    '-f',
    join(NHC_DIR, 'crds'),
    '-f',
    join(FIXTURES, 'test-remediation-crds.yaml'),
  ]);
  await establishCrds([NHC_CRD, ...TEST_CRDS]);
  const leasesExisted = (await kubectl(['get', 'namespace', MEDIK8S_LEASES])).code === 0;
  const namespace = uniqueName('it-nhc');
  await must(['create', 'namespace', namespace]);
  await must(['apply', '-n', namespace, '-f', join(FIXTURES, 'test-remediation-template.yaml')]);

  const probe = await freePort();
  const child = spawn(
    binary,
    [
      `--kubeconfig=${KUBECONFIG}`,
      '--leader-elect=false',
      '--metrics-bind-address=0', // off: it would listen on every address, and nothing here scrapes it
      `--health-probe-bind-address=127.0.0.1:${probe}`,
      '--zap-devel=false',
      '--zap-encoder=json',
    ],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, DEPLOYMENT_NAMESPACE: namespace, ENABLE_WEBHOOKS: 'false' },
    },
  );
  const logs = collectLogs(child);
  const exited = new Promise<number | null>((resolve) => {
    child.on('exit', (code) => {
      resolve(code);
    });
  });
  const tail = (lines = 20) =>
    logs
      .slice(-lines)
      .map((l) => JSON.stringify(l))
      .join('\n');
  const harness: NodeHealthcheck = {
    namespace,
    template: {
      apiVersion: 'test.sandbox.remediator.io/v1alpha1',
      kind: 'TestRemediationTemplate',
      name: 'reboot',
      namespace,
    },
    logs,
    tail,
    stop: async () => {
      let code: number | null = child.exitCode;
      if (code === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
        code = await exited;
        clearTimeout(timer);
      }
      await removeLeftovers(namespace, leasesExisted);
      return code;
    },
  };
  try {
    await eventually(
      'node-healthcheck-operator ready, its NodeHealthCheck controller started',
      async () => {
        if (child.exitCode !== null) throw new Error(`it exited with ${child.exitCode}:\n${tail()}`);
        const ready = await fetch(`http://127.0.0.1:${probe}/readyz`).catch(() => undefined);
        return (
          ready?.ok === true &&
          logs.some((l) => l.msg === 'Starting workers' && l.controller === 'nodehealthcheck')
        );
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
  } catch (err) {
    await harness.stop();
    throw err;
  }
  return harness;
}

function collectLogs(child: ChildProcess): NhcLogLine[] {
  const logs: NhcLogLine[] = [];
  for (const stream of [child.stdout, child.stderr]) {
    let buffer = '';
    stream?.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        try {
          logs.push(JSON.parse(line) as NhcLogLine);
        } catch {
          logs.push({ level: 'raw', msg: line });
        }
      }
    });
  }
  return logs;
}

/** What NHC leaves behind, so that the next test file finds the cluster as it was. */
async function removeLeftovers(namespace: string, keepLeaseNamespace: boolean): Promise<void> {
  const leases = JSON.parse(
    (await kubectl(['get', 'leases', '-n', MEDIK8S_LEASES, '-o', 'json'])).stdout || '{"items":[]}',
  ) as { items: { metadata: { name: string }; spec?: { holderIdentity?: string } }[] };
  const ours = leases.items.filter((l) => l.spec?.holderIdentity?.startsWith('NodeHealthCheck-'));
  if (ours.length > 0)
    await kubectl([
      'delete',
      'lease',
      '-n',
      MEDIK8S_LEASES,
      '--ignore-not-found',
      ...ours.map((l) => l.metadata.name),
    ]);
  if (!keepLeaseNamespace)
    await kubectl(['delete', 'namespace', MEDIK8S_LEASES, '--ignore-not-found', '--wait=false']);
  await kubectl(['delete', 'clusterrolebinding,clusterrole', NHC_AGGREGATION, '--ignore-not-found']);
  await kubectl(['delete', 'namespace', namespace, '--ignore-not-found', '--wait=false']);
  await kubectl(['delete', 'crd', NHC_CRD, ...TEST_CRDS, '--ignore-not-found', '--wait=true']);
}

export interface NodeHealthCheckOptions {
  /** The nodes it selects, by kubernetes.io/hostname. */
  nodes: string[];
  /** unhealthyConditions: [{type: SandboxCreationDegraded, status: conditionStatus, duration: `${durationSeconds}s`}]. */
  durationSeconds: number;
  conditionStatus?: 'True' | 'False' | 'Unknown';
  /** NHC has no default: without minHealthy or maxUnhealthy it refuses to remediate. Upstream's sample says 51%. */
  minHealthy?: string | number;
  name?: string;
}

/** Creates a NodeHealthCheck on our condition (deleted by cleanup, while NHC still runs) and waits until it is enabled. */
export async function createNodeHealthCheck(
  cleanup: Cleanup,
  nhc: NodeHealthcheck,
  {
    nodes,
    durationSeconds,
    conditionStatus = 'True',
    minHealthy = '51%',
    name = uniqueName('it-nhc'),
  }: NodeHealthCheckOptions,
): Promise<string> {
  const object = {
    apiVersion: 'remediation.medik8s.io/v1alpha1',
    kind: 'NodeHealthCheck',
    metadata: { name },
    spec: {
      selector: { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: nodes }] },
      unhealthyConditions: [
        { type: NODE_CONDITION_TYPE, status: conditionStatus, duration: `${durationSeconds}s` },
      ],
      minHealthy,
      remediationTemplate: nhc.template,
    },
  };
  await must(['create', '-f', '-'], JSON.stringify(object));
  cleanup.add(() => kubectl(['delete', 'nodehealthcheck', name, '--ignore-not-found', '--wait=true']));
  await eventually(
    `NodeHealthCheck ${name} enabled, observing ${nodes.length} node(s)`,
    async () => {
      const s = (await readNodeHealthCheck(name)).status;
      const disabled = s?.conditions?.find((c) => c.type === 'Disabled');
      return disabled?.status === 'False' && s?.observedNodes === nodes.length;
    },
    { timeoutMs: 30_000, intervalMs: 500 },
  );
  return name;
}

export interface NodeHealthCheckObject {
  status?: {
    observedNodes?: number;
    healthyNodes?: number;
    phase?: string;
    unhealthyNodes?: { name: string; remediations?: { resource?: { name?: string } }[] }[];
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
  };
}

export async function readNodeHealthCheck(name: string): Promise<NodeHealthCheckObject> {
  return JSON.parse(await must(['get', 'nodehealthcheck', name, '-o', 'json'])) as NodeHealthCheckObject;
}

/** The TestRemediations in the harness's namespace, those owned by the NodeHealthCheck `owner` if given. */
export async function listRemediations(nhc: NodeHealthcheck, owner?: string): Promise<Remediation[]> {
  const list = JSON.parse(await must(['get', 'testremediations', '-n', nhc.namespace, '-o', 'json'])) as {
    items: {
      metadata: {
        name: string;
        creationTimestamp: string;
        annotations?: Record<string, string>;
        ownerReferences?: { kind: string; name: string }[];
      };
      spec?: Record<string, unknown>;
    }[];
  };
  return list.items
    .map((item) => ({
      name: item.metadata.name,
      nodeName: item.metadata.annotations?.['remediation.medik8s.io/node-name'],
      owner: item.metadata.ownerReferences?.find((o) => o.kind === 'NodeHealthCheck')?.name,
      createdAt: new Date(item.metadata.creationTimestamp),
      spec: item.spec ?? {},
    }))
    .filter((r) => owner === undefined || r.owner === owner);
}

/**
 * Sets a condition (ours by default) on a node's status by hand, as the operator will: a strategic merge patch of
 * nodes/status, which keeps the other conditions. lastTransitionTime is whole seconds (what the API stores), now unless
 * given; it is returned.
 */
export async function setNodeCondition(
  node: string,
  {
    type = NODE_CONDITION_TYPE,
    status,
    reason,
    message = 'set by a test',
    lastTransitionTime = new Date(Math.floor(Date.now() / 1000) * 1000),
  }: {
    type?: string;
    status: 'True' | 'False' | 'Unknown';
    reason: string;
    message?: string;
    lastTransitionTime?: Date;
  },
): Promise<Date> {
  const at = lastTransitionTime.toISOString().replace(/\.\d{3}Z$/, 'Z');
  const patch = {
    status: {
      conditions: [{ type, status, reason, message, lastHeartbeatTime: at, lastTransitionTime: at }],
    },
  };
  await must([
    'patch',
    'node',
    node,
    '--subresource=status',
    '--type=strategic',
    '-p',
    JSON.stringify(patch),
  ]);
  return new Date(at);
}
