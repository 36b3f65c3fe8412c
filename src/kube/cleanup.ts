// The reads and writes behind `sandbox-remediator cleanup`: every node, rollout, gated pod, medik8s node lease,
// SandboxHealth and SandboxPolicy, listed once with their resourceVersions; the writes through the operator's own
// actuator, and a SandboxHealth's deletion on its version.
import {
  AppsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
} from '@kubernetes/client-node';
import {
  GROUP,
  IoLimitReportSchema,
  ROLLOUT_KINDS,
  VERSION,
  type RolloutKind,
  type WantedIoLimitSpec,
} from '../api/v1alpha1/index.js';
import type { CleanupRereader, CleanupWriter } from '../cleanup/run.js';
import type { HealthLeftover, Versioned } from '../cleanup/plan.js';
import type { StampedPodView } from '../cleanup/pod-stamps.js';
import type { GatedPodView, NodeView, WorkloadView } from '../detection/index.js';
import { NODE_LEASE_NAMESPACE, nodeLeaseName, type NodeLeaseView } from '../policy/node-lease.js';
import { ARGO_ROLLOUTS, KubeActuator } from './actuator.js';
import { isNotFound } from './errors.js';
import type { RawObject } from './informer.js';
import { fromLease, KubeLeaseStore, type StoredLease } from './leader-election.js';
import { listAll, listKept, listRollouts, PAGE, WORKLOAD_VIEWS, type Page } from './lists.js';
import { gatedPodView, healthView, ioStampedPodView, nodeLeaseView, nodeView, obj, str } from './views.js';
import { KubeStatusWriter } from './writer.js';

const raw = (o: unknown) => o as RawObject;
const paging = (token: string | undefined) => ({ limit: PAGE, ...(token ? { _continue: token } : {}) });
const named = (o: RawObject) => {
  const name = str(obj(o.metadata).name);
  return name ? { name } : undefined;
};
/** A SandboxHealth with the IO limits wanted and those its agent reports in force (a list that does not parse: none). */
const leftover = (o: RawObject): HealthLeftover | undefined => {
  const view = healthView(o);
  if (!view) return undefined;
  const health: HealthLeftover = { name: view.name };
  if (view.nodeName) health.nodeName = view.nodeName;
  if (view.ioLimits) health.ioLimits = view.ioLimits;
  // The agent's report read on its own: a status that does not parse as a whole may still hold it.
  const report = obj(o.status).ioLimits;
  const parsed = report === undefined ? undefined : IoLimitReportSchema.safeParse(report);
  if (parsed?.success && parsed.data.applied) health.applied = parsed.data.applied;
  if (view.ioLimitsUnreadable || parsed?.success === false) health.unreadableLimits = true;
  return health;
};

/** A list that failed: the cleanup goes on with the others and fails at the end. */
export interface ListProblem {
  what: string;
  error: unknown;
}

export interface ClusterLeftovers {
  nodes: Versioned<NodeView>[];
  workloads: Versioned<WorkloadView>[];
  gatedPods: Versioned<GatedPodView>[];
  leases: Versioned<NodeLeaseView>[];
  healths: Versioned<HealthLeftover>[];
  policies: string[];
  /** The pods carrying our IO-limit stamps (limitIo). */
  stampedPods: StampedPodView[];
  problems: ListProblem[];
}

