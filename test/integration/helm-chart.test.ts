// charts/sandbox-remediator on the real local cluster: linted, rendered as config/ builds it, accepted by the
// apiserver with every option, installed (the Deployment, the DaemonSet, their RBAC and admission policies in force),
// and uninstalled down to the CRDs. No image runs here (kwok nodes): the objects are checked, not running pods.
import {
  AdmissionregistrationV1Api,
  CoreV1Api,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { expect } from 'chai';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { IMAGE_REPOSITORY } from '../../hack/release/versions.js';
import { VERSION } from '../../src/cli/version.js';
import { loadKubeConfig } from '../../src/kube/client.js';
import { deniedBy, policyInForce, refusal } from '../support/admission.js';
import {
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import {
  CHART_DIR,
  displaceClusterObjects,
  ensureThirdPartyCrds,
  helm,
  objectsOf,
  putBack,
  renderChart,
  kubectlResource,
  setValues,
} from '../support/helm.js';
import { readManifests } from '../support/manifests.js';
import { kustomize, type KubeObject } from '../support/monitoring-config.js';
import { createToken, writeTokenKubeconfig } from '../support/tokens.js';

const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);

/** Every option the chart has, on. */
const EVERYTHING = {
  'webhook.enabled': true,
  'webhook.certificates': 'certManager',
  'kubeletSummary.enabled': true,
  'nodeLease.enabled': true,
  'monitoring.serviceMonitors.enabled': true,
  'monitoring.prometheusRule.enabled': true,
  'monitoring.dashboard.enabled': true,
  'monitoring.labels.release': 'kube-prometheus-stack',
  'image.repository': 'registry.example.com/sandbox-remediator',
  'image.pullPolicy': 'IfNotPresent',
  'imagePullSecrets[0].name': 'regcred',
  'operator.extraArgs[0]': '--log-level=debug',
  'operator.nodeSelector.kubernetes\\.io/os': 'linux',
  'agent.cgroupRoot': '/sys/fs/cgroup/unified',
  'agent.extraArgs[0]': '--include-loop-devices',
  'agent.allowIoLimits': true,
  // Issue 42: what a production install sets.
  'operator.priorityClassName': 'system-cluster-critical',
  'operator.podLabels.team': 'sre',
  'operator.podAnnotations.example\\.com/owner': 'sre',
  'operator.extraEnv[0].name': 'TZ',
  'operator.extraEnv[0].value': 'UTC',
  'operator.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight': 100,
  'operator.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey':
    'kubernetes.io/hostname',
  'operator.topologySpreadConstraints[0].maxSkew': 1,
  'operator.topologySpreadConstraints[0].topologyKey': 'topology.kubernetes.io/zone',
  'operator.topologySpreadConstraints[0].whenUnsatisfiable': 'ScheduleAnyway',
  'agent.priorityClassName': '',
  'agent.podLabels.team': 'sre',
  'agent.extraEnv[0].name': 'TZ',
  'agent.extraEnv[0].value': 'UTC',
  'global.imageRegistry': 'registry.example.com',
};
const CHART_LABELS = ['helm.sh/chart', 'app.kubernetes.io/managed-by', 'app.kubernetes.io/instance'];
const key = (o: KubeObject) => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;

/**
 * An object as config/ has it: the chart's own labels dropped, and blank lines inside strings collapsed (kustomize's
 * YAML library reads a folded scalar's more-indented lines with an extra line break, which is whitespace in CEL).
 */
function asConfigHasIt(o: KubeObject): unknown {
  const labels = Object.fromEntries(
    Object.entries(o.metadata.labels ?? {}).filter(([k]) => !CHART_LABELS.includes(k)),
  );
  const metadata = { ...o.metadata, labels };
  if (Object.keys(labels).length === 0) delete (metadata as { labels?: unknown }).labels;
  const collapse = (v: unknown): unknown =>
    typeof v === 'string'
      ? v.replace(/\n\n+/g, '\n')
      : Array.isArray(v)
        ? v.map(collapse)
        : v && typeof v === 'object'
          ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, collapse(x)]))
          : v;
  return collapse({ ...o, metadata });
}

