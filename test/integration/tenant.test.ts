// Issue 40: in a cluster many teams share, a tenant with rights only in its own namespace cannot drive the operator.
// Each test acts as the tenant does (`kubectl --as`, a Role in one namespace: test/support/tenant.ts).
import { expect } from 'chai';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { FAST_IO } from '../support/proc-root.js';
import {
  api,
  Cleanup,
  createNodes,
  eventually,
  KUBECONFIG,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import { deniedBy } from '../support/admission.js';
import { runCli } from '../support/cli.js';
import { AuthProxy } from '../support/auth-proxy.js';
import { Monitoring } from '../support/monitoring.js';
import { REPO_ROOT } from '../support/manifests.js';
import { useOperator } from '../support/operator-process.js';
import type { RawObject } from '../../src/kube/informer.js';
import { nodeView } from '../../src/kube/views.js';
import { applyPolicy, getHealth } from '../support/resources.js';
import { SaturatedNode } from '../support/saturated-node.js';
import { Tenant } from '../support/tenant.js';
import { eventsWithReason, podsOf, readNode, stampsOf, waitForRunning } from '../support/workloads.js';

const EVENTS_POLICY = 'sandbox-remediator-kubelet-events';
const IO_MESSAGE =
  'Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded';

const log = (msg: string) => {
  console.error(`      [tenant] ${msg}`);
};

/** A FailedCreatePodSandBox Event about a pod, claiming to be written by `component` on `host`. */
function failureEvent(
  pod: { name: string; namespace: string; uid: string },
  author: { component: string; host: string },
  options: { name?: string; lastTimestamp?: string } = {},
) {
  const now = new Date().toISOString();
  return {
    apiVersion: 'v1',
    kind: 'Event',
    metadata: { name: options.name ?? uniqueName(`${pod.name}.e`), namespace: pod.namespace },
    involvedObject: { apiVersion: 'v1', kind: 'Pod', ...pod },
    reason: 'FailedCreatePodSandBox',
    type: 'Warning',
    message: IO_MESSAGE,
    source: author,
    count: 1,
    firstTimestamp: now,
    lastTimestamp: options.lastTimestamp ?? now,
  };
}

/** Creates an object as the kubelet of `node` does: its user and group. */
const asKubeletOf = (node: string, object: unknown) =>
  kubectl(
    ['create', '-f', '-', `--as=system:node:${node}`, '--as-group=system:nodes'],
    JSON.stringify(object),
  );

async function applyEventsPolicy(on: boolean): Promise<void> {
  const result = await kubectl([
    on ? 'apply' : 'delete',
    '-k',
    join(REPO_ROOT, 'config/events'),
    ...(on ? [] : ['--ignore-not-found']),
  ]);
  expect(result.code, result.stderr).to.equal(0);
}

describe('a tenant cannot drive the operator', function () {
  const cleanup = new Cleanup();
  afterEach(() => cleanup.run());

  describe("config/events: only the kubelet of a pod's node writes its sandbox failures", function () {
    after(() => applyEventsPolicy(false));

    it("refuses a tenant's and another node's, in both Event APIs, and lets the node's own and others' Events through", async function () {
      this.timeout(90_000);
      await applyEventsPolicy(true);
      const tenant = await Tenant.create(cleanup);
      const pod = { name: 'web-0', namespace: tenant.namespace, uid: '0b1c6a52-3f0e-4c8e-9a43-0d6c2b8f4e11' };
      const forged = failureEvent(pod, { component: 'kubelet', host: 'kwok-node-0' });
      // Policies load asynchronously: the first refusal may take a moment.
      const refused = await eventually(
        "the tenant's forged Event refused",
        async () => {
          const result = await tenant.create({
            ...forged,
            metadata: { ...forged.metadata, name: uniqueName('f') },
          });
          return result.code !== 0 ? result.stderr : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 500 },
      );
      expect(refused).to.include(
        deniedBy(
          EVENTS_POLICY,
          `only system:node:kwok-node-0 may write FailedCreatePodSandBox Events about pods as the kubelet of kwok-node-0, not ${tenant.user}`,
        ),
      );
      // The same through events.k8s.io/v1, converted to core/v1 and checked by the same rule.
      const newApi = await tenant.create({
        apiVersion: 'events.k8s.io/v1',
        kind: 'Event',
        metadata: { name: uniqueName('web-0.n'), namespace: tenant.namespace },
        regarding: { apiVersion: 'v1', kind: 'Pod', ...pod },
        reason: 'FailedCreatePodSandBox',
        type: 'Warning',
        note: IO_MESSAGE,
        eventTime: new Date().toISOString().replace('Z', '000Z'),
        action: 'CreatePodSandbox',
        reportingController: 'kubelet',
        reportingInstance: 'kwok-node-0',
      });
      expect(newApi.code).to.not.equal(0);
      expect(newApi.stderr).to.include(deniedBy(EVENTS_POLICY, 'only system:node:kwok-node-0 may write'));
      // Failed, the other reason the operator reads, and a kubelet that names no node.
      const failed = await tenant.create({
        ...failureEvent(pod, { component: 'kubelet', host: 'kwok-node-0' }),
        reason: 'Failed',
      });
      expect(failed.stderr).to.include(
        deniedBy(EVENTS_POLICY, 'only system:node:kwok-node-0 may write Failed'),
      );
      const nameless = await tenant.create(failureEvent(pod, { component: 'kubelet', host: '' }));
      expect(nameless.stderr).to.include(
        deniedBy(EVENTS_POLICY, 'an Event written as the kubelet must name its node'),
      );
      // Another node's kubelet may not speak for this one.
      const otherNode = await asKubeletOf(
        'kwok-node-1',
        failureEvent(pod, { component: 'kubelet', host: 'kwok-node-0' }),
      );
      expect(otherNode.stderr).to.include(
        deniedBy(
          EVENTS_POLICY,
          'only system:node:kwok-node-0 may write FailedCreatePodSandBox Events about pods as the kubelet of kwok-node-0, not system:node:kwok-node-1',
        ),
      );
      // Let through: the node's own kubelet, and the tenant's Events that do not claim to be the kubelet's (the
      // operator does not count them) or have another reason.
      const own = await asKubeletOf(
        'kwok-node-0',
        failureEvent(pod, { component: 'kubelet', host: 'kwok-node-0' }),
      );
      expect(own.code, own.stderr).to.equal(0);
      const itsOwnTool = await tenant.create(
        failureEvent(pod, { component: 'tenant-bot', host: 'kwok-node-0' }),
      );
      expect(itsOwnTool.code, itsOwnTool.stderr).to.equal(0);
      const otherReason = await tenant.create({
        ...forged,
        reason: 'Scheduled',
        metadata: { ...forged.metadata, name: uniqueName('s') },
      });
      expect(otherReason.code, otherReason.stderr).to.equal(0);
    });
  });

  describe('with the operator running', function () {
    const operator = useOperator([], { serviceAccount: 'tenant' });

    it("ignores Events the kubelet of the pod's node did not write when the policy is absent, and fences with the default limits once that kubelet reports", async function () {
      this.timeout(180_000);
      await applyEventsPolicy(false);
      const tenant = await Tenant.create(cleanup);
      // Four nodes and the default safety limits: 20% of 4 allows the one saturated node to be fenced.
      const { pool, names } = await createNodes(cleanup, 4);
      const sickName = names[0]!;
      const policy = uniqueName('it-tenant');
      await applyPolicy(cleanup, policy, {
        nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
        detection: { stuckThresholdSeconds: 3 },
        ioPressure: FAST_IO,
      });
      const sick = new SaturatedNode(sickName, cleanup);
      await sick.start(['--no-events']);
      await sick.pressure('load');
      const created = await tenant.create({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'mine' },
        spec: { nodeName: sickName, containers: [{ name: 'app', image: 'registry.local/app:1' }] },
      });
      expect(created.code, created.stderr).to.equal(0);
      const uid = (JSON.parse(created.stdout) as { metadata: { uid: string } }).metadata.uid;
      const pod = { name: 'mine', namespace: tenant.namespace, uid };
      // The tenant's forgeries: another node's kubelet, dated far ahead so it would be the latest for ever, and its
      // own tool on the right node.
      for (const author of [
        { component: 'kubelet', host: names[1]! },
        { component: 'tenant-bot', host: sickName },
      ]) {
        const posted = await tenant.create(
          failureEvent(pod, author, { lastTimestamp: '2099-01-01T00:00:00Z' }),
        );
        expect(posted.code, posted.stderr).to.equal(0);
      }
      const listed = await eventually('the pod listed as stuck, its cause unknown', async () => {
        const stuck = (await getHealth(sickName))?.stuckPods?.find((p) => p.uid === uid);
        return stuck;
      });
      expect(listed).to.include({ cause: 'Unknown', failureCount: 0 });
      const metrics = async () => (await operator.get('/metrics', operator.metricsPort)).text;
      const ignored = await eventually('both forgeries counted', async () => {
        const text = await metrics();
        const count = (reason: string) =>
          Number(
            new RegExp(`sandbox_remediator_failure_events_ignored_total\\{reason="${reason}"\\} (\\d+)`).exec(
              text,
            )?.[1] ?? 0,
          );
        return count('OtherNode') >= 1 && count('NotKubelet') >= 1
          ? [count('OtherNode'), count('NotKubelet')]
          : undefined;
      });
      log(`ignored Events counted: OtherNode ${ignored[0]}, NotKubelet ${ignored[1]}`);
      // A few passes later: still counted once, logged once, and nothing done to the node.
      await new Promise((resolve) => setTimeout(resolve, 4_000));
      const warnings = operator.logs.filter(
        (l) =>
          l.message === 'Ignored failure Events about a Pod not written by the kubelet of its Node' &&
          l.pod === `${tenant.namespace}/mine`,
      );
      expect(warnings, 'logged once for the pod').to.have.length(1);
      expect((await readNode(sickName)).spec?.unschedulable, 'cordoned on forged Events').to.not.equal(true);
      // No verdict on the Node for NodeHealthCheck to act on, and no IO cause on record.
      expect(nodeView((await readNode(sickName)) as unknown as RawObject)?.ownCondition).to.equal(undefined);
      expect((await getHealth(sickName))?.causes?.map((c) => c.cause)).to.deep.equal(['Unknown']);

      // The kubelet of that node reports the same failure: now the operator acts, within the default limits.
      const genuine = await asKubeletOf(
        sickName,
        failureEvent(pod, { component: 'kubelet', host: sickName }),
      );
      expect(genuine.code, genuine.stderr).to.equal(0);
      await eventually(
        'the saturated node cordoned',
        async () => (await readNode(sickName)).spec?.unschedulable === true,
        { timeoutMs: 60_000 },
      );
      const health = await getHealth(sickName);
      expect(health?.stuckPods?.find((p) => p.uid === uid)).to.include({
        cause: 'DeadlineExceeded',
        failureCount: 1,
      });
    });

    it('moves a plain IO-heavy pod, and leaves one with an emptyDir or a volume bound to the node, saying why', async function () {
      this.timeout(180_000);
      const tenant = await Tenant.create(cleanup);
      const { pool, names } = await createNodes(cleanup, 2);
      const [sickName, spare] = names as [string, string];
      // A local PersistentVolume on the sick node (an admin's, as volumes are), claimed by the tenant.
      const pv = uniqueName('it-local');
      const created = await kubectl(
        ['create', '-f', '-'],
        JSON.stringify({
          apiVersion: 'v1',
          kind: 'PersistentVolume',
          metadata: { name: pv },
          spec: {
            capacity: { storage: '1Gi' },
            accessModes: ['ReadWriteOnce'],
            storageClassName: 'it-local',
            local: { path: '/mnt/disks/db' },
            claimRef: { namespace: tenant.namespace, name: 'db-data' },
            nodeAffinity: {
              required: {
                nodeSelectorTerms: [
                  {
                    matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [sickName] }],
                  },
                ],
              },
            },
          },
        }),
      );
      expect(created.code, created.stderr).to.equal(0);
      cleanup.add(() => kubectl(['delete', 'pv', pv, '--wait=false']));
      const claim = await tenant.create({
        apiVersion: 'v1',
        kind: 'PersistentVolumeClaim',
        metadata: { name: 'db-data' },
        spec: {
          accessModes: ['ReadWriteOnce'],
          storageClassName: 'it-local',
          volumeName: pv,
          resources: { requests: { storage: '1Gi' } },
        },
      });
      expect(claim.code, claim.stderr).to.equal(0);
      const policy = uniqueName('it-data');
      await applyPolicy(cleanup, policy, {
        nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
        detection: { stuckThresholdSeconds: 3 },
        ioPressure: FAST_IO,
        remediation: {
          migrateWorkloads: { podSelector: { matchLabels: { io: 'heavy' } }, maxPodsPerNode: 3 },
        },
        safety: { maxUnhealthyNodes: 1, cooldownSeconds: 5, maxEvictionsPerMinute: 20 },
      });
      const deployment = (name: string, labels: Record<string, string>, volumes: object[] = []) =>
        tenant.create({
          apiVersion: 'apps/v1',
          kind: 'Deployment',
          metadata: { name },
          spec: {
            replicas: 1,
            selector: { matchLabels: { app: name } },
            template: {
              metadata: { labels: { app: name, ...labels } },
              spec: {
                nodeSelector: { 'sandbox.remediator.io/test-pool': pool },
                affinity: {
                  nodeAffinity: {
                    preferredDuringSchedulingIgnoredDuringExecution: [
                      {
                        weight: 100,
                        preference: {
                          matchExpressions: [
                            { key: 'kubernetes.io/hostname', operator: 'In', values: [sickName] },
                          ],
                        },
                      },
                    ],
                  },
                },
                terminationGracePeriodSeconds: 0,
                volumes,
                containers: [
                  {
                    name: 'app',
                    image: 'registry.local/app:1',
                    volumeMounts: volumes.map((v) => ({
                      name: (v as { name: string }).name,
                      mountPath: '/data',
                    })),
                  },
                ],
              },
            },
          },
        });
      for (const made of [
        await deployment('web', { io: 'heavy' }),
        await deployment('cache', { io: 'heavy' }, [{ name: 'scratch', emptyDir: {} }]),
        await deployment('db', { io: 'heavy' }, [
          { name: 'data', persistentVolumeClaim: { claimName: 'db-data' } },
        ]),
      ])
        expect(made.code, made.stderr).to.equal(0);
      for (const app of ['web', 'cache', 'db']) {
        const [running] = await waitForRunning(tenant.namespace, app, 1);
        expect(running?.spec?.nodeName, `${app} on the sick node`).to.equal(sickName);
      }
      const sick = new SaturatedNode(sickName, cleanup);
      await sick.start();
      expect((await deployment('stuck', {})).code).to.equal(0);
      await sick.pressure('load');
      await eventually(
        'the plain pod migrated',
        async () => (await eventsWithReason('MigratedIoHeavyPod', tenant.namespace)).length >= 1,
        { timeoutMs: 60_000 },
      );
      // Each held by its own guard, named by the pod (a Deployment's pod: <app>-<hash>-<id>).
      const blocked = await eventually('the other two held, each named', async () => {
        const held = ((await getHealth(sickName))?.blocked ?? []).filter((b) => b.kind === 'Migrate');
        const byApp = held.map((b) => `${/\/(cache|db)-/.exec(b.target)?.[1] ?? b.target} ${b.guard}`);
        return byApp.length >= 2 ? byApp.sort() : undefined;
      });
      expect(blocked).to.deep.equal(['cache LocalStorage', 'db NodeBoundVolume']);
      const messages = (await eventsWithReason('RemediationBlocked', 'default', sickName)).map(
        (e) => e.message,
      );
      expect(messages.some((m) => m.includes('LocalStorage') && m.includes('scratch'))).to.equal(true);
      expect(messages.some((m) => m.includes('NodeBoundVolume') && m.includes('db-data'))).to.equal(true);
      await new Promise((r) => setTimeout(r, 4_000));
      const where = async (app: string) => (await podsOf(tenant.namespace, app)).map((p) => p.spec?.nodeName);
      expect(await where('web'), 'the plain pod moved').to.deep.equal([spare]);
      expect(await where('cache'), 'the emptyDir pod stayed').to.deep.equal([sickName]);
      expect(await where('db'), 'the pod on the local volume stayed').to.deep.equal([sickName]);
      expect(await eventsWithReason('MigratedIoHeavyPod', tenant.namespace)).to.have.length(1);
    });

    it('reads Prometheus only through its token and CA, and no series of another job', async function () {
      this.timeout(180_000);
      const { pool, names } = await createNodes(cleanup, 2);
      const [exported, faked] = names as [string, string];
      // A tenant's own exporter, scraped with its labels honoured, claims the other node is saturated: PSI growing a
      // second a second.
      const started = Date.now();
      const fake = createServer((_req, res) => {
        const seconds = ((Date.now() - started) / 1000).toFixed(3);
        res.end(
          [
            `node_pressure_io_waiting_seconds_total{node="${faked}"} ${seconds}`,
            `node_pressure_io_stalled_seconds_total{node="${faked}"} ${seconds}`,
            `node_procs_blocked{node="${faked}"} 500`,
            '',
          ].join('\n'),
        );
      });
      await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
      cleanup.add(() => new Promise((resolve) => fake.close(resolve)));
      const monitoring = new Monitoring();
      cleanup.add(() => monitoring.stop());
      await monitoring.start(exported, { tenant: `127.0.0.1:${(fake.address() as AddressInfo).port}` });
      const proxy = new AuthProxy(monitoring.prometheusUrl);
      await proxy.start();
      cleanup.add(() => proxy.stop());
      const secret = {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: 'sandbox-remediator-prometheus', namespace: 'sandbox-remediator-system' },
        stringData: { 'ca.crt': proxy.ca, token: `${proxy.token}\n` },
      };
      const applied = await kubectl(['apply', '-f', '-'], JSON.stringify(secret));
      expect(applied.code, applied.stderr).to.equal(0);
      cleanup.add(() =>
        kubectl(['delete', 'secret', '-n', 'sandbox-remediator-system', 'sandbox-remediator-prometheus']),
      );
      const policy = uniqueName('it-prom');
      const spec = (seriesSelector?: string) => ({
        nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
        ioPressure: {
          ...FAST_IO,
          source: 'prometheus',
          prometheus: {
            url: proxy.url,
            nodeLabel: 'node',
            nodeLabelRegex: '^(.+)$',
            ...(seriesSelector ? { seriesSelector } : {}),
            ca: { secret: { name: 'sandbox-remediator-prometheus', key: 'ca.crt' } },
            bearerToken: { secret: { name: 'sandbox-remediator-prometheus', key: 'token' } },
          },
        },
      });
      await applyPolicy(cleanup, policy, spec('{job="node"}'));
      const psi = async (node: string) => (await getHealth(node))?.ioReading?.psiSomeAvg10Percent;
      await eventually(
        "node_exporter's node read through the token and the CA",
        async () => (await psi(exported)) !== undefined,
        {
          timeoutMs: 90_000,
          intervalMs: 1000,
        },
      );
      // Long enough for the fake series to have two samples, and for a pass to have read them if it would.
      await new Promise((r) => setTimeout(r, 8_000));
      const health = await getHealth(faked);
      expect(health?.ioReading, "the tenant's series not read").to.equal(undefined);
      expect(health?.ioPressure?.observation).to.equal('Unknown');
      expect(proxy.answered.get(401) ?? 0, 'every query carried the token').to.equal(0);
      expect(proxy.answered.get(200) ?? 0).to.be.above(0);
      // The same policy without the selector believes the tenant: the guard above is what kept it out.
      await applyPolicy(cleanup, policy, spec());
      const believed = await eventually(
        'the faked series read without the selector',
        async () => {
          const value = await psi(faked);
          return value !== undefined && value > 10 ? value : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 1000 },
      );
      log(`without seriesSelector the tenant's series read as PSI ${believed}%`);
    });

    it("holds the rollout that feeds the saturated node, and lets another team's rollouts on healthy nodes run to the end", async function () {
      this.timeout(180_000);
      const feeding = await Tenant.create(cleanup);
      const other = await Tenant.create(cleanup);
      const { pool, names } = await createNodes(cleanup, 3);
      const sickName = names[0]!;
      await applyPolicy(cleanup, uniqueName('it-scope'), {
        nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
        detection: { stuckThresholdSeconds: 3 },
        ioPressure: FAST_IO,
        remediation: { evictStuckPods: false, throttleRollouts: { maxConcurrentRollouts: 1 } },
        safety: { maxUnhealthyNodes: 1, cooldownSeconds: 5 },
      });
      const sick = new SaturatedNode(sickName, cleanup);
      await sick.start();
      await sick.pressure('load');
      const deployment = (name: string, affinity: object, minReadySeconds = 0, replicas = 1) => ({
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        metadata: { name },
        spec: {
          replicas,
          minReadySeconds,
          selector: { matchLabels: { app: name } },
          template: {
            metadata: { labels: { app: name } },
            spec: {
              nodeSelector: { 'sandbox.remediator.io/test-pool': pool },
              affinity: {
                nodeAffinity: {
                  requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [affinity] },
                },
              },
              terminationGracePeriodSeconds: 0,
              containers: [{ name: 'app', image: 'registry.local/app:1' }],
            },
          },
        },
      });
      const onSick = {
        matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [sickName] }],
      };
      const offSick = {
        matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'NotIn', values: [sickName] }],
      };
      expect((await feeding.create(deployment('web', onSick))).code).to.equal(0);
      await eventually(
        'the rollout feeding the saturated node held',
        async () =>
          (await api().apps.readNamespacedDeployment({ name: 'web', namespace: feeding.namespace })).spec
            ?.paused === true,
        { timeoutMs: 60_000 },
      );
      // The other team rolls out two Deployments on the healthy nodes, each for 15 s (minReadySeconds): with
      // maxConcurrentRollouts 1 the operator used to queue one of them.
      for (const name of ['api', 'worker'])
        expect((await other.create(deployment(name, offSick, 15, 2))).code).to.equal(0);
      const done = async (name: string) => {
        const d = await api().apps.readNamespacedDeployment({ name, namespace: other.namespace });
        return (d.status?.availableReplicas ?? 0) === 2 && (d.status?.updatedReplicas ?? 0) === 2;
      };
      await eventually(
        'both rolled out to the end',
        async () => (await done('api')) && (await done('worker')),
        {
          timeoutMs: 90_000,
          intervalMs: 1000,
        },
      );
      expect(await eventsWithReason('RolloutPaused', other.namespace), 'never held nor queued').to.deep.equal(
        [],
      );
      const web = await api().apps.readNamespacedDeployment({ name: 'web', namespace: feeding.namespace });
      expect(web.spec?.paused, 'the feeder still held').to.equal(true);
    });

    it('hands over a node and a Deployment released by hand, and an excluded node, and undoes only the rest on recovery', async function () {
      this.timeout(240_000);
      const tenant = await Tenant.create(cleanup);
      const { pool, names } = await createNodes(cleanup, 5);
      const [released, excluded, control] = names as [string, string, string];
      await applyPolicy(cleanup, uniqueName('it-handover'), {
        nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
        detection: { stuckThresholdSeconds: 3 },
        ioPressure: FAST_IO,
        remediation: { evictStuckPods: false, throttleRollouts: { maxConcurrentRollouts: 5 } },
        safety: { maxUnhealthyNodes: 3, cooldownSeconds: 5 },
      });
      const sick = [released, excluded, control].map((n) => new SaturatedNode(n, cleanup));
      for (const node of sick) await node.start();
      for (const node of sick) await node.pressure('load');
      // A stuck pod on each: the tenant's Deployment on the first (held as it feeds it), bare pods on the others.
      expect(
        (
          await tenant.create({
            apiVersion: 'apps/v1',
            kind: 'Deployment',
            metadata: { name: 'web' },
            spec: {
              replicas: 1,
              selector: { matchLabels: { app: 'web' } },
              template: {
                metadata: { labels: { app: 'web' } },
                spec: {
                  nodeSelector: { 'kubernetes.io/hostname': released },
                  containers: [{ name: 'app', image: 'registry.local/app:1' }],
                },
              },
            },
          })
        ).code,
      ).to.equal(0);
      for (const node of [excluded, control])
        expect(
          (
            await tenant.create({
              apiVersion: 'v1',
              kind: 'Pod',
              metadata: { name: `bare-${node.slice(-2)}` },
              spec: { nodeName: node, containers: [{ name: 'app', image: 'registry.local/app:1' }] },
            })
          ).code,
        ).to.equal(0);
      const stamped = async (node: string) =>
        stampsOf(await readNode(node))['sandbox.remediator.io/remediated-by'];
      await eventually(
        'all three cordoned by us, and web held',
        async () => {
          const nodes = await Promise.all([released, excluded, control].map(stamped));
          const web = await api().apps.readNamespacedDeployment({ name: 'web', namespace: tenant.namespace });
          return (
            nodes.every(Boolean) &&
            web.metadata?.annotations?.['sandbox.remediator.io/paused-by'] !== undefined
          );
        },
        { timeoutMs: 90_000 },
      );
      const cordonEvent = (await eventsWithReason('Cordoned', 'default', released)).map((e) => e.message);
      expect(cordonEvent.join('\n'), 'the cordon says how to take it over').to.include(
        `kubectl sandbox release ${released}`,
      );

      // A person takes over the first node and the Deployment; another labels the second node excluded.
      for (const target of [released, `deployment/${tenant.namespace}/web`]) {
        const run = await releaseCli(target);
        expect(run.code, run.stderr).to.equal(0);
        expect(run.stdout).to.match(/^Released /);
      }
      expect(
        (await kubectl(['label', 'node', excluded, 'sandbox.remediator.io/exclude=true'])).code,
      ).to.equal(0);
      await eventually('the excluded node released', async () => (await stamped(excluded)) === undefined);

      // Recovery: the control node is undone, the others are left as their new owners have them.
      for (const node of sick) await node.end();
      await eventually(
        'the control node uncordoned on recovery',
        async () => (await readNode(control)).spec?.unschedulable !== true,
        {
          timeoutMs: 90_000,
        },
      );
      await new Promise((r) => setTimeout(r, 3_000));
      for (const node of [released, excluded]) {
        const n = await readNode(node);
        expect(n.spec?.unschedulable, `${node} still cordoned`).to.equal(true);
        expect(stampsOf(n), `${node} carries none of our stamps`).to.deep.equal({});
        expect(await eventsWithReason('RemediationReleased', 'default', node)).to.have.length(1);
      }
      const web = await api().apps.readNamespacedDeployment({ name: 'web', namespace: tenant.namespace });
      expect(web.spec?.paused, 'the released Deployment still paused').to.equal(true);
      expect(await eventsWithReason('RolloutResumed', tenant.namespace)).to.deep.equal([]);
      expect(await eventsWithReason('RemediationReleased', tenant.namespace)).to.have.length(1);
    });
  });
});

/** `sandbox-remediator release TARGET`, as a person runs it with their own kubeconfig. */
const releaseCli = (target: string) => runCli(['release', target, `--kubeconfig=${KUBECONFIG}`]);
