// An in-memory ClusterCache + StatusWriter + EventRecorder for reconcile tests: the writer applies what it
// is given to the same store the cache reads, and records every call.
import type { NodeSelectorTerm } from '../../src/policy/node-affinity.js';
import type {
  Actuator,
  EvictionOutcome,
  NodeChange,
  NodeLeaseRelease,
  NodeLeaseWrite,
  WorkloadChange,
} from '../../src/actuation/actuator.js';
import type { NodeLeaseView } from '../../src/policy/node-lease.js';
import type { RawObject } from '../../src/kube/informer.js';
import { argoRolloutView, daemonSetView, statefulSetView } from '../../src/kube/workload-views.js';
import {
  matchesSelector,
  readRolloutStamps,
  readStamps,
  ROLLOUT_STAMP,
  rolloutStampAnnotations,
  stampAnnotations,
  type LabelSelector,
  type SandboxHealthStatus,
  type SandboxPolicySpecInput,
  type SandboxPolicyStatus,
  type NodeConditionValue,
  type WantedIoLimitSpec,
  type IoLimitStampAnnotations,
} from '../../src/api/v1alpha1/index.js';
import type {
  Change,
  ClusterCache,
  HealthObject,
  PolicyObject,
  RunningCache,
  VersionedKind,
  WorkloadReader,
} from '../../src/ports/cluster.js';
import type { EventRecorder, StatusWriter, Transition } from '../../src/ports/writes.js';
import type { PodRef } from '../../src/policy/actions.js';
import {
  indexFailureEvents,
  type WorkloadView,
  type GatedPodView,
  type EventView,
  type NodeView,
  type PodView,
} from '../../src/detection/index.js';
import { OutOfTurnError, terminalIfInvalid } from '../../src/kube/errors.js';
import { applyMergePatch } from '../../src/status/merge-patch.js';
import { explainedByIo } from '../../src/status/health-status.js';
import { T0 } from './builders.js';

export function aNode(name: string, labels: Record<string, string> = {}): NodeView {
  return {
    name,
    uid: `uid-${name}`,
    labels,
    unschedulable: false,
    ready: true,
    taints: [],
    conditions: [],
    runtimeVersion: 'containerd://1.6.0',
  };
}

/**
 * The API and the cache in one. With `lagging`, writes reach the API (`apiNodes`, `apiHealths`) at once but the
 * cache only on deliver(), as a watch delivers them later: the read-your-writes race, on demand.
 */
export class MemoryCluster implements ClusterCache, StatusWriter, EventRecorder, Actuator, WorkloadReader {
  readonly dryRun = false;
  readonly policyMap = new Map<string, PolicyObject>();
  readonly nodeMap = new Map<string, NodeView>();
  pods: PodView[] = [];
  /** Running pods (the cache keeps only Pending ones; migration reads these live). */
  running: PodView[] = [];
  events: EventView[] = [];
  readonly healthMap = new Map<string, HealthObject>();
  /** Deployments by namespace/name. */
  readonly deploymentMap = new Map<string, WorkloadView>();
  /** StatefulSets, DaemonSets and Argo Rollouts as the API has them, by Kind/namespace/name: read through the real views, patched as JSON merge patches. */
  readonly rawWorkloads = new Map<string, RawObject>();
  readonly namespaceMap = new Map<string, Record<string, string>>();
  gated: GatedPodView[] = [];
  readonly released: string[] = [];
  readonly writes: string[] = [];
  readonly recorded: Transition[] = [];
  readonly evicted: string[] = [];
  /** Pods (namespace/name) whose eviction answers 429, as a PodDisruptionBudget would. */
  readonly protectedPods = new Set<string>();
  lagging = false;
  watching = true;
  /** Told of every change the cache shows, with the node it is about (as the mapper tells the reconciler). */
  private readonly listeners: ((node: string | undefined) => void)[] = [];
  private version = 100;
  private readonly versions = new Map<string, number>();
  /** What the API holds, ahead of `versions` (what the cache shows) while lagging. */
  private readonly apiVersions = new Map<string, number>();
  private readonly undelivered: (() => void)[] = [];
  private readonly policyListeners: ((policy: string) => void)[] = [];
  /** SandboxHealths as the API holds them after writes the watch has not delivered yet. */
  private readonly undeliveredHealth = new Map<string, HealthObject>();
  /** Fails the next patch of this node with this error, once. */
  failNextNodePatch = new Map<string, Error>();
  /** Runs once just before the next Deployment patch reaches the API. */
  beforeNextDeploymentPatch: (() => void) | undefined;
  /** Runs once just before the next node patch reaches the API: someone else's change racing ours. */
  beforeNextNodePatch: (() => void) | undefined;
  /** The next Node condition write reaches the API only once this settles: a write still in flight. */
  holdNextConditionWrite: Promise<void> | undefined;
  /** Awaited once at the start of the next live read of a node's running pods: what happens while a pass looks. */
  duringNextLiveRead: (() => Promise<void>) | undefined;
  failNextHealthPatch = new Map<string, Error>();
  /** SandboxHealth status patches are answered only once this settles: writes slower than the apply that asked. */
  healthPatchGate: Promise<void> | undefined;

