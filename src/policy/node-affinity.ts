// PURE: whether a pod or a volume may be on a node, as the scheduler judges it from the pod's nodeSelector, its
// required node affinity and its tolerations, and from a PersistentVolume's node affinity. Used where the operator
// must not reach past a saturated node: a rollout is held, or a pod gated, only if its pods could land there, and a
// pod is not moved if its volume admits no other node.
import { arr, labels, obj, str, type Json } from '../detection/raw-json.js';

// The scheduling views are the pod's, read with it (detection/types.ts); this file judges them.
export type { NodeSelectorRequirement, NodeSelectorTerm, Placement, Toleration } from '../detection/types.js';
import type { NodeSelectorRequirement, NodeSelectorTerm, Placement, Toleration } from '../detection/types.js';

export interface NodeLike {
  name: string;
  labels: Readonly<Record<string, string>>;
  taints?: readonly { key: string; value?: string; effect: string }[];
}

function matchesRequirement(r: NodeSelectorRequirement, value: string | undefined): boolean {
  const values = r.values ?? [];
  switch (r.operator) {
    case 'In':
      return value !== undefined && values.includes(value);
    case 'NotIn':
      return value === undefined || !values.includes(value);
    case 'Exists':
      return value !== undefined;
    case 'DoesNotExist':
      return value === undefined;
    case 'Gt':
    case 'Lt': {
      const [bound] = values;
      const n = Number.parseInt(value ?? '', 10);
      const b = Number.parseInt(bound ?? '', 10);
      if (!Number.isInteger(n) || !Number.isInteger(b)) return false;
      return r.operator === 'Gt' ? n > b : n < b;
    }
    default:
      return false; // an operator the API does not know selects nothing, as the scheduler treats it
  }
}

/** One term: every expression and field holds; an empty term selects no node (the API's rule). */
export function matchesTerm(term: NodeSelectorTerm, node: NodeLike): boolean {
  const expressions = term.matchExpressions ?? [];
  const fields = term.matchFields ?? [];
  if (expressions.length === 0 && fields.length === 0) return false;
  return (
    expressions.every((r) => matchesRequirement(r, node.labels[r.key])) &&
    fields.every((r) => matchesRequirement(r, r.key === 'metadata.name' ? node.name : undefined))
  );
}

/** Terms ORed, as nodeSelectorTerms are; none given: every node. */
export function matchesTerms(terms: readonly NodeSelectorTerm[] | undefined, node: NodeLike): boolean {
  return terms === undefined || terms.length === 0 || terms.some((t) => matchesTerm(t, node));
}

/** Whether a toleration tolerates a taint (the scheduler's rule: an empty key with Exists tolerates everything). */
function tolerates(t: Toleration, taint: { key: string; value?: string; effect: string }): boolean {
  if (t.effect && t.effect !== taint.effect) return false;
  if (t.key === undefined || t.key === '') return t.operator === 'Exists';
  if (t.key !== taint.key) return false;
  return t.operator === 'Exists' || (t.value ?? '') === (taint.value ?? '');
}

/**
 * Whether the scheduler could place a pod with this placement on the node, as far as labels, required affinity and
 * NoSchedule/NoExecute taints go (resources and the rest are not judged: a pod that could land there by these rules
 * is taken as able to). `unschedulable` is the node's cordon, which the scheduler treats as a NoSchedule taint.
 */
export function mayLandOn(placement: Placement, node: NodeLike & { unschedulable?: boolean }): boolean {
  for (const [key, value] of Object.entries(placement.nodeSelector ?? {}))
    if (node.labels[key] !== value) return false;
  if (!matchesTerms(placement.requiredTerms, node)) return false;
  const taints = [
    ...(node.taints ?? []),
    ...(node.unschedulable ? [{ key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule' }] : []),
  ];
  const tolerations = placement.tolerations ?? [];
  return taints
    .filter((t) => t.effect === 'NoSchedule' || t.effect === 'NoExecute')
    .every((taint) => tolerations.some((t) => tolerates(t, taint)));
}

/** Where a pod spec (raw JSON) lets its pod land: node selector, required node affinity, tolerations. */
export function placementOf(spec: Json): Placement | undefined {
  const placement: Placement = {};
  const selector = labels(spec.nodeSelector);
  if (Object.keys(selector).length > 0) placement.nodeSelector = selector;
  const required = obj(obj(obj(spec.affinity).nodeAffinity).requiredDuringSchedulingIgnoredDuringExecution);
  if (Array.isArray(required.nodeSelectorTerms))
    placement.requiredTerms = arr(required.nodeSelectorTerms).map((t) => ({
      matchExpressions: requirements(t.matchExpressions),
      matchFields: requirements(t.matchFields),
    }));
  const tolerations = arr(spec.tolerations).map((t) => {
    const toleration: Toleration = {};
    for (const field of ['key', 'operator', 'value', 'effect'] as const) {
      const value = str(t[field]);
      if (value !== undefined) toleration[field] = value;
    }
    return toleration;
  });
  if (tolerations.length > 0) placement.tolerations = tolerations;
  return Object.keys(placement).length > 0 ? placement : undefined;
}

const requirements = (v: unknown): NodeSelectorRequirement[] =>
  arr(v).map((r) => ({
    key: str(r.key) ?? '',
    operator: str(r.operator) ?? '',
    values: Array.isArray(r.values) ? r.values.filter((x): x is string => typeof x === 'string') : [],
  }));
