import type { NodeConditionValue, RolloutKind, Taint } from '../api/v1alpha1/index.js';
import type { IoLimitStampAnnotations } from '../api/v1alpha1/index.js';
import type { PodRef } from '../policy/actions.js';

/** One change to a Node: everything decided for it in a pass, applied as one patch. */
export interface NodeChange {
  node: string;
  /** The resourceVersion the decision was made on: the write fails (409) if the node changed since. */
  resourceVersion?: string;
  unschedulable?: boolean;
  /** The node's whole taint list after the change (absent: unchanged). */
  taints?: Taint[];
  /** Annotations to set; null removes one. */
  annotations: Record<string, string | null>;
}

/**
 * Holds or releases a rollout (a Deployment, StatefulSet, DaemonSet or Argo Rollout), with the stamps that record it,
 * in one merge patch: the hold and its record are written together or not at all.
 */
export interface WorkloadChange {
  kind: RolloutKind;
  namespace: string;
  name: string;
  /** The resourceVersion the decision was made on (409 when it changed since). */
  resourceVersion?: string;
  /** A JSON merge patch of its spec (absent: unchanged): spec.paused, or spec.updateStrategy. */
  spec?: Record<string, unknown>;
  annotations: Record<string, string | null>;
}

/**
 * Takes or renews a medik8s node lease (Lease node-<node> in medik8s-leases) as a whole object, on the version it was
 * decided on, so another holder's lease is never taken over unless it was seen expired at that version.
 */
export interface NodeLeaseWrite {
  node: string;
  /** The Node's uid: the lease is owned by the Node, as medik8s' are, and goes when it does. */
  nodeUid: string;
  holder: string;
  durationSeconds: number;
  acquireTime: Date;
  renewTime: Date;
  transitions: number;
  /** Absent: create it (409 if one exists by then); else replace this version of it (409 if it changed since). */
  resourceVersion?: string | undefined;
}

/** Our node lease to delete, at exactly this uid and version (medik8s releases a lease by deleting it). */
export interface NodeLeaseRelease {
  node: string;
  uid: string;
  resourceVersion?: string | undefined;
}

export type EvictionOutcome =
  | { result: 'Evicted' }
  /** A dry run's: reported as done, but the pod is still there. */
  | { result: 'Simulated' }
  /** The pod was already gone. */
  | { result: 'Gone' }
  /** The API refused for now (429: a PodDisruptionBudget): retry later. */
  | { result: 'Blocked'; message: string };

/**
 * Carries out decided actions. The real implementation (src/kube) changes the cluster; the dry-run one changes
 * nothing. Logs, Events, metrics and status are produced by the caller for both alike, so a dry run reports
 * exactly what a real run would.
 */
export interface Actuator {
  readonly dryRun: boolean;
  /** Applies the change; resolves with the node's new resourceVersion when one is known. */
  patchNode(change: NodeChange): Promise<string | undefined>;
  /** Evicts through the Eviction API (policy/v1), which honours PodDisruptionBudgets. */
  evict(pod: PodRef): Promise<EvictionOutcome>;
  /** Resolves with the workload's new resourceVersion when one is known. */
  patchWorkload(change: WorkloadChange): Promise<string | undefined>;
  /**
   * Lifts the pacing gate from a pod whose gates are `gates` (as the cache shows them); it keeps every other gate.
   * Resolves false when the pod is gone or its gates changed meanwhile (looked at again on a later pass), or, with a
   * resourceVersion, when the pod changed at all since that version.
   */
  releaseGate(pod: PodRef & { gates: readonly string[]; resourceVersion?: string }): Promise<boolean>;
  /**
   * Writes the IO-limit stamps on a pod (limitIo; a key set to null is removed), and no other annotation: only on the
   * pod `uid`, never another made again under its name. Resolves false when that pod is gone.
   */
  stampPod(pod: PodRef, annotations: IoLimitStampAnnotations): Promise<boolean>;
  /**
   * Sets the node's SandboxCreationDegraded condition (null removes it), and no other part of its status; resolves
   * with the node's new resourceVersion when one is known. With a resourceVersion, a node changed since is a 409.
   */
  setNodeCondition(
    node: string,
    condition: NodeConditionValue | null,
    resourceVersion?: string,
  ): Promise<string | undefined>;
  /** Resolves with the lease's new resourceVersion when one is known. */
  writeNodeLease(write: NodeLeaseWrite): Promise<string | undefined>;
  /** A lease already gone is no error; one changed since (someone took it) is a 409. */
  releaseNodeLease(release: NodeLeaseRelease): Promise<void>;
}

/** Mutates nothing; what a real run would have done is reported by the caller, marked as a dry run. */
export class DryRunActuator implements Actuator {
  readonly dryRun = true;
  patchNode(): Promise<string | undefined> {
    return Promise.resolve(undefined);
  }
  evict(): Promise<EvictionOutcome> {
    return Promise.resolve({ result: 'Simulated' });
  }
  patchWorkload(): Promise<string | undefined> {
    return Promise.resolve(undefined);
  }
  releaseGate(): Promise<boolean> {
    return Promise.resolve(true);
  }
  stampPod(): Promise<boolean> {
    return Promise.resolve(true);
  }
  setNodeCondition(): Promise<string | undefined> {
    return Promise.resolve(undefined);
  }
  writeNodeLease(): Promise<string | undefined> {
    return Promise.resolve(undefined);
  }
  releaseNodeLease(): Promise<void> {
    return Promise.resolve();
  }
}
