import {
  AppsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  V1MicroTime,
  type KubeConfig,
  type V1Taint,
} from '@kubernetes/client-node';
import type {
  Actuator,
  EvictionOutcome,
  NodeChange,
  NodeLeaseRelease,
  NodeLeaseWrite,
  WorkloadChange,
} from '../actuation/actuator.js';
import {
  formatSelector,
  type IoLimitStampAnnotations,
  NODE_CONDITION_TYPE,
  PACING_GATE,
  type LabelSelector,
  type NodeConditionValue,
} from '../api/v1alpha1/index.js';
import type { ClaimPlacement, WorkloadReader } from '../ports/cluster.js';
import type { PodView } from '../detection/index.js';
import type { PodRef } from '../policy/actions.js';
import { NODE_LEASE_NAMESPACE, nodeLeaseName } from '../policy/node-lease.js';
import {
  apiStatus,
  describeError,
  isInvalid,
  isNotFound,
  isTooManyRequests,
  terminalIfInvalid,
} from './errors.js';
import type { RawObject } from './informer.js';
import { podData, podView } from './views.js';

const FIELD_MANAGER = 'sandbox-remediator';
const mergePatch = () => setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
/** Argo Rollouts' API group, where its Rollout kind lives. */
export const ARGO_ROLLOUTS = { group: 'argoproj.io', version: 'v1alpha1' } as const;

/** Changes Nodes and rollouts, and evicts Pods, through the API. */
export class KubeActuator implements Actuator {
  readonly dryRun = false;
  private readonly core: CoreV1Api;
  private readonly apps: AppsV1Api;
  private readonly custom: CustomObjectsApi;
  private readonly coordination: CoordinationV1Api;
  constructor(kc: KubeConfig) {
    this.core = kc.makeApiClient(CoreV1Api);
    this.coordination = kc.makeApiClient(CoordinationV1Api);
    this.apps = kc.makeApiClient(AppsV1Api);
    this.custom = kc.makeApiClient(CustomObjectsApi);
  }

  async patchWorkload(change: WorkloadChange): Promise<string | undefined> {
    const body: { metadata: Record<string, unknown>; spec?: Record<string, unknown> } = {
      metadata: {
        annotations: change.annotations,
        ...(change.resourceVersion ? { resourceVersion: change.resourceVersion } : {}),
      },
    };
    if (change.spec) body.spec = change.spec;
    const { name, namespace } = change;
    const request = { name, namespace, body, fieldManager: FIELD_MANAGER };
    try {
      switch (change.kind) {
        case 'Deployment':
          return (await this.apps.patchNamespacedDeployment(request, mergePatch())).metadata?.resourceVersion;
        case 'StatefulSet':
          return (await this.apps.patchNamespacedStatefulSet(request, mergePatch())).metadata
            ?.resourceVersion;
        case 'DaemonSet':
          return (await this.apps.patchNamespacedDaemonSet(request, mergePatch())).metadata?.resourceVersion;
        case 'Rollout': {
          const updated = (await this.custom.patchNamespacedCustomObject(
            { ...request, ...ARGO_ROLLOUTS, plural: 'rollouts' },
            mergePatch(),
          )) as { metadata?: { resourceVersion?: string } };
          return updated.metadata?.resourceVersion;
        }
      }
    } catch (err) {
      throw terminalIfInvalid(err, `patch of ${change.kind.toLowerCase()}/${namespace}/${name}`);
    }
  }

  async patchNode(change: NodeChange): Promise<string | undefined> {
    const body: { metadata: Record<string, unknown>; spec?: Record<string, unknown> } = {
      // With a resourceVersion the apiserver refuses (409) a patch made on a stale view of the node.
      metadata: {
        annotations: change.annotations,
        ...(change.resourceVersion ? { resourceVersion: change.resourceVersion } : {}),
      },
    };
    const spec: Record<string, unknown> = {};
    if (change.unschedulable !== undefined) spec.unschedulable = change.unschedulable ? true : null;
    if (change.taints !== undefined) spec.taints = change.taints.map((t): V1Taint => ({ ...t }));
    if (Object.keys(spec).length > 0) body.spec = spec;
    try {
      const node = await this.core.patchNode(
        { name: change.node, body, fieldManager: FIELD_MANAGER },
        mergePatch(),
      );
      return node.metadata?.resourceVersion;
    } catch (err) {
      throw terminalIfInvalid(err, `patch of node/${change.node}`);
    }
  }

  async setNodeCondition(
    node: string,
    condition: NodeConditionValue | null,
    resourceVersion?: string,
  ): Promise<string | undefined> {
    // A strategic merge patch keys conditions by type: every other condition (the kubelet's) stays as it is.
    const entry = condition
      ? { type: NODE_CONDITION_TYPE, ...condition }
      : { type: NODE_CONDITION_TYPE, $patch: 'delete' };
    const body = {
      ...(resourceVersion ? { metadata: { resourceVersion } } : {}),
      status: { conditions: [entry] },
    };
    try {
      const updated = await this.core.patchNodeStatus(
        { name: node, body, fieldManager: FIELD_MANAGER },
        setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
      );
      return updated.metadata?.resourceVersion;
    } catch (err) {
      throw terminalIfInvalid(err, `patch of node/${node} status`);
    }
  }

