import { expect } from 'chai';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { AgentProcess } from '../support/agent-process.js';
import {
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  hack,
  kubectl,
  CLUSTER_DIR,
  uniqueName,
} from '../support/cluster.js';
import { freePort } from '../support/monitoring.js';
import { FAST_IO, ProcRoot } from '../support/proc-root.js';
import { createSpreadDeployment, eventsWithReason, readNode } from '../support/workloads.js';
import { readManifests, REPO_ROOT } from '../support/manifests.js';
import {
  applyCrds,
  applyWebhookConfig,
  deleteWebhookConfig,
  OperatorProcess,
} from '../support/operator-process.js';
import { applyPolicy, condition, getHealth } from '../support/resources.js';

// The agent has a namespace of its own, the one Pod Security lets hostPath into (config/default/namespace.yaml).
const namespaceOf = (serviceAccount: string) =>
  serviceAccount === 'sandbox-remediator-agent' ? 'sandbox-remediator-agent' : 'sandbox-remediator-system';
const sa = (name: string) => `system:serviceaccount:${namespaceOf(name)}:${name}`;

interface PodTemplate {
  metadata?: { labels?: Record<string, string> };
  spec: {
    serviceAccountName?: string;
    containers: { securityContext?: Record<string, unknown> }[];
    [field: string]: unknown;
  };
}

/** A Pod made of a workload's pod template in config/, as its controller would create it (minus the SA). */
function podFrom(
  file: string,
  kind: string,
  name: string,
): { apiVersion: 'v1'; kind: 'Pod'; metadata: { name: string }; spec: PodTemplate['spec'] } {
  const workload = readManifests(dirname(file)).find((m) => m.file === file && m.object.kind === kind)
    ?.object as { spec: { template: PodTemplate } } | undefined;
  if (!workload) throw new Error(`no ${kind} in ${file}`);
  // The ServiceAccount lives in the workload's namespace, not the test's; Pod Security does not look at it.
  const { serviceAccountName: _, ...spec } = workload.spec.template.spec;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { ...workload.spec.template.metadata, name },
    spec,
  };
}

/** A kubeconfig for a ServiceAccount: the local cluster's server and CA, and a token for the account. */
async function kubeconfigFor(serviceAccount: string, dir: string): Promise<string> {
  const token = await kubectl([
    'create',
    'token',
    serviceAccount,
    '-n',
    namespaceOf(serviceAccount),
    '--duration=1h',
  ]);
  expect(token.code, token.stderr).to.equal(0);
  const server = (
    await kubectl(['config', 'view', '--minify', '-o', 'jsonpath={.clusters[0].cluster.server}'])
  ).stdout;
  const file = join(dir, `${serviceAccount}.kubeconfig`);
  const kc = (...args: string[]) => kubectl([...args, `--kubeconfig=${file}`]);
  const ca = join(CLUSTER_DIR, 'pki', 'ca.crt');
  for (const args of [
    [
      'config',
      'set-cluster',
      'local',
      `--server=${server}`,
      `--certificate-authority=${ca}`,
      '--embed-certs',
    ],
    ['config', 'set-credentials', serviceAccount, `--token=${token.stdout.trim()}`],
    ['config', 'set-context', 'local', '--cluster=local', `--user=${serviceAccount}`],
    ['config', 'use-context', 'local'],
  ]) {
    // kubectl() pins the admin kubeconfig first; the later --kubeconfig wins for these config commands.
    const result = await kc(...args);
    expect(result.code, result.stderr).to.equal(0);
  }
  return file;
}

