// PURE: what decideRemediation reads of a policy's nodes, and what it returns.
import type { IoCause, NodeStamps, SandboxPolicySpec, Taint } from '../api/v1alpha1/index.js';
import type { Action, BlockedAction, Guard, PodRef } from './actions.js';
import type { PodData } from '../detection/index.js';
import type { NodeLeaseView } from './node-lease.js';

export interface CandidatePod extends PodRef {
  /** Kind of the controlling owner; absent for a bare pod. */
  controllerKind?: string;
  mirror?: boolean;
  /** Labelled sandbox.remediator.io/no-migrate=true: never migrated. */
  noMigrate?: boolean;
  /** Its measured share of the saturated device's IO (migrateWorkloads.by measuredIo). */
  sharePercent?: number;
  /** A running pod's: what it keeps on the node (guardData); absent for a stuck pod, and when it was not read. */
  data?: PodData;
  /**
   * A stuck pod the node's SandboxHealth, as stored, does not list with an IO cause yet: not evicted before a report
   * says why (the report is written first, the eviction decided on the pass after it).
   */
  unlisted?: true;
}

/**
 * What IoPressureHigh says, reduced to what acting needs. High: over a threshold for sustainSeconds on verified
 * readings. Low: verified under every threshold (for recoverySeconds if it was high). Rising: over, not yet
 * sustained. Recovering: under, recoverySeconds not yet elapsed. Unknown: no verified reading.
 */
export type IoState = 'High' | 'Rising' | 'Recovering' | 'Low' | 'Unknown';

export interface NodeFacts {
  name: string;
  ready: boolean;
  controlPlane: boolean;
  /** spec.unschedulable as the node has it (in a dry run, as it would have it). */
  unschedulable: boolean;
  taints: readonly Taint[];
  /** Our ownership stamps (in a dry run, the simulated ones); absent: nothing on the node is ours. */
  stamps?: NodeStamps;
  /** SandboxCreationDegraded with failures pointing at IO (NameReserved, DeadlineExceeded). */
  degradedByIo: boolean;
  io: IoState;
  /** Who does the device's IO, from the reading's attribution: a culprit pod, the runtime, nothing that stands out. */
  ioCause: IoCause;
  /** Pods stuck creating their sandbox from an IO cause, longest-waiting first, not yet evicted. */
  ioStuckPods: readonly CandidatePod[];
  /** Since when fewer than minStuckPods pods have been stuck (SandboxCreationDegraded False); absent while degraded. */
  quietSince?: Date;
  /** Running pods the policy's migrateWorkloads.podSelector selects, not yet evicted. */
  ioHeavyPods: readonly CandidatePod[];
  /** Pods migrated off this node during the current remediation. */
  migrated: number;
  /** When a pod was last evicted or migrated off it by the operator (the first eviction of a node goes first). */
  lastEvictionAt?: Date;
  /** Real stamps seen by a dry run: left exactly as they are (a dry run cannot undo what a real run did). */
  frozen?: boolean;
  /** When the operator last undid a remediation on this node (cooldown). */
  lastUndoAt?: Date;
  /** The medik8s lease node-<node> in medik8s-leases, as the cache has it; absent when there is none. */
  lease?: NodeLeaseView;
}

export interface RemediationInput {
  policy: string;
  spec: SandboxPolicySpec;
  /** Every node the policy owns. */
  nodes: readonly NodeFacts[];
  now: Date;
  /** When the policy evicted pods recently (any age; only the last 60 s count). */
  recentEvictions: readonly Date[];
  /** Caches synced and no watch known to be broken. */
  cacheReady: boolean;
  /** Where the operator runs: its pods, like kube-system's, are never migrated. */
  operatorNamespace?: string | undefined;
}

export interface RemediationDecision {
  actions: Action[];
  blocked: BlockedAction[];
  storm: { detected: boolean; unhealthy: number; limit: number };
  /** Per node, the stamps it carries once the actions are carried out. */
  stampsAfter: Map<string, NodeStamps | undefined>;
}

/** What holds an action (a guard), and why. */
export interface Hold {
  guard: Guard;
  message: string;
  /** When the guard lifts with time alone; absent when only a change can lift it. */
  liftsAt?: Date | undefined;
}