  addPolicy(name: string, spec: SandboxPolicySpecInput | Record<string, unknown>, createdAt = T0): this {
    this.policyMap.set(name, { name, uid: `uid-${name}`, generation: 1, createdAt, spec });
    return this;
  }
  addNodes(...nodes: NodeView[]): this {
    for (const node of nodes) this.nodeMap.set(node.name, node);
    return this;
  }

  policies() {
    return this.policyMap.values();
  }
  policy(name: string) {
    return this.policyMap.get(name);
  }
  nodes() {
    return this.nodeMap.values();
  }
  node(name: string) {
    return this.nodeMap.get(name);
  }
  pendingPodsOn(nodeName: string) {
    return this.pods.filter((p) => p.nodeName === nodeName && p.phase === 'Pending');
  }
  podByUid(uid: string) {
    return this.pods.find((p) => p.uid === uid);
  }
  *workloads() {
    yield* this.deploymentMap.values();
    for (const raw of this.rawWorkloads.values()) {
      const view = viewOf(raw);
      if (view) yield view;
    }
  }
  /** A StatefulSet, DaemonSet or Rollout as stored (its kind and metadata.namespace/name say where). */
  putWorkload(raw: RawObject): string {
    const meta = raw.metadata as { namespace: string; name: string };
    const key = `${String(raw.kind)}/${meta.namespace}/${meta.name}`;
    this.commit(key, () => this.rawWorkloads.set(key, structuredClone(raw)), { quiet: true });
    return key;
  }
  private patchRawWorkload(change: WorkloadChange): Promise<string | undefined> {
    const key = `${change.kind}/${change.namespace}/${change.name}`;
    this.writes.push(`patch ${change.kind.toLowerCase()}/${change.namespace}/${change.name}`);
    const raw = this.rawWorkloads.get(key);
    if (!raw) return Promise.reject(new Error(`no ${key}`));
    const current = this.apiVersions.get(key);
    if (
      change.resourceVersion !== undefined &&
      current !== undefined &&
      change.resourceVersion !== String(current)
    )
      return Promise.reject(conflict(`${key} was changed since resourceVersion ${change.resourceVersion}`));
    const patch: Record<string, unknown> = { metadata: { annotations: change.annotations } };
    if (change.spec) patch.spec = change.spec;
    const updated = mergePatch(raw, patch) as RawObject;
    this.patchedWorkloads.push({ key, patch });
    return Promise.resolve(this.commit(key, () => this.rawWorkloads.set(key, updated), { quiet: true }));
  }
  /** Every merge patch sent to a StatefulSet, DaemonSet or Rollout, in order. */
  readonly patchedWorkloads: { key: string; patch: Record<string, unknown> }[] = [];
  gatedPods() {
    return this.gated;
  }
  releaseGate(pod: PodRef & { gates: readonly string[] }): Promise<boolean> {
    this.writes.push(`release pod/${pod.namespace}/${pod.name}`);
    const found = this.gated.some((p) => p.uid === pod.uid);
    this.released.push(`${pod.namespace}/${pod.name}`);
    this.gated = this.gated.filter((p) => p.uid !== pod.uid);
    return Promise.resolve(found);
  }
  /** The IO-limit stamps on each pod, by UID, as the API has them (running pods are read live, not cached). */
  readonly podStamps = new Map<string, Record<string, string>>();
  /** Pods (namespace/name) whose next stamp write fails, as an apiserver that does not answer. */
  readonly failStamps = new Set<string>();
  /** Pods (namespace/name) whose stamp writes a webhook of the cluster's denies, each time (403). */
  readonly refuseStamps = new Set<string>();
  stampPod(pod: PodRef, annotations: IoLimitStampAnnotations): Promise<boolean> {
    this.writes.push(`stamp pod/${pod.namespace}/${pod.name}`);
    if (this.failStamps.delete(`${pod.namespace}/${pod.name}`))
      return Promise.reject(Object.assign(new Error('timed out'), { code: 504, body: {} }));
    if (this.refuseStamps.has(`${pod.namespace}/${pod.name}`)) {
      const message = 'admission webhook "freeze.example.com" denied the request: pods are frozen';
      const denied = Object.assign(new Error(message), { code: 403, body: { message } });
      const refused = terminalIfInvalid(denied, `patch of pod/${pod.namespace}/${pod.name}`);
      return Promise.reject(refused instanceof Error ? refused : denied);
    }
    const found = [...this.pods, ...this.running].some((p) => p.uid === pod.uid);
    if (!found) return Promise.resolve(false);
    const stamps = mergeAnnotations(this.podStamps.get(pod.uid), annotations);
    if (Object.keys(stamps).length > 0) this.podStamps.set(pod.uid, stamps);
    else this.podStamps.delete(pod.uid);
    return Promise.resolve(true);
  }
  /** medik8s node leases by node, as the API has them (the cache shows them as delivered). */
  readonly leaseMap = new Map<string, NodeLeaseView>();
  nodeLease(node: string) {
    return this.leaseMap.get(node);
  }
  nodeLeases() {
    return this.leaseMap.values();
  }
  /** Someone else (NodeHealthCheck, say) holds or changes a node's lease: a new version. */
  putLease(lease: NodeLeaseView): void {
    this.commit(`NodeLease/${lease.node}`, () => this.leaseMap.set(lease.node, lease));
  }
  writeNodeLease(write: NodeLeaseWrite): Promise<string | undefined> {
    const key = `NodeLease/${write.node}`;
    this.writes.push(`${write.resourceVersion ? 'update' : 'create'} lease/node-${write.node}`);
    const current = this.apiVersions.get(key);
    const exists = this.leaseMap.has(write.node);
    if (write.resourceVersion === undefined ? exists : write.resourceVersion !== String(current))
      return Promise.reject(conflict(`lease node-${write.node}: ${exists ? 'changed meanwhile' : 'exists'}`));
    const lease: NodeLeaseView = {
      node: write.node,
      uid: this.leaseMap.get(write.node)?.uid ?? `lease-uid-${write.node}-${this.version}`,
      holder: write.holder,
      acquireTime: write.acquireTime,
      renewTime: write.renewTime,
      durationSeconds: write.durationSeconds,
      transitions: write.transitions,
    };
    return Promise.resolve(this.commit(key, () => this.leaseMap.set(write.node, lease)));
  }
  releaseNodeLease(release: NodeLeaseRelease): Promise<void> {
    const key = `NodeLease/${release.node}`;
    this.writes.push(`delete lease/node-${release.node}`);
    const lease = this.leaseMap.get(release.node);
    if (!lease) return Promise.resolve();
    if (
      lease.uid !== release.uid ||
      (release.resourceVersion !== undefined && release.resourceVersion !== String(this.apiVersions.get(key)))
    )
      return Promise.reject(conflict(`lease node-${release.node} changed meanwhile`));
    this.apiVersions.delete(key);
    this.leaseMap.delete(release.node);
    this.versions.delete(key);
    this.changed(release.node);
    return Promise.resolve();
  }
  namespaces() {
    return [...this.namespaceMap].map(([name, labels]) => ({ name, labels }));
  }
  namespaceLabels(name: string) {
    return this.namespaceMap.get(name) ?? (name.startsWith('kube-') ? undefined : {});
  }
  patchWorkload(change: WorkloadChange): Promise<string | undefined> {
    if (change.kind !== 'Deployment') return this.patchRawWorkload(change);
    const key = `${change.namespace}/${change.name}`;
    this.writes.push(`patch deployment/${key}`);
    const d = this.deploymentMap.get(key);
    if (!d) return Promise.reject(new Error(`no deployment ${key}`));
    const race = this.beforeNextDeploymentPatch;
    this.beforeNextDeploymentPatch = undefined;
    race?.();
    const current = this.apiVersions.get(`Deployment/${key}`);
    if (
      change.resourceVersion !== undefined &&
      current !== undefined &&
      change.resourceVersion !== String(current)
    )
      return Promise.reject(
        conflict(`deployment/${key} was changed since resourceVersion ${change.resourceVersion}`),
      );
    const annotations = new Map(
      Object.entries(rolloutStampAnnotations(d.stamps, d.uid, d.handsOffUntil)).filter(
        (e): e is [string, string] => e[1] !== null,
      ),
    );
    for (const [k, v] of Object.entries(change.annotations)) {
      if (v === null) annotations.delete(k);
      else annotations.set(k, v);
    }
    const paused = change.spec && 'paused' in change.spec ? change.spec.paused === true : d.paused;
    const updated: WorkloadView = { ...d, paused };
    const stamps = readRolloutStamps(Object.fromEntries(annotations), d.uid);
    if (stamps) updated.stamps = stamps;
    else delete updated.stamps;
    const handsOff = annotations.get(ROLLOUT_STAMP.handsOffUntil);
    if (handsOff) updated.handsOffUntil = new Date(handsOff);
    return Promise.resolve(
      this.commit(`Deployment/${key}`, () => this.deploymentMap.set(key, updated), { quiet: true }),
    );
  }
  observedVersion(kind: VersionedKind, name: string) {
    const v = this.versions.get(`${kind}/${name}`);
    return v === undefined ? undefined : String(v);
  }
  watchesHealthy() {
    return this.watching;
  }
  /** As the real reader: every running pod with what it keeps on the node (none, unless a test gave it some). */
  async runningPodsOn(node: string, selector: LabelSelector) {
    const during = this.duringNextLiveRead;
    this.duringNextLiveRead = undefined;
    await during?.();
    return this.running
      .filter((p) => p.nodeName === node && matchesSelector(selector, p.labels))
      .map((p) => ({ ...p, data: p.data ?? { localVolumes: [], claims: [] } }));
  }
  /**
   * A running pod of a rollout on a node (n1 by default), owned as its kind owns pods: a Deployment's through a
   * ReplicaSet with a pod-template-hash, a StatefulSet's or DaemonSet's directly. Such a rollout's new pods may land there.
   */
  runsOn(kind: 'Deployment' | 'StatefulSet' | 'DaemonSet', key: string, node = 'n1'): this {
    const [namespace = '', name = ''] = key.split('/');
    const pod = {
      uid: `uid-running-${name}-${node}`,
      namespace,
      name: `${name}-running-${node}`,
      nodeName: node,
      phase: 'Running',
      createdAt: new Date(0),
      deleting: false,
      containers: [{ name: 'app', init: false, state: 'running' as const }],
    };
    this.running.push(
      kind === 'Deployment'
        ? {
            ...pod,
            labels: { 'pod-template-hash': 'h1' },
            controllerKind: 'ReplicaSet',
            controllerName: `${name}-h1`,
          }
        : { ...pod, labels: {}, controllerKind: kind, controllerName: name },
    );
    return this;
  }
  /** The node affinity of the volume each claim is bound to, by namespace/claim (absent: any node). */
  readonly claimTerms = new Map<string, NodeSelectorTerm[]>();
  claimPlacements(namespace: string, claims: readonly string[]) {
    return Promise.resolve(
      claims.map((claim) => {
        const nodeTerms = this.claimTerms.get(`${namespace}/${claim}`);
        return nodeTerms ? { claim, nodeTerms } : { claim };
      }),
    );
  }
  /** Applies to the cache what the API already has (a watch catching up). */
  deliver(): void {
    for (const apply of this.undelivered.splice(0)) apply();
  }
  onNodeChange(listener: (node: string | undefined) => void): this {
    this.listeners.push(listener);
    return this;
  }
  /** Calls back with a policy's name each time the cache shows a new version of it, as its informer would. */
  onPolicyChange(listener: (policy: string) => void): this {
    this.policyListeners.push(listener);
    return this;
  }
  /** Tells listeners that the cache changed for a node (undefined: anything), as informer events would. */
  changed(node?: string): void {
    for (const listener of this.listeners) listener(node);
  }
  private commit(key: string, apply: () => void, { quiet = false } = {}): string {
    const version = ++this.version;
    this.apiVersions.set(key, version);
    const visible = () => {
      apply();
      this.versions.set(key, version);
      if (key.startsWith('SandboxPolicy/'))
        for (const listener of this.policyListeners) listener(key.slice('SandboxPolicy/'.length));
      // The mapper drops the operator's own status writes: they make no node dirty.
      if (!quiet) this.changed(key.slice(key.indexOf('/') + 1));
    };
    if (this.lagging) this.undelivered.push(visible);
    else visible();
    return String(version);
  }

