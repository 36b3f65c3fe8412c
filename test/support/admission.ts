// ValidatingAdmissionPolicies on the real apiserver, for the tests of the agent's and the operator's: what a refused
// write was told, that a policy type-checked, and waiting until a freshly applied policy is in force.
import { expect } from 'chai';
import { apiStatus } from '../../src/kube/errors.js';
import { eventually, kubectl } from './cluster.js';

/** What the apiserver said when it refused a write (403 unless told); fails if the write went through. */
export async function refusal(write: () => Promise<unknown>, code = 403): Promise<string> {
  try {
    await write();
  } catch (err) {
    const status = apiStatus(err);
    expect(status?.code, String(err)).to.equal(code);
    return status!.message;
  }
  return expect.fail('the write was allowed');
}

/** The apiserver's words for a denial by `policy` (bound under its own name): its name, then the message. */
export const deniedBy = (policy: string, message: string) =>
  `ValidatingAdmissionPolicy '${policy}' with binding '${policy}' denied request: ${message}`;

/** Once the policy's status has caught up with its spec: the warnings of its type check. */
export async function typeCheckWarnings(policy: string): Promise<unknown[]> {
  const status = await eventually('the policy type-checked', async () => {
    const result = await kubectl(['get', 'validatingadmissionpolicy', policy, '-o', 'json']);
    const vap = JSON.parse(result.stdout) as {
      metadata: { generation: number };
      status?: { observedGeneration?: number; typeChecking?: { expressionWarnings?: unknown[] } };
    };
    return vap.status?.observedGeneration === vap.metadata.generation && vap.status;
  });
  return status.typeChecking?.expressionWarnings ?? [];
}

/**
 * Policies load asynchronously: until `probe`, a write the policy exists to refuse, is refused by it. A probe that
 * compares old and new must change something each time: repeated after it got through, it changes nothing.
 */
export async function policyInForce(policy: string, probe: () => Promise<unknown>): Promise<void> {
  await eventually(
    'the policy in force',
    async () => {
      try {
        await probe();
        return false;
      } catch (err) {
        return apiStatus(err)?.message.includes(policy) === true;
      }
    },
    { timeoutMs: 30_000 },
  );
}
