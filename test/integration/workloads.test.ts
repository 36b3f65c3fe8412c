import { expect } from 'chai';
import { api, Cleanup, createNamespace, createNodes, eventually } from '../support/cluster.js';

describe('kwok workloads on the real control plane', function () {
  const cleanup = new Cleanup();
  afterEach(() => cleanup.run());

  it('rolls a 3-replica Deployment out to Ready, replaces an evicted pod, and garbage-collects on delete', async () => {
    const { core, apps } = api();
    const namespace = await createNamespace(cleanup);
    const { pool } = await createNodes(cleanup, 2);
    await apps.createNamespacedDeployment({
      namespace,
      body: {
        metadata: { name: 'web' },
        spec: {
          replicas: 3,
          selector: { matchLabels: { app: 'web' } },
          template: {
            metadata: { labels: { app: 'web' } },
            spec: {
              nodeSelector: { 'sandbox.remediator.io/test-pool': pool },
              containers: [{ name: 'web', image: 'registry.local/web:1' }],
            },
          },
        },
      },
    });
    await eventually('3/3 ready replicas', async () => {
      const d = await apps.readNamespacedDeployment({ name: 'web', namespace });
      return d.status?.readyReplicas === 3 && d.status.updatedReplicas === 3;
    });
    const pods = (await core.listNamespacedPod({ namespace })).items;
    expect(pods.map((p) => p.status?.phase)).to.deep.equal(['Running', 'Running', 'Running']);
    expect(pods.every((p) => p.spec?.nodeName?.startsWith(pool))).to.equal(true);

    const victim = pods[0]!.metadata!.name!;
    await core.createNamespacedPodEviction({
      name: victim,
      namespace,
      body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: victim, namespace } },
    });
    await eventually('the evicted pod replaced and all 3 Running again', async () => {
      const now = (await core.listNamespacedPod({ namespace })).items;
      return (
        now.length === 3 &&
        !now.some((p) => p.metadata?.name === victim) &&
        now.every((p) => p.status?.phase === 'Running')
      );
    });

    await apps.deleteNamespacedDeployment({ name: 'web', namespace, propagationPolicy: 'Background' });
    await eventually('the garbage collector to remove ReplicaSets and pods', async () => {
      const [rs, left] = await Promise.all([
        apps.listNamespacedReplicaSet({ namespace }),
        core.listNamespacedPod({ namespace }),
      ]);
      return rs.items.length === 0 && left.items.length === 0;
    });
  });
});
