// Objects as the cleanup lists them, built from the API's shapes through the operator's own views, so a test reads
// what a cluster would hold: aNode('n1').cordoned().stampedBy('p', { cordoned: true }).
import type { NodeChange } from '../../src/actuation/actuator.js';
import {
  formatTaint,
  NODE_CONDITION_TYPE,
  PACING_GATE,
  PACING_STAMP,
  STAMP,
  type Taint,
} from '../../src/api/v1alpha1/index.js';
import type { Versioned } from '../../src/cleanup/plan.js';
import type { GatedPodView, NodeView, WorkloadView } from '../../src/detection/index.js';
import type { RawObject } from '../../src/kube/informer.js';
import { gatedPodView, nodeLeaseView, nodeView } from '../../src/kube/views.js';
import { deploymentView, statefulSetView } from '../../src/kube/workload-views.js';
import type { NodeLeaseView } from '../../src/policy/node-lease.js';

export class NodeBuilder {
  private unschedulable = false;
  private readonly taints: (Taint & { timeAdded?: string })[] = [];
  private readonly annotations: Record<string, string> = {};
  private readonly conditions: Record<string, string>[] = [{ type: 'Ready', status: 'True' }];
  constructor(
    private readonly name: string,
    private version = '100',
  ) {}

  cordoned(): this {
    this.unschedulable = true;
    return this;
  }
  tainted(taint: Taint & { timeAdded?: string }): this {
    this.taints.push(taint);
    return this;
  }
  /** Our stamps, as the operator writes them when it cordons and (optionally) taints. */
  stampedBy(policy: string, what: { cordoned?: boolean; taint?: Taint | undefined } = {}): this {
    this.annotations[STAMP.policy] = policy;
    this.annotations[STAMP.since] = '2026-12-01T10:00:00.000Z';
    this.annotations[STAMP.reason] = 'IoSaturated';
    if (what.cordoned) this.annotations[STAMP.cordoned] = 'true';
    if (what.taint) this.annotations[STAMP.taint] = formatTaint(what.taint);
    return this;
  }
  withCondition(type: string, status: string, reason = 'IoSaturated'): this {
    this.conditions.push({ type, status, reason, message: 'm', lastTransitionTime: '2026-12-01T10:00:00Z' });
    return this;
  }
  withOurCondition(status = 'True', reason = 'IoSaturated'): this {
    return this.withCondition(NODE_CONDITION_TYPE, status, reason);
  }
  atVersion(version: string): this {
    this.version = version;
    return this;
  }
  raw(): RawObject {
    return {
      metadata: {
        name: this.name,
        uid: `uid-${this.name}`,
        resourceVersion: this.version,
        annotations: { ...this.annotations },
      },
      spec: { unschedulable: this.unschedulable, taints: this.taints.map((t) => ({ ...t })) },
      status: { conditions: this.conditions.map((c) => ({ ...c })) },
    };
  }
  build(): Versioned<NodeView> {
    return { view: nodeView(this.raw())!, version: this.version };
  }
}

export const aNode = (name: string) => new NodeBuilder(name);

/** The node as the apiserver would hold it after a merge patch of `change` (null removes an annotation). */
export function applyNodeChange(raw: RawObject, change: NodeChange, version: string): Versioned<NodeView> {
  const meta = raw.metadata as { annotations: Record<string, string> };
  const annotations = Object.fromEntries(
    Object.entries({ ...meta.annotations, ...change.annotations }).filter(
      (entry): entry is [string, string] => entry[1] !== null,
    ),
  );
  const spec = { ...(raw.spec as Record<string, unknown>) };
  if (change.unschedulable !== undefined) spec.unschedulable = change.unschedulable;
  if (change.taints !== undefined) spec.taints = change.taints;
  const after = { ...raw, metadata: { ...meta, annotations, resourceVersion: version }, spec };
  return { view: nodeView(after)!, version };
}

