import type { LabelSelector, SandboxHealthStatus, SandboxPolicyStatus } from '../api/v1alpha1/index.js';
import type { DeploymentView, EventView, GatedPodView, NodeView, PodView } from '../detection/index.js';

export type VersionedKind = 'Node' | 'SandboxHealth' | 'SandboxPolicy' | 'Deployment';
import type { Transition } from '../status/health-status.js';

export interface PolicyObject {
  name: string;
  uid: string;
  generation: number;
  createdAt: Date;
  /** The spec as stored: validated by the reconciler, never trusted. */
  spec: unknown;
  status?: SandboxPolicyStatus;
}

export interface HealthObject {
  name: string;
  uid: string;
  nodeName?: string;
  status?: SandboxHealthStatus;
  /** When the apiserver last took the agent's status.ioReading (its managedFields time, whole seconds). */
  readingWrittenTime?: string;
}

/** The read-only, synced cache the reconciler reads; implemented by informers, or in memory in tests. */
export interface ClusterCache {
  policies(): Iterable<PolicyObject>;
  policy(name: string): PolicyObject | undefined;
  nodes(): Iterable<NodeView>;
  node(name: string): NodeView | undefined;
  /** Scheduled, Pending pods on a node. */
  pendingPodsOn(nodeName: string): readonly PodView[];
  podByUid(uid: string): PodView | undefined;
  /** Sandbox failure events indexed by the pod uid they are about. */
  failureEventsByPod(): ReadonlyMap<string, readonly EventView[]>;
  healths(): Iterable<HealthObject>;
  health(name: string): HealthObject | undefined;
  /** Pods held at the pacing gate. */
  gatedPods(): Iterable<GatedPodView>;
  /** Deployments, for rollout throttling. */
  deployments(): Iterable<DeploymentView>;
  /** A namespace's labels; undefined when the namespace is not known. */
  namespaceLabels(name: string): Readonly<Record<string, string>> | undefined;
  /** The resourceVersion the cache holds for an object (Deployments by namespace/name): what read-your-writes fences compare against. */
  observedVersion(kind: VersionedKind, name: string): string | undefined;
  /** Synced, and no watch known to be broken: the operator acts only then. */
  watchesHealthy(): boolean;
}

/** Live reads the cache does not keep: running pods are not cached (only Pending ones are). */
export interface WorkloadReader {
  runningPodsOn(node: string, selector: LabelSelector): Promise<PodView[]>;
}

/** Writes the operator's own objects. Implementations patch only what they are given. */
export interface StatusWriter {
  createHealth(node: NodeView): Promise<void>;
  /** Resolves with the object's new resourceVersion and status (the API's merge of the patch), as returned. */
  patchHealthStatus(
    name: string,
    status: { [K in keyof SandboxHealthStatus]?: SandboxHealthStatus[K] | null },
  ): Promise<{ version?: string; status?: SandboxHealthStatus }>;
  deleteHealth(name: string): Promise<void>;
  /** Resolves with the policy's new resourceVersion (undefined when it is gone or none was returned). */
  patchPolicyStatus(name: string, status: SandboxPolicyStatus): Promise<string | undefined>;
}

export interface EventRecorder {
  record(transition: Transition): Promise<void>;
}
