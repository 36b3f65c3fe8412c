import type { KubeConfig, KubernetesObjectApi, Watch } from '@kubernetes/client-node';
import { GROUP, VERSION, type RolloutKind } from '../api/v1alpha1/index.js';
import type { Change, HealthObject, PolicyObject, RunningCache, VersionedKind } from '../ports/cluster.js';
import {
  findPodOfEvent,
  indexFailureEvents,
  podUidOf,
  type WorkloadView,
  type EventView,
  type GatedPodView,
  type NodeView,
  type PodView,
} from '../detection/index.js';
import { FailureEventCaps } from './failure-event-caps.js';
import {
  Informer,
  keyOf,
  type ChangeHandler,
  type InformerLogger,
  type InformerOptions,
  type RawObject,
} from './informer.js';
import {
  eventView,
  gatedPodView,
  healthView,
  namespaceView,
  nodeLeaseView,
  nodeView,
  podView,
  policyView,
} from './views.js';
import { NODE_LEASE_NAMESPACE, nodeLeaseName, type NodeLeaseView } from '../policy/node-lease.js';
import { argoRolloutView, daemonSetView, deploymentView, statefulSetView } from './workload-views.js';

export interface InformerCacheOptions {
  kc: KubeConfig;
  logger: InformerLogger;
  onRestart?(informer: string, reason: string): void;
  /** See InformerOptions.watchSilenceMs. */
  watchSilenceMs?: number;
  /** Stand-ins for the API calls, for tests that feed the informers without a network. */
  api?: Pick<KubernetesObjectApi, 'list'>;
  watcher?: Pick<Watch, 'watch'>;
  /** Argo Rollouts' Rollout CRD is installed: its Rollouts are watched too (else they are not, and nothing asks). */
  argoRollouts?: boolean;
}

/** What one informer lists and watches, and what it keeps of each object. */
type Resource<T> = Pick<
  InformerOptions<T>,
  'apiVersion' | 'kind' | 'path' | 'namespace' | 'fieldSelector' | 'transform'
>;

const core = (kind: string, plural: string) => ({ apiVersion: 'v1', kind, path: `/api/v1/${plural}` });
const own = (kind: string, plural: string) => ({
  apiVersion: `${GROUP}/${VERSION}`,
  kind,
  path: `/apis/${GROUP}/${VERSION}/${plural}`,
});

const leaseKey = (node: string) => `${NODE_LEASE_NAMESPACE}/${nodeLeaseName(node)}`;

/**
 * The operator's read-only view of the cluster, fed by informers that keep only what detection reads:
 * scheduled Pending pods, sandbox-failure events, nodes, and the operator's own kinds.
 */
export class InformerCache implements RunningCache {
  readonly pods: Informer<PodView>;
  readonly sandboxEvents: Informer<EventView>;
  readonly failedEvents: Informer<EventView>;
  readonly nodeInformer: Informer<NodeView>;
  readonly policyInformer: Informer<PolicyObject>;
  readonly healthInformer: Informer<HealthObject>;
  readonly deploymentInformer: Informer<WorkloadView>;
  readonly statefulSetInformer: Informer<WorkloadView>;
  readonly daemonSetInformer: Informer<WorkloadView>;
  /** Only when Argo Rollouts is installed. */
  readonly rolloutInformer: Informer<WorkloadView> | undefined;
  readonly gatedPodInformer: Informer<GatedPodView>;
  readonly namespaceInformer: Informer<{ name: string; labels: Record<string, string> }>;
  /** medik8s' node leases, of one namespace: it may not exist (a list there is empty, not an error). */
  readonly leaseInformer: Informer<NodeLeaseView>;
  private readonly podsByNode = new Map<string, Map<string, PodView>>();
  private readonly podsByUid = new Map<string, PodView>();
  private eventsByPod: Map<string, EventView[]> | undefined;
  readonly failureEventCaps = new FailureEventCaps();

