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
import { BoundedMap } from '../runtime/bounded-map.js';

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

// Keyed by what is validated, not by the object: its status, written at almost every pass of an incident, makes a new
// object each time and leaves the validation as it was. Bounded: an entry of a generation long gone is of no use.
const validations = new BoundedMap<string, ReturnType<typeof validateSandboxPolicySpec>>(1_000);
const specKey = (object: PolicyObject) => `${object.name}\n${JSON.stringify(object.spec)}`;

/** A policy's spec validated (every problem listed), once per spec. */
export function validatePolicy(object: PolicyObject): ReturnType<typeof validateSandboxPolicySpec> {
  const key = specKey(object);
  let result = validations.get(key);
  if (!result) validations.set(key, (result = validateSandboxPolicySpec(object.spec)));
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

/**
 * assignmentOf, made again only when a node's view or a policy's spec changed: a pass of an incident runs every few
 * milliseconds, and matching every selector against every node each time was most of its cost at 1,000 nodes. The
 * cache replaces a node's view when it changes (and keeps it when it does not), so identity tells.
 */
export class Ownership {
  private last: Assigned | undefined;

  of(cache: Pick<ClusterCache, 'policies' | 'nodes'>): NodeAssignment {
    return this.current(cache).assignment;
  }

  /** The nodes a policy owns: the same array for as long as the assignment holds. */
  ownedBy(cache: Pick<ClusterCache, 'policies' | 'nodes'>, policy: string): readonly string[] {
    const { assignment, owned } = this.current(cache);
    let nodes = owned.get(policy);
    if (!nodes) {
      nodes = [];
      for (const [node, owner] of assignment.owner) if (owner === policy) nodes.push(node);
      owned.set(policy, nodes);
    }
    return nodes;
  }

  private current(cache: Pick<ClusterCache, 'policies' | 'nodes'>): Assigned {
    const objects = [...cache.policies()];
    // A policy deleted and made again (a new uid and creation time) may rank differently with the same spec.
    const policies = objects.map((p) => `${p.uid}/${specKey(p)}`);
    const nodes = [...cache.nodes()];
    const last = this.last;
    if (last && sameItems(last.policies, policies) && sameItems(last.nodes, nodes)) return last;
    const assignment = assignNodes(validPolicies(objects), nodes);
    this.last = { policies, nodes, assignment, owned: new Map() };
    return this.last;
  }
}

interface Assigned {
  policies: string[];
  nodes: NodeView[];
  assignment: NodeAssignment;
  /** By policy, the nodes it owns, made when first asked. */
  owned: Map<string, string[]>;
}

const sameItems = <T>(a: readonly T[], b: readonly T[]) =>
  a.length === b.length && a.every((x, i) => x === b[i]);

/** Whether a policy exists but is invalid: what it did stays frozen, neither judged nor undone, until it is fixed. */
export function isFrozenPolicy(cache: Pick<ClusterCache, 'policy'>, name: string | undefined): boolean {
  const object = name ? cache.policy(name) : undefined;
  return object !== undefined && !validatePolicy(object).valid;
}