async function dryRun(yaml: string) {
  return kubectl(['apply', '--dry-run=server', '-f', '-'], yaml);
}

describe('the Helm chart (charts/sandbox-remediator)', function () {
  const cleanup = new Cleanup();
  let createdCrds: string[] = [];

  before(async function () {
    this.timeout(300_000);
    createdCrds = await ensureThirdPartyCrds();
    // nodeLease.enabled's Role lives in medik8s' lease namespace, which a medik8s operator makes: made here if absent.
    if ((await kubectl(['get', 'namespace', 'medik8s-leases'])).code !== 0) {
      const made = await kubectl(['create', 'namespace', 'medik8s-leases']);
      expect(made.code, made.stderr).to.equal(0);
      cleanup.add(() =>
        kubectl(['delete', 'namespace', 'medik8s-leases', '--ignore-not-found', '--wait=false']),
      );
    }
  });

  after(async function () {
    this.timeout(120_000);
    await cleanup.run();
    if (createdCrds.length > 0) await kubectl(['delete', 'crd', '--wait=false', ...createdCrds]);
  });

  it('passes helm lint with the defaults and with every option on', async () => {
    for (const args of [[], setValues(EVERYTHING)]) {
      const lint = await helm(['lint', '--strict', CHART_DIR, ...args]);
      expect(lint.code, lint.stdout + lint.stderr).to.equal(0);
      expect(lint.stdout).to.contain('1 chart(s) linted, 0 chart(s) failed');
    }
  });

  it('refuses replicas without leader election, the lease grant without its admission policy, an unknown certificate choice and a misspelt value', async () => {
    const noLease = await helm(['template', CHART_DIR, '--set', 'operator.leaderElection.enabled=false']);
    expect(noLease.code).to.not.equal(0);
    expect(noLease.stderr).to.contain('operator.replicas > 1 needs operator.leaderElection.enabled');
    const unguarded = await helm([
      'template',
      CHART_DIR,
      ...setValues({ 'nodeLease.enabled': true, 'admissionPolicies.enabled': false }),
    ]);
    expect(unguarded.code).to.not.equal(0);
    expect(unguarded.stderr).to.contain('nodeLease.enabled needs admissionPolicies.enabled');
    const single = await renderChart(
      setValues({ 'operator.replicas': 1, 'operator.leaderElection.enabled': false }),
    );
    const args = (
      single.find((o) => o.kind === 'Deployment')?.spec as {
        template: { spec: { containers: { args: string[] }[] } };
      }
    ).template.spec.containers[0]?.args;
    expect(args).to.not.include('--leader-elect');
    // No leader election, no Lease Role: the one Role left is the Prometheus credentials' (issue 40).
    expect(
      single
        .filter((o) => o.kind === 'Role' || o.kind === 'RoleBinding')
        .map((o) => `${o.kind}/${o.metadata.name}`),
    ).to.deep.equal([
      'Role/sandbox-remediator-prometheus-credentials',
      'RoleBinding/sandbox-remediator-prometheus-credentials',
    ]);
    // values.schema.json: a choice that does not exist, and a misspelt value, which Helm would otherwise ignore.
    const pki = await helm(['template', CHART_DIR, '--set', 'webhook.certificates=vault']);
    expect(pki.stderr).to.contain(
      "at '/webhook/certificates': value must be one of 'generated', 'certManager'",
    );
    const typo = await helm(['template', CHART_DIR, '--set', 'agent.cgroupRot=/sys/fs/cgroup/unified']);
    expect(typo.stderr).to.contain("additional properties 'cgroupRot' not allowed");
    // Issue 42: the production values are typed too.
    const digest = await helm(['template', CHART_DIR, '--set', 'image.digest=latest']);
    expect(digest.stderr).to.contain("at '/image/digest'");
    const nameless = await helm(['template', CHART_DIR, '--set', 'operator.extraEnv[0].value=x']);
    expect(nameless.stderr).to.contain("at '/operator/extraEnv/0'");
    const spread = await helm(['template', CHART_DIR, '--set', 'agent.topologySpreadConstraints.maxSkew=1']);
    expect(spread.stderr).to.contain("at '/agent/topologySpreadConstraints'");
    // A digest, when set, is what the pods pull.
    const pinned = await renderChart(setValues({ 'image.digest': `sha256:${'a'.repeat(64)}` }));
    const images = pinned
      .filter((o) => o.kind === 'Deployment' || o.kind === 'DaemonSet')
      .map((o) => (o.spec as { template: { spec: PodSpec } }).template.spec.containers[0]?.image);
    expect(images).to.deep.equal([
      `${IMAGE_REPOSITORY}@sha256:${'a'.repeat(64)}`,
      `${IMAGE_REPOSITORY}@sha256:${'a'.repeat(64)}`,
    ]);
  });

  it("renders by default what kubectl kustomize config/default builds, but the operator's Namespace: the release's", async function () {
    this.timeout(60_000);
    const built = await kustomize('config/default');
    const rendered = await renderChart(['-n', 'sandbox-remediator-system', '--include-crds']);
    const wanted = built.filter(
      (o) => !(o.kind === 'Namespace' && o.metadata.name === 'sandbox-remediator-system'),
    );
    expect(wanted.length).to.be.greaterThan(15);
    expect(rendered.map(key).sort()).to.deep.equal(wanted.map(key).sort());
    const byKey = new Map(rendered.map((o) => [key(o), o]));
    const differing = wanted
      .filter((o) => !isDeepStrictEqual(asConfigHasIt(o), asConfigHasIt(byKey.get(key(o))!)))
      .map(key);
    expect(differing).to.deep.equal([]);
    for (const o of rendered.filter((x) => x.kind !== 'CustomResourceDefinition'))
      expect(o.metadata.labels, key(o)).to.include({ 'app.kubernetes.io/managed-by': 'Helm' });
  });

  describe('helm template | kubectl apply --dry-run=server', () => {
    const variants: [string, Record<string, string | number | boolean>][] = [
      ['the defaults', {}],
      ['every option on', EVERYTHING],
      ['the webhook with generated certificates', { 'webhook.enabled': true }],
      ['the agent off', { 'agent.enabled': false }],
    ];
    for (const [name, values] of variants)
      it(`is accepted with ${name}`, async function () {
        this.timeout(60_000);
        const namespace = await createNamespace(cleanup, 'it-helm');
        const agent = await createNamespace(cleanup, 'it-helm-agent');
        const args = ['-n', namespace, ...setValues({ 'agent.namespace': agent, ...values })];
        const yaml = (await helm(['template', 'sandbox-remediator', CHART_DIR, ...args])).stdout;
        const objects = objectsOf(yaml);
        expect(objects.length).to.be.greaterThan(10);
        const result = await dryRun(yaml);
        expect(result.code, result.stderr).to.equal(0);
        for (const o of objects)
          expect(result.stdout, key(o)).to.match(new RegExp(`/${o.metadata.name} .*\\(server dry run\\)`));
      });

    it('and refuses what the apiserver refuses, so the check can fail', async () => {
      const namespace = await createNamespace(cleanup, 'it-helm');
      const result = await helm([
        'template',
        'sandbox-remediator',
        CHART_DIR,
        '-n',
        namespace,
        '--set',
        'operator.resources.requests.cpu=lots',
      ]);
      expect(result.code, result.stderr).to.equal(0);
      const refused = await dryRun(result.stdout);
      expect(refused.code).to.not.equal(0);
      expect(refused.stderr).to.match(/quantities must match/);
    });
  });

  describe('helm install and helm uninstall', function () {
    const release = uniqueName('sr');
    let namespace = '';
    let agentNamespace = '';
    let manifest: KubeObject[] = [];
    /** Objects of the chart's fixed names that other tests left (config/rbac, config/webhook), put back after. */
    const displaced: KubeObject[] = [];
    let dir = '';
    const canI = async (serviceAccount: string, ...args: string[]) =>
      (
        await kubectl(['auth', 'can-i', ...args, `--as=system:serviceaccount:${serviceAccount}`])
      ).stdout.trim();

    before(async function () {
      this.timeout(300_000);
      dir = await mkdtemp(join(tmpdir(), 'helm-chart-'));
      namespace = await createNamespace(cleanup, 'it-helm');
      agentNamespace = `${namespace}-agent`;
      const values = ['-n', namespace, ...setValues({ ...EVERYTHING, 'agent.namespace': agentNamespace })];
      displaced.push(...(await displaceClusterObjects(values)));
      const installed = await helm(['install', release, CHART_DIR, ...values]);
      expect(installed.code, installed.stderr).to.equal(0);
      manifest = objectsOf((await helm(['get', 'manifest', release, '-n', namespace])).stdout);
    });

    after(async function () {
      this.timeout(120_000);
      await helm(['uninstall', release, '-n', namespace, '--wait']);
      await kubectl(['delete', 'namespace', agentNamespace, '--ignore-not-found', '--wait=false']);
      await putBack(displaced);
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it("accepts the operator's Deployment and the agent's DaemonSet, with the values in them", async () => {
      const deployment = JSON.parse(
        (await kubectl(['get', 'deployment', 'sandbox-remediator-operator', '-n', namespace, '-o', 'json']))
          .stdout,
      ) as {
        spec: {
          replicas: number;
          template: {
            metadata: { labels: Record<string, string>; annotations?: Record<string, string> };
            spec: PodSpec;
          };
        };
      };
      expect(deployment.spec.replicas).to.equal(2);
      const operator = deployment.spec.template.spec.containers[0]!;
      // The tag left at its default: the release's version (the chart's appVersion).
      expect(operator.image).to.equal(`registry.example.com/sandbox-remediator:${VERSION}`);
      expect(operator.args).to.include.members([
        '--leader-elect',
        '--webhook-bind-address=:9443',
        '--webhook-cert-dir=/var/run/webhook-certs',
        `--webhook-url=https://sandbox-remediator-webhook.${namespace}.svc:9443/mutate-pods`,
        '--log-level=debug',
      ]);
      const pod = deployment.spec.template;
      expect(pod.spec.priorityClassName).to.equal('system-cluster-critical');
      expect(pod.metadata.labels).to.include({ team: 'sre', 'app.kubernetes.io/component': 'operator' });
      expect(pod.metadata.annotations).to.include({ 'example.com/owner': 'sre' });
      expect(operator.env).to.deep.include({ name: 'TZ', value: 'UTC' });
      expect(pod.spec.affinity).to.have.property('podAntiAffinity');
      expect(pod.spec.topologySpreadConstraints?.[0]).to.include({
        maxSkew: 1,
        whenUnsatisfiable: 'ScheduleAnyway',
      });
      expect(deployment.spec.template.spec.volumes).to.deep.include({
        name: 'webhook-certs',
        secret: { secretName: 'sandbox-remediator-webhook-tls', defaultMode: 420 },
      });

      const daemonSet = JSON.parse(
        (await kubectl(['get', 'daemonset', 'sandbox-remediator-agent', '-n', agentNamespace, '-o', 'json']))
          .stdout,
      ) as { spec: { template: { spec: PodSpec } } };
      const agent = daemonSet.spec.template.spec.containers[0]!;
      expect(agent.args).to.include.members([
        '--cgroup-root=/host/sys/fs/cgroup/unified',
        '--allow-io-limits',
        '--include-loop-devices',
      ]);
      // allowIoLimits: the cgroup tree writable, and root, which owns its files (no capability more).
      const cgroupMount = agent.volumeMounts?.find((m) => m.name === 'host-cgroup');
      expect(cgroupMount).to.include({ mountPath: '/host/sys/fs/cgroup/unified' });
      expect(cgroupMount, 'writable (false is left out)').to.not.have.property('readOnly', true);
      expect(daemonSet.spec.template.spec.securityContext).to.deep.include({
        runAsNonRoot: false,
        runAsUser: 0,
      });
      expect(daemonSet.spec.template.spec.tolerations).to.deep.equal([{ operator: 'Exists' }]);
      expect(daemonSet.spec.template.spec.priorityClassName, 'emptied: none').to.equal(undefined);
      expect(agent.env).to.deep.include({ name: 'TZ', value: 'UTC' });
      const ns = JSON.parse(
        (await kubectl(['get', 'namespace', agentNamespace, '-o', 'json'])).stdout,
      ) as KubeObject;
      expect(ns.metadata.labels).to.include({ 'pod-security.kubernetes.io/enforce': 'privileged' });
    });

    it('grants the ServiceAccounts what config/rbac grants, the opt-in kubelet Summary too, and no more', async () => {
      const role = JSON.parse(
        (await kubectl(['get', 'clusterrole', 'sandbox-remediator-operator', '-o', 'json'])).stdout,
      ) as { rules: unknown[] };
      const configRole = readManifests('config/rbac').find(
        (m) => m.object.kind === 'ClusterRole' && m.object.metadata.name === 'sandbox-remediator-operator',
      )?.object as unknown as { rules: unknown[] };
      expect(role.rules).to.deep.equal(configRole.rules);

      const op = `${namespace}:sandbox-remediator-operator`;
      const agent = `${agentNamespace}:sandbox-remediator-agent`;
      const table: [string, string[], string][] = [
        [op, ['patch', 'nodes'], 'yes'],
        [op, ['create', 'pods', '--subresource=eviction', '-n', 'default'], 'yes'],
        [op, ['patch', 'sandboxhealths.sandbox.remediator.io', '--subresource=status'], 'yes'],
        [op, ['create', 'leases', '-n', namespace], 'yes'],
        [op, ['get', 'nodes', '--subresource=proxy'], 'yes'],
        [op, ['patch', 'mutatingwebhookconfigurations/sandbox-remediator-pacing'], 'yes'],
        [op, ['delete', 'pods', '-n', 'default'], 'no'],
        [op, ['get', 'secrets', '-n', namespace], 'no'],
        [op, ['create', 'mutatingwebhookconfigurations'], 'no'],
        [op, ['update', 'leases/someone-else', '-n', namespace], 'no'],
        [agent, ['patch', 'sandboxhealths.sandbox.remediator.io', '--subresource=status'], 'yes'],
        [agent, ['patch', 'nodes'], 'no'],
        [agent, ['list', 'pods', '-A'], 'no'],
        [agent, ['get', 'nodes', '--subresource=proxy'], 'no'],
      ];
      const answers = await Promise.all(table.map(([sa, args]) => canI(sa, ...args)));
      expect(answers).to.deep.equal(table.map(([, , want]) => want));
    });

    it("puts the admission policies in force for the release's ServiceAccounts", async function () {
      this.timeout(60_000);
      // Every policy the release made is bound, and names the release's ServiceAccounts, not config/'s namespaces.
      const policies = manifest
        .filter((o) => o.kind === 'ValidatingAdmissionPolicy')
        .map((o) => o.metadata.name);
      expect(policies).to.include.members([
        'sandbox-remediator-operator',
        'sandbox-remediator-agent-own-node',
      ]);
      for (const name of policies) {
        const policy = await kubectl(['get', 'validatingadmissionpolicy', name, '-o', 'json']);
        expect(policy.code, policy.stderr).to.equal(0);
        // The kubelet Events policy narrows every requester, not the release's tokens (config/events).
        if (name !== 'sandbox-remediator-kubelet-events')
          expect(policy.stdout, name).to.match(
            new RegExp(
              `system:serviceaccount:(${namespace}|${agentNamespace}):sandbox-remediator-(operator|agent)`,
            ),
          );
        expect(policy.stdout, name).to.not.contain('system:serviceaccount:sandbox-remediator-');
        const binding = JSON.parse(
          (await kubectl(['get', 'validatingadmissionpolicybinding', name, '-o', 'json'])).stdout,
        ) as { spec: { policyName: string; validationActions: string[] } };
        expect(binding.spec).to.deep.include({ policyName: name, validationActions: ['Deny'] });
      }

      // The operator's token may patch Nodes and its webhook configuration (RBAC), but not a Node's labels nor the
      // webhook's timeout: the policies, not RBAC, refuse those.
      const { names } = await createNodes(cleanup, 1);
      const token = await createToken(namespace, 'sandbox-remediator-operator');
      const asOperator = loadKubeConfig(await writeTokenKubeconfig(dir, 'operator', token));
      const core = asOperator.makeApiClient(CoreV1Api);
      const admission = asOperator.makeApiClient(AdmissionregistrationV1Api);
      const node = names[0] ?? '';
      const labelNode = () =>
        core.patchNode(
          { name: node, body: { metadata: { labels: { 'it-helm': `${Date.now()}` } } } },
          mergePatch,
        );
      await policyInForce('sandbox-remediator-operator', labelNode);
      expect(await refusal(labelNode)).to.contain(deniedBy('sandbox-remediator-operator', ''));
      const retime = () =>
        admission.patchMutatingWebhookConfiguration(
          {
            name: 'sandbox-remediator-pacing',
            // Never 2, the chart's own: an unchanged field is no change to refuse.
            body: [{ op: 'replace', path: '/webhooks/0/timeoutSeconds', value: 3 + (Date.now() % 7) }],
          },
          jsonPatch,
        );
      await policyInForce('sandbox-remediator-operator-webhook', retime);
      expect(await refusal(retime)).to.contain('timeoutSeconds');
    });

    it('removes what an option made when helm upgrade turns it off', async function () {
      this.timeout(60_000);
      const rule = ['get', 'prometheusrule', 'sandbox-remediator', '-n', namespace];
      expect((await kubectl(rule)).code).to.equal(0);
      const upgraded = await helm([
        'upgrade',
        release,
        CHART_DIR,
        '-n',
        namespace,
        '--reuse-values',
        '--set',
        'monitoring.prometheusRule.enabled=false',
      ]);
      expect(upgraded.code, upgraded.stderr).to.equal(0);
      await eventually('the PrometheusRule gone', async () =>
        (await kubectl(rule)).stderr.includes('NotFound'),
      );
      const deployment = await kubectl(['get', 'deployment', 'sandbox-remediator-operator', '-n', namespace]);
      expect(deployment.code, deployment.stderr).to.equal(0);
    });

    it('leaves nothing behind on helm uninstall but the CRDs', async function () {
      this.timeout(120_000);
      expect(manifest.length).to.be.greaterThan(20);
      const uninstalled = await helm(['uninstall', release, '-n', namespace, '--wait']);
      expect(uninstalled.code, uninstalled.stderr).to.equal(0);
      for (const o of manifest) {
        const namespaced = o.metadata.namespace ? ['-n', o.metadata.namespace] : [];
        await eventually(
          `${key(o)} gone`,
          async () => {
            const got = await kubectl(['get', kubectlResource(o), o.metadata.name, ...namespaced]);
            return got.code !== 0 && got.stderr.includes('NotFound');
          },
          { timeoutMs: 90_000 },
        );
      }
      for (const crd of ['sandboxpolicies.sandbox.remediator.io', 'sandboxhealths.sandbox.remediator.io'])
        expect((await kubectl(['get', 'crd', crd])).code, crd).to.equal(0);
      expect((await helm(['list', '-n', namespace, '-q'])).stdout.trim()).to.equal('');
    });
  });
});

interface PodSpec {
  containers: {
    image: string;
    args: string[];
    volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
    env?: unknown[];
  }[];
  securityContext?: object;
  volumes?: unknown[];
  tolerations?: unknown[];
  priorityClassName?: string;
  affinity?: object;
  topologySpreadConstraints?: Record<string, unknown>[];
}
