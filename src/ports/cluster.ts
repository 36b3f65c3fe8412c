// What the controllers read of the cluster: the read-only cache, its change notices, and the live reads it does not
// keep. Implemented by src/kube (informers, REST) and in memory by the tests; it names no implementation.
import type {
  LabelSelector,
  RolloutKind,
  SandboxHealthStatus,
  WantedIoLimitSpec,
  SandboxPolicyStatus,
} from '../api/v1alpha1/index.js';
import type { WorkloadView, EventView, GatedPodView, NodeView, PodView } from '../detection/index.js';
import type { NodeSelectorTerm } from '../policy/node-affinity.js';
import type { NodeLeaseView } from '../policy/node-lease.js';

/** A PersistentVolumeClaim and the nodes its volume admits (nodeAffinity.required's terms; absent: every node). */
export interface ClaimPlacement {
  claim: string;
  nodeTerms?: NodeSelectorTerm[];
}

/** What read-your-writes fences compare; a NodeLease by the node's name. */
export type VersionedKind = 'Node' | 'SandboxHealth' | 'SandboxPolicy' | 'NodeLease' | RolloutKind;

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
  /**
   * spec.ioLimits, the IO limits the operator wants on the node's pods, as stored (absent: none); a list that does
   * not parse is `unreadable` instead, and left alone.
   */
  ioLimits?: WantedIoLimitSpec[];
  ioLimitsUnreadable?: true;
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
  /** What rolls out, for rollout throttling: Deployments, StatefulSets, DaemonSets, and Argo Rollouts when installed. */
  workloads(): Iterable<WorkloadView>;
  /** The medik8s lease of a node (node-<node> in medik8s-leases); undefined when there is none. */
  nodeLease(node: string): NodeLeaseView | undefined;
  /** Every medik8s node lease the cache holds. */
  nodeLeases(): Iterable<NodeLeaseView>;
  /** A namespace's labels; undefined when the namespace is not known. */
  namespaceLabels(name: string): Readonly<Record<string, string>> | undefined;
  /** Every namespace the cache holds, with its labels. */
  namespaces(): Iterable<{ name: string; labels: Readonly<Record<string, string>> }>;
  /** The resourceVersion the cache holds for an object (a rollout's by namespace/name): what read-your-writes fences compare against. */
  observedVersion(kind: VersionedKind, name: string): string | undefined;
  /** Synced, and no watch known to be broken: the operator acts only then. */
  watchesHealthy(): boolean;
}

/** A change the cache saw, as its informers report it: what the mapper turns into policy keys. */
export type Change =
  | {
      /** A NodeLease's key is its node's name. */
      kind: 'SandboxPolicy' | 'Node' | 'Namespace' | 'NodeLease' | RolloutKind;
      type: 'add' | 'update' | 'delete';
      key: string;
    }
  | { kind: 'Pod'; type: 'add' | 'update' | 'delete'; key: string; pod: PodView }
  | { kind: 'GatedPod'; type: 'add' | 'update' | 'delete'; key: string; pod: GatedPodView }
  | { kind: 'Event'; type: 'add' | 'update' | 'delete'; key: string; event: EventView }
  | {
      kind: 'SandboxHealth';
      type: 'add' | 'update' | 'delete';
      key: string;
      health: HealthObject;
      previous?: HealthObject;
    };

/** Live reads the cache does not keep: running pods are not cached (only Pending ones are). */
export interface WorkloadReader {
  /** Running pods on a node that a selector picks, each with what it keeps on the node (data; its claims unresolved). */
  runningPodsOn(node: string, selector: LabelSelector): Promise<PodView[]>;
  /**
   * Where each of a namespace's claims may be used: the node affinity of the PersistentVolume it is bound to (absent:
   * anywhere, or not bound).
   */
  claimPlacements(namespace: string, claims: readonly string[]): Promise<ClaimPlacement[]>;
}

/** The cache as the Manager runs it: started, synced before any work, watched, stopped. */
export interface RunningCache extends ClusterCache {
  start(): void;
  stop(): Promise<void>;
  waitForSync(): Promise<void>;
  isSynced(): boolean;
  /** The longest time any informer has been without a working list or watch (0 when all have one). */
  longestDisconnectedMs(): number;
  /** Objects held, by informer. */
  sizes(): Record<string, number>;
  /** Calls back with every change to what the cache keeps; wire handlers before start(). */
  onChange(handler: (change: Change) => void): void;
}
