// Registers the pacing webhook with the apiserver: a MutatingWebhookConfiguration that fails open.
import { KubernetesObjectApi, PatchStrategy, type KubeConfig } from '@kubernetes/client-node';

export const WEBHOOK_CONFIGURATION = 'sandbox-remediator-pacing';

/**
 * Creates or updates the registration: pod CREATE only, `failurePolicy: Ignore` and a 2-second timeout (with the
 * operator down, pods are created ungated and never blocked), kube-system and the operator's namespace excluded.
 */
export async function registerPacingWebhook(
  kc: KubeConfig,
  options: { url: string; caPem: string; operatorNamespace: string },
): Promise<void> {
  const objects = KubernetesObjectApi.makeApiClient(kc);
  const body = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'MutatingWebhookConfiguration',
    metadata: {
      name: WEBHOOK_CONFIGURATION,
      labels: { 'app.kubernetes.io/managed-by': 'sandbox-remediator' },
    },
    webhooks: [
      {
        name: 'pacing.sandbox.remediator.io',
        admissionReviewVersions: ['v1'],
        sideEffects: 'None',
        failurePolicy: 'Ignore',
        timeoutSeconds: 2,
        reinvocationPolicy: 'Never',
        clientConfig: { url: options.url, caBundle: Buffer.from(options.caPem).toString('base64') },
        rules: [
          {
            apiGroups: [''],
            apiVersions: ['v1'],
            operations: ['CREATE'],
            resources: ['pods'],
            scope: 'Namespaced',
          },
        ],
        namespaceSelector: {
          matchExpressions: [
            {
              key: 'kubernetes.io/metadata.name',
              operator: 'NotIn',
              values: ['kube-system', options.operatorNamespace],
            },
          ],
        },
      },
    ],
  };
  await objects.patch(body, undefined, undefined, 'sandbox-remediator', true, PatchStrategy.ServerSideApply);
}
