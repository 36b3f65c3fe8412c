// PURE: the Node condition SandboxCreationDegraded that a policy keeps on one of its nodes, decided from the node's
// facts and the condition as the node carries it. Nothing here is remembered between passes: a restarted operator
// reads the condition back from the node and decides the same.
import {
  NODE_CONDITION_REASONS,
  toApiTime,
  type NodeConditionReason,
  type NodeConditionValue,
  type NodeStamps,
  type OwnNodeCondition,
  type SandboxPolicySpec,
} from '../api/v1alpha1/index.js';
import { guardPod } from './guards.js';
import type { NodeFacts } from './node-facts.js';
import { hasRecovered } from './remediation.js';

/** A condition whose status and reason hold is written again at most this often, for a changed message. */
export const CONDITION_REFRESH_MS = 60_000;
const MAX_MESSAGE = 1_024;

export interface NodeConditionInput {
  policy: string;
  spec: SandboxPolicySpec;
  facts: NodeFacts;
  /** Our condition as the node carries it now; absent when it has none. */
  current: OwnNodeCondition | undefined;
  /** The node's stamps once this pass's actions are carried out. */
  stampsAfter: NodeStamps | undefined;
  /** The IO evidence, in words (IoPressureHigh's message). */
  evidence: string;
  now: Date;
}

/** Set the condition to this, remove it, or (undefined) leave it as it is. */
export type NodeConditionDecision = { set: NodeConditionValue } | { remove: true } | undefined;

/**
 * True while sandbox creation is stuck for an IO cause with the IO proven, and from then on until the node has
 * recovered (the moment the operator would undo), whatever was moved meanwhile; False (Recovered) only after a True.
 * Never a first False: a node the operator never saw saturated gets no condition (node-problem-detector's #304). Its
 * lastTransitionTime holds while the status does, because NodeHealthCheck and MachineHealthCheck count from it.
 */
export function decideNodeCondition(input: NodeConditionInput): NodeConditionDecision {
  const { spec, facts, current, now } = input;
  if (!spec.remediation.nodeCondition || facts.controlPlane) return current ? { remove: true } : undefined;
  const holding = current?.status === 'True';
  const saturated = facts.degradedByIo && facts.io === 'High';
  let status: 'True' | 'False';
  if (saturated || (holding && !hasRecovered(facts, spec, now))) status = 'True';
  else if (holding) status = 'False';
  else return undefined;
  const reason = reasonOf(input, status, holding);
  const transition = current?.status !== status || !current.lastTransitionTime;
  const wanted: NodeConditionValue = {
    status,
    reason,
    message: messageOf(input, reason).slice(0, MAX_MESSAGE),
    lastTransitionTime:
      transition || !current.lastTransitionTime ? toApiTime(now) : current.lastTransitionTime,
    lastHeartbeatTime: toApiTime(now),
  };
  if (current && !transition && current.reason === reason) {
    if (current.message === wanted.message) return undefined;
    const beat = Date.parse(current.lastHeartbeatTime ?? '');
    if (now.getTime() - (Number.isNaN(beat) ? 0 : beat) < CONDITION_REFRESH_MS) return undefined;
  }
  return { set: wanted };
}

/** RemediationExhausted once escalation's time is up, and for the rest of the incident; IoSaturated before. */
function reasonOf(
  input: NodeConditionInput,
  status: 'True' | 'False',
  holding: boolean,
): NodeConditionReason {
  if (status === 'False') return NODE_CONDITION_REASONS.recovered;
  const wasExhausted = holding && input.current?.reason === NODE_CONDITION_REASONS.remediationExhausted;
  return wasExhausted || isExhausted(input)
    ? NODE_CONDITION_REASONS.remediationExhausted
    : NODE_CONDITION_REASONS.ioSaturated;
}

/**
 * Whether escalation is due: the node still IoPressureHigh afterSeconds after our stamps fenced it (cordoned or
 * tainted), with no stuck pod left that the operator may move.
 */
export function isExhausted({ spec, facts, stampsAfter, now }: NodeConditionInput): boolean {
  const after = spec.remediation.escalation?.afterSeconds;
  if (after === undefined || facts.io !== 'High' || !stampsAfter) return false;
  if (!stampsAfter.cordoned && !stampsAfter.taint) return false;
  const mayMove = spec.remediation.evictStuckPods && spec.safety.maxEvictionsPerMinute > 0;
  if (mayMove && facts.ioStuckPods.some((pod) => guardPod(pod) === undefined)) return false;
  return now.getTime() - stampsAfter.since.getTime() >= after * 1000;
}

function messageOf(input: NodeConditionInput, reason: NodeConditionReason): string {
  const { policy, facts, stampsAfter, evidence } = input;
  const stuck = facts.ioStuckPods.length;
  const pods = `${stuck} pod${stuck === 1 ? '' : 's'} stuck creating their sandbox for an IO cause`;
  switch (reason) {
    case NODE_CONDITION_REASONS.recovered:
      return `Recovered: IO pressure and stuck pods gone (policy ${policy}).`;
    case NODE_CONDITION_REASONS.remediationExhausted: {
      // The fence's time, not the minutes since: a message that changed every minute would be written every minute.
      const since = stampsAfter
        ? ` since policy ${policy} fenced the node at ${toApiTime(stampsAfter.since)}`
        : '';
      return `Still IO-saturated${since}, with what it may move moved; ${pods}. ${evidence}`;
    }
    default:
      return `${pods}; IO pressure proven (policy ${policy}). ${evidence}`;
  }
}
