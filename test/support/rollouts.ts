// Deployments for rollout tests on the real cluster: one whose rollout feeds a chosen node, and small readers.
import type { V1Deployment } from '@kubernetes/client-node';
import { api, kubectl, type Cleanup } from './cluster.js';

/** A Deployment whose pods prefer `prefer` (so a rollout's new pod lands there) and become available after 2 s. */
export async function createRolloutDeployment(
  cleanup: Cleanup,
  namespace: string,
  name: string,
  pool: string,
  prefer?: string,
) {
  const { apps } = api();
  const body: V1Deployment = {
    metadata: { name },
    spec: {
      replicas: 3,
      minReadySeconds: 2,
      strategy: { rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          nodeSelector: { 'sandbox.remediator.io/test-pool': pool },
          ...(prefer
            ? {
                affinity: {
                  nodeAffinity: {
                    preferredDuringSchedulingIgnoredDuringExecution: [
                      {
                        weight: 100,
                        preference: {
                          matchExpressions: [
                            { key: 'kubernetes.io/hostname', operator: 'In', values: [prefer] },
                          ],
                        },
                      },
                    ],
                  },
                },
              }
            : {}),
          terminationGracePeriodSeconds: 0,
          containers: [{ name: 'app', image: 'registry.local/app:1' }],
        },
      },
    },
  };
  await apps.createNamespacedDeployment({ namespace, body });
  cleanup.add(() => apps.deleteNamespacedDeployment({ name, namespace }).catch(() => undefined));
}

export const readDeployment = (namespace: string, name: string) =>
  api().apps.readNamespacedDeployment({ name, namespace });
export const isComplete = (d: V1Deployment) =>
  (d.status?.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0) &&
  d.status?.updatedReplicas === d.spec?.replicas &&
  d.status?.availableReplicas === d.spec?.replicas &&
  d.status?.replicas === d.spec?.replicas;
export const pausedBy = (d: V1Deployment) => d.metadata?.annotations?.['sandbox.remediator.io/paused-by'];
/** A new rollout: a changed pod template, as `kubectl rollout restart` makes one. */
export const restartRollout = (namespace: string, name: string) =>
  kubectl(['rollout', 'restart', `deployment/${name}`, '-n', namespace]);
