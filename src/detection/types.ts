import type {
  HeldStrategy,
  NodeStamps,
  OwnNodeCondition,
  RolloutKind,
  RolloutStamps,
  UpdateStrategy,
} from '../api/v1alpha1/index.js';

/** A node selector requirement (core/v1 NodeSelectorRequirement). */
export interface NodeSelectorRequirement {
  key: string;
  operator: string;
  values?: readonly string[];
}

/** A node selector term: its expressions on labels and its fields (only metadata.name exists), ANDed. */
export interface NodeSelectorTerm {
  matchExpressions?: readonly NodeSelectorRequirement[];
  matchFields?: readonly NodeSelectorRequirement[];
}

/** A toleration (core/v1 Toleration). */
export interface Toleration {
  key?: string;
  operator?: string;
  value?: string;
  effect?: string;
}

/** Where a pod may be scheduled: what the scheduler reads of its spec for that. */
export interface Placement {
  nodeSelector?: Readonly<Record<string, string>>;
  /** requiredDuringSchedulingIgnoredDuringExecution's terms, ORed; absent: any node. */
  requiredTerms?: readonly NodeSelectorTerm[];
  tolerations?: readonly Toleration[];
}

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

/**
 * What a running pod keeps on its node, read from its spec by the live read of running pods (the cache of Pending
 * pods keeps none of it): what moving the pod would lose, or whether it could start elsewhere at all.
 */
export interface PodData {
  /** Volumes whose data lives on the node: an emptyDir not backed by memory, a hostPath, a generic ephemeral volume. */
  localVolumes: string[];
  /** The PersistentVolumeClaims it mounts. */
  claims: string[];
  /** Of those, the ones bound to a PersistentVolume with node affinity (a local volume); absent until resolved. */
  nodeBoundClaims?: string[];
  /** spec.priority and spec.priorityClassName, when set. */
  priority?: number;
  priorityClassName?: string;
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
  /** Running pods read live only: what it keeps on its node. */
  data?: PodData;
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
  /**
   * Latest occurrence (lastTimestamp, series.lastObservedTime or eventTime); one dated after the Event was seen is
   * taken at the time it was seen, so a date in the future cannot make an Event the latest for ever.
   */
  lastTime: Date;
  /**
   * Who the Event says wrote it: source.component and source.host (core/v1), else reportingComponent and
   * reportingInstance (events.k8s.io/v1's reportingController and reportingInstance); '' when it names none. Only
   * an Event of the kubelet of the pod's own node counts (ignoredEventReason); the admission policy
   * config/events makes the claim true.
   */
  reportingController: string;
  reportingInstance: string;
}

export interface NodeView {
  name: string;
  uid: string;
  labels: Readonly<Record<string, string>>;
  unschedulable: boolean;
  ready: boolean;
  /** status.nodeInfo.containerRuntimeVersion, e.g. containerd://1.6.0 */
  runtimeVersion?: string;
  /** Whole, timeAdded included: a patch of the list gives every other taint back exactly as it was. */
  taints: readonly { key: string; value?: string; effect: string; timeAdded?: string }[];
  conditions: readonly { type: string; status: string; lastTransitionTime?: Date }[];
  /** The operator's ownership stamps, read from the node's annotations; absent: nothing on it is ours. */
  stamps?: NodeStamps;
  /** The condition SandboxCreationDegraded in its status, as written; absent when the node has none. */
  ownCondition?: OwnNodeCondition;
}

/**
 * What rollout throttling reads of a workload that rolls out: a Deployment, a StatefulSet, a DaemonSet or an Argo
 * Rollout. Each kind's own hold is read into the same words, so that one decision serves every kind.
 */
export interface WorkloadView {
  kind: RolloutKind;
  namespace: string;
  name: string;
  uid: string;
  generation: number;
  /**
   * Held from rolling out. Not ours: spec.paused (Deployment, Rollout, or a Rollout's pause condition), a
   * StatefulSet's partition at its replicas or its OnDelete strategy, a DaemonSet's OnDelete. Ours (stamped):
   * whether our hold stands as we set it; false when its owner resumed it or changed the strategy meanwhile.
   */
  paused: boolean;
  createdAt: Date;
  /** Not every replica runs the current spec and is available yet (or the spec is not yet observed). */
  rollingOut: boolean;
  /**
   * StatefulSet and DaemonSet rolling out only because updated pods are not yet ready or available: neither kind has
   * a progress deadline, so one whose pod never becomes ready would hold a slot for ever (observeRollouts bounds it).
   */
  settling?: true;
  /** StatefulSet and DaemonSet: spec.updateStrategy as it stands (a hold replaces it, a release puts back the held one). */
  strategy?: UpdateStrategy;
  /** StatefulSet: spec.replicas (a partition there holds every pod). */
  replicas?: number;
  /**
   * StatefulSet: pods running the update revision, as the controller has counted them for this generation (0 while
   * it has not seen it). It updates from the highest ordinal down, so these are the top ordinals.
   */
  updatedReplicas?: number;
  /**
   * The revision an updated pod carries, so that a stuck pod is known to be this rollout's: a StatefulSet's
   * status.updateRevision (its pods' controller-revision-hash), a DaemonSet's template generation (its pods'
   * pod-template-generation, the DaemonSet controller's other test of an updated pod), a Rollout's
   * status.currentPodHash (its pods' rollouts-pod-template-hash). Deployments: none, any pod of it counts.
   */
  revision?: string;
  /** A Deployment past its own progress deadline (Progressing=False): rolling out, but holding no slot. */
  stalled?: true;
  /** Our pause stamps; absent: we did not pause it. */
  stamps?: RolloutStamps;
  /** StatefulSet and DaemonSet we hold: what the hold replaced. */
  held?: HeldStrategy;
  /** Where its pods may be scheduled: its pod template's nodeSelector, required node affinity and tolerations. */
  placement?: Placement;
  /** The user resumed one we paused: hands off until then. */
  handsOffUntil?: Date;
}

/** A pod with its measured share of its node's disk IO (percent of the device's busy time), when it was measured. */
export type MeasuredPod = PodView & { sharePercent?: number };

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