  patchNode(change: NodeChange): Promise<string | undefined> {
    this.writes.push(`patch node/${change.node}`);
    const race = this.beforeNextNodePatch;
    this.beforeNextNodePatch = undefined;
    race?.();
    const failure = this.failNextNodePatch.get(change.node);
    if (failure) {
      this.failNextNodePatch.delete(change.node);
      return Promise.reject(failure);
    }
    const node = this.nodeMap.get(change.node);
    if (!node) return Promise.reject(new Error(`no node ${change.node}`));
    const current = this.apiVersions.get(`Node/${change.node}`);
    if (
      change.resourceVersion !== undefined &&
      current !== undefined &&
      change.resourceVersion !== String(current)
    )
      return Promise.reject(
        conflict(`node/${change.node} was changed since resourceVersion ${change.resourceVersion}`),
      );
    const annotations = new Map(
      Object.entries(stampAnnotations(node.stamps, node.uid)).filter(
        (e): e is [string, string] => e[1] !== null,
      ),
    );
    for (const [k, v] of Object.entries(change.annotations)) {
      if (v === null) annotations.delete(k);
      else annotations.set(k, v);
    }
    const updated: NodeView = {
      ...node,
      unschedulable: change.unschedulable ?? node.unschedulable,
      taints: change.taints ?? node.taints,
    };
    const stamps = readStamps(Object.fromEntries(annotations), node.uid);
    if (stamps) updated.stamps = stamps;
    else delete updated.stamps;
    return Promise.resolve(this.commit(`Node/${change.node}`, () => this.nodeMap.set(change.node, updated)));
  }
  /**
   * Holds the next Node condition write where it reaches the API: `reached` resolves once it is held there (and
   * throws if it never comes), `release` lets it through.
   */
  holdConditionWrite(): { reached: () => Promise<void>; release: () => void } {
    let release!: () => void;
    this.holdNextConditionWrite = new Promise<void>((resolve) => (release = resolve));
    const reached = async () => {
      for (let i = 0; i < 50 && this.holdNextConditionWrite !== undefined; i++)
        await new Promise(setImmediate);
      if (this.holdNextConditionWrite !== undefined)
        throw new Error('the condition write never reached the API');
    };
    return { reached, release };
  }

