import type { KubeConfig, KubernetesObjectApi, Watch } from '@kubernetes/client-node';
import { GROUP, VERSION } from '../api/v1alpha1/index.js';
import type { Change, ClusterCache, HealthObject, PolicyObject, VersionedKind } from '../ports/cluster.js';
import {
  findPodOfEvent,
  indexFailureEvents,
  podUidOf,
  type DeploymentView,
  type EventView,
  type GatedPodView,
  type NodeView,
  type PodView,
} from '../detection/index.js';
import {
  Informer,
  keyOf,
  type ChangeHandler,
  type ChangeType,
  type InformerLogger,
  type RawObject,
} from './informer.js';
import {
  deploymentView,
  eventView,
  gatedPodView,
  healthView,
  namespaceView,
  nodeView,
  podView,
  policyView,
} from './views.js';

export interface InformerCacheOptions {
  kc: KubeConfig;
  logger: InformerLogger;
  onRestart?(informer: string, reason: string): void;
  /** See InformerOptions.watchSilenceMs. */
  watchSilenceMs?: number;
  /** Stand-ins for the API calls, for tests that feed the informers without a network. */
  api?: Pick<KubernetesObjectApi, 'list'>;
  watcher?: Pick<Watch, 'watch'>;
}

/**
 * Caps on the failure Events the cache keeps (issue 12): a flood of them (50,000 in a few minutes) must neither grow
 * the operator without bound nor crowd out the Events of the pods that are stuck. An Event over a cap is not stored;
 * a stored one is dropped when a change of it would go over.
 *
 * - 24 per pod: kubelet's EventCorrelator folds a pod's Events of one reason into at most 10 of their own and one
 *   that combines the rest (updated in place with the latest message); two reasons are watched, so 2 x 11, rounded
 *   up. Detection reads only the sum of their counts and the latest.
 * - 10,000 about pods the cache does not hold (not Pending, not seen yet, or no such pod): such an Event matters only
 *   if its pod shows up after it. Events about cached pods are not held to this cap, so a flood about other pods
 *   cannot crowd them out; the per-pod cap bounds them. Messages are cut to 2 KiB (MAX_FAILURE_MESSAGE_CHARS): 10,000
 *   Events took 11 MiB of heap with kubelet's messages, 27 MiB with every message at the cut (measured with
 *   test/unit/kube/event-flood.test.ts's informers), against 44 MiB for 50,000 uncapped.
 *
 * An Event is counted as its pod was when it was last admitted: one whose pod later left the cache counts as cached
 * until it changes again or the apiserver deletes it (after an hour by default).
 */
export const MAX_EVENTS_PER_POD = 24;
export const MAX_EVENTS_ABOUT_UNCACHED_PODS = 10_000;

interface AdmittedEvent {
  pod: string;
  uncached: boolean;
}

/**
 * Counts the failure Events each informer holds, to admit new ones under the caps. An informer calls its transform
 * (admit) and then reports the change, one at a time on a watch, or for a whole list first and then its changes.
 * A list that failed part way reports nothing of what it admitted: once an informer has reported a change, whatever
 * it admitted before and has not reported when it next calls admit (a list reports all of its changes in one go) was
 * never stored, and stops counting. During a list, the Events it will not find again count until it reports them
 * gone: a relist admits fewer than the caps allow, never more.
 */
export class FailureEventCaps {
  private readonly admitted = new Map<string, Map<string, AdmittedEvent>>();
  private readonly unreported = new Map<string, Set<string>>();
  private readonly stale = new Set<string>();
  private readonly perPod = new Map<string, number>();
  private uncachedCount = 0;

  /** Whether the informer `source` may hold the Event `key` about `pod` (cached: the cache holds that pod). */
  admit(source: string, key: string, pod: string, cached: boolean): boolean {
    if (this.stale.delete(source)) this.forgetUnreported(source);
    const admitted = this.admittedBy(source);
    const current = admitted.get(key);
    if (current?.pod !== pod && (this.perPod.get(pod) ?? 0) >= MAX_EVENTS_PER_POD) return false;
    if (!cached && !current?.uncached && this.uncachedCount >= MAX_EVENTS_ABOUT_UNCACHED_PODS) return false;
    if (current) this.remove(admitted, key, current);
    admitted.set(key, { pod, uncached: !cached });
    this.perPod.set(pod, (this.perPod.get(pod) ?? 0) + 1);
    if (!cached) this.uncachedCount++;
    if (!current) this.unreportedBy(source).add(key);
    return true;
  }

