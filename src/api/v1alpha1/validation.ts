import type { z } from 'zod';
import { labelValueProblem, qualifiedNameProblem, type LabelSelector } from './meta.js';
import { SandboxPolicySpecSchema, type PolicyProblem, type SandboxPolicySpec } from './sandbox-policy.js';

export type PolicyValidation =
  { valid: true; spec: SandboxPolicySpec; problems: [] } | { valid: false; problems: PolicyProblem[] };

/** Joins a zod issue path onto a field path: ['a', 0, 'b'] -> spec.a[0].b */
function fieldPath(base: string, path: readonly PropertyKey[]): string {
  return path.reduce<string>(
    (acc, part) => (typeof part === 'number' ? `${acc}[${part}]` : `${acc}.${String(part)}`),
    base,
  );
}

function issueProblems(error: z.ZodError, base: string): PolicyProblem[] {
  return error.issues.flatMap((issue) =>
    issue.code === 'unrecognized_keys'
      ? issue.keys.map((key) => ({ field: fieldPath(base, [...issue.path, key]), message: 'unknown field' }))
      : [{ field: fieldPath(base, issue.path), message: issue.message }],
  );
}

/** Every problem with a label selector that the apiserver's own selector parsing would refuse. */
export function selectorProblems(selector: LabelSelector, field: string): PolicyProblem[] {
  const problems: PolicyProblem[] = [];
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    const keyProblem = qualifiedNameProblem(key);
    if (keyProblem)
      problems.push({ field: `${field}.matchLabels`, message: `key ${JSON.stringify(key)}: ${keyProblem}` });
    const valueProblem = labelValueProblem(value);
    if (valueProblem)
      problems.push({ field: `${field}.matchLabels.${key}`, message: `value ${valueProblem}` });
  }
  (selector.matchExpressions ?? []).forEach((requirement, i) => {
    const at = `${field}.matchExpressions[${i}]`;
    const keyProblem = qualifiedNameProblem(requirement.key);
    if (keyProblem) problems.push({ field: `${at}.key`, message: keyProblem });
    const values = requirement.values ?? [];
    const needsValues = requirement.operator === 'In' || requirement.operator === 'NotIn';
    if (needsValues && values.length === 0) {
      problems.push({
        field: `${at}.values`,
        message: `must be non-empty for operator ${requirement.operator}`,
      });
    }
    if (!needsValues && values.length > 0) {
      problems.push({ field: `${at}.values`, message: `must be empty for operator ${requirement.operator}` });
    }
    values.forEach((value, j) => {
      const valueProblem = labelValueProblem(value);
      if (valueProblem) problems.push({ field: `${at}.values[${j}]`, message: valueProblem });
    });
  });
  return problems;
}

function isEmptySelector(selector: LabelSelector): boolean {
  return (
    Object.keys(selector.matchLabels ?? {}).length === 0 && (selector.matchExpressions ?? []).length === 0
  );
}

function urlProblem(raw: string): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `${JSON.stringify(raw)} is not a URL`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    return `scheme must be http or https, not ${url.protocol}`;
  return undefined;
}

function regexProblem(raw: string): string | undefined {
  try {
    const groups = new RegExp(`${raw}|`).exec('')?.length ?? 1;
    return groups < 2 ? 'must contain a capture group for the node name' : undefined;
  } catch (err) {
    return `not a valid regular expression: ${(err as Error).message}`;
  }
}

/**
 * What the schema cannot say: relations between fields and the syntax of embedded mini-languages.
 * Pure; returns every problem, with its field path.
 */
