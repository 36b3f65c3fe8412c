// PURE: what keeps new pods off a node, as remediation judges it: a cordon, or a taint that keeps new pods off with the
// spec's key or with the key our stamps record.
import type { SandboxPolicySpec } from '../api/v1alpha1/index.js';
import type { NodeFacts } from './node-facts.js';

/** Taint effects that keep new pods off a node; PreferNoSchedule only asks the scheduler. */
export const FENCING_EFFECTS: ReadonlySet<string> = new Set(['NoSchedule', 'NoExecute']);

/** The node carries a taint with this key that keeps new pods off (the effect on the node, not the spec's). */
const hasFencingTaint = (facts: NodeFacts, key: string) =>
  facts.taints.some((t) => t.key === key && FENCING_EFFECTS.has(t.effect));

/** Fenced: cordoned, or a taint with the spec's key or the key our stamps record keeps new pods off. */
export function isFenced(facts: NodeFacts, spec: SandboxPolicySpec): boolean {
  const specTaintKey = spec.remediation.taint?.key;
  return (
    facts.unschedulable ||
    (specTaintKey !== undefined && hasFencingTaint(facts, specTaintKey)) ||
    (facts.stamps?.taint !== undefined && hasFencingTaint(facts, facts.stamps.taint.key))
  );
}

/** New pods can land on the node: Ready and not fenced. */
export const isSchedulable = (facts: NodeFacts, spec: SandboxPolicySpec): boolean =>
  facts.ready && !isFenced(facts, spec);

/** The taint node-maintenance-operator puts on a node it drains (a NodeMaintenance). */
export const NODE_MAINTENANCE_TAINT = 'medik8s.io/drain';

/**
 * Other managers' fencing taints: NoSchedule or NoExecute, not ours (our key, `ours`), and not the node lifecycle's
 * own (node.kubernetes.io/*: a cordon's unschedulable taint, not-ready, the pressure conditions), which come and go
 * with the node's state.
 */
export function foreignFencingTaints(
  taints: readonly { key: string; effect: string }[],
  ours: string | undefined,
): string[] {
  return taints
    .filter(
      (t) => FENCING_EFFECTS.has(t.effect) && t.key !== ours && !t.key.startsWith('node.kubernetes.io/'),
    )
    .map((t) => t.key);
}
