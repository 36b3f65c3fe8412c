import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';

/**
 * Reads one key of a Secret in the operator's own namespace: the credentials a policy names for its Prometheus. The
 * operator's Role there names the Secrets it may read (config/rbac: sandbox-remediator-prometheus); any other is
 * refused by the apiserver, and the source reports it.
 */
export function secretReader(
  kc: KubeConfig,
  namespace: string,
): (name: string, key: string) => Promise<string> {
  const core = kc.makeApiClient(CoreV1Api);
  return async (name, key) => {
    const secret = await core.readNamespacedSecret({ name, namespace });
    const value = secret.data?.[key];
    if (value === undefined) throw new Error(`Secret ${namespace}/${name} has no key ${key}`);
    return Buffer.from(value, 'base64').toString('utf8');
  };
}
