// PURE: where the pacing webhook is armed. The apiserver calls it only for pods in namespaces a pacing policy could
// gate now (some node of the policy saturated), by a matchCondition the operator keeps in step with its policies:
// no other pod creation in the cluster waits on the operator, and none at all while nothing is saturated (ADR 0028).
import { matchesSelector } from '../api/v1alpha1/index.js';
import { UNPACED_NAMESPACES, type PacingPolicy } from './pacing.js';

/** The name of the webhook's matchCondition the operator owns; any other is the admin's, and kept. */
export const ARMING_CONDITION = 'sandbox.remediator.io/armed';

/**
 * Past this many namespaces the condition arms every namespace the shipped namespaceSelector lets through, rather
 * than list them all: a longer list would make the configuration, and the apiserver's evaluation, grow without bound.
 */
export const MAX_ARMED_NAMESPACES = 1_000;

export interface NamespaceLike {
  name: string;
  labels: Readonly<Record<string, string>>;
}

/**
 * The namespaces whose new pods some policy could gate now, sorted: those its namespaceSelector takes, while it has
 * a saturated node and gates (or counts, in a dry run). Never kube-system or the operator's own.
 */
export function pacedNamespaces(
  policies: readonly PacingPolicy[],
  namespaces: Iterable<NamespaceLike>,
  operatorNamespace: string | undefined,
): string[] {
  const arming = policies.filter((p) => (p.gating || p.dryRun) && p.saturated.length > 0);
  if (arming.length === 0) return [];
  const names: string[] = [];
  for (const ns of namespaces) {
    if (UNPACED_NAMESPACES.has(ns.name) || ns.name === operatorNamespace) continue;
    if (arming.some((p) => matchesSelector(p.namespaceSelector, ns.labels))) names.push(ns.name);
  }
  return names.sort();
}

/**
 * The CEL the apiserver evaluates before it calls the webhook: `false` when nothing is paced, else whether the pod's
 * namespace is one of these (namespace names are DNS labels: nothing in them needs quoting).
 */
export function armingExpression(namespaces: readonly string[]): string {
  if (namespaces.length === 0) return 'false';
  if (namespaces.length > MAX_ARMED_NAMESPACES) return 'true';
  return `request.namespace in [${namespaces.map((n) => `'${n}'`).join(', ')}]`;
}

export interface MatchCondition {
  name: string;
  expression: string;
}

/** The webhook's matchConditions with ours set to `expression`, where it stands: the admin's own are kept as they are. */
export function withArming(
  current: readonly MatchCondition[] | undefined,
  expression: string,
): MatchCondition[] {
  const ours = { name: ARMING_CONDITION, expression };
  const conditions = current ?? [];
  return conditions.some((c) => c.name === ARMING_CONDITION)
    ? conditions.map((c) => (c.name === ARMING_CONDITION ? ours : c))
    : [...conditions, ours];
}

/** Whether the webhook's matchConditions already hold ours with this expression. */
export function isArmedAs(current: readonly MatchCondition[] | undefined, expression: string): boolean {
  return (current ?? []).some((c) => c.name === ARMING_CONDITION && c.expression === expression);
}