export function crossFieldProblems(spec: SandboxPolicySpec): PolicyProblem[] {
  const problems: PolicyProblem[] = [];
  if (spec.nodeSelector) problems.push(...selectorProblems(spec.nodeSelector, 'spec.nodeSelector'));

  const io = spec.ioPressure;
  if (io.source === 'prometheus' && !io.prometheus) {
    problems.push({ field: 'spec.ioPressure.prometheus', message: 'is required when source is prometheus' });
  }
  if (io.prometheus) {
    const bad = urlProblem(io.prometheus.url);
    if (bad) problems.push({ field: 'spec.ioPressure.prometheus.url', message: bad });
    const badRegex = regexProblem(io.prometheus.nodeLabelRegex);
    if (badRegex) problems.push({ field: 'spec.ioPressure.prometheus.nodeLabelRegex', message: badRegex });
  }
  if (
    io.source === 'nodeCondition' &&
    ['Ready', 'MemoryPressure', 'PIDPressure'].includes(io.nodeCondition.type)
  ) {
    problems.push({
      field: 'spec.ioPressure.nodeCondition.type',
      message: `${io.nodeCondition.type} does not report IO pressure; name a condition that does (e.g. IoPressure)`,
    });
  }
  if (io.staleAfterSeconds < io.sustainSeconds / 2 && io.sustainSeconds > 0) {
    // A reading must live long enough to be seen again while the sustain window fills.
    problems.push({
      field: 'spec.ioPressure.staleAfterSeconds',
      message: `must be at least half of sustainSeconds (${io.sustainSeconds}), or readings expire before pressure can be sustained`,
    });
  }

  const remediation = spec.remediation;
  if (remediation.taint) {
    const bad = qualifiedNameProblem(remediation.taint.key);
    if (bad) problems.push({ field: 'spec.remediation.taint.key', message: bad });
    const badValue = labelValueProblem(remediation.taint.value);
    if (badValue) problems.push({ field: 'spec.remediation.taint.value', message: badValue });
  }
  if (remediation.migrateWorkloads) {
    const selector = remediation.migrateWorkloads.podSelector;
    if (isEmptySelector(selector)) {
      problems.push({
        field: 'spec.remediation.migrateWorkloads.podSelector',
        message: 'must not be empty: an empty selector would evict every pod on the node',
      });
    }
    problems.push(...selectorProblems(selector, 'spec.remediation.migrateWorkloads.podSelector'));
  }
  const paced = remediation.throttleRollouts?.pacePodStarts?.namespaceSelector;
  if (paced) {
    if (isEmptySelector(paced))
      problems.push({
        field: 'spec.remediation.throttleRollouts.pacePodStarts.namespaceSelector',
        message: 'must not be empty: pacing every namespace must be asked for by name or label',
      });
    problems.push(
      ...selectorProblems(paced, 'spec.remediation.throttleRollouts.pacePodStarts.namespaceSelector'),
    );
  }
  const namespaces = remediation.throttleRollouts?.namespaceSelector;
  if (namespaces)
    problems.push(...selectorProblems(namespaces, 'spec.remediation.throttleRollouts.namespaceSelector'));
  return problems;
}

/**
 * Validates a SandboxPolicy spec as a user wrote it (defaults not yet applied). The schema is checked
 * first; the cross-field rules then run on every top-level section that passed it, so one bad section
 * does not hide the problems of another.
 */
export function validateSandboxPolicySpec(raw: unknown): PolicyValidation {
  const parsed = SandboxPolicySpecSchema.safeParse(raw ?? {});
  if (parsed.success) {
    const problems = crossFieldProblems(parsed.data);
    return problems.length === 0
      ? { valid: true, spec: parsed.data, problems: [] }
      : { valid: false, problems };
  }
  const problems = issueProblems(parsed.error, 'spec');
  const broken = new Set(parsed.error.issues.map((issue) => String(issue.path[0] ?? '')));
  if (broken.has('')) return { valid: false, problems };
  // Re-validate with the broken sections replaced by their defaults, and keep the cross-field problems
  // that fall in the sections that were fine.
  const patched = Object.fromEntries(
    Object.entries(raw as Record<string, unknown>).filter(([section]) => !broken.has(section)),
  );
  const reparsed = SandboxPolicySpecSchema.safeParse(patched);
  if (reparsed.success) {
    for (const problem of crossFieldProblems(reparsed.data)) {
      const section = problem.field.split(/[.[]/)[1] ?? '';
      if (!broken.has(section)) problems.push(problem);
    }
  }
  return { valid: false, problems };
}