  async setNodeCondition(name: string, condition: NodeConditionValue | null): Promise<string | undefined> {
    this.writes.push(`${condition ? 'set' : 'remove'} condition node/${name}`);
    const held = this.holdNextConditionWrite;
    this.holdNextConditionWrite = undefined;
    await held;
    const node = this.nodeMap.get(name);
    if (!node) return Promise.reject(new Error(`no node ${name}`));
    const updated: NodeView = { ...node };
    if (condition) {
      const { status, reason, message, lastTransitionTime, lastHeartbeatTime } = condition;
      updated.ownCondition = { status, reason, message, lastTransitionTime, lastHeartbeatTime };
    } else delete updated.ownCondition;
    return this.commit(`Node/${name}`, () => this.nodeMap.set(name, updated));
  }
  evict(pod: PodRef): Promise<EvictionOutcome> {
    if (this.protectedPods.has(`${pod.namespace}/${pod.name}`))
      return Promise.resolve({
        result: 'Blocked',
        message: "Cannot evict pod as it would violate the pod's disruption budget.",
      });
    // The operator's promise, checked on every eviction of every test: a stuck pod goes only once its node's stored
    // SandboxHealth explains it as stuck from IO.
    const stuck = this.pods.find((p) => p.uid === pod.uid);
    if (stuck?.nodeName && !explainedByIo(this.healthMap.get(stuck.nodeName)?.status)(pod.uid))
      return Promise.reject(
        new Error(`evicted ${pod.namespace}/${pod.name} before sandboxhealth/${stuck.nodeName} explained it`),
      );
    this.writes.push(`evict pod/${pod.namespace}/${pod.name}`);
    this.evicted.push(`${pod.namespace}/${pod.name}`);
    const node = [...this.pods, ...this.running].find((p) => p.uid === pod.uid)?.nodeName;
    const remove = () => {
      this.pods = this.pods.filter((p) => p.uid !== pod.uid);
      this.running = this.running.filter((p) => p.uid !== pod.uid);
      this.changed(node);
    };
    if (this.lagging) this.undelivered.push(remove);
    else remove();
    return Promise.resolve({ result: 'Evicted' });
  }
  failureEventsByPod() {
    return indexFailureEvents(this.events);
  }
  healths() {
    return this.healthMap.values();
  }
  health(name: string) {
    return this.healthMap.get(name);
  }

