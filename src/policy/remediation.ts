// PURE: decides what to do about a policy's nodes. Every safety guard is enforced in the policy (guards.ts, asked by
// the steps in remediation-node.ts) and nowhere else; the actuators only carry out what this returns.
import {
  resolveIntOrPercent,
  type NodeStamps,
  type SandboxPolicySpec,
  type Taint,
} from '../api/v1alpha1/index.js';
import type { Action, BlockedAction, PodRef } from './actions.js';
import { isSchedulable } from './fences.js';
import { budgetLeft } from './rate-window.js';
import {
  isReverted,
  keepMigrating,
  leaveFrozen,
  letGoOfRevertedStamps,
  remediateNode,
  undoOnRecovery,
} from './remediation-node.js';
import type { RemediationPass } from './remediation-pass.js';

export interface CandidatePod extends PodRef {
  /** Kind of the controlling owner; absent for a bare pod. */
  controllerKind?: string;
  mirror?: boolean;
}

/**
 * What IoPressureHigh says, reduced to what acting needs. High: over a threshold for sustainSeconds on verified
 * readings. Low: verified under every threshold (for recoverySeconds if it was high). Rising: over, not yet
 * sustained. Recovering: under, recoverySeconds not yet elapsed. Unknown: no verified reading.
 */
export type IoState = 'High' | 'Rising' | 'Recovering' | 'Low' | 'Unknown';

export interface NodeFacts {
  name: string;
  ready: boolean;
  controlPlane: boolean;
  /** spec.unschedulable as the node has it (in a dry run, as it would have it). */
  unschedulable: boolean;
  taints: readonly Taint[];
  /** Our ownership stamps (in a dry run, the simulated ones); absent: nothing on the node is ours. */
  stamps?: NodeStamps;
  /** SandboxCreationDegraded with failures pointing at IO (NameReserved, DeadlineExceeded). */
  degradedByIo: boolean;
  io: IoState;
  /** Pods stuck creating their sandbox from an IO cause, longest-waiting first, not yet evicted. */
  ioStuckPods: readonly CandidatePod[];
  /** Since when fewer than minStuckPods pods have been stuck (SandboxCreationDegraded False); absent while degraded. */
  quietSince?: Date;
  /** Running pods the policy's migrateWorkloads.podSelector selects, not yet evicted. */
  ioHeavyPods: readonly CandidatePod[];
  /** Pods migrated off this node during the current remediation. */
  migrated: number;
  /** Real stamps seen by a dry run: left exactly as they are (a dry run cannot undo what a real run did). */
  frozen?: boolean;
  /** When the operator last undid a remediation on this node (cooldown). */
  lastUndoAt?: Date;
}

export interface RemediationInput {
  policy: string;
  spec: SandboxPolicySpec;
  /** Every node the policy owns. */
  nodes: readonly NodeFacts[];
  now: Date;
  /** When the policy evicted pods recently (any age; only the last 60 s count). */
  recentEvictions: readonly Date[];
  /** Caches synced and no watch known to be broken. */
  cacheReady: boolean;
}

export interface RemediationDecision {
  actions: Action[];
  blocked: BlockedAction[];
  storm: { detected: boolean; unhealthy: number; limit: number };
  /** Per node, the stamps it carries once the actions are carried out. */
  stampsAfter: Map<string, NodeStamps | undefined>;
}

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
  const pass: RemediationPass = {
    input,
    triggered,
    storm: { detected: unhealthy > limit, unhealthy, limit },
    schedulable: nodes.filter((n) => isSchedulable(n, spec)).length,
    evictionBudget: budgetLeft(safety.maxEvictionsPerMinute, input.recentEvictions, now),
    actions: [],
    blocked: [],
    stampsAfter: new Map(),
  };
  // The most degraded nodes first, so limits go to the worst; names break ties deterministically.
  const ordered = [...nodes].sort(
    (a, b) => b.ioStuckPods.length - a.ioStuckPods.length || a.name.localeCompare(b.name),
  );
  for (const facts of ordered) decideNode(pass, facts);
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
