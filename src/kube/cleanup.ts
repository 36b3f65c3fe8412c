// The reads and writes behind `sandbox-remediator cleanup`: every node, rollout, gated pod, medik8s node lease and
// SandboxHealth, listed once; the writes through the operator's own actuator, plus the three only an uninstall makes.
import {
  AppsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
} from '@kubernetes/client-node';
import {
  GROUP,
  MEDIK8S_LEASE_NAMESPACE,
  NODE_CONDITION_TYPE,
  ROLLOUT_KINDS,
  VERSION,
  type RolloutKind,
} from '../api/v1alpha1/index.js';
import type { CleanupRereader, CleanupWriter } from '../cleanup/run.js';
import type { LeaseView, Versioned } from '../cleanup/plan.js';
import type { GatedPodView, NodeView, WorkloadView } from '../detection/index.js';
import { ARGO_ROLLOUTS, KubeActuator } from './actuator.js';
import { isNotFound } from './errors.js';
import type { RawObject } from './informer.js';
import { KubeLeaseStore, type StoredLease } from './leader-election.js';
import { listAll, listRollouts, PAGE, WORKLOAD_VIEWS, type Page } from './lists.js';
import { gatedPodView, nodeView, obj, str } from './views.js';
import { KubeStatusWriter } from './writer.js';

const raw = (o: unknown) => o as RawObject;
const versionOf = (o: RawObject) => str(obj(o.metadata).resourceVersion);
const paging = (token: string | undefined) => ({ limit: PAGE, ...(token ? { _continue: token } : {}) });

/** A list that failed: the cleanup goes on with the others and fails at the end. */
export interface ListProblem {
  what: string;
  error: unknown;
}

export interface ClusterLeftovers {
  nodes: Versioned<NodeView>[];
  workloads: Versioned<WorkloadView>[];
  gatedPods: GatedPodView[];
  leases: LeaseView[];
  healths: { name: string }[];
  problems: ListProblem[];
}

export class KubeCleanupReads implements CleanupRereader {
  private readonly core: CoreV1Api;
  private readonly apps: AppsV1Api;
  private readonly custom: CustomObjectsApi;
  private readonly coordination: CoordinationV1Api;

  constructor(private readonly kc: KubeConfig) {
    this.core = kc.makeApiClient(CoreV1Api);
    this.apps = kc.makeApiClient(AppsV1Api);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.coordination = kc.makeApiClient(CoordinationV1Api);
  }

  /** The operator's leader Lease, as leader election reads it; undefined when there is none. */
  leader(namespace: string, name: string): Promise<StoredLease | undefined> {
    return new KubeLeaseStore(this.kc, namespace, name).get();
  }

  /** Everything the operator may have left behind; a list that fails is named in `problems`, the rest go on. */
  async leftovers(): Promise<ClusterLeftovers> {
    const problems: ListProblem[] = [];
    const attempt = async <T>(what: string, read: () => Promise<T[]>): Promise<T[]> => {
      try {
        return await read();
      } catch (error) {
        problems.push({ what, error });
        return [];
      }
    };
    const [nodes, workloads, gatedPods, leases, healths] = await Promise.all([
      attempt('list nodes', async () =>
        (await listAll((t) => this.core.listNode(paging(t)))).flatMap((n) => versioned(raw(n), nodeView)),
      ),
      Promise.all(
        ROLLOUT_KINDS.map((kind) =>
          attempt(kind === 'Rollout' ? 'list rollouts.argoproj.io' : `list ${kind.toLowerCase()}s`, async () =>
            (await listRollouts({ apps: this.apps, custom: this.custom }, kind)).flatMap((w) =>
              versioned(w, WORKLOAD_VIEWS[kind]),
            ),
          ),
        ),
      ).then((kinds) => kinds.flat()),
      attempt('list pods at the pacing gate', async () =>
        // A gated pod is never scheduled: only unscheduled pods are listed.
        (
          await listAll((t) => this.core.listPodForAllNamespaces({ fieldSelector: 'spec.nodeName=', ...paging(t) }))
        ).flatMap((p) => gatedPodView(raw(p)) ?? []),
      ),
      attempt(`list leases in ${MEDIK8S_LEASE_NAMESPACE}`, () => this.nodeLeases()),
      attempt('list sandboxhealths', () => this.healths()),
    ]);
    return { nodes, workloads, gatedPods, leases, healths, problems };
  }

