import { validateSandboxPolicySpec, type SandboxPolicySpec } from '../api/v1alpha1/index.js';
import type { PolicyObject } from '../ports/cluster.js';
import type { z } from 'zod';
import type { PolicySummarySchema } from './schema.js';

export type PolicySummary = z.infer<typeof PolicySummarySchema>;

/**
 * What a policy says about acting: valid or not (its Valid condition when the operator has judged it, else our own
 * validation, the same the operator runs), dry run, paused, storm. The spec with defaults when it is valid.
 */
export function summarisePolicy(
  name: string,
  policy: PolicyObject | undefined,
): { summary: PolicySummary; spec?: SandboxPolicySpec } {
  if (!policy) return { summary: { name, found: false, problems: [] } };
  const validation = validateSandboxPolicySpec(policy.spec);
  const conditions = policy.status?.conditions ?? [];
  const condition = (type: string) => conditions.find((c) => c.type === type);
  const judged = condition('Valid');
  const valid = judged ? judged.status === 'True' : validation.valid;
  const stated = policy.status?.problems ?? [];
  // A Valid=False condition without a list (an older operator) still says why in its message.
  const problems = !judged
    ? validation.problems
    : stated.length > 0 || valid
      ? stated
      : [{ field: 'spec', message: judged.message }];
  const spec = validation.valid ? validation.spec : undefined;
  const active = condition('Active');
  const summary: PolicySummary = { name, found: true, valid, problems: valid ? [] : [...problems] };
  if (spec || active) {
    summary.dryRun = (spec?.safety.dryRun ?? false) || active?.reason === 'DryRun';
    summary.paused = (spec?.safety.paused ?? false) || active?.reason === 'Paused';
  }
  const storm = condition('StormDetected');
  if (storm) summary.stormDetected = storm.status === 'True';
  return spec ? { summary, spec } : { summary };
}
