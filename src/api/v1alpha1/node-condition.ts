/**
 * The Node condition this operator writes, and the condition types it knows of others.
 *
 * NodeHealthCheck, MachineHealthCheck and node-problem-detector all meet on Node conditions; this is the
 * operator's verdict in that shared language. See docs/adr/0021-node-condition.md.
 */

/** The condition type in Node.status.conditions that this operator owns, and nobody else writes. */
export const NODE_CONDITION_TYPE = 'SandboxCreationDegraded';

/** The reasons the operator writes on its condition. */
export const NODE_CONDITION_REASONS = {
  /** True: sandbox creation is stuck for an IO cause and the node's IO pressure is proven. */
  ioSaturated: 'IoSaturated',
  /** True: the node stayed saturated remediation.escalation.afterSeconds after it was fenced and emptied. */
  remediationExhausted: 'RemediationExhausted',
  /** False: the node recovered (the moment the operator undoes). */
  recovered: 'Recovered',
} as const;
export type NodeConditionReason = (typeof NODE_CONDITION_REASONS)[keyof typeof NODE_CONDITION_REASONS];

/**
 * Condition types Kubernetes reserves for its PSI-based disk contention conditions (KEP-5394, alpha in 1.36).
 * This operator never writes them; the nodeCondition IO source knows them.
 */
export const KUBERNETES_IO_CONDITIONS = [
  'SystemDiskContentionPressure',
  'KubepodsDiskContentionPressure',
] as const;

/** Node condition types known to report IO pressure, for spec.ioPressure.nodeCondition.type. */
export const KNOWN_IO_CONDITIONS = ['IoPressure', ...KUBERNETES_IO_CONDITIONS] as const;

/** Condition types that never report IO pressure, refused as spec.ioPressure.nodeCondition.type. */
export const NOT_IO_CONDITIONS = [
  'Ready',
  'MemoryPressure',
  'PIDPressure',
  'DiskPressure',
  'NetworkUnavailable',
  NODE_CONDITION_TYPE,
] as const;

/** The condition as the operator writes it (times as the apiserver keeps them: RFC 3339 to the second). */
export interface NodeConditionValue {
  status: 'True' | 'False';
  reason: NodeConditionReason;
  message: string;
  lastTransitionTime: string;
  lastHeartbeatTime: string;
}

/** The condition as a node carries it: anyone with RBAC on nodes/status may have written it, so nothing is assumed. */
export interface OwnNodeCondition {
  status: string;
  reason: string;
  message: string;
  lastTransitionTime?: string;
  lastHeartbeatTime?: string;
}

/** A time as the apiserver keeps a condition's or a taint's: RFC 3339, to the second. */
export function toApiTime(at: Date): string {
  return at.toISOString().replace(/\.\d{3}Z$/, 'Z');
}