  async node(name: string): Promise<Versioned<NodeView> | undefined> {
    try {
      return versioned(raw(await this.core.readNode({ name })), nodeView)[0];
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  async workload(kind: RolloutKind, namespace: string, name: string): Promise<Versioned<WorkloadView> | undefined> {
    const request = { name, namespace };
    try {
      const object =
        kind === 'Deployment'
          ? await this.apps.readNamespacedDeployment(request)
          : kind === 'StatefulSet'
            ? await this.apps.readNamespacedStatefulSet(request)
            : kind === 'DaemonSet'
              ? await this.apps.readNamespacedDaemonSet(request)
              : await this.custom.getNamespacedCustomObject({ ...ARGO_ROLLOUTS, plural: 'rollouts', ...request });
      return versioned(raw(object), WORKLOAD_VIEWS[kind])[0];
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  async gatedPod(namespace: string, name: string): Promise<GatedPodView | undefined> {
    try {
      return gatedPodView(raw(await this.core.readNamespacedPod({ name, namespace })));
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** The namespace not existing lists nothing: no medik8s operator, nor ours, ever took a lease here. */
  private async nodeLeases(): Promise<LeaseView[]> {
    const namespace = MEDIK8S_LEASE_NAMESPACE;
    const items = await listAll((t) => this.coordination.listNamespacedLease({ namespace, ...paging(t) }));
    return items.flatMap((lease) => {
      const name = lease.metadata?.name;
      if (!name) return [];
      return [
        {
          namespace,
          name,
          uid: lease.metadata?.uid ?? '',
          version: lease.metadata?.resourceVersion,
          holder: lease.spec?.holderIdentity ?? '',
        },
      ];
    });
  }

  /** The CRD not installed lists none. */
  private async healths(): Promise<{ name: string }[]> {
    try {
      const items = await listAll(
        (t) =>
          this.custom.listClusterCustomObject({
            group: GROUP,
            version: VERSION,
            plural: 'sandboxhealths',
            ...paging(t),
          }) as Promise<Page<unknown>>,
      );
      return items.flatMap((item) => {
        const name = str(obj(raw(item).metadata).name);
        return name ? [{ name }] : [];
      });
    } catch (err) {
      if (isNotFound(err)) return [];
      throw err;
    }
  }
}

function versioned<T>(o: RawObject, view: (o: RawObject) => T | undefined): Versioned<T>[] {
  const v = view(o);
  return v === undefined ? [] : [{ view: v, version: versionOf(o) }];
}

/** The real writes: nodes, rollouts and gates through the operator's own actuator. */
export class KubeCleanupWriter implements CleanupWriter {
  readonly dryRun = false;
  private readonly actuator: KubeActuator;
  private readonly status: KubeStatusWriter;
  private readonly core: CoreV1Api;
  private readonly coordination: CoordinationV1Api;

  constructor(kc: KubeConfig) {
    this.actuator = new KubeActuator(kc);
    this.status = new KubeStatusWriter(kc);
    this.core = kc.makeApiClient(CoreV1Api);
    this.coordination = kc.makeApiClient(CoordinationV1Api);
  }

  patchNode: CleanupWriter['patchNode'] = (change) => this.actuator.patchNode(change);
  patchWorkload: CleanupWriter['patchWorkload'] = (change) => this.actuator.patchWorkload(change);
  releaseGate: CleanupWriter['releaseGate'] = (pod) => this.actuator.releaseGate(pod);

  /** A strategic merge patch deletes the list entry by its key (type): every other condition stays as it is. */
  async removeNodeCondition(node: string): Promise<void> {
    await this.core.patchNodeStatus(
      {
        name: node,
        body: { status: { conditions: [{ type: NODE_CONDITION_TYPE, $patch: 'delete' }] } },
        fieldManager: 'sandbox-remediator',
      },
      setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
    );
  }

  async deleteLease(lease: LeaseView): Promise<void> {
    try {
      await this.coordination.deleteNamespacedLease({
        name: lease.name,
        namespace: lease.namespace,
        // Never a lease another holder took meanwhile: only the one listed, as listed.
        body: {
          preconditions: { uid: lease.uid, ...(lease.version ? { resourceVersion: lease.version } : {}) },
        },
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  deleteHealth(name: string): Promise<void> {
    return this.status.deleteHealth(name);
  }
}