/** A read of one object: undefined when it is gone. */
async function unlessGone<T>(read: () => Promise<T>): Promise<T | undefined> {
  try {
    return await read();
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
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

  /**
   * Leases of this name in every namespace (one page: an operator's Lease name is rare), by namespace: where an
   * operator installed in another namespace than the one given leads.
   */
  async leadersNamed(name: string): Promise<{ namespace: string; stored: StoredLease }[]> {
    const list = await this.coordination.listLeaseForAllNamespaces({
      fieldSelector: `metadata.name=${name}`,
      limit: 100,
    });
    return list.items.map((lease) => ({
      namespace: lease.metadata?.namespace ?? '',
      stored: fromLease(lease),
    }));
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
    const [nodes, workloads, gatedPods, leases, healths, policies, stampedPods] = await Promise.all([
      attempt('list nodes', async () =>
        (await listAll((t) => this.core.listNode(paging(t)))).flatMap((n) => versioned(raw(n), nodeView)),
      ),
      Promise.all(
        ROLLOUT_KINDS.map((kind) =>
          attempt(
            kind === 'Rollout' ? 'list rollouts.argoproj.io' : `list ${kind.toLowerCase()}s`,
            async () =>
              (await listRollouts({ apps: this.apps, custom: this.custom }, kind)).flatMap((w) =>
                versioned(w, WORKLOAD_VIEWS[kind]),
              ),
          ),
        ),
      ).then((kinds) => kinds.flat()),
      attempt('list pods at the pacing gate', async () =>
        // A gated pod is never scheduled: only unscheduled pods are listed.
        (
          await listAll((t) =>
            this.core.listPodForAllNamespaces({ fieldSelector: 'spec.nodeName=', ...paging(t) }),
          )
        ).flatMap((p) => versioned(raw(p), gatedPodView)),
      ),
      // A namespace that does not exist lists nothing: no medik8s operator, nor ours, ever took a lease.
      attempt(`list leases in ${NODE_LEASE_NAMESPACE}`, async () =>
        (
          await listAll((t) =>
            this.coordination.listNamespacedLease({ namespace: NODE_LEASE_NAMESPACE, ...paging(t) }),
          )
        ).flatMap((l) => versioned(raw(l), nodeLeaseView)),
      ),
      attempt('list sandboxhealths', async () =>
        (await this.listOurs('sandboxhealths')).flatMap((h) => versioned(h, leftover)),
      ),
      attempt('list sandboxpolicies', async () =>
        (await this.listOurs('sandboxpolicies')).flatMap((p) => named(p)?.name ?? []),
      ),
      // Every pod, page by page, keeping only those that carry our IO-limit stamps.
      attempt('list pods with IO-limit stamps', () =>
        listKept(
          (t) => this.core.listPodForAllNamespaces(paging(t)),
          (p) => versioned(raw(p), ioStampedPodView).map((v) => v.view),
        ),
      ),
    ]);
    return { nodes, workloads, gatedPods, leases, healths, policies, stampedPods, problems };
  }

  /** Every SandboxHealth, as it is now (read again after the rest of the cleanup). */
  async healths(): Promise<HealthLeftover[]> {
    return (await this.listOurs('sandboxhealths')).flatMap((h) => leftover(h) ?? []);
  }

  async node(name: string): Promise<Versioned<NodeView> | undefined> {
    const node = await unlessGone(() => this.core.readNode({ name }));
    return node && versioned(raw(node), nodeView)[0];
  }

  async workload(
    kind: RolloutKind,
    namespace: string,
    name: string,
  ): Promise<Versioned<WorkloadView> | undefined> {
    const request = { name, namespace };
    const object = await unlessGone<unknown>(() => {
      switch (kind) {
        case 'Deployment':
          return this.apps.readNamespacedDeployment(request);
        case 'StatefulSet':
          return this.apps.readNamespacedStatefulSet(request);
        case 'DaemonSet':
          return this.apps.readNamespacedDaemonSet(request);
        case 'Rollout':
          return this.custom.getNamespacedCustomObject({ ...ARGO_ROLLOUTS, plural: 'rollouts', ...request });
      }
    });
    return object === undefined ? undefined : versioned(raw(object), WORKLOAD_VIEWS[kind])[0];
  }

  async gatedPod(namespace: string, name: string): Promise<Versioned<GatedPodView> | undefined> {
    const pod = await unlessGone(() => this.core.readNamespacedPod({ name, namespace }));
    return pod && versioned(raw(pod), gatedPodView)[0];
  }

  async lease(node: string): Promise<Versioned<NodeLeaseView> | undefined> {
    const name = nodeLeaseName(node);
    const lease = await unlessGone(() =>
      this.coordination.readNamespacedLease({ name, namespace: NODE_LEASE_NAMESPACE }),
    );
    return lease && versioned(raw(lease), nodeLeaseView)[0];
  }

  async health(name: string): Promise<Versioned<HealthLeftover> | undefined> {
    const health = await unlessGone<unknown>(() =>
      this.custom.getClusterCustomObject({ group: GROUP, version: VERSION, plural: 'sandboxhealths', name }),
    );
    return health === undefined ? undefined : versioned(raw(health), leftover)[0];
  }

  /** Every object of one of our kinds; the CRD not installed lists none. */
  private async listOurs(plural: 'sandboxhealths' | 'sandboxpolicies'): Promise<RawObject[]> {
    const items = await unlessGone(() =>
      listAll(
        (t) =>
          this.custom.listClusterCustomObject({
            group: GROUP,
            version: VERSION,
            plural,
            ...paging(t),
          }) as Promise<Page<unknown>>,
      ),
    );
    return (items ?? []).map(raw);
  }
}

function versioned<T>(o: RawObject, view: (o: RawObject) => T | undefined): Versioned<T>[] {
  const v = view(o);
  return v === undefined ? [] : [{ view: v, version: str(obj(o.metadata).resourceVersion) }];
}

/** The real writes: the operator's own actuator, and the SandboxHealth deletion of its status writer. */
export class KubeCleanupWriter extends KubeActuator implements CleanupWriter {
  private readonly status: KubeStatusWriter;

  constructor(kc: KubeConfig) {
    super(kc);
    this.status = new KubeStatusWriter(kc);
  }

  deleteHealth(name: string, resourceVersion: string | undefined): Promise<void> {
    return this.status.deleteHealth(name, resourceVersion);
  }

  patchHealthIoLimits(
    name: string,
    limits: readonly WantedIoLimitSpec[],
    read: readonly WantedIoLimitSpec[] | undefined,
    version: string | undefined,
  ): Promise<string | undefined> {
    return this.status.patchHealthIoLimits(name, limits, read, version);
  }
}
