import {
  CONTROL_PLANE_LABEL,
  EXCLUDE_LABEL,
  matchesSelector,
  selectorSpecificity,
  validateSandboxPolicySpec,
  type SandboxPolicySpec,
} from '../api/v1alpha1/index.js';
import type { NodeView } from '../detection/index.js';
import type { ClusterCache, PolicyObject } from '../ports/cluster.js';

export interface PolicyCandidate {
  name: string;
  createdAt: Date;
  spec: SandboxPolicySpec;
}

/** Whether a policy selects a node: its selector (default: not control-plane), never an excluded node. */
export function selectsNode(spec: SandboxPolicySpec, node: Pick<NodeView, 'labels'>): boolean {
  if (node.labels[EXCLUDE_LABEL] === 'true') return false;
  if (!spec.nodeSelector) return !Object.hasOwn(node.labels, CONTROL_PLANE_LABEL);
  return matchesSelector(spec.nodeSelector, node.labels);
}

/** Orders competing policies: the more specific selector wins, then the older policy, then the name. */
export function comparePolicies(a: PolicyCandidate, b: PolicyCandidate): number {
  return (
    selectorSpecificity(b.spec.nodeSelector) - selectorSpecificity(a.spec.nodeSelector) ||
    a.createdAt.getTime() - b.createdAt.getTime() ||
    a.name.localeCompare(b.name)
  );
}

export interface NodeAssignment {
  /** node name -> the policy that owns it */
  owner: Map<string, string>;
  /** policy name -> nodes it selects but another policy owns, with that owner */
  overlaps: Map<string, { node: string; ownedBy: string }[]>;
}

/** Assigns each node to at most one valid policy, deterministically. Pure. */
export function assignNodes(
  policies: readonly PolicyCandidate[],
  nodes: Iterable<Pick<NodeView, 'name' | 'labels'>>,
): NodeAssignment {
  const ranked = [...policies].sort(comparePolicies);
  const owner = new Map<string, string>();
  const overlaps = new Map<string, { node: string; ownedBy: string }[]>();
  for (const node of nodes) {
    const selecting = ranked.filter((p) => selectsNode(p.spec, node));
    const [winner, ...losers] = selecting;
    if (!winner) continue;
    owner.set(node.name, winner.name);
    for (const loser of losers) {
      const list = overlaps.get(loser.name) ?? [];
      list.push({ node: node.name, ownedBy: winner.name });
      overlaps.set(loser.name, list);
    }
  }
  return { owner, overlaps };
}

// Informers replace a view object on every change, so the object identity keys the validation result.
const validations = new WeakMap<PolicyObject, ReturnType<typeof validateSandboxPolicySpec>>();

/** A policy's spec validated (every problem listed), once per version of the object. */
export function validatePolicy(object: PolicyObject): ReturnType<typeof validateSandboxPolicySpec> {
  let result = validations.get(object);
  if (!result) validations.set(object, (result = validateSandboxPolicySpec(object.spec)));
  return result;
}

/** Valid policies with their parsed specs; invalid ones are left out of node ownership. */
export function validPolicies(
  policies: Iterable<PolicyObject>,
): (PolicyCandidate & { object: PolicyObject })[] {
  const valid: (PolicyCandidate & { object: PolicyObject })[] = [];
  for (const object of policies) {
    const result = validatePolicy(object);
    if (result.valid)
      valid.push({ name: object.name, createdAt: object.createdAt, spec: result.spec, object });
  }
  return valid;
}

/** The owning policy of each node, over all valid policies in the cache. */
export function assignmentOf(cache: Pick<ClusterCache, 'policies' | 'nodes'>): NodeAssignment {
  return assignNodes(validPolicies(cache.policies()), cache.nodes());
}

/** Whether a policy exists but is invalid: what it did stays frozen, neither judged nor undone, until it is fixed. */
export function isFrozenPolicy(cache: Pick<ClusterCache, 'policy'>, name: string | undefined): boolean {
  const object = name ? cache.policy(name) : undefined;
  return object !== undefined && !validatePolicy(object).valid;
}