  createHealth(node: NodeView): Promise<void> {
    this.writes.push(`create health/${node.name}`);
    this.vanished.delete(node.name);
    this.healthMap.set(node.name, { name: node.name, uid: `h-${node.name}`, nodeName: node.name });
    return Promise.resolve();
  }
  patchHealthStatus(
    name: string,
    status: Parameters<StatusWriter['patchHealthStatus']>[1],
    after?: string,
  ): Promise<{ version?: string; status?: SandboxHealthStatus }> {
    this.writes.push(after === undefined ? `patch health/${name}` : `patch health/${name} after`);
    const gate = this.healthPatchGate;
    if (gate) return gate.then(() => this.answerHealthPatch(name, status, after));
    return this.answerHealthPatch(name, status, after);
  }
  private answerHealthPatch(
    name: string,
    status: Parameters<StatusWriter['patchHealthStatus']>[1],
    after?: string,
  ): Promise<{ version?: string; status?: SandboxHealthStatus }> {
    const failure = this.failNextHealthPatch.get(name);
    if (failure) {
      this.failNextHealthPatch.delete(name);
      return Promise.reject(failure);
    }
    // What the API holds: our last write while the watch has not delivered it, else what the cache shows.
    const health = this.vanished.has(name)
      ? undefined
      : (this.undeliveredHealth.get(name) ?? this.healthMap.get(name));
    if (after !== undefined && health?.status?.reportId !== after)
      return Promise.reject(new OutOfTurnError(`status patch of sandboxhealth/${name}`));
    if (!health) {
      const gone = Object.assign(new Error(`sandboxhealths "${name}" not found`), { statusCode: 404 });
      return Promise.reject(gone);
    }
    const patch = JSON.parse(JSON.stringify(status)) as Record<string, unknown>;
    // As the apiserver answers a JSON Patch that removes what is not there.
    if (after !== undefined && Object.entries(patch).some(([k, v]) => v === null && !(k in health.status!)))
      return Promise.reject(new OutOfTurnError(`status patch of sandboxhealth/${name}`));
    // A new object, as an informer replaces its view: a reconcile holding the old one still sees the old status.
    const updated: HealthObject = {
      ...health,
      status: (after === undefined
        ? applyMergePatch(health.status, patch)
        : replaceKeys(health.status, patch)) as SandboxHealthStatus,
    };
    if (this.lagging) this.undeliveredHealth.set(name, updated);
    const version = this.commit(
      `SandboxHealth/${name}`,
      () => {
        this.healthMap.set(name, updated);
        if (this.undeliveredHealth.get(name) === updated) this.undeliveredHealth.delete(name);
      },
      { quiet: true },
    );
    return Promise.resolve({
      version,
      status: JSON.parse(JSON.stringify(updated.status)) as SandboxHealthStatus,
    });
  }
  /** Fails the next spec.ioLimits write of a SandboxHealth with this error. */
  readonly failNextIoLimitsPatch = new Map<string, Error>();
  /**
   * As the apiserver applies the operator's JSON Patch of spec.ioLimits: only while the list is still what was read
   * (a 409-shaped error otherwise), a new version of the object.
   */
  patchHealthIoLimits(
    name: string,
    limits: readonly WantedIoLimitSpec[],
    read: readonly WantedIoLimitSpec[] | undefined,
    version: string | undefined,
  ): Promise<string | undefined> {
    this.writes.push(`patch health/${name} ioLimits`);
    const failure = this.failNextIoLimitsPatch.get(name);
    if (failure) {
      this.failNextIoLimitsPatch.delete(name);
      return Promise.reject(failure);
    }
    const health = this.vanished.has(name) ? undefined : this.apiHealth(name);
    const stored = health?.ioLimits;
    const apiVersion = this.apiVersions.get(`SandboxHealth/${name}`);
    const added = read === undefined && version !== undefined && apiVersion !== undefined;
    if (
      !health ||
      JSON.stringify(stored) !== JSON.stringify(read) ||
      (added && String(apiVersion) !== version)
    )
      return Promise.reject(Object.assign(new Error('changed meanwhile'), { code: 409, body: {} }));
    const updated: HealthObject = { ...health };
    if (limits.length > 0) updated.ioLimits = JSON.parse(JSON.stringify(limits)) as WantedIoLimitSpec[];
    else delete updated.ioLimits;
    if (this.lagging) this.undeliveredHealth.set(name, updated);
    return Promise.resolve(
      this.commit(
        `SandboxHealth/${name}`,
        () => {
          this.healthMap.set(name, updated);
          if (this.undeliveredHealth.get(name) === updated) this.undeliveredHealth.delete(name);
        },
        { quiet: true },
      ),
    );
  }
  /** Someone else (an SRE, the agent) changes a SandboxHealth: a new version, seen at once. */
  changeHealth(name: string, change: (health: HealthObject) => HealthObject): void {
    const health = this.healthMap.get(name);
    if (!health) throw new Error(`no sandboxhealth ${name}`);
    this.commit(`SandboxHealth/${name}`, () => this.healthMap.set(name, change(health)));
  }
  /** A SandboxHealth as the API holds it (ahead of the cache while lagging). */
  apiHealth(name: string) {
    return this.undeliveredHealth.get(name) ?? this.healthMap.get(name);
  }
  /** A condition of a SandboxHealth as the API holds it (ahead of the cache while lagging). */
  apiHealthCondition(name: string, type: string) {
    return this.apiHealth(name)?.status?.conditions?.find((c) => c.type === type);
  }
  /** The SandboxHealth is deleted behind the operator's back, and the watch never shows it (a delete missed). */
  vanishHealth(name: string): void {
    this.vanished.add(name);
    this.undeliveredHealth.delete(name);
  }
  /** SandboxHealths gone from the API that the cache still shows. */
  private readonly vanished = new Set<string>();
  deleteHealth(name: string): Promise<void> {
    this.writes.push(`delete health/${name}`);
    this.healthMap.delete(name);
    this.undeliveredHealth.delete(name);
    this.versions.delete(`SandboxHealth/${name}`);
    return Promise.resolve();
  }
  /** The bodies of the policy status patches, in order. */
  readonly policyPatches: Partial<SandboxPolicyStatus>[] = [];
  patchPolicyStatus(name: string, status: Partial<SandboxPolicyStatus>): Promise<string | undefined> {
    this.writes.push(`patch policy/${name}`);
    this.policyPatches.push(status);
    const policy = this.policyMap.get(name);
    if (!policy) return Promise.resolve(undefined);
    // Merge-patch semantics: the fields given replace those stored; the others stay.
    const updated: PolicyObject = {
      ...policy,
      status: JSON.parse(JSON.stringify({ ...policy.status, ...status })) as SandboxPolicyStatus,
    };
    return Promise.resolve(
      this.commit(`SandboxPolicy/${name}`, () => this.policyMap.set(name, updated), { quiet: true }),
    );
  }
  /** Someone else changes a Deployment (kubectl rollout pause, say): a new version. */
  changeDeployment(key: string, change: (d: WorkloadView) => WorkloadView): void {
    const d = this.deploymentMap.get(key);
    if (!d) throw new Error(`no deployment ${key}`);
    this.commit(`Deployment/${key}`, () => this.deploymentMap.set(key, change(d)), { quiet: true });
  }
  /** Someone else changes a node (an admin's kubectl cordon, say): a new version, seen as the cache allows. */
  changeNode(name: string, change: (node: NodeView) => NodeView): void {
    const node = this.nodeMap.get(name);
    if (!node) throw new Error(`no node ${name}`);
    this.commit(`Node/${name}`, () => this.nodeMap.set(name, change(node)));
  }

