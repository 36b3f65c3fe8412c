import {
  classifyFailureMessage,
  isSandboxFailureEvent,
  type Classification,
  type FailureCause,
} from './classify.js';
import type { EventView, PodView } from './types.js';

/** Container waiting reasons that mean the pod never got a working sandbox or container. */
export const STUCK_WAITING_REASONS: ReadonlySet<string> = new Set([
  'ContainerCreating',
  'PodInitializing',
  'CreateContainerError',
  'RunContainerError',
]);

/** Why a failure Event about a pod does not count: it does not say it was written by the kubelet of the pod's node. */
export type IgnoredEventReason = 'NotKubelet' | 'OtherNode';

/** A failure Event about a stuck pod that detection did not count, and who it says wrote it. */
export interface IgnoredEvent {
  uid: string;
  reason: IgnoredEventReason;
  reportingController: string;
  reportingInstance: string;
}

/** The component name kubelet writes its Events with (source.component, reportingComponent). */
export const KUBELET_COMPONENT = 'kubelet';

/**
 * Why an Event about a pod on `nodeName` is not the word of that node's kubelet, or undefined when it is. A sandbox
 * failure is believed only from the kubelet that tried to create the sandbox: anyone who may create Events in a
 * namespace could otherwise mark its pods stuck for an IO cause, and have the node cordoned and other teams' pods
 * moved. The claim is only as good as the admission policy that checks it against the requester (config/events).
 */
export function ignoredEventReason(
  event: Pick<EventView, 'reportingController' | 'reportingInstance'>,
  nodeName: string,
): IgnoredEventReason | undefined {
  if (event.reportingController !== KUBELET_COMPONENT) return 'NotKubelet';
  return event.reportingInstance === nodeName ? undefined : 'OtherNode';
}

export interface StuckPod {
  pod: PodView;
  nodeName: string;
  waitingReason: string;
  waitingSince: Date;
  waitedSeconds: number;
  /** The latest failure's cause, or 'Unknown' when no failure event was seen (yet). */
  cause: FailureCause | 'Unknown';
  classification?: Classification;
  failureCount: number;
  lastFailureTime?: Date;
  lastMessage?: string;
  /** Failure Events about the pod that were not counted (ignoredEventReason); absent when there were none. */
  ignoredEvents?: IgnoredEvent[];
}

export interface StuckPodOptions {
  stuckThresholdSeconds: number;
  now: Date;
}

/** The reason a pod is waiting for its sandbox, or undefined when it is not waiting for one. */
function waitingReasonOf(pod: PodView): string | undefined {
  if (pod.containers.length === 0) return 'ContainerCreating'; // kubelet has not reported any container yet
  let reason: string | undefined;
  for (const container of pod.containers) {
    if (container.state === 'running') return undefined;
    if (container.state === 'waiting' && container.reason && STUCK_WAITING_REASONS.has(container.reason)) {
      reason ??= container.reason;
    }
  }
  return reason;
}

/**
 * When the first of these pods that waits for its sandbox but is not stuck yet will count as stuck; undefined
 * when none will. The same rule as detectStuckPods, so the reconciler comes back exactly then.
 */
export function nextStuckAt(
  pods: Iterable<PodView>,
  stuckThresholdSeconds: number,
  now: Date,
): Date | undefined {
  let earliest: number | undefined;
  for (const pod of pods) {
    if (!pod.nodeName || pod.phase !== 'Pending' || pod.deleting || !waitingReasonOf(pod)) continue;
    const due = (pod.scheduledAt ?? pod.createdAt).getTime() + stuckThresholdSeconds * 1000;
    if (due > now.getTime() && (earliest === undefined || due < earliest)) earliest = due;
  }
  return earliest === undefined ? undefined : new Date(earliest);
}

/**
 * The uid of the pod an event is about: involvedObject.uid, else the uid in a reserved sandbox name that names the
 * same pod as involvedObject (a message alone must not point at another namespace's pod).
 */
export function podUidOf(
  event: Pick<EventView, 'message' | 'involvedNamespace' | 'involvedName' | 'involvedUid'>,
): string | undefined {
  if (event.involvedUid) return event.involvedUid;
  const name = classifyFailureMessage(event.message).name;
  return name && name.pod === event.involvedName && name.namespace === event.involvedNamespace
    ? name.uid
    : undefined;
}

