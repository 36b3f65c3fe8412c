// Converts API objects into the slim views the cache keeps. Lists arrive deserialised by client-node (dates as
// Date), watch events as raw JSON (dates as strings): every reader here accepts both.
import {
  toApiTime,
  NODE_CONDITION_TYPE,
  PACING_GATE,
  PACING_STAMP,
  IO_LIMIT_STAMP,
  ioLimitStamped,
  readStamps,
  SandboxHealthStatusSchema,
  SandboxPolicyStatusSchema,
  WantedIoLimitsSchema,
  type OwnNodeCondition,
} from '../api/v1alpha1/index.js';
import {
  isSandboxFailureEvent,
  podUidOf,
  truncateFailureMessage,
  type ContainerView,
  type EventView,
  type GatedPodView,
  type NodeView,
  type PodData,
  type PodView,
} from '../detection/index.js';
import type { HealthObject, PolicyObject } from '../ports/cluster.js';
import { leaseNode, type NodeLeaseView } from '../policy/node-lease.js';
import { arr, isJson, labels, num, obj, str, toDate } from '../detection/raw-json.js';
import type { StampedPodView } from '../cleanup/pod-stamps.js';
import type { RawObject } from './informer.js';
import { AGENT_FIELD_MANAGER } from './reading-publisher.js';

export { arr, isJson, labels, numOr, obj, str, toDate, type Json } from '../detection/raw-json.js';
export { placementOf } from '../policy/node-affinity.js';

function containers(statuses: unknown, init: boolean): ContainerView[] {
  return arr(statuses).map((s) => {
    const state = obj(s.state);
    const name = str(s.name) ?? '';
    if (state.running) return { name, init, state: 'running' };
    if (state.terminated) {
      const reason = str(obj(state.terminated).reason);
      return reason ? { name, init, state: 'terminated', reason } : { name, init, state: 'terminated' };
    }
    const reason = str(obj(state.waiting).reason);
    return reason ? { name, init, state: 'waiting', reason } : { name, init, state: 'waiting' };
  });
}

export function podView(raw: RawObject): PodView | undefined {
  const meta = obj(raw.metadata);
  const spec = obj(raw.spec);
  const status = obj(raw.status);
  const uid = str(meta.uid);
  const name = str(meta.name);
  const namespace = str(meta.namespace);
  const createdAt = toDate(meta.creationTimestamp);
  if (!uid || !name || !namespace || !createdAt) return undefined;
  const view: PodView = {
    uid,
    name,
    namespace,
    phase: str(status.phase) ?? 'Pending',
    createdAt,
    deleting: meta.deletionTimestamp !== undefined && meta.deletionTimestamp !== null,
    labels: labels(meta.labels),
    containers: [
      ...containers(status.initContainerStatuses, true),
      ...containers(status.containerStatuses, false),
    ],
  };
  const nodeName = str(spec.nodeName);
  if (nodeName) view.nodeName = nodeName;
  const controller = arr(meta.ownerReferences).find((o) => o.controller === true);
  const controllerKind = str(controller?.kind);
  if (controllerKind) view.controllerKind = controllerKind;
  const controllerName = str(controller?.name);
  if (controllerName) view.controllerName = controllerName;
  if (obj(meta.annotations)['kubernetes.io/config.mirror'] !== undefined) view.mirror = true;
  const scheduled = arr(status.conditions).find((c) => c.type === 'PodScheduled' && c.status === 'True');
  const scheduledAt = toDate(scheduled?.lastTransitionTime);
  if (scheduledAt) view.scheduledAt = scheduledAt;
  return view;
}

/**
 * What a running pod keeps on its node (the live read of running pods only): volumes whose data stays on the node
 * (an emptyDir not in memory, a hostPath, a generic ephemeral volume: its claim goes with the pod), the claims it
 * mounts (which of them are bound to the node is another read: WorkloadReader.claimPlacements), its priority.
 */