  /** The informer `source` stored (add, update) or dropped (delete) the Event `key`. */
  reported(source: string, type: ChangeType, key: string): void {
    const admitted = this.admittedBy(source);
    const current = admitted.get(key);
    if (type === 'delete' && current) this.remove(admitted, key, current);
    const unreported = this.unreportedBy(source);
    unreported.delete(key);
    if (unreported.size > 0) this.stale.add(source);
  }

  /** Events counted: all, and those about pods the cache did not hold. */
  get size(): { events: number; uncached: number; pods: number } {
    let events = 0;
    for (const admitted of this.admitted.values()) events += admitted.size;
    return { events, uncached: this.uncachedCount, pods: this.perPod.size };
  }

  private forgetUnreported(source: string): void {
    const admitted = this.admittedBy(source);
    for (const key of this.unreportedBy(source)) {
      const current = admitted.get(key);
      if (current) this.remove(admitted, key, current);
    }
    this.unreportedBy(source).clear();
  }

  private remove(admitted: Map<string, AdmittedEvent>, key: string, event: AdmittedEvent): void {
    admitted.delete(key);
    const left = (this.perPod.get(event.pod) ?? 0) - 1;
    if (left > 0) this.perPod.set(event.pod, left);
    else this.perPod.delete(event.pod);
    if (event.uncached) this.uncachedCount--;
  }

  private admittedBy(source: string): Map<string, AdmittedEvent> {
    let admitted = this.admitted.get(source);
    if (!admitted) this.admitted.set(source, (admitted = new Map<string, AdmittedEvent>()));
    return admitted;
  }

  private unreportedBy(source: string): Set<string> {
    let unreported = this.unreported.get(source);
    if (!unreported) this.unreported.set(source, (unreported = new Set<string>()));
    return unreported;
  }
}

/**
 * The operator's read-only view of the cluster, fed by informers that keep only what detection reads:
 * scheduled Pending pods, sandbox-failure events, nodes, and the operator's own kinds.
 */
export class InformerCache implements ClusterCache {
  readonly pods: Informer<PodView>;
  readonly sandboxEvents: Informer<EventView>;
  readonly failedEvents: Informer<EventView>;
  readonly nodeInformer: Informer<NodeView>;
  readonly policyInformer: Informer<PolicyObject>;
  readonly healthInformer: Informer<HealthObject>;
  readonly deploymentInformer: Informer<DeploymentView>;
  readonly gatedPodInformer: Informer<GatedPodView>;
  readonly namespaceInformer: Informer<{ name: string; labels: Record<string, string> }>;
  private readonly podsByNode = new Map<string, Map<string, PodView>>();
  private readonly podsByUid = new Map<string, PodView>();
  private eventsByPod: Map<string, EventView[]> | undefined;
  readonly failureEventCaps = new FailureEventCaps();