  async releaseGate(pod: PodRef & { gates: readonly string[]; resourceVersion?: string }): Promise<boolean> {
    const remaining = pod.gates.filter((g) => g !== PACING_GATE);
    const patch = [
      // Never another pod of the same name, and never a gate list someone changed since we looked.
      { op: 'test', path: '/metadata/uid', value: pod.uid },
      ...(pod.resourceVersion
        ? [{ op: 'test', path: '/metadata/resourceVersion', value: pod.resourceVersion }]
        : []),
      { op: 'test', path: '/spec/schedulingGates', value: pod.gates.map((name) => ({ name })) },
      remaining.length > 0
        ? { op: 'replace', path: '/spec/schedulingGates', value: remaining.map((name) => ({ name })) }
        : { op: 'remove', path: '/spec/schedulingGates' },
    ];
    try {
      await this.core.patchNamespacedPod(
        { name: pod.name, namespace: pod.namespace, body: patch, fieldManager: FIELD_MANAGER },
        setHeaderOptions('Content-Type', PatchStrategy.JsonPatch),
      );
      return true;
    } catch (err) {
      if (isNotFound(err) || isInvalid(err)) return false; // gone, or replaced by a pod of the same name
      throw err;
    }
  }

  async stampPod(pod: PodRef, annotations: IoLimitStampAnnotations): Promise<boolean> {
    // A merge patch of our annotations alone. The uid in it is checked by the apiserver's validation of the update: a pod
    // made again under the name answers 422, metadata.uid immutable.
    const body = { metadata: { uid: pod.uid, annotations } };
    try {
      await this.core.patchNamespacedPod(
        { name: pod.name, namespace: pod.namespace, body, fieldManager: FIELD_MANAGER },
        mergePatch(),
      );
      return true;
    } catch (err) {
      const status = apiStatus(err);
      if (isNotFound(err) || (status?.code === 422 && status.message.includes('metadata.uid'))) return false;
      throw terminalIfInvalid(err, `patch of pod/${pod.namespace}/${pod.name}`);
    }
  }

  async writeNodeLease(write: NodeLeaseWrite): Promise<string | undefined> {
    const name = nodeLeaseName(write.node);
    const namespace = NODE_LEASE_NAMESPACE;
    const body = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        name,
        namespace,
        labels: { 'app.kubernetes.io/managed-by': 'sandbox-remediator' },
        ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: write.node, uid: write.nodeUid }],
        ...(write.resourceVersion ? { resourceVersion: write.resourceVersion } : {}),
      },
      // MicroTime: client-node's V1MicroTime serialises with the microseconds the apiserver requires.
      spec: {
        holderIdentity: write.holder,
        leaseDurationSeconds: write.durationSeconds,
        acquireTime: new V1MicroTime(write.acquireTime.toISOString()),
        renewTime: new V1MicroTime(write.renewTime.toISOString()),
        leaseTransitions: write.transitions,
      },
    };
    try {
      const lease = write.resourceVersion
        ? await this.coordination.replaceNamespacedLease({
            name,
            namespace,
            body,
            fieldManager: FIELD_MANAGER,
          })
        : await this.coordination.createNamespacedLease({ namespace, body, fieldManager: FIELD_MANAGER });
      return lease.metadata?.resourceVersion;
    } catch (err) {
      throw terminalIfInvalid(err, `write of lease/${namespace}/${name}`);
    }
  }

  async releaseNodeLease(release: NodeLeaseRelease): Promise<void> {
    const preconditions = {
      uid: release.uid,
      ...(release.resourceVersion ? { resourceVersion: release.resourceVersion } : {}),
    };
    try {
      await this.coordination.deleteNamespacedLease({
        name: nodeLeaseName(release.node),
        namespace: NODE_LEASE_NAMESPACE,
        body: { preconditions },
      });
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
  }

  async evict(pod: PodRef): Promise<EvictionOutcome> {
    try {
      await this.core.createNamespacedPodEviction({
        name: pod.name,
        namespace: pod.namespace,
        body: {
          apiVersion: 'policy/v1',
          kind: 'Eviction',
          metadata: { name: pod.name, namespace: pod.namespace },
          // The uid precondition: never evict a same-named replacement of the pod we decided on.
          deleteOptions: { preconditions: { uid: pod.uid } },
        },
      });
      return { result: 'Evicted' };
    } catch (err) {
      if (isNotFound(err)) return { result: 'Gone' };
      if (isTooManyRequests(err)) return { result: 'Blocked', message: describeError(err) };
      throw terminalIfInvalid(err, `eviction of pod/${pod.namespace}/${pod.name}`);
    }
  }
}

/** Running pods on a node that a selector picks: a live read, made only for nodes being remediated. */
export class KubeWorkloadReader implements WorkloadReader {
  private readonly core: CoreV1Api;
  constructor(kc: KubeConfig) {
    this.core = kc.makeApiClient(CoreV1Api);
  }

  async runningPodsOn(node: string, selector: LabelSelector): Promise<PodView[]> {
    const list = await this.core.listPodForAllNamespaces({
      fieldSelector: `spec.nodeName=${node},status.phase=Running`,
      labelSelector: formatSelector(selector),
    });
    return list.items.flatMap((pod) => {
      const view = podView(pod as unknown as RawObject);
      return view && !view.deleting ? [{ ...view, data: podData(pod as unknown as RawObject) }] : [];
    });
  }

  async claimPlacements(namespace: string, claims: readonly string[]): Promise<ClaimPlacement[]> {
    const placements: ClaimPlacement[] = [];
    for (const name of claims) {
      const claim = await this.core.readNamespacedPersistentVolumeClaim({ name, namespace });
      const volume = claim.spec?.volumeName;
      // A running pod's claim is bound; one that is not holds no volume anywhere.
      if (!volume) {
        placements.push({ claim: name });
        continue;
      }
      const pv = await this.core.readPersistentVolume({ name: volume });
      const terms = pv.spec?.nodeAffinity?.required?.nodeSelectorTerms;
      placements.push(terms ? { claim: name, nodeTerms: terms } : { claim: name });
    }
    return placements;
  }
}