describe('config/: manifests and least-privilege RBAC on the real cluster', function () {
  const cleanup = new Cleanup();
  let dir = '';
  before(async function () {
    this.timeout(120_000);
    await applyCrds();
    dir = await mkdtemp(join(tmpdir(), 'rbac-'));
    const ns = await kubectl(['apply', '-f', join(REPO_ROOT, 'config/default/namespace.yaml')]);
    expect(ns.code, ns.stderr).to.equal(0);
    const rbac = await kubectl(['apply', '-k', join(REPO_ROOT, 'config/rbac')]);
    expect(rbac.code, rbac.stderr).to.equal(0);
  });
  afterEach(() => cleanup.run());
  after(async () => {
    await kubectl(['delete', '-k', join(REPO_ROOT, 'config/rbac'), '--ignore-not-found']);
    await rm(dir, { recursive: true, force: true });
  });

  it('accepts the whole of config/default (server-side dry run), with no Pod Security warning', async () => {
    const result = await kubectl(['apply', '-k', join(REPO_ROOT, 'config/default'), '--dry-run=server']);
    expect(result.code, result.stderr).to.equal(0);
    for (const kind of [
      'namespace/sandbox-remediator-system',
      'namespace/sandbox-remediator-agent',
      'deployment.apps/sandbox-remediator-operator',
      'daemonset.apps/sandbox-remediator-agent',
    ]) {
      expect(result.stdout).to.contain(kind);
    }
    // The apiserver warns about a workload whose pods its namespace's Pod Security level would refuse.
    expect(result.stderr).to.not.match(/PodSecurity/);
    const labels = JSON.parse(
      (await kubectl(['get', 'namespaces', '-l', 'pod-security.kubernetes.io/enforce', '-o', 'json'])).stdout,
    ) as { items: { metadata: { name: string; labels: Record<string, string> } }[] };
    const enforced = Object.fromEntries(
      labels.items.map((n) => [n.metadata.name, n.metadata.labels['pod-security.kubernetes.io/enforce']]),
    );
    expect(enforced).to.include({
      'sandbox-remediator-system': 'restricted',
      'sandbox-remediator-agent': 'privileged',
    });
  });

  it('runs the operator under Pod Security restricted, which refuses a broken securityContext and the agent', async () => {
    const namespace = await createNamespace(cleanup, 'it-restricted');
    const labelled = await kubectl([
      'label',
      'namespace',
      namespace,
      'pod-security.kubernetes.io/enforce=restricted',
    ]);
    expect(labelled.code, labelled.stderr).to.equal(0);
    const create = (pod: object) =>
      kubectl(['create', '--dry-run=server', '-n', namespace, '-f', '-'], JSON.stringify(pod));

    const operator = podFrom('config/manager/manager.yaml', 'Deployment', 'operator');
    const accepted = await create(operator);
    expect(accepted.code, accepted.stderr).to.equal(0);
    expect(accepted.stderr).to.equal('');

    const escalating = structuredClone(operator);
    escalating.spec.containers[0]!.securityContext = {
      ...escalating.spec.containers[0]!.securityContext,
      allowPrivilegeEscalation: true,
    };
    const refused = await create(escalating);
    expect(refused.code).to.not.equal(0);
    expect(refused.stderr).to.contain(
      'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false',
    );

    // The agent's pod breaks restricted by its hostPath volume and nothing else (it is unprivileged otherwise),
    // and baseline by the same volume: hence a namespace of its own.
    const agent = podFrom('config/agent/daemonset.yaml', 'DaemonSet', 'agent');
    const violations = async () => {
      const result = await create(agent);
      expect(result.code).to.not.equal(0);
      return /violates PodSecurity "(.*)$/m.exec(result.stderr)?.[1] ?? result.stderr;
    };
    expect(await violations()).to.equal(
      'restricted:latest": restricted volume types (volumes "host-proc", "host-cgroup" use restricted volume type "hostPath")',
    );
    await kubectl([
      'label',
      '--overwrite',
      'namespace',
      namespace,
      'pod-security.kubernetes.io/enforce=baseline',
    ]);
    expect(await violations()).to.equal(
      'baseline:latest": hostPath volumes (volumes "host-proc", "host-cgroup")',
    );
  });

  it('grants the operator and the agent nothing beyond what they use', async () => {
    const can = async (who: string, ...what: string[]) =>
      (await kubectl(['auth', 'can-i', ...what, `--as=${sa(who)}`])).stdout.trim();
    expect(await can('sandbox-remediator-operator', 'watch', 'pods')).to.equal('yes');
    expect(await can('sandbox-remediator-operator', 'delete', 'pods')).to.equal('no');
    expect(await can('sandbox-remediator-operator', 'create', 'pods', '--subresource=eviction')).to.equal(
      'yes',
    );
    expect(await can('sandbox-remediator-operator', 'patch', 'nodes')).to.equal('yes');
    expect(await can('sandbox-remediator-operator', 'update', 'nodes')).to.equal('no');
    expect(await can('sandbox-remediator-operator', 'delete', 'nodes')).to.equal('no');
    // Asked as a SubjectAccessReview: kubectl auth can-i maps rollouts.argoproj.io to the core group when the CRD is
    // not installed, and would answer for a resource nobody grants.
    const allowed = async (verb: string, group: string, resource: string) => {
      const review = {
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SubjectAccessReview',
        spec: { user: sa('sandbox-remediator-operator'), resourceAttributes: { verb, group, resource } },
      };
      const result = await kubectl(['create', '-o', 'json', '-f', '-'], JSON.stringify(review));
      expect(result.code, result.stderr).to.equal(0);
      return (JSON.parse(result.stdout) as { status: { allowed: boolean } }).status.allowed ? 'yes' : 'no';
    };
    for (const [group, resource] of [
      ['apps', 'deployments'],
      ['apps', 'statefulsets'],
      ['apps', 'daemonsets'],
      ['argoproj.io', 'rollouts'],
    ] as const) {
      expect(await allowed('patch', group, resource), `patch ${resource}.${group}`).to.equal('yes');
      expect(await allowed('delete', group, resource), `delete ${resource}.${group}`).to.equal('no');
      expect(await allowed('update', group, resource), `update ${resource}.${group}`).to.equal('no');
    }
    expect(await can('sandbox-remediator-operator', 'patch', 'pods')).to.equal('yes');
    expect(
      await can(
        'sandbox-remediator-operator',
        'patch',
        'mutatingwebhookconfigurations.admissionregistration.k8s.io/sandbox-remediator-pacing',
      ),
    ).to.equal('yes');
    expect(
      await can(
        'sandbox-remediator-operator',
        'patch',
        'mutatingwebhookconfigurations.admissionregistration.k8s.io/someone-elses',
      ),
    ).to.equal('no');
    expect(await can('sandbox-remediator-operator', 'get', 'secrets')).to.equal('no');
    // Only the one Secret a policy's Prometheus credentials may be kept in, in its own namespace.
    const ns = '--namespace=sandbox-remediator-system';
    expect(
      await can('sandbox-remediator-operator', 'get', 'secrets/sandbox-remediator-prometheus', ns),
    ).to.equal('yes');
    expect(await can('sandbox-remediator-operator', 'get', 'secrets/another', ns)).to.equal('no');
    expect(await can('sandbox-remediator-operator', 'list', 'secrets', ns)).to.equal('no');
    expect(await can('sandbox-remediator-operator', 'get', 'persistentvolumeclaims')).to.equal('yes');
    expect(await can('sandbox-remediator-operator', 'list', 'persistentvolumeclaims')).to.equal('no');
    expect(await can('sandbox-remediator-operator', 'get', 'persistentvolumes')).to.equal('yes');
    expect(
      await can(
        'sandbox-remediator-agent',
        'patch',
        'sandboxhealths.sandbox.remediator.io',
        '--subresource=status',
      ),
    ).to.equal('yes');
    expect(await can('sandbox-remediator-agent', 'list', 'pods')).to.equal('no');
    expect(await can('sandbox-remediator-agent', 'delete', 'sandboxhealths.sandbox.remediator.io')).to.equal(
      'no',
    );
  });

  it('is enough: the operator and the agent do their whole job under their own ServiceAccounts', async function () {
    this.timeout(180_000);
    const operatorConfig = await kubeconfigFor('sandbox-remediator-operator', dir);
    const agentConfig = await kubeconfigFor('sandbox-remediator-agent', dir);
    const operator = new OperatorProcess();
    cleanup.add(() => operator.stop());
    // With the pacing webhook on: it fills in the shipped MutatingWebhookConfiguration under this identity too.
    await applyWebhookConfig();
    cleanup.add(() => deleteWebhookConfig());
    await operator.start([
      `--kubeconfig=${operatorConfig}`,
      `--webhook-bind-address=127.0.0.1:${await freePort()}`,
    ]);
    await operator.waitForLog('Serving the pacing webhook', 30_000);
    await operator.waitForLog('Registered the pacing webhook', 30_000);

    const namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 2);
    const node = names[0]!;
    const policy = uniqueName('it-rbac');
    await applyPolicy(cleanup, policy, {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      detection: { stuckThresholdSeconds: 2 },
      ioPressure: FAST_IO,
      safety: { maxUnhealthyNodes: 1, cooldownSeconds: 3 },
    });
    const proc = new ProcRoot();
    cleanup.add(() => proc.remove());
    const agent = new AgentProcess();
    cleanup.add(() => agent.stop());
    agent.start(node, [
      `--kubeconfig=${agentConfig}`,
      `--proc-root=${await proc.create()}`,
      '--interval-seconds=1',
    ]);
    await eventually(
      'the agent reading published',
      async () => (await getHealth(node))?.ioReading?.source === 'agent',
      { timeoutMs: 30_000 },
    );
    const started = await hack('incident', ['start', '--node', node, '--interval-seconds', '2']);
    expect(started.code, started.stderr).to.equal(0);
    cleanup.add(() => hack('incident', ['stop', '--node', node]));
    await createSpreadDeployment(cleanup, namespace, 'web', pool, 2);
    await eventually(
      'the stuck pod reported, the Event recorded',
      async () => {
        const health = await getHealth(node);
        const events = await kubectl([
          'get',
          'events',
          '-n',
          namespace,
          '--field-selector',
          'reason=SandboxCreationStuck',
          '-o',
          'name',
        ]);
        return health?.stuckPodCount === 1 && events.stdout.trim() !== '';
      },
      { timeoutMs: 60_000 },
    );
    // Remediation under the operator's own identity: cordon (patch nodes) and eviction (pods/eviction).
    await proc.setPressure('load');
    await eventually(
      'cordoned and the stuck pod evicted',
      async () => {
        const cordoned = (await readNode(node)).spec?.unschedulable === true;
        return cordoned && (await eventsWithReason('EvictedStuckPod', namespace)).length === 1;
      },
      { timeoutMs: 60_000 },
    );
    await hack('incident', ['stop', '--node', node]);
    await proc.setPressure('idle');
    await eventually(
      'uncordoned after recovery',
      async () => (await readNode(node)).spec?.unschedulable !== true,
      {
        timeoutMs: 60_000,
      },
    );
    const status = JSON.parse((await kubectl(['get', 'sandboxpolicy', policy, '-o', 'json'])).stdout) as {
      status?: {
        conditions?: {
          type: string;
          status: 'True' | 'False' | 'Unknown';
          reason: string;
          message: string;
          lastTransitionTime: string;
        }[];
      };
    };
    expect(condition(status.status?.conditions, 'Valid')?.status).to.equal('True');

    await kubectl(['delete', 'sandboxpolicy', policy]);
    await eventually(
      'the unowned SandboxHealth deleted by the operator',
      async () => (await getHealth(node)) === undefined,
      { timeoutMs: 30_000 },
    );
    expect(
      operator.logs.filter((l) => l.level === 'warn' && /forbidden/i.test(JSON.stringify(l))),
    ).to.deep.equal([]);
  });
});
