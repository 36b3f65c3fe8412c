import type { NodeStamps, RolloutStamps } from '../api/v1alpha1/index.js';

/**
 * The slices of Kubernetes objects that detection reads. src/kube converts API objects into these, so the
 * pure core never sees client-node types and its tests build plain data.
 */
export interface ContainerView {
  name: string;
  init: boolean;
  state: 'waiting' | 'running' | 'terminated';
  /** The waiting or terminated reason as kubelet reports it, e.g. ContainerCreating. */
  reason?: string;
}

export interface PodView {
  uid: string;
  namespace: string;
  name: string;
  nodeName?: string;
  phase: string;
  createdAt: Date;
  /** When the PodScheduled condition became True. */
  scheduledAt?: Date;
  deleting: boolean;
  labels: Readonly<Record<string, string>>;
  containers: readonly ContainerView[];
  /** Kind of the controlling owner (ReplicaSet, StatefulSet, DaemonSet, Job, ...); absent for a bare pod. */
  controllerKind?: string;
  /** A static pod's mirror (kubernetes.io/config.mirror): the API cannot delete the real one. */
  mirror?: boolean;
  /** Name of the controlling owner (a ReplicaSet for a Deployment's pods). */
  controllerName?: string;
}

export interface EventView {
  uid: string;
  type: string;
  reason: string;
  message: string;
  involvedKind: string;
  involvedNamespace: string;
  involvedName: string;
  involvedUid?: string;
  /** Occurrences folded into this Event (count, or series.count). */
  count: number;
  /** Latest occurrence (lastTimestamp, series.lastObservedTime or eventTime). */
  lastTime: Date;
}

export interface NodeView {
  name: string;
  uid: string;
  labels: Readonly<Record<string, string>>;
  unschedulable: boolean;
  ready: boolean;
  /** status.nodeInfo.containerRuntimeVersion, e.g. containerd://1.6.0 */
  runtimeVersion?: string;
  taints: readonly { key: string; value?: string; effect: string }[];
  conditions: readonly { type: string; status: string; lastTransitionTime?: Date }[];
  /** The operator's ownership stamps, read from the node's annotations; absent: nothing on it is ours. */
  stamps?: NodeStamps;
}

/** What rollout throttling reads of a Deployment. */
export interface DeploymentView {
  namespace: string;
  name: string;
  uid: string;
  generation: number;
  paused: boolean;
  createdAt: Date;
  /** Not every replica runs the current spec and is available yet (or the spec is not yet observed). */
  rollingOut: boolean;
  /** Our pause stamps; absent: we did not pause it. */
  stamps?: RolloutStamps;
  /** The user resumed one we paused: hands off until then. */
  handsOffUntil?: Date;
}

/** A pod held at the pacing gate (unscheduled, carrying sandbox.remediator.io/paced). */
export interface GatedPodView {
  namespace: string;
  name: string;
  uid: string;
  /** Every scheduling gate on the pod, ours included. */
  gates: readonly string[];
  /** The policy whose gate it is (sandbox.remediator.io/gated-by). */
  policy?: string;
  /** When it was gated (sandbox.remediator.io/gated-at, else its creation). */
  gatedAt: Date;
}
