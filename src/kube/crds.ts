// --install-crds: our CustomResourceDefinitions applied with server-side apply, so a CRD left by an older release
// is brought up to date (a create, as @dot-i/k8s-operator's registerCustomResourceDefinition does, leaves it
// stale), then waited on until the apiserver serves it, before any cache lists it.
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  ApiextensionsV1Api,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
  type V1CustomResourceDefinition,
} from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import type { Logger } from '../observability/logger.js';
import { describeError } from './errors.js';

/** The operator's field manager, as on its other writes (src/kube/actuator.ts). */
export const CRD_FIELD_MANAGER = 'sandbox-remediator';

/** The CustomResourceDefinitions in YAML files, refusing anything else. */
export async function readCustomResourceDefinitions(files: string[]): Promise<V1CustomResourceDefinition[]> {
  const texts = await Promise.all(files.map((file) => readFile(file, 'utf8')));
  return texts.flatMap((text, i) =>
    parseAllDocuments(text)
      .map((doc) => doc.toJS() as V1CustomResourceDefinition | null)
      .filter((crd) => crd !== null)
      .map((crd) => {
        if (crd.apiVersion !== 'apiextensions.k8s.io/v1' || crd.kind !== 'CustomResourceDefinition')
          throw new Error(`${files[i] ?? ''}: not an apiextensions.k8s.io/v1 CustomResourceDefinition`);
        return crd;
      }),
  );
}

/**
 * Applies each CRD (force: the operator's copy wins over anyone's edits of the same fields; fields only we set
 * before and no longer do are removed), then waits until every one is Established.
 */
export async function applyCustomResourceDefinitions(
  kc: KubeConfig,
  crds: V1CustomResourceDefinition[],
  logger: Logger,
  { timeoutMs = 60_000, pollMs = 250 } = {},
): Promise<void> {
  const api = kc.makeApiClient(ApiextensionsV1Api);
  for (const crd of crds) {
    const name = crd.metadata?.name ?? '';
    const applied = await api.patchCustomResourceDefinition(
      { name, body: crd, fieldManager: CRD_FIELD_MANAGER, force: true },
      setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply),
    );
    logger.info('Applied CustomResourceDefinition', { crd: name, generation: applied.metadata?.generation });
  }
  const deadline = Date.now() + timeoutMs;
  for (const crd of crds) {
    const name = crd.metadata?.name ?? '';
    for (;;) {
      let conditions: { type: string; status: string; reason?: string; message?: string }[] = [];
      try {
        conditions = (await api.readCustomResourceDefinition({ name })).status?.conditions ?? [];
      } catch (err) {
        if (Date.now() > deadline) throw err;
        logger.debug('Failed to read CustomResourceDefinition; retrying', {
          crd: name,
          error: describeError(err),
        });
      }
      if (conditions.some((c) => c.type === 'Established' && c.status === 'True')) break;
      if (Date.now() > deadline) {
        // NamesAccepted False (a plural or short name taken by another CRD) is the usual reason.
        const problems = conditions
          .filter((c) => c.status !== 'True')
          .map((c) => `${c.type}: ${c.message ?? ''}`);
        throw new Error(
          `CustomResourceDefinition ${name} not Established after ${timeoutMs} ms${problems.length > 0 ? ` (${problems.join('; ')})` : ''}`,
        );
      }
      await sleep(pollMs);
    }
    logger.info('CustomResourceDefinition is Established', { crd: name });
  }
}
