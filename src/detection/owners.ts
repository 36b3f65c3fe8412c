import type { PodView } from './types.js';

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
