import { expect } from 'chai';
import type { Condition, SandboxHealthStatus, SandboxPolicyStatus } from '../../src/api/v1alpha1/index.js';
import { Watch } from '@kubernetes/client-node';
import { api, type Cleanup, kubeConfig, kubectl } from './cluster.js';

const GROUP = 'sandbox.remediator.io';

export async function getHealth(node: string): Promise<SandboxHealthStatus | undefined> {
  const { objects } = api();
  try {
    const h = await objects.read<{
      apiVersion: string;
      kind: string;
      metadata: { name: string };
      status?: SandboxHealthStatus;
    }>({
      apiVersion: `${GROUP}/v1alpha1`,
      kind: 'SandboxHealth',
      metadata: { name: node },
    });
    return h.status;
  } catch {
    return undefined;
  }
}

/** Every status a node's SandboxHealth has had since `watchHealth` was called, in order, as the watch delivered it. */
export interface HealthHistory {
  readonly seen: readonly SandboxHealthStatus[];
}

/**
 * Watches a node's SandboxHealth and keeps every status it takes, so that a test sees a state the operator holds for
 * one pass only, which a poll can miss. A watch the apiserver ends is resumed from the last version seen; the
 * watch stops at cleanup.
 */
export async function watchHealth(cleanup: Cleanup, node: string): Promise<HealthHistory> {
  const seen: SandboxHealthStatus[] = [];
  const watch = new Watch(kubeConfig());
  let version: string | undefined;
  let stopped = false;
  let abort: AbortController | undefined;
  const start = async (): Promise<void> => {
    abort = await watch.watch(
      `/apis/${GROUP}/v1alpha1/sandboxhealths`,
      { fieldSelector: `metadata.name=${node}`, ...(version ? { resourceVersion: version } : {}) },
      (type: string, object: { metadata?: { resourceVersion?: string }; status?: SandboxHealthStatus }) => {
        if (type === 'BOOKMARK' || type === 'ERROR') return;
        version = object.metadata?.resourceVersion ?? version;
        if (object.status) seen.push(object.status);
      },
      () => {
        if (!stopped) setTimeout(() => void start().catch(() => undefined), 200);
      },
    );
  };
  await start();
  cleanup.add(() => {
    stopped = true;
    abort?.abort();
    return Promise.resolve();
  });
  return { seen };
}

export async function getPolicyStatus(name: string): Promise<SandboxPolicyStatus | undefined> {
  const result = await kubectl(['get', 'sandboxpolicy', name, '-o', 'json']);
  return result.code === 0
    ? (JSON.parse(result.stdout) as { status?: SandboxPolicyStatus }).status
    : undefined;
}

export const condition = (conditions: Condition[] | undefined, type: string) =>
  conditions?.find((c) => c.type === type);

export async function applyPolicy(cleanup: Cleanup, name: string, spec: Record<string, unknown>) {
  const manifest = { apiVersion: `${GROUP}/v1alpha1`, kind: 'SandboxPolicy', metadata: { name }, spec };
  const result = await kubectl(['apply', '-f', '-'], JSON.stringify(manifest));
  expect(result.code, result.stderr).to.equal(0);
  cleanup.add(() => kubectl(['delete', 'sandboxpolicy', name, '--ignore-not-found']));
}