/**
 * Whether an event is about this pod: the same uid, and the same namespace and name. A uid is only a string in an
 * Event: one naming another pod's uid from another namespace (or an old pod's name) is not about it.
 */
export function isEventAbout(
  event: Pick<EventView, 'message' | 'involvedNamespace' | 'involvedName' | 'involvedUid'>,
  pod: Pick<PodView, 'uid' | 'namespace' | 'name'>,
): boolean {
  return (
    event.involvedNamespace === pod.namespace &&
    event.involvedName === pod.name &&
    podUidOf(event) === pod.uid
  );
}

/** The pod an event is about among those a lookup by uid knows (isEventAbout), if any. */
export function findPodOfEvent<P extends Pick<PodView, 'uid' | 'namespace' | 'name'>>(
  event: Pick<EventView, 'message' | 'involvedNamespace' | 'involvedName' | 'involvedUid'>,
  podByUid: (uid: string) => P | undefined,
): P | undefined {
  const uid = podUidOf(event);
  const pod = uid === undefined ? undefined : podByUid(uid);
  return pod && isEventAbout(event, pod) ? pod : undefined;
}

/** Failure events indexed by the pod they are about (podUidOf). */
export function indexFailureEvents(events: Iterable<EventView>): Map<string, EventView[]> {
  const byPodUid = new Map<string, EventView[]>();
  for (const event of events) {
    if (!isSandboxFailureEvent(event)) continue;
    const uid = podUidOf(event);
    if (!uid) continue;
    const list = byPodUid.get(uid);
    if (list) list.push(event);
    else byPodUid.set(uid, [event]);
  }
  return byPodUid;
}

/** The occurrences an Event stands for: its count when that is one, else 1 (the Event exists). */
const occurrences = (event: EventView) =>
  Number.isSafeInteger(event.count) && event.count > 0 ? event.count : 1;

/**
 * Pods scheduled to a node, still Pending, whose containers wait for a sandbox longer than the threshold,
 * each joined with its failure events. Pure: the answer depends only on the arguments.
 */
export function detectStuckPods(
  pods: Iterable<PodView>,
  failureEvents: ReadonlyMap<string, readonly EventView[]>,
  options: StuckPodOptions,
): StuckPod[] {
  const stuck: StuckPod[] = [];
  for (const pod of pods) {
    if (!pod.nodeName || pod.phase !== 'Pending' || pod.deleting) continue;
    const waitingReason = waitingReasonOf(pod);
    if (!waitingReason) continue;
    const waitingSince = pod.scheduledAt ?? pod.createdAt;
    const waitedSeconds = (options.now.getTime() - waitingSince.getTime()) / 1000;
    if (!(waitedSeconds >= options.stuckThresholdSeconds)) continue; // an invalid time (NaN) is no wait

    let latest: EventView | undefined;
    let failureCount = 0;
    const ignored: IgnoredEvent[] = [];
    for (const event of failureEvents.get(pod.uid) ?? []) {
      if (!isEventAbout(event, pod)) continue;
      const reason = ignoredEventReason(event, pod.nodeName);
      if (reason) {
        const { uid, reportingController, reportingInstance } = event;
        ignored.push({ uid, reason, reportingController, reportingInstance });
        continue;
      }
      // Bounded: the status publishes it as an integer, and the sum of a few odd counts could overflow to Infinity.
      failureCount = Math.min(Number.MAX_SAFE_INTEGER, failureCount + occurrences(event));
      if (!latest || event.lastTime > latest.lastTime) latest = event;
    }
    const entry: StuckPod = {
      pod,
      nodeName: pod.nodeName,
      waitingReason,
      waitingSince,
      waitedSeconds,
      cause: 'Unknown',
      failureCount,
    };
    if (latest) {
      entry.classification = classifyFailureMessage(latest.message);
      entry.cause = entry.classification.cause;
      entry.lastFailureTime = latest.lastTime;
      entry.lastMessage = latest.message;
    }
    if (ignored.length > 0) entry.ignoredEvents = ignored;
    stuck.push(entry);
  }
  return stuck;
}
