// What the diagnosis reads, already fetched: src/kube/diagnosis-reads.ts fills these from the API, tests build them.
import type { WorkloadView, EventView, GatedPodView, NodeView } from '../detection/index.js';
import type { HealthObject, PolicyObject } from '../ports/cluster.js';

/** A Node, with its sandbox.remediator.io/* annotations as they are (the stamps, and anything else of ours). */
export interface DiagnosedNode {
  view: NodeView;
  annotations: Readonly<Record<string, string>>;
}

/** An Event the operator recorded (source component sandbox-remediator). */
export interface OperatorEvent {
  type: string;
  reason: string;
  message: string;
  count: number;
  lastTime: Date;
}

/** A read that failed: the diagnosis goes on without it and says so. */
export interface ReadProblem {
  what: string;
  message: string;
}

export interface NodeDiagnosisInput {
  nodeName: string;
  now: Date;
  health?: HealthObject;
  node?: DiagnosedNode;
  /** The SandboxPolicy named by status.policy (or the Node's stamps); absent when it does not exist. */
  policy?: PolicyObject;
  /** The latest FailedCreatePodSandBox Event of each stuck pod, by pod uid. */
  failureEvents: ReadonlyMap<string, EventView>;
  /** The operator's Events on the Node. */
  nodeEvents: readonly OperatorEvent[];
  /** Deployments carrying our pause stamps. */
  heldRollouts: readonly WorkloadView[];
  /** Pods held at our pacing gate. */
  gatedPods: readonly GatedPodView[];
  unavailable: readonly ReadProblem[];
}

export interface ClusterOverviewInput {
  now: Date;
  healths: readonly HealthObject[];
  nodes: readonly DiagnosedNode[];
  policies: readonly PolicyObject[];
  unavailable: readonly ReadProblem[];
}