export function podData(raw: RawObject): PodData {
  const spec = obj(raw.spec);
  const data: PodData = { localVolumes: [], claims: [] };
  for (const volume of arr(spec.volumes)) {
    const name = str(volume.name) ?? '';
    const emptyDir = isJson(volume.emptyDir) ? volume.emptyDir : undefined;
    if (isJson(volume.hostPath) || isJson(volume.ephemeral) || (emptyDir && emptyDir.medium !== 'Memory'))
      data.localVolumes.push(name);
    const claim = str(obj(volume.persistentVolumeClaim).claimName);
    if (claim) data.claims.push(claim);
  }
  const priority = num(spec.priority);
  if (priority !== undefined) data.priority = priority;
  const priorityClassName = str(spec.priorityClassName);
  if (priorityClassName) data.priorityClassName = priorityClassName;
  return data;
}

/**
 * Where a pod spec may be scheduled, as node-affinity.ts reads it: its nodeSelector, its required node affinity's
 * terms and its tolerations; undefined when it sets none of them (any node without a NoSchedule taint).
 */
// What an Event's involvedObject must look like to name a pod at all: a namespace is a DNS-1123 label and a pod's
// name a DNS-1123 subdomain (an Event is not checked for either); a uid is a UUID (36 characters; 128 leaves room).
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const MAX_UID_CHARS = 128;
// The largest count a core/v1 Event can carry (int32).
const MAX_EVENT_COUNT = 2 ** 31 - 1;

/**
 * The head of a message that detection reads, as a string of its own: V8 makes a slice of a long string point into
 * it, so a 2 KiB head would keep the whole 1 MB message alive (measured with 200 KB messages: 200 KB kept per Event,
 * against 3 KB for a copy).
 */
function messageHead(message: string): string {
  const head = truncateFailureMessage(message);
  return head === message ? message : (JSON.parse(JSON.stringify(head)) as string);
}

/** A time an API object can carry: RFC 3339 has four-digit years, so anything else was never the apiserver's. */
function apiTime(v: unknown): Date | undefined {
  const date = toDate(v);
  const year = date?.getUTCFullYear();
  return year !== undefined && year >= 0 && year <= 9999 ? date : undefined;
}

/** How often an Event happened and when last: its series, else the older count and timestamps. */
export function eventOccurrences(raw: RawObject): { count: number; lastTime: Date } {
  const meta = obj(raw.metadata);
  const series = obj(raw.series);
  const count = num(series.count) ?? num(raw.count) ?? 1;
  return {
    // An Event exists because something happened at least once.
    count: Number.isFinite(count) ? Math.min(Math.max(1, Math.floor(count)), MAX_EVENT_COUNT) : 1,
    lastTime:
      apiTime(series.lastObservedTime) ??
      apiTime(raw.lastTimestamp) ??
      apiTime(raw.eventTime) ??
      apiTime(meta.creationTimestamp) ??
      new Date(0),
  };
}

/** The first non-empty string of these, or '' (an Event's older field first, as the API mirrors the newer into it). */
const firstNamed = (...values: unknown[]): string =>
  values.find((v): v is string => typeof v === 'string' && v !== '') ?? '';

/**
 * Only sandbox-failure events about a pod they can name are kept; everything else the selector let through is
 * dropped here. Dropped too: an Event whose involvedObject is in another namespace than the Event itself (kubelet
 * writes a pod's Events in its namespace; the apiserver checks this only for Events without an eventTime), so that no
 * one can report failures of another namespace's pods. The message is kept to the head detection reads. An Event
 * dated after `seenAt` (when the cache received it) is taken at that time: a date in 2099 would otherwise be the
 * latest failure of its pod for ever. Who wrote it is read as config/events/admission-policy.yaml reads it.
 */
export function eventView(raw: RawObject, seenAt: Date = new Date()): EventView | undefined {
  const meta = obj(raw.metadata);
  const involved = obj(raw.involvedObject);
  const involvedNamespace = str(involved.namespace) ?? '';
  const involvedName = str(involved.name) ?? '';
  const involvedUid = str(involved.uid);
  if (!DNS_LABEL.test(involvedNamespace) || !DNS_SUBDOMAIN.test(involvedName)) return undefined;
  if (str(meta.namespace) !== involvedNamespace) return undefined;
  if (involvedUid !== undefined && involvedUid.length > MAX_UID_CHARS) return undefined;
  const view: EventView = {
    uid: str(meta.uid) ?? '',
    type: str(raw.type) === 'Warning' ? 'Warning' : 'Normal', // kept bounded: the API allows any string
    reason: str(raw.reason) ?? '',
    message: messageHead(str(raw.message) ?? ''),
    involvedKind: str(involved.kind) ?? '',
    involvedNamespace,
    involvedName,
    ...eventOccurrences(raw),
    reportingController: firstNamed(obj(raw.source).component, raw.reportingComponent),
    reportingInstance: firstNamed(obj(raw.source).host, raw.reportingInstance),
  };
  if (view.lastTime > seenAt) view.lastTime = seenAt;
  if (involvedUid) view.involvedUid = involvedUid;
  return isSandboxFailureEvent(view) && podUidOf(view) !== undefined ? view : undefined;
}

