// Paged LISTs shared by the CLI's reads (diagnose, cleanup): every page of a list, and every rollout of one kind.
import type { AppsV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import type { RolloutKind } from '../api/v1alpha1/index.js';
import type { WorkloadView } from '../detection/index.js';
import { ARGO_ROLLOUTS } from './actuator.js';
import { isNotFound } from './errors.js';
import type { RawObject } from './informer.js';
import { argoRolloutView, daemonSetView, deploymentView, statefulSetView } from './workload-views.js';

export const PAGE = 500;

export interface Page<T> {
  items: T[];
  metadata?: { _continue?: string };
}

export async function listAll<T>(page: (token: string | undefined) => Promise<Page<T>>): Promise<T[]> {
  const items: T[] = [];
  let token: string | undefined;
  do {
    const result = await page(token);
    items.push(...result.items);
    token = result.metadata?._continue || undefined;
  } while (token);
  return items;
}

/** Like listAll, keeping of each page only what `keep` makes of its items: for lists too large to hold (every pod). */
export async function listKept<T, V>(
  page: (token: string | undefined) => Promise<Page<T>>,
  keep: (item: T) => V[],
): Promise<V[]> {
  const kept: V[] = [];
  let token: string | undefined;
  do {
    const result = await page(token);
    for (const item of result.items) kept.push(...keep(item));
    token = result.metadata?._continue || undefined;
  } while (token);
  return kept;
}

const paging = (token: string | undefined) => ({ limit: PAGE, ...(token ? { _continue: token } : {}) });

export const WORKLOAD_VIEWS: Record<RolloutKind, (raw: RawObject) => WorkloadView | undefined> = {
  Deployment: deploymentView,
  StatefulSet: statefulSetView,
  DaemonSet: daemonSetView,
  Rollout: argoRolloutView,
};

/** Every object of a rollout kind in the cluster, as the API returns them; Argo Rollouts not installed lists none. */
export async function listRollouts(
  apis: { apps: AppsV1Api; custom: CustomObjectsApi },
  kind: RolloutKind,
): Promise<RawObject[]> {
  const { apps, custom } = apis;
  const raw = (items: readonly unknown[]) => items as RawObject[];
  switch (kind) {
    case 'Deployment':
      return raw(await listAll((t) => apps.listDeploymentForAllNamespaces(paging(t))));
    case 'StatefulSet':
      return raw(await listAll((t) => apps.listStatefulSetForAllNamespaces(paging(t))));
    case 'DaemonSet':
      return raw(await listAll((t) => apps.listDaemonSetForAllNamespaces(paging(t))));
    case 'Rollout':
      try {
        return raw(
          await listAll(
            (t) =>
              custom.listClusterCustomObject({
                ...ARGO_ROLLOUTS,
                plural: 'rollouts',
                ...paging(t),
              }) as Promise<Page<unknown>>,
          ),
        );
      } catch (err) {
        if (isNotFound(err)) return [];
        throw err;
      }
  }
}