  constructor(options: InformerCacheOptions) {
    const common = (name: string) => ({
      kc: options.kc,
      logger: options.logger,
      name,
      onRestart: (reason: string) => options.onRestart?.(name, reason),
      // One informer through again means the apiserver is back: the others retry now, not at the end of a backoff
      // that grew while it was gone (up to 10 s; the operator converged 7 s after a restarted apiserver was ready).
      onRecovered: () => {
        for (const informer of this.informers()) informer.retryNow();
      },
      ...(options.watchSilenceMs !== undefined ? { watchSilenceMs: options.watchSilenceMs } : {}),
      ...(options.api ? { api: options.api } : {}),
      ...(options.watcher ? { watcher: options.watcher } : {}),
    });
    // Failure Events within the caps above; the budget hears of each change before anyone else.
    const admitEvent = (source: string) => (raw: RawObject) => {
      const view = eventView(raw);
      const pod = view && podUidOf(view);
      if (!view || !pod) return undefined;
      const cached = findPodOfEvent(view, (uid) => this.podsByUid.get(uid)) !== undefined;
      return this.failureEventCaps.admit(source, keyOf(raw), pod, cached) ? view : undefined;
    };
    this.pods = new Informer({
      ...common('pods'),
      apiVersion: 'v1',
      kind: 'Pod',
      path: '/api/v1/pods',
      // Running pods are not stuck: the apiserver filters them out (and sends a delete when a pod starts).
      fieldSelector: 'status.phase=Pending,spec.nodeName!=',
      transform: podView,
    });
    this.sandboxEvents = new Informer({
      ...common('events-sandbox'),
      apiVersion: 'v1',
      kind: 'Event',
      path: '/api/v1/events',
      fieldSelector: 'reason=FailedCreatePodSandBox,involvedObject.kind=Pod',
      transform: admitEvent('events-sandbox'),
    });
    this.failedEvents = new Informer({
      ...common('events-failed'),
      apiVersion: 'v1',
      kind: 'Event',
      path: '/api/v1/events',
      fieldSelector: 'reason=Failed,involvedObject.kind=Pod',
      transform: admitEvent('events-failed'), // keeps only container-creation failures
    });
    this.nodeInformer = new Informer({
      ...common('nodes'),
      apiVersion: 'v1',
      kind: 'Node',
      path: '/api/v1/nodes',
      transform: nodeView,
    });
    const crPath = (plural: string) => `/apis/${GROUP}/${VERSION}/${plural}`;
    this.policyInformer = new Informer({
      ...common('sandboxpolicies'),
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'SandboxPolicy',
      path: crPath('sandboxpolicies'),
      transform: policyView,
    });
    this.healthInformer = new Informer({
      ...common('sandboxhealths'),
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'SandboxHealth',
      path: crPath('sandboxhealths'),
      transform: healthView,
    });

    this.deploymentInformer = new Informer({
      ...common('deployments'),
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      path: '/apis/apps/v1/deployments',
      transform: deploymentView,
    });
    this.gatedPodInformer = new Informer({
      ...common('pods-gated'),
      apiVersion: 'v1',
      kind: 'Pod',
      path: '/api/v1/pods',
      // Gated pods are unscheduled: the pods informer (scheduled only) never sees them.
      fieldSelector: 'status.phase=Pending,spec.nodeName=',
      transform: gatedPodView,
    });
    this.namespaceInformer = new Informer({
      ...common('namespaces'),
      apiVersion: 'v1',
      kind: 'Namespace',
      path: '/api/v1/namespaces',
      transform: namespaceView,
    });

    this.pods.onChange((_type, _key, pod, previous) => {
      if (previous) this.unindexPod(previous);
      if (pod) this.indexPod(pod);
    });
    const onEvent =
      (source: string): ChangeHandler<EventView> =>
      (type, key) => {
        this.failureEventCaps.reported(source, type, key);
        this.eventsByPod = undefined;
      };
    this.sandboxEvents.onChange(onEvent('events-sandbox'));
    this.failedEvents.onChange(onEvent('events-failed'));
  }

  private informers(): Informer<unknown>[] {
    return [
      this.pods,
      this.sandboxEvents,
      this.failedEvents,
      this.nodeInformer,
      this.policyInformer,
      this.healthInformer,
      this.deploymentInformer,
      this.namespaceInformer,
      this.gatedPodInformer,
    ] as Informer<unknown>[];
  }

  /** Calls back with every change to what the cache keeps; wire handlers before start(). */
  onChange(handler: (change: Change) => void): void {
    this.pods.onChange((type, key, now, before) => {
      const pod = now ?? before;
      if (pod) handler({ kind: 'Pod', type, key, pod });
    });
    const onEvent: ChangeHandler<EventView> = (type, key, now, before) => {
      const event = now ?? before;
      if (event) handler({ kind: 'Event', type, key, event });
    };
    this.sandboxEvents.onChange(onEvent);
    this.failedEvents.onChange(onEvent);
    this.nodeInformer.onChange((type, key) => {
      handler({ kind: 'Node', type, key });
    });
    this.policyInformer.onChange((type, key) => {
      handler({ kind: 'SandboxPolicy', type, key });
    });
    this.deploymentInformer.onChange((type, key) => {
      handler({ kind: 'Deployment', type, key });
    });
    this.namespaceInformer.onChange((type, key) => {
      handler({ kind: 'Namespace', type, key });
    });
    this.gatedPodInformer.onChange((type, key, now, before) => {
      const pod = now ?? before;
      if (pod) handler({ kind: 'GatedPod', type, key, pod });
    });
    this.healthInformer.onChange((type, key, now, before) => {
      const health = now ?? before;
      if (health)
        handler({ kind: 'SandboxHealth', type, key, health, ...(now && before ? { previous: before } : {}) });
    });
  }

