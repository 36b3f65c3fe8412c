import type {
  Condition,
  IoAttribution,
  IoReadingStatus,
  NodeState,
  SandboxHealthStatus,
  StuckPodStatus,
} from '../api/v1alpha1/index.js';
import {
  assessRuntimeVersion,
  isIoCause,
  type NodeFindings,
  type NodeView,
  type StuckPod,
} from '../detection/index.js';
import type { IoCauseDecision } from '../policy/io-cause.js';
import type { IoPressureDecision } from '../policy/io-pressure.js';
import type { Transition } from '../ports/writes.js';
import { conditionStatus, mergeConditions, type ConditionInput } from './conditions.js';
import { desiredIoCause, ioCauseTransitions } from './io-cause-status.js';

export const MAX_LISTED_STUCK_PODS = 50;
const MAX_MESSAGE = 1024;

type OwnedKeys = 'policy' | 'state' | 'stuckPodCount' | 'stuckPods' | 'causes' | 'ioEvidence' | 'conditions';
/**
 * The part of SandboxHealth status the operator writes. ioReading only when the policy's source is not the
 * agent (the agent owns it, by server-side apply, when it is).
 */
export type DetectionStatus = { [K in OwnedKeys]-?: NonNullable<SandboxHealthStatus[K]> } & Pick<
  SandboxHealthStatus,
  'runtime' | 'ioPressure' | 'ioReading' | 'ioCause' | 'topConsumer'
>;

export interface HealthInput {
  policyName: string;
  node: NodeView;
  findings: NodeFindings;
  minStuckPods: number;
  thresholdSeconds: number;
  previous: SandboxHealthStatus | undefined;
  now: Date;
  io?: { decision: IoPressureDecision; readingToWrite?: IoReadingStatus };
  /** Who does the device's IO: absent when there is nothing to say (no attribution, no pressure). */
  cause?: { decision: IoCauseDecision; attribution?: IoAttribution | undefined };
}

