import type { SandboxHealthStatus, StuckPodStatus } from '../api/v1alpha1/index.js';
import { assessRuntimeVersion, type NodeFindings, type NodeView, type StuckPod } from '../detection/index.js';
import { conditionStatus, mergeConditions } from './conditions.js';

export const MAX_LISTED_STUCK_PODS = 50;
const MAX_MESSAGE = 1024;

/** The part of SandboxHealth status that the operator's detection owns (the agent owns ioReading). */
type DetectionKeys =
  'policy' | 'state' | 'stuckPodCount' | 'stuckPods' | 'causes' | 'ioEvidence' | 'conditions';
export type DetectionStatus = { [K in DetectionKeys]-?: NonNullable<SandboxHealthStatus[K]> } & Pick<
  SandboxHealthStatus,
  'runtime'
>;

export interface HealthInput {
  policyName: string;
  node: NodeView;
  findings: NodeFindings;
  minStuckPods: number;
  thresholdSeconds: number;
  previous: SandboxHealthStatus | undefined;
  now: Date;
}

const truncate = (text: string) => (text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE - 1)}…` : text);

function stuckPodStatus(stuck: StuckPod): StuckPodStatus {
  const status: StuckPodStatus = {
    namespace: stuck.pod.namespace,
    name: stuck.pod.name,
    uid: stuck.pod.uid,
    waitingReason: stuck.waitingReason,
    waitingSince: stuck.waitingSince.toISOString(),
    cause: stuck.cause,
    failureCount: stuck.failureCount,
  };
  if (stuck.lastFailureTime) status.lastFailureTime = stuck.lastFailureTime.toISOString();
  if (stuck.lastMessage !== undefined) status.lastMessage = truncate(stuck.lastMessage);
  if (stuck.classification?.reservedFor) status.reservedFor = stuck.classification.reservedFor;
  return status;
}

export function describeCauses(findings: NodeFindings): string {
  return [...findings.causes]
    .sort(([a, x], [b, y]) => y - x || a.localeCompare(b))
    .map(([cause, count]) => `${cause}=${count}`)
    .join(', ');
}

const EVIDENCE_TEXT = {
  IoSuspected: 'the failures point at a runtime too slow to answer (disk IO)',
  NotIo: 'the failures point away from disk IO (network, image or runtime configuration)',
  Inconclusive: 'the failure messages do not say why yet',
} as const;

/** Desired detection status of one node's SandboxHealth. Pure. */
export function desiredDetectionStatus(input: HealthInput): DetectionStatus {
  const { findings, now } = input;
  const count = findings.stuckPods.length;
  const degraded = findings.degraded;
  const degradedCondition = degraded
    ? {
        type: 'SandboxCreationDegraded',
        status: 'True' as const,
        reason: 'StuckPodsAboveThreshold',
        message: `${count} pod(s) waiting over ${input.thresholdSeconds}s for a sandbox (${describeCauses(findings)}); ${EVIDENCE_TEXT[findings.evidence]}.`,
      }
    : {
        type: 'SandboxCreationDegraded',
        status: 'False' as const,
        reason: count === 0 ? 'NoStuckPods' : 'BelowMinStuckPods',
        message:
          count === 0
            ? 'No pod is stuck creating its sandbox.'
            : `${count} stuck pod(s), fewer than minStuckPods (${input.minStuckPods}).`,
      };
  const status: DetectionStatus = {
    policy: input.policyName,
    state: degraded ? 'Degraded' : 'Healthy',
    stuckPodCount: count,
    stuckPods: findings.stuckPods.slice(0, MAX_LISTED_STUCK_PODS).map(stuckPodStatus),
    causes: [...findings.causes]
      .map(([cause, n]) => ({ cause, count: n }))
      .sort((a, b) => b.count - a.count || a.cause.localeCompare(b.cause)),
    ioEvidence: findings.evidence,
    conditions: mergeConditions(
      input.previous?.conditions?.filter((c) => c.type === 'SandboxCreationDegraded'),
      [degradedCondition],
      now,
    ),
  };
  if (input.node.runtimeVersion) status.runtime = assessRuntimeVersion(input.node.runtimeVersion);
  // Conditions owned by other parts (IO pressure, remediation) are kept as they are.
  const others = input.previous?.conditions?.filter((c) => c.type !== 'SandboxCreationDegraded') ?? [];
  status.conditions = [...status.conditions, ...others];
  return status;
}

/** The subset of a stored status that desiredDetectionStatus computes, for change detection. */
export function storedDetectionStatus(previous: SandboxHealthStatus | undefined): Partial<DetectionStatus> {
  if (!previous) return {};
  const { policy, state, stuckPodCount, stuckPods, causes, ioEvidence, conditions, runtime } = previous;
  return Object.fromEntries(
    Object.entries({
      policy,
      state,
      stuckPodCount,
      stuckPods,
      causes,
      ioEvidence,
      conditions,
      runtime,
    }).filter(([, v]) => v !== undefined),
  );
}

export interface Transition {
  target:
    | { kind: 'Node'; name: string; uid: string }
    | { kind: 'Pod'; namespace: string; name: string; uid: string };
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

/** Events for what changed between the stored and the desired status: only transitions, never repeats. */
export function detectionTransitions(
  node: NodeView,
  previous: SandboxHealthStatus | undefined,
  desired: DetectionStatus,
): Transition[] {
  const transitions: Transition[] = [];
  const nodeRef = { kind: 'Node' as const, name: node.name, uid: node.uid };
  const was = conditionStatus(previous?.conditions, 'SandboxCreationDegraded') === 'True';
  const is = conditionStatus(desired.conditions, 'SandboxCreationDegraded') === 'True';
  const message = desired.conditions.find((c) => c.type === 'SandboxCreationDegraded')?.message ?? '';
  if (!was && is)
    transitions.push({ target: nodeRef, type: 'Warning', reason: 'SandboxCreationDegraded', message });
  if (was && !is)
    transitions.push({ target: nodeRef, type: 'Normal', reason: 'SandboxCreationRecovered', message });

  const known = new Set((previous?.stuckPods ?? []).map((p) => p.uid));
  for (const pod of desired.stuckPods) {
    if (known.has(pod.uid)) continue;
    const detail = pod.reservedFor ? ` (name reserved for ${pod.reservedFor.slice(0, 12)})` : '';
    transitions.push({
      target: { kind: 'Pod', namespace: pod.namespace, name: pod.name, uid: pod.uid },
      type: 'Warning',
      reason: 'SandboxCreationStuck',
      message: `Waiting in ${pod.waitingReason} since ${pod.waitingSince} on node ${node.name}; cause ${pod.cause}${detail}.`,
    });
  }
  return transitions;
}