  record(transition: Transition): Promise<void> {
    this.recorded.push(transition);
    return Promise.resolve();
  }
  takeWrites(): string[] {
    return this.writes.splice(0);
  }
  takeEvents(): string[] {
    return this.recorded.splice(0).map((t) => `${t.target.kind}/${t.target.name} ${t.type} ${t.reason}`);
  }
}

/** Wires the cluster's changes to a reconciler's dirty-node tracking, as the manager's mapper does. */
export function tellOfChanges(
  cluster: MemoryCluster,
  reconciler: { markDirty(policy: string, node?: string): void; policyObserved(policy: string): void },
): void {
  cluster.onNodeChange((node) => {
    for (const policy of cluster.policyMap.keys()) reconciler.markDirty(policy, node);
  });
  cluster.onPolicyChange((policy) => {
    reconciler.policyObserved(policy);
  });
}

/** A 409 as client-node reports it. */
function conflict(message: string): Error {
  return Object.assign(new Error(message), {
    code: 409,
    body: JSON.stringify({ reason: 'Conflict', message }),
  });
}

/**
 * The in-memory cluster as the Manager runs a cache: synced at once, its changes reported as informer changes (a node's,
 * or, for a change that can touch anything, a policy's).
 */
export class RunningMemoryCluster extends MemoryCluster implements RunningCache {
  start(): void {
    return undefined;
  }
  stop(): Promise<void> {
    return Promise.resolve();
  }
  waitForSync(): Promise<void> {
    return Promise.resolve();
  }
  isSynced(): boolean {
    return true;
  }
  longestDisconnectedMs(): number {
    return 0;
  }
  sizes(): Record<string, number> {
    return { nodes: this.nodeMap.size, pods: this.pods.length };
  }
  private readonly handlers: ((change: Change) => void)[] = [];
  /** Tells the Manager of a change of another kind, as an informer would (a Deployment's, say). */
  tell(change: Change): void {
    for (const handler of this.handlers) handler(change);
  }
  onChange(handler: (change: Change) => void): void {
    this.handlers.push(handler);
    this.onPolicyChange((policy) => {
      handler({ kind: 'SandboxPolicy', type: 'update', key: policy });
    });
    this.onNodeChange((node) => {
      handler(
        node === undefined
          ? { kind: 'SandboxPolicy', type: 'update', key: [...this.policyMap.keys()][0] ?? '' }
          : { kind: 'Node', type: 'update', key: node },
      );
    });
  }
}

