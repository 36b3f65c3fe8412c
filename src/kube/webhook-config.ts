// Registers the pacing webhook with the apiserver: fills in the address and CA of the MutatingWebhookConfiguration
// that config/webhook ships, and arms it where it paces (its matchCondition sandbox.remediator.io/armed). The operator
// creates none (its role cannot) and changes nothing else in it (its admission policy allows nothing else): rules,
// selectors, the admin's own matchConditions and `failurePolicy: Ignore` stay as the admin applied them.
import {
  AdmissionregistrationV1Api,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
} from '@kubernetes/client-node';
import { isArmedAs, withArming } from '../policy/webhook-arming.js';
import type { Registration } from '../ports/writes.js';
import { isNotFound } from './errors.js';

export const WEBHOOK_CONFIGURATION = 'sandbox-remediator-pacing';
export const WEBHOOK_NAME = 'pacing.sandbox.remediator.io';

/**
 * Points the shipped configuration's webhook at `url`, trusting `caPem`, armed by `armed` (the CEL of our
 * matchCondition: webhook-arming.ts): three fields, written only when they differ, with a test that the webhook at
 * that index is still ours.
 */
export async function registerPacingWebhook(
  kc: KubeConfig,
  options: { url: string; caPem: string; armed: string },
): Promise<Registration> {
  const api = kc.makeApiClient(AdmissionregistrationV1Api);
  let current;
  try {
    current = await api.readMutatingWebhookConfiguration({ name: WEBHOOK_CONFIGURATION });
  } catch (err) {
    if (isNotFound(err))
      return {
        registered: false,
        why: `the MutatingWebhookConfiguration ${WEBHOOK_CONFIGURATION} is not installed (kubectl apply -k config/webhook)`,
      };
    throw err;
  }
  const webhooks = current.webhooks ?? [];
  const index = webhooks.findIndex((w) => w.name === WEBHOOK_NAME);
  const hook = webhooks[index];
  if (!hook)
    return {
      registered: false,
      why: `the MutatingWebhookConfiguration ${WEBHOOK_CONFIGURATION} has no webhook ${WEBHOOK_NAME} (apply config/webhook again)`,
    };
  const caBundle = Buffer.from(options.caPem).toString('base64');
  const client = hook.clientConfig;
  if (
    client.url === options.url &&
    client.caBundle === caBundle &&
    isArmedAs(hook.matchConditions, options.armed)
  )
    return { registered: true, changed: false };
  await api.patchMutatingWebhookConfiguration(
    {
      name: WEBHOOK_CONFIGURATION,
      body: [
        // As read: the admin's matchConditions, kept beside ours, are not overwritten with an older list.
        { op: 'test', path: '/metadata/resourceVersion', value: current.metadata?.resourceVersion },
        { op: 'test', path: `/webhooks/${index}/name`, value: WEBHOOK_NAME },
        { op: 'add', path: `/webhooks/${index}/clientConfig/url`, value: options.url },
        { op: 'add', path: `/webhooks/${index}/clientConfig/caBundle`, value: caBundle },
        {
          op: 'add',
          path: `/webhooks/${index}/matchConditions`,
          value: withArming(hook.matchConditions, options.armed),
        },
      ],
      fieldManager: 'sandbox-remediator',
    },
    setHeaderOptions('Content-Type', PatchStrategy.JsonPatch),
  );
  return { registered: true, changed: true };
}