const ROLLOUT_STAMPS = (policy: string) => ({
  'sandbox.remediator.io/paused-by': policy,
  'sandbox.remediator.io/paused-since': '2026-12-01T10:00:00Z',
  'sandbox.remediator.io/pause-reason': 'FeedsSaturatedNode',
  'sandbox.remediator.io/rollout-started': '2026-12-01T09:59:00Z',
});

const workloadMeta = (name: string, annotations: Record<string, string>, version: string) => ({
  namespace: 'shop',
  name,
  uid: `uid-${name}`,
  generation: 2,
  resourceVersion: version,
  creationTimestamp: '2026-12-01T00:00:00Z',
  annotations,
});

/** A Deployment paused by its owner, by us (stamped), or not at all; with any annotations of ours. */
export function aDeployment(
  name: string,
  {
    paused = false,
    pausedBy,
    annotations = {},
    version = '7',
  }: {
    paused?: boolean;
    pausedBy?: string;
    annotations?: Record<string, string>;
    version?: string;
  } = {},
): Versioned<WorkloadView> {
  const view = deploymentView({
    kind: 'Deployment',
    // Times as a watch delivers them: strings, which client-node's types call Dates.
    metadata: workloadMeta(name, { ...(pausedBy ? ROLLOUT_STAMPS(pausedBy) : {}), ...annotations }, version),
    spec: { replicas: 2, paused },
    status: { observedGeneration: 2, replicas: 2, updatedReplicas: 2, availableReplicas: 2 },
  } as never);
  return { view: view!, version };
}

/** A StatefulSet we hold at partition 3 (of 3), having had `had` as its update strategy; or, with `held` undefined, its record lost. */
export function aHeldStatefulSet(
  name: string,
  policy: string,
  held: string | undefined,
  version = '9',
): Versioned<WorkloadView> {
  const annotations: Record<string, string> = {
    ...ROLLOUT_STAMPS(policy),
    'sandbox.remediator.io/held-partition': '3',
  };
  if (held !== undefined) annotations['sandbox.remediator.io/held-update-strategy'] = held;
  const view = statefulSetView({
    kind: 'StatefulSet',
    metadata: workloadMeta(name, annotations, version),
    spec: { replicas: 3, updateStrategy: { type: 'RollingUpdate', rollingUpdate: { partition: 3 } } },
    status: {
      observedGeneration: 2,
      updatedReplicas: 3,
      readyReplicas: 3,
      currentRevision: 'a',
      updateRevision: 'a',
    },
  } as never);
  return { view: view!, version };
}

/** A pod at our pacing gate (and any others), gated for `policy`. */
export function aGatedPod(
  name: string,
  gates = [PACING_GATE],
  policy = 'p',
  version = '5',
): Versioned<GatedPodView> {
  const view = gatedPodView({
    metadata: {
      namespace: 'shop',
      name,
      uid: `uid-${name}`,
      resourceVersion: version,
      annotations: { [PACING_STAMP.policy]: policy },
      creationTimestamp: '2026-12-01T10:00:00Z',
    },
    spec: { schedulingGates: gates.map((g) => ({ name: g })) },
  } as never);
  return { view: view!, version };
}

/** A medik8s node lease of `holder`, renewed `renewedAgoSeconds` before `now`. */
export function aNodeLease(
  node: string,
  holder: string,
  { version = '3', now = new Date(), renewedAgoSeconds = 5, durationSeconds = 120 } = {},
): Versioned<NodeLeaseView> {
  const renewTime = new Date(now.getTime() - renewedAgoSeconds * 1000).toISOString();
  const view = nodeLeaseView({
    metadata: {
      name: `node-${node}`,
      namespace: 'medik8s-leases',
      uid: `lease-${node}`,
      resourceVersion: version,
    },
    spec: {
      holderIdentity: holder,
      leaseDurationSeconds: durationSeconds,
      acquireTime: renewTime,
      renewTime,
    },
  });
  return { view: view!, version };
}