const truncate = (text: string) => (text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE - 1)}…` : text);

/**
 * 0, 1, 2, 5, 10, 20, 50, 100, ...: the largest of these at or below n. kubelet retries a failed sandbox every few
 * seconds to minutes and each retry bumps an Event count; publishing the exact sum would make every retry a
 * status write. The steps still tell one failure from a few from a retry storm; the Events have the exact count.
 */
export function coarseCount(n: number): number {
  if (n < 1) return 0;
  const decade = 10 ** Math.floor(Math.log10(n));
  const step = [5, 2, 1].find((m) => m * decade <= n) ?? 1;
  return step * decade;
}

function stuckPodStatus(stuck: StuckPod, previous: StuckPodStatus | undefined): StuckPodStatus {
  const status: StuckPodStatus = {
    namespace: stuck.pod.namespace,
    name: stuck.pod.name,
    uid: stuck.pod.uid,
    waitingReason: stuck.waitingReason,
    waitingSince: stuck.waitingSince.toISOString(),
    cause: stuck.cause,
    failureCount: coarseCount(stuck.failureCount),
  };
  // Moves only when the cause does: the latest failure's time would move with every retry.
  const causeSince =
    previous?.cause === stuck.cause && previous.causeSince
      ? previous.causeSince
      : stuck.lastFailureTime?.toISOString();
  if (causeSince) status.causeSince = causeSince;
  // Kept while the cause holds: many runtimes name a new sandbox id in every retry's message.
  const lastMessage =
    previous?.cause === stuck.cause && previous.lastMessage !== undefined
      ? previous.lastMessage
      : stuck.lastMessage !== undefined
        ? truncate(stuck.lastMessage)
        : undefined;
  if (lastMessage !== undefined) status.lastMessage = lastMessage;
  if (stuck.classification?.reservedFor) status.reservedFor = stuck.classification.reservedFor;
  if (stuck.classification?.runtime) status.runtime = stuck.classification.runtime;
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

/** A runtime as a sentence names it: the classifier's `windows` is the Windows host's runtime (hcsshim). */
const runtimeName = (runtime: string) => (runtime === 'windows' ? 'the Windows runtime (hcsshim)' : runtime);

/** The evidence in words, naming the runtime when every message that told one told the same. */
function evidenceText(findings: NodeFindings): string {
  const runtimes = new Set(
    findings.stuckPods.flatMap((p) => (p.classification?.runtime ? [p.classification.runtime] : [])),
  );
  const [runtime] = runtimes;
  return findings.evidence === 'IoSuspected' && runtimes.size === 1 && runtime
    ? `the failures point at ${runtimeName(runtime)} too slow to answer (disk IO)`
    : EVIDENCE_TEXT[findings.evidence];
}

function degradedCondition(input: HealthInput): ConditionInput {
  const { findings } = input;
  const count = findings.stuckPods.length;
  if (findings.degraded) {
    return {
      type: 'SandboxCreationDegraded',
      status: 'True',
      reason: 'StuckPodsAboveThreshold',
      message: `${count} pod(s) waiting over ${input.thresholdSeconds}s for a sandbox (${describeCauses(findings)}); ${evidenceText(findings)}.`,
    };
  }
  return {
    type: 'SandboxCreationDegraded',
    status: 'False',
    reason: count === 0 ? 'NoStuckPods' : 'BelowMinStuckPods',
    message:
      count === 0
        ? 'No pod is stuck creating its sandbox.'
        : `${count} stuck pod(s), fewer than minStuckPods (${input.minStuckPods}).`,
  };
}

function nodeState(degraded: boolean, io: IoPressureDecision | undefined): NodeState {
  if (io?.condition.status === 'True' && io.condition.reason === 'RecoveryPending') return 'Recovering';
  const high = io?.condition.status === 'True';
  if (degraded && high) return 'IoPressure';
  return degraded ? 'Degraded' : 'Healthy';
}

/**
 * IoPressureHigh, with the stored message kept while the condition keeps its status and reason through one run of
 * the same observation (same tracking since): which signals are over changes from sample to sample around the
 * thresholds, and every changed message is a write. The message names the signals that were over when the
 * condition took its reason; status.ioReading has the current values.
 */
function ioPressureCondition(decision: IoPressureDecision, previous: SandboxHealthStatus | undefined) {
  const { condition, tracking } = decision;
  const stored = previous?.conditions?.find((c) => c.type === condition.type);
  const sameRun =
    previous?.ioPressure?.observation === tracking.observation &&
    new Date(previous.ioPressure.since).getTime() === tracking.since.getTime();
  return sameRun && stored?.status === condition.status && stored.reason === condition.reason
    ? { ...condition, message: stored.message }
    : condition;
}

const OWN_CONDITIONS = new Set(['SandboxCreationDegraded', 'IoPressureHigh']);

/** Desired operator-owned status of one node's SandboxHealth. Pure. */
export function desiredDetectionStatus(input: HealthInput): DetectionStatus {
  const { findings, now } = input;
  const listed = new Map((input.previous?.stuckPods ?? []).map((p) => [p.uid, p]));
  const desired: ConditionInput[] = [degradedCondition(input)];
  if (input.io) desired.push(ioPressureCondition(input.io.decision, input.previous));
  const conditions: Condition[] = [
    ...mergeConditions(
      input.previous?.conditions?.filter((c) => OWN_CONDITIONS.has(c.type)),
      desired,
      now,
    ),
    // Conditions owned by other parts (remediation) are kept as they are.
    ...(input.previous?.conditions?.filter((c) => !OWN_CONDITIONS.has(c.type)) ?? []),
  ];
  const status: DetectionStatus = {
    policy: input.policyName,
    state: nodeState(findings.degraded, input.io?.decision),
    stuckPodCount: findings.stuckPods.length,
    stuckPods: findings.stuckPods
      .slice(0, MAX_LISTED_STUCK_PODS)
      .map((stuck) => stuckPodStatus(stuck, listed.get(stuck.pod.uid))),
    causes: [...findings.causes]
      .map(([cause, n]) => ({ cause, count: n }))
      .sort((a, b) => b.count - a.count || a.cause.localeCompare(b.cause)),
    ioEvidence: findings.evidence,
    conditions,
  };
  if (input.io) {
    const { tracking } = input.io.decision;
    const previousTracking = input.previous?.ioPressure;
    status.ioPressure = {
      observation: tracking.observation,
      // Keep the stored text when the instant is the same (the API keeps what we wrote).
      since:
        previousTracking && new Date(previousTracking.since).getTime() === tracking.since.getTime()
          ? previousTracking.since
          : tracking.since.toISOString(),
    };
    if (input.io.readingToWrite) status.ioReading = input.io.readingToWrite;
  }
  if (input.node.runtimeVersion) status.runtime = assessRuntimeVersion(input.node.runtimeVersion);
  if (input.cause) Object.assign(status, desiredIoCause(input.cause, input.previous, status.runtime, now));
  return status;
}

/** Newly stuck pods that get an Event of their own, per node and EVENT_WINDOW_MS; the rest share Events on the node. */
export const POD_EVENTS_PER_NODE = 3;
/** The window over which a node's stuck-pod Events are counted (the reconciler keeps the count). */
export const EVENT_WINDOW_MS = 10 * 60_000;
const PODS_LISTED_PER_EVENT = 10;

/**
 * How many stuck-pod Events a node may still get: `pods` Events of their own, and whether one more Event on the
 * node may list the rest. Pods beyond it are in the status (and the metrics) only.
 */
export interface EventBudget {
  pods: number;
  node: boolean;
}

/** Pods stuck for a known cause that the stored status did not list with one (newly stuck, or their cause new). */
export function podsOfNewlyKnownCause(
  previous: SandboxHealthStatus | undefined,
  desired: Pick<DetectionStatus, 'stuckPods'>,
): DetectionStatus['stuckPods'] {
  const causeBefore = new Map((previous?.stuckPods ?? []).map((p) => [p.uid, p.cause]));
  return desired.stuckPods.filter(
    (p) => p.cause !== 'Unknown' && (causeBefore.get(p.uid) ?? 'Unknown') === 'Unknown',
  );
}

/**
 * Whether a status explains a stuck pod as stuck from IO, by uid: it lists the pod with an IO cause, or its list is
 * full (MAX_LISTED_STUCK_PODS) and the pod had no room in it (counted in stuckPodCount and causes, named in its own
 * Events). An eviction of a stuck pod stands on this: what the SRE reads says why before the pod goes.
 */
export function explainedByIo(
  status: Pick<SandboxHealthStatus, 'stuckPods'> | undefined,
): (uid: string) => boolean {
  const listed = status?.stuckPods ?? [];
  const full = listed.length >= MAX_LISTED_STUCK_PODS;
  const cause = new Map(listed.map((p) => [p.uid, p.cause]));
  return (uid) => {
    const c = cause.get(uid);
    return c === undefined ? full : isIoCause(c);
  };
}

/** Pods the desired status explains as stuck from IO and the stored one did not: their eviction waits for it. */
export function podsNewlyExplainedByIo(
  previous: SandboxHealthStatus | undefined,
  desired: Pick<DetectionStatus, 'stuckPods'>,
): DetectionStatus['stuckPods'] {
  const before = explainedByIo(previous);
  return desired.stuckPods.filter((p) => isIoCause(p.cause) && !before(p.uid));
}

/** Events for what changed between the stored and the desired status: only transitions, never repeats. */
export function detectionTransitions(
  node: NodeView,
  previous: SandboxHealthStatus | undefined,
  desired: DetectionStatus,
  budget: EventBudget,
): Transition[] {
  const transitions: Transition[] = [];
  const nodeRef = { kind: 'Node' as const, name: node.name, uid: node.uid };
  const messageOf = (type: string) => desired.conditions.find((c) => c.type === type)?.message ?? '';
  const rose = (type: string) =>
    conditionStatus(previous?.conditions, type) !== 'True' &&
    conditionStatus(desired.conditions, type) === 'True';
  const fell = (type: string) =>
    conditionStatus(previous?.conditions, type) === 'True' &&
    conditionStatus(desired.conditions, type) === 'False';

  if (rose('SandboxCreationDegraded'))
    transitions.push({
      target: nodeRef,
      type: 'Warning',
      reason: 'SandboxCreationDegraded',
      message: messageOf('SandboxCreationDegraded'),
    });
  if (fell('SandboxCreationDegraded'))
    transitions.push({
      target: nodeRef,
      type: 'Normal',
      reason: 'SandboxCreationRecovered',
      message: messageOf('SandboxCreationDegraded'),
    });
  if (rose('IoPressureHigh'))
    transitions.push({
      target: nodeRef,
      type: 'Warning',
      reason: 'IoPressureHigh',
      message: messageOf('IoPressureHigh'),
    });
  if (fell('IoPressureHigh'))
    transitions.push({
      target: nodeRef,
      type: 'Normal',
      reason: 'IoPressureRecovered',
      message: messageOf('IoPressureHigh'),
    });

  // Pods stuck for a known cause, newly (or listed before with no cause known): an Event on each of the first few
  // (kubectl describe pod shows it), and one on the node for the rest, as the budget allows. A mass rollout stuck
  // on every node writes a handful of Events per node, not one per pod, and pods trickling in over an hour do not
  // get one each either. Pods whose cause is not known yet get none: the node's SandboxCreationDegraded Event
  // counts them, and they are not left without one when their cause shows up later (kubelet's first failure can
  // come minutes after the threshold).
  transitions.push(...ioCauseTransitions(node, previous, desired));

  const fresh = podsOfNewlyKnownCause(previous, desired);
  const own = Math.max(0, budget.pods);
  for (const pod of fresh.slice(0, own)) {
    const detail = pod.reservedFor ? ` (name reserved for ${pod.reservedFor.slice(0, 12)})` : '';
    const said = pod.runtime ? `, as ${runtimeName(pod.runtime)} words it` : '';
    transitions.push({
      target: { kind: 'Pod', namespace: pod.namespace, name: pod.name, uid: pod.uid },
      type: 'Warning',
      reason: 'SandboxCreationStuck',
      message: `Waiting in ${pod.waitingReason} since ${pod.waitingSince} on node ${node.name}; cause ${pod.cause}${detail}${said}.`,
    });
  }
  const rest = fresh.slice(own);
  if (rest.length > 0 && budget.node) {
    const listed = rest.slice(0, PODS_LISTED_PER_EVENT).map((p) => `${p.namespace}/${p.name} (${p.cause})`);
    const more = rest.length - listed.length;
    transitions.push({
      target: nodeRef,
      type: 'Warning',
      reason: 'SandboxCreationStuck',
      message: `${rest.length} more pod(s) stuck waiting for a sandbox: ${listed.join(', ')}${more > 0 ? ` and ${more} more` : ''}; see kubectl get sandboxhealth ${node.name}.`,
    });
  }
  return transitions;
}
