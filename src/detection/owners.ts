import type { PodView, WorkloadView } from './types.js';

/**
 * The Deployment a pod belongs to, as namespace/name: its controller is a ReplicaSet named
 * <deployment>-<pod-template-hash>, and the pod carries that hash as a label (the Deployment controller's own
 * naming). Undefined for any other pod.
 */
export function deploymentOf(
  pod: Pick<PodView, 'namespace' | 'labels' | 'controllerKind' | 'controllerName'>,
): string | undefined {
  const hash = pod.labels['pod-template-hash'];
  if (pod.controllerKind !== 'ReplicaSet' || !pod.controllerName || !hash) return undefined;
  const suffix = `-${hash}`;
  if (!pod.controllerName.endsWith(suffix) || pod.controllerName.length === suffix.length) return undefined;
  return `${pod.namespace}/${pod.controllerName.slice(0, -suffix.length)}`;
}

/** The rollout a pod belongs to, and the revision it runs, when its controller is one that rolls out. */
export interface PodRollout {
  /** Kind/namespace/name, as workloadKey gives it. */
  key: string;
  /** The revision the pod runs (compared with WorkloadView.revision); absent for a Deployment's. */
  revision?: string;
}

/** The key rollout throttling files a workload under: Kind/namespace/name. */
export const workloadKey = (w: Pick<WorkloadView, 'kind' | 'namespace' | 'name'>) =>
  `${w.kind}/${w.namespace}/${w.name}`;

/**
 * Which rollout a pod is of: a StatefulSet's or a DaemonSet's pods are theirs directly (with their
 * controller-revision-hash, or pod-template-generation, as the revision); an Argo Rollout's are its ReplicaSet's,
 * named <rollout>-<rollouts-pod-template-hash>; a Deployment's as deploymentOf says.
 */
export function rolloutOf(
  pod: Pick<PodView, 'namespace' | 'labels' | 'controllerKind' | 'controllerName'>,
): PodRollout | undefined {
  const { namespace, controllerKind, controllerName, labels } = pod;
  if (controllerName && controllerKind === 'StatefulSet') {
    const revision = labels['controller-revision-hash'];
    return { key: `StatefulSet/${namespace}/${controllerName}`, ...(revision ? { revision } : {}) };
  }
  if (controllerName && controllerKind === 'DaemonSet') {
    const revision = labels['pod-template-generation'];
    return { key: `DaemonSet/${namespace}/${controllerName}`, ...(revision ? { revision } : {}) };
  }
  const argoHash = labels['rollouts-pod-template-hash'];
  if (argoHash && controllerKind === 'ReplicaSet' && controllerName?.endsWith(`-${argoHash}`)) {
    const name = controllerName.slice(0, -argoHash.length - 1);
    return name ? { key: `Rollout/${namespace}/${name}`, revision: argoHash } : undefined;
  }
  const deployment = deploymentOf(pod);
  return deployment ? { key: `Deployment/${deployment}` } : undefined;
}
