import { expect } from 'chai';
import type { Condition, SandboxHealthStatus, SandboxPolicyStatus } from '../../src/api/v1alpha1/index.js';
import { api, type Cleanup, kubectl } from './cluster.js';

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