export function nodeView(raw: RawObject): NodeView | undefined {
  const meta = obj(raw.metadata);
  const spec = obj(raw.spec);
  const status = obj(raw.status);
  const name = str(meta.name);
  if (!name) return undefined;
  const conditions = arr(status.conditions).map((c) => {
    const condition: NodeView['conditions'][number] = {
      type: str(c.type) ?? '',
      status: str(c.status) ?? 'Unknown',
    };
    const since = toDate(c.lastTransitionTime);
    return since ? { ...condition, lastTransitionTime: since } : condition;
  });
  const view: NodeView = {
    name,
    uid: str(meta.uid) ?? '',
    labels: labels(meta.labels),
    unschedulable: spec.unschedulable === true,
    ready: conditions.some((c) => c.type === 'Ready' && c.status === 'True'),
    taints: arr(spec.taints).map((t) => {
      const value = str(t.value);
      const timeAdded = asWritten(t.timeAdded);
      return {
        key: str(t.key) ?? '',
        ...(value === undefined ? {} : { value }),
        effect: str(t.effect) ?? '',
        ...(timeAdded === undefined ? {} : { timeAdded }),
      };
    }),
    conditions,
  };
  const runtime = str(obj(status.nodeInfo).containerRuntimeVersion);
  if (runtime) view.runtimeVersion = runtime;
  const stamps = readStamps(labels(meta.annotations), view.uid);
  if (stamps) view.stamps = stamps;
  const own = arr(status.conditions).find((c) => c.type === NODE_CONDITION_TYPE);
  if (own) view.ownCondition = ownCondition(own);
  return view;
}

/** A time as the apiserver wrote it (RFC 3339 to the second), from a watch's string or a list's Date alike. */
function asWritten(value: unknown): string | undefined {
  return value instanceof Date ? toApiTime(value) : str(value);
}

function ownCondition(c: Record<string, unknown>): OwnNodeCondition {
  const condition: OwnNodeCondition = {
    status: str(c.status) ?? 'Unknown',
    reason: str(c.reason) ?? '',
    message: str(c.message) ?? '',
  };
  const since = asWritten(c.lastTransitionTime);
  if (since) condition.lastTransitionTime = since;
  const heartbeat = asWritten(c.lastHeartbeatTime);
  if (heartbeat) condition.lastHeartbeatTime = heartbeat;
  return condition;
}

export function policyView(raw: RawObject): PolicyObject | undefined {
  const meta = obj(raw.metadata);
  const name = str(meta.name);
  if (!name) return undefined;
  const view: PolicyObject = {
    name,
    uid: str(meta.uid) ?? '',
    generation: num(meta.generation) ?? 0,
    createdAt: toDate(meta.creationTimestamp) ?? new Date(0),
    spec: raw.spec ?? {},
  };
  // Status is ours, but anyone with RBAC can patch it: a status that does not parse counts as none.
  const status = SandboxPolicyStatusSchema.safeParse(raw.status);
  if (status.success) view.status = status.data;
  return view;
}

export function healthView(raw: RawObject): HealthObject | undefined {
  const meta = obj(raw.metadata);
  const name = str(meta.name);
  if (!name) return undefined;
  const view: HealthObject = { name, uid: str(meta.uid) ?? '' };
  const nodeName = str(obj(raw.spec).nodeName);
  if (nodeName) view.nodeName = nodeName;
  const status = SandboxHealthStatusSchema.safeParse(raw.status);
  if (status.success) view.status = status.data;
  const wanted = obj(raw.spec).ioLimits;
  if (wanted !== undefined && wanted !== null) {
    const limits = WantedIoLimitsSchema.safeParse(wanted);
    if (limits.success) view.ioLimits = limits.data;
    else view.ioLimitsUnreadable = true;
  }
  // The apiserver's clock for the agent's last write: an agent whose clock is ahead cannot make its last reading
  // look new after it stopped (io-pressure.ts readingTime).
  const written = arr(meta.managedFields).find(
    (f) => f.manager === AGENT_FIELD_MANAGER && f.subresource === 'status',
  );
  const writtenTime = str(written?.time);
  if (writtenTime) view.readingWrittenTime = writtenTime;
  return view;
}