  start(): void {
    const events = [this.sandboxEvents, this.failedEvents] as Informer<unknown>[];
    for (const informer of this.informers()) if (!events.includes(informer)) informer.start();
    // Events are admitted by whether the cache holds their pod: listed before the pods, every one would count
    // against the cap on Events about pods not cached. (An informer stopped before it starts does nothing.)
    void this.pods.synced.then(() => {
      for (const informer of events) informer.start();
    });
  }

  async waitForSync(): Promise<void> {
    await Promise.all(this.informers().map((i) => i.synced));
  }

  isSynced(): boolean {
    return this.informers().every((i) => i.isSynced());
  }

  /** Every informer synced and none failing now: a failing one's part of the cache may be going stale. */
  watchesHealthy(): boolean {
    return this.informers().every((i) => i.isWatching());
  }

  async stop(): Promise<void> {
    await Promise.all(this.informers().map((i) => i.stop()));
  }

  /** The longest time any informer has been without a working list or watch (0 when all have one). */
  longestDisconnectedMs(): number {
    const now = performance.now();
    return Math.max(0, ...this.informers().map((i) => i.disconnectedMs(now)));
  }

  sizes(): Record<string, number> {
    return Object.fromEntries(this.informers().map((i) => [i.name, i.size]));
  }

  private indexPod(pod: PodView): void {
    this.podsByUid.set(pod.uid, pod);
    if (!pod.nodeName) return;
    let onNode = this.podsByNode.get(pod.nodeName);
    if (!onNode) this.podsByNode.set(pod.nodeName, (onNode = new Map<string, PodView>()));
    onNode.set(pod.uid, pod);
  }

  private unindexPod(pod: PodView): void {
    this.podsByUid.delete(pod.uid);
    if (!pod.nodeName) return;
    const onNode = this.podsByNode.get(pod.nodeName);
    onNode?.delete(pod.uid);
    if (onNode?.size === 0) this.podsByNode.delete(pod.nodeName);
  }

  podByUid(uid: string): PodView | undefined {
    return this.podsByUid.get(uid);
  }

  policies(): Iterable<PolicyObject> {
    return this.policyInformer.values();
  }
  policy(name: string): PolicyObject | undefined {
    return this.policyInformer.get(name);
  }
  nodes(): Iterable<NodeView> {
    return this.nodeInformer.values();
  }
  node(name: string): NodeView | undefined {
    return this.nodeInformer.get(name);
  }
  pendingPodsOn(nodeName: string): readonly PodView[] {
    return [...(this.podsByNode.get(nodeName)?.values() ?? [])];
  }
  failureEventsByPod(): ReadonlyMap<string, readonly EventView[]> {
    this.eventsByPod ??= indexFailureEvents([...this.sandboxEvents.values(), ...this.failedEvents.values()]);
    return this.eventsByPod;
  }
  eventView(key: string): EventView | undefined {
    return this.sandboxEvents.get(key) ?? this.failedEvents.get(key);
  }
  observedVersion(kind: VersionedKind, name: string): string | undefined {
    const informers = {
      Node: this.nodeInformer,
      SandboxHealth: this.healthInformer,
      SandboxPolicy: this.policyInformer,
      Deployment: this.deploymentInformer,
    } as const;
    return informers[kind].versionOf(name);
  }
  gatedPods(): Iterable<GatedPodView> {
    return this.gatedPodInformer.values();
  }
  deployments(): Iterable<DeploymentView> {
    return this.deploymentInformer.values();
  }
  namespaceLabels(name: string): Readonly<Record<string, string>> | undefined {
    return this.namespaceInformer.get(name)?.labels;
  }
  healths(): Iterable<HealthObject> {
    return this.healthInformer.values();
  }
  health(name: string): HealthObject | undefined {
    return this.healthInformer.get(name);
  }
}