function viewOf(raw: RawObject): WorkloadView | undefined {
  if (raw.kind === 'StatefulSet') return statefulSetView(raw);
  if (raw.kind === 'DaemonSet') return daemonSetView(raw);
  if (raw.kind === 'Rollout') return argoRolloutView(raw);
  return undefined;
}

/** RFC 7386 JSON merge patch: objects merge, null removes, anything else replaces. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out = new Map(
    typeof target === 'object' && target !== null && !Array.isArray(target) ? Object.entries(target) : [],
  );
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) out.delete(key);
    else out.set(key, mergePatch(out.get(key), value));
  }
  return Object.fromEntries(out);
}

/** A JSON Patch's keys applied to a status, as the apiserver applies `add` (set whole) and `remove` (null). */
function replaceKeys(status: object | undefined, keys: Record<string, unknown>): object {
  const kept = Object.entries(status ?? {}).filter(([key]) => !(key in keys));
  const set = Object.entries(keys).filter(([, value]) => value !== null);
  return Object.fromEntries([...kept, ...set]);
}

/** Annotations after a merge patch of them: a key set to null is removed. */
export const mergeAnnotations = (
  before: Readonly<Record<string, string>> | undefined,
  patch: Readonly<Record<string, string | null>>,
): Record<string, string> =>
  Object.fromEntries(
    Object.entries({ ...before, ...patch }).filter((kv): kv is [string, string] => kv[1] !== null),
  );