  constructor(options: InformerCacheOptions) {
    const informer = <T>(name: string, resource: Resource<T>) =>
      new Informer<T>({ ...this.sharedOptions(options, name), ...resource });
    // Failure Events within the caps (failure-event-caps.ts); the budget hears of each change before anyone else.
    const failureEvents = (name: string, fieldSelector: string) => {
      const events = informer(name, {
        ...core('Event', 'events'),
        fieldSelector,
        transform: this.admitEvent(name),
      });
      events.onChange((type, key) => {
        this.failureEventCaps.reported(name, type, key);
        this.eventsByPod = undefined;
      });
      return events;
    };
    this.pods = informer('pods', {
      ...core('Pod', 'pods'),
      // Running pods are not stuck: the apiserver filters them out (and sends a delete when a pod starts).
      fieldSelector: 'status.phase=Pending,spec.nodeName!=',
      transform: podView,
    });
    this.sandboxEvents = failureEvents(
      'events-sandbox',
      'reason=FailedCreatePodSandBox,involvedObject.kind=Pod',
    );
    // Keeps only container-creation failures.
    this.failedEvents = failureEvents('events-failed', 'reason=Failed,involvedObject.kind=Pod');
    this.nodeInformer = informer('nodes', { ...core('Node', 'nodes'), transform: nodeView });
    this.policyInformer = informer('sandboxpolicies', {
      ...own('SandboxPolicy', 'sandboxpolicies'),
      transform: policyView,
    });
    this.healthInformer = informer('sandboxhealths', {
      ...own('SandboxHealth', 'sandboxhealths'),
      transform: healthView,
    });
    this.deploymentInformer = informer('deployments', {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      path: '/apis/apps/v1/deployments',
      transform: deploymentView,
    });
    this.statefulSetInformer = informer('statefulsets', {
      apiVersion: 'apps/v1',
      kind: 'StatefulSet',
      path: '/apis/apps/v1/statefulsets',
      transform: statefulSetView,
    });
    this.daemonSetInformer = informer('daemonsets', {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      path: '/apis/apps/v1/daemonsets',
      transform: daemonSetView,
    });
    this.rolloutInformer = options.argoRollouts
      ? informer('rollouts', {
          apiVersion: 'argoproj.io/v1alpha1',
          kind: 'Rollout',
          path: '/apis/argoproj.io/v1alpha1/rollouts',
          transform: argoRolloutView,
        })
      : undefined;
    this.gatedPodInformer = informer('pods-gated', {
      ...core('Pod', 'pods'),
      // Gated pods are unscheduled: the pods informer (scheduled only) never sees them.
      fieldSelector: 'status.phase=Pending,spec.nodeName=',
      transform: gatedPodView,
    });
    this.namespaceInformer = informer('namespaces', {
      ...core('Namespace', 'namespaces'),
      transform: namespaceView,
    });
    this.leaseInformer = informer('node-leases', {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      path: `/apis/coordination.k8s.io/v1/namespaces/${NODE_LEASE_NAMESPACE}/leases`,
      namespace: NODE_LEASE_NAMESPACE,
      transform: nodeLeaseView,
    });
    this.pods.onChange((_type, _key, pod, previous) => {
      if (previous) this.unindexPod(previous);
      if (pod) this.indexPod(pod);
    });
  }

  private sharedOptions(options: InformerCacheOptions, name: string) {
    return {
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
    };
  }

  private admitEvent(source: string) {
    return (raw: RawObject): EventView | undefined => {
      const view = eventView(raw);
      const pod = view && podUidOf(view);
      if (!view || !pod) return undefined;
      const cached = findPodOfEvent(view, (uid) => this.podsByUid.get(uid)) !== undefined;
      return this.failureEventCaps.admit(source, keyOf(raw), pod, cached) ? view : undefined;
    };
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
      this.statefulSetInformer,
      this.daemonSetInformer,
      ...(this.rolloutInformer ? [this.rolloutInformer] : []),
      this.namespaceInformer,
      this.gatedPodInformer,
      this.leaseInformer,
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
    for (const informer of this.workloadInformers())
      informer.informer.onChange((type, key) => {
        handler({ kind: informer.kind, type, key });
      });
    this.namespaceInformer.onChange((type, key) => {
      handler({ kind: 'Namespace', type, key });
    });
    this.leaseInformer.onChange((type, _key, now, before) => {
      const node = (now ?? before)?.node;
      if (node) handler({ kind: 'NodeLease', type, key: node });
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
  /**
   * Every informer lists and watches. Not Argo Rollouts': its CRD is optional and can be removed while the operator
   * runs, and a 404 there must not stop node remediation; its Rollouts are then only not throttled.
   */
  watchesHealthy(): boolean {
    return this.informers().every((i) => i === this.rolloutInformer || i.isWatching());
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
      StatefulSet: this.statefulSetInformer,
      DaemonSet: this.daemonSetInformer,
      Rollout: this.rolloutInformer,
    } as const;
    if (kind === 'NodeLease') return this.leaseInformer.versionOf(leaseKey(name));
    return informers[kind]?.versionOf(name);
  }
  gatedPods(): Iterable<GatedPodView> {
    return this.gatedPodInformer.values();
  }
  *workloads(): Iterable<WorkloadView> {
    for (const { informer } of this.workloadInformers()) yield* informer.values();
  }
  private workloadInformers(): { kind: RolloutKind; informer: Informer<WorkloadView> }[] {
    return [
      { kind: 'Deployment', informer: this.deploymentInformer },
      { kind: 'StatefulSet', informer: this.statefulSetInformer },
      { kind: 'DaemonSet', informer: this.daemonSetInformer },
      ...(this.rolloutInformer ? [{ kind: 'Rollout' as const, informer: this.rolloutInformer }] : []),
    ];
  }
  nodeLease(node: string): NodeLeaseView | undefined {
    return this.leaseInformer.get(leaseKey(node));
  }
  nodeLeases(): Iterable<NodeLeaseView> {
    return this.leaseInformer.values();
  }
  namespaceLabels(name: string): Readonly<Record<string, string>> | undefined {
    return this.namespaceInformer.get(name)?.labels;
  }
  namespaces(): Iterable<{ name: string; labels: Readonly<Record<string, string>> }> {
    return this.namespaceInformer.values();
  }
  healths(): Iterable<HealthObject> {
    return this.healthInformer.values();
  }
  health(name: string): HealthObject | undefined {
    return this.healthInformer.get(name);
  }
}