/** A namespace as rollout scoping reads it: its name and labels. */
export function namespaceView(raw: RawObject): { name: string; labels: Record<string, string> } | undefined {
  const meta = obj(raw.metadata);
  const name = str(meta.name);
  return name ? { name, labels: labels(meta.labels) } : undefined;
}

/**
 * When a pod was gated: the webhook gates a pod as it is created, so its gated-at is within a second or two of the
 * pod's creationTimestamp (whole seconds). One further off was not written by the webhook (a pod created with our gate
 * and annotation while the webhook was not asked), and would let the pod jump the queue: its creation time stands.
 */
function gatedAt(annotated: Date | undefined, created: Date | undefined): Date {
  if (!created) return annotated ?? new Date(0);
  return annotated && Math.abs(annotated.getTime() - created.getTime()) <= GATED_AT_SLACK_MS
    ? annotated
    : created;
}
const GATED_AT_SLACK_MS = 2_000;

/** Only pods carrying our pacing gate are kept. */
export function gatedPodView(raw: RawObject): GatedPodView | undefined {
  const meta = obj(raw.metadata);
  const gates = arr(obj(raw.spec).schedulingGates).flatMap((g) =>
    typeof g.name === 'string' ? [g.name] : [],
  );
  if (!gates.includes(PACING_GATE)) return undefined;
  const uid = str(meta.uid);
  const name = str(meta.name);
  const namespace = str(meta.namespace);
  if (!uid || !name || !namespace) return undefined;
  const annotations = labels(meta.annotations);
  const view: GatedPodView = {
    namespace,
    name,
    uid,
    gates,
    gatedAt: gatedAt(toDate(annotations[PACING_STAMP.since]), toDate(meta.creationTimestamp)),
  };
  const policy = annotations[PACING_STAMP.policy];
  if (policy) view.policy = policy;
  return view;
}

/** A pod carrying our IO-limit stamps for its own uid (limitIo), as cleanup lists them; others are not kept. */
export function ioStampedPodView(raw: RawObject): StampedPodView | undefined {
  const meta = obj(raw.metadata);
  const uid = str(meta.uid);
  const name = str(meta.name);
  const namespace = str(meta.namespace);
  const annotations = labels(meta.annotations);
  if (!uid || !name || !namespace || !ioLimitStamped(annotations, uid)) return undefined;
  const view: StampedPodView = {
    namespace,
    name,
    uid,
    policy: annotations[IO_LIMIT_STAMP.policy] ?? '',
    limit: annotations[IO_LIMIT_STAMP.limit] ?? '',
  };
  const nodeName = str(obj(raw.spec).nodeName);
  if (nodeName) view.nodeName = nodeName;
  return view;
}

/** A medik8s node lease (node-<node>); others in its namespace are not kept. */
export function nodeLeaseView(raw: RawObject): NodeLeaseView | undefined {
  const meta = obj(raw.metadata);
  const spec = obj(raw.spec);
  const node = leaseNode(str(meta.name) ?? '');
  const uid = str(meta.uid);
  if (!node || !uid) return undefined;
  const view: NodeLeaseView = { node, uid };
  const holder = str(spec.holderIdentity);
  const acquireTime = toDate(spec.acquireTime);
  const renewTime = toDate(spec.renewTime);
  const durationSeconds = num(spec.leaseDurationSeconds);
  const transitions = num(spec.leaseTransitions);
  if (holder !== undefined) view.holder = holder;
  if (acquireTime) view.acquireTime = acquireTime;
  if (renewTime) view.renewTime = renewTime;
  if (durationSeconds !== undefined) view.durationSeconds = durationSeconds;
  if (transitions !== undefined) view.transitions = transitions;
  return view;
}
