// PURE: decides what to do about a policy's nodes. Every safety guard is enforced in the policy (guards.ts, asked by
// the steps in remediation-node.ts) and nowhere else; the actuators only carry out what this returns.
import { resolveIntOrPercent, type SandboxPolicySpec } from '../api/v1alpha1/index.js';
import { isSchedulable } from './fences.js';
import { budgetLeft, firstEvictionReserve } from './rate-window.js';
import {
  isReverted,
  keepMigrating,
  leaveFrozen,
  letGoOfRevertedStamps,
  remediateNode,
  spendDeferred,
  undoOnRecovery,
} from './remediation-node.js';
import type { NodeFacts, RemediationDecision, RemediationInput } from './node-facts.js';
import type { RemediationPass } from './remediation-pass.js';

/** Whether a node's evidence calls for remediation under this policy. */
export function isTriggered(facts: NodeFacts, spec: SandboxPolicySpec): boolean {
  if (!facts.degradedByIo) return false;
  return !spec.remediation.requireIoPressure || facts.io === 'High';
}

/** Why a degraded node does not call for remediation, in words for status; undefined when it does, or is healthy. */
export function whyNotTriggered(
  facts: NodeFacts,
  degraded: boolean,
  spec: SandboxPolicySpec,
): { reason: string; message: string } | undefined {
  if (!degraded || isTriggered(facts, spec)) return undefined;
  if (!facts.degradedByIo)
    return {
      reason: 'NotIoCaused',
      message:
        'Pods are stuck, but their failures do not point at disk IO (network, image, runtime configuration or not yet known): nothing to remediate here.',
    };
  return {
    reason: 'IoPressureNotVerified',
    message: `Pods are stuck from an IO cause, but IO pressure is ${facts.io === 'Unknown' ? 'unknown (no verified reading)' : `not sustained (${facts.io})`}; spec.remediation.requireIoPressure is true.`,
  };
}

/** Whether a node we remediated has verifiably recovered, so what we did may be undone. */
export function hasRecovered(facts: NodeFacts, spec: SandboxPolicySpec, now: Date): boolean {
  if (facts.degradedByIo || facts.ioStuckPods.length > 0 || !facts.quietSince) return false;
  const quietMs = now.getTime() - facts.quietSince.getTime();
  if (!spec.remediation.requireIoPressure) {
    // No IO source required: the stuck pods alone judge recovery, but known pressure still holds it.
    return quietMs >= spec.ioPressure.recoverySeconds * 1000 && facts.io !== 'High' && facts.io !== 'Rising';
  }
  return facts.io === 'Low'; // Low after High already took recoverySeconds of verified readings
}

/**
 * Decides the actions for one policy's nodes. Order per node: cordon and taint; evict stuck pods once the node
 * is seen fenced (so replacements land elsewhere); migrate IO-heavy pods; undo in reverse after recovery.
 */
export function decideRemediation(input: RemediationInput): RemediationDecision {
  const { spec, nodes, now } = input;
  const { safety } = spec;
  const triggered = new Set(nodes.filter((n) => isTriggered(n, spec)).map((n) => n.name));
  const ours = nodes.filter((n) => n.stamps !== undefined).map((n) => n.name);
  const unhealthy = new Set([...triggered, ...ours]).size;
  const limit = resolveIntOrPercent(safety.maxUnhealthyNodes, nodes.length);
  const evictionBudget = budgetLeft(safety.maxEvictionsPerMinute, input.recentEvictions, now);
  const reserve = firstEvictionReserve(safety.maxEvictionsPerMinute, input.recentEvictions, now);
  // Nodes that may have pods to move this pass: the budget's share of each (an over-count only lowers it, to 1).
  const movers = nodes.filter(
    (n) => (triggered.has(n.name) || n.stamps) && (n.ioStuckPods.length > 0 || n.ioHeavyPods.length > 0),
  ).length;
  const pass: RemediationPass = {
    input,
    triggered,
    storm: { detected: unhealthy > limit, unhealthy, limit },
    schedulable: nodes.filter((n) => isSchedulable(n, spec)).length,
    evictionBudget,
    // The budget above the reserve for later nodes' first evictions, shared; a node's first eviction is always its own.
    evictionShare: Math.max(1, Math.floor((evictionBudget - reserve) / Math.max(1, movers))),
    evictionReserve: reserve,
    evictionsOn: new Map(),
    deferred: [],
    actions: [],
    blocked: [],
    stampsAfter: new Map(),
  };
  // The most degraded nodes first, so limits go to the worst; names break ties deterministically.
  const ordered = [...nodes].sort(
    (a, b) => b.ioStuckPods.length - a.ioStuckPods.length || a.name.localeCompare(b.name),
  );
  for (const facts of ordered) decideNode(pass, facts);
  spendDeferred(pass);
  const { actions, blocked, storm, stampsAfter } = pass;
  return { actions, blocked, storm, stampsAfter };
}

/** One node: the first step that applies decides it; a node neither triggered nor ours is left alone. */
function decideNode(pass: RemediationPass, facts: NodeFacts): void {
  const { spec, now } = pass.input;
  const { stamps } = facts;
  const wanted = pass.triggered.has(facts.name);
  pass.stampsAfter.set(facts.name, stamps);
  if (!wanted && !stamps) return;
  if (facts.frozen) leaveFrozen(pass, facts);
  else if (stamps && isReverted(facts, stamps)) letGoOfRevertedStamps(pass, facts, stamps);
  else if (stamps && !wanted && hasRecovered(facts, spec, now)) undoOnRecovery(pass, facts, stamps);
  else if (!wanted) keepMigrating(pass, facts);
  else remediateNode(pass, facts);
}
