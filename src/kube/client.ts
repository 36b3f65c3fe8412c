import { KubeConfig } from '@kubernetes/client-node';

export type { KubeConfig } from '@kubernetes/client-node';

/** Loads a kubeconfig: the given file, else $KUBECONFIG, ~/.kube/config, or the in-cluster service account. */
export function loadKubeConfig(path?: string): KubeConfig {
  const kc = new KubeConfig();
  if (path) kc.loadFromFile(path);
  else kc.loadFromDefault();
  return kc;
}

export function serverOf(kc: KubeConfig): string | undefined {
  return kc.getCurrentCluster()?.server;
}
