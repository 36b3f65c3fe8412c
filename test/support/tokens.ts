// ServiceAccount tokens for tests that act as a workload would: a token from the TokenRequest API, optionally
// bound to a pod as the kubelet mounts it, and a kubeconfig that carries nothing but that token.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CLUSTER_DIR, kubeConfig, kubectl } from './cluster.js';

/**
 * A token for `namespace/serviceAccount`. Bound to a pod, the apiserver adds the pod's node to the user's
 * extra info (authentication.kubernetes.io/node-name), as in the token the kubelet mounts.
 */
export async function createToken(
  namespace: string,
  serviceAccount: string,
  { boundToPod }: { boundToPod?: string } = {},
): Promise<string> {
  const bound = boundToPod ? ['--bound-object-kind=Pod', `--bound-object-name=${boundToPod}`] : [];
  const result = await kubectl([
    'create',
    'token',
    serviceAccount,
    '-n',
    namespace,
    '--duration=1h',
    ...bound,
  ]);
  if (result.code !== 0) throw new Error(`kubectl create token ${serviceAccount} failed: ${result.stderr}`);
  return result.stdout.trim();
}

/**
 * A kubeconfig file in `dir` with the local cluster's server and CA and this token as the only credential (the
 * admin kubeconfig's client certificate would win over a token given beside it).
 */
export async function writeTokenKubeconfig(
  dir: string,
  name: string,
  token: string,
  /** Another address of the apiserver (a pass-through a test can freeze); the admin kubeconfig's by default. */
  server = kubeConfig().getCurrentCluster()?.server,
): Promise<string> {
  if (!server) throw new Error('the admin kubeconfig names no server');
  const file = join(dir, `${name}.kubeconfig`);
  const config = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      { name: 'local', cluster: { server, 'certificate-authority': join(CLUSTER_DIR, 'pki', 'ca.crt') } },
    ],
    users: [{ name, user: { token } }],
    contexts: [{ name: 'local', context: { cluster: 'local', user: name } }],
    'current-context': 'local',
  };
  // JSON is YAML: kubectl and client-node read it as is.
  await writeFile(file, JSON.stringify(config), { mode: 0o600 });
  return file;
}
