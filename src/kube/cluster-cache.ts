import type { KubeConfig } from '@kubernetes/client-node';
import { GROUP, VERSION } from '../api/v1alpha1/index.js';
import type { Change } from '../controllers/mapper.js';
import type { ClusterCache, HealthObject, PolicyObject, VersionedKind } from '../controllers/ports.js';
import type { DeploymentView, EventView, GatedPodView, NodeView, PodView } from '../detection/index.js';
import { Informer, type ChangeHandler, type InformerLogger } from './informer.js';
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

  constructor(options: InformerCacheOptions) {
    const common = (name: string) => ({
      kc: options.kc,
      logger: options.logger,
      name,
      onRestart: (reason: string) => options.onRestart?.(name, reason),
      ...(options.watchSilenceMs !== undefined ? { watchSilenceMs: options.watchSilenceMs } : {}),
    });
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
      transform: eventView,
    });
    this.failedEvents = new Informer({
      ...common('events-failed'),
      apiVersion: 'v1',
      kind: 'Event',
      path: '/api/v1/events',
      fieldSelector: 'reason=Failed,involvedObject.kind=Pod',
      transform: eventView, // keeps only container-creation failures
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
    const invalidateEvents: ChangeHandler<EventView> = () => (this.eventsByPod = undefined);
    this.sandboxEvents.onChange(invalidateEvents);
    this.failedEvents.onChange(invalidateEvents);
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
    for (const informer of this.informers()) informer.start();
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
    if (!this.eventsByPod) {
      const index = new Map<string, EventView[]>();
      for (const event of [...this.sandboxEvents.values(), ...this.failedEvents.values()]) {
        const uid = event.involvedUid;
        if (!uid) continue;
        const list = index.get(uid);
        if (list) list.push(event);
        else index.set(uid, [event]);
      }
      this.eventsByPod = index;
    }
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
