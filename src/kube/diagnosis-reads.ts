// The reads behind `sandbox-remediator diagnose`: GETs and LISTs only. What the diagnosis cannot do without (the
// SandboxHealth, the Node, the lists of both) fails it with one line; every other read that fails is named in the
// diagnosis, which goes on without it.
import { AppsV1Api, CoreV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import { GROUP, KEY_PREFIX, ROLLOUT_KINDS, VERSION } from '../api/v1alpha1/index.js';
import type { HealthObject, PolicyObject } from '../ports/cluster.js';
import {
  ignoredEventReason,
  type WorkloadView,
  type EventView,
  type GatedPodView,
} from '../detection/index.js';
import type {
  ClusterOverviewInput,
  DiagnosedNode,
  NodeDiagnosisInput,
  OperatorEvent,
  ReadProblem,
} from '../diagnose/inputs.js';
import { forEachLimit } from '../runtime/limit.js';
import { serverOf, type KubeConfig } from './client.js';
import { apiStatus, describeError, describeNoAnswer, isNotFound } from './errors.js';
import type { RawObject } from './informer.js';
import { eventOccurrences, eventView, gatedPodView, healthView, nodeView, policyView } from './views.js';
import { listAll, listRollouts, PAGE, WORKLOAD_VIEWS, type Page } from './lists.js';

/** The one line that says why the diagnosis could not be made, and what to change. */
export class DiagnosisReadError extends Error {
  override name = 'DiagnosisReadError';
}

/** Each request of the diagnosis waits this long at most: at 3 a.m. a silent apiserver should say so soon. */
export const DIAGNOSE_TIMEOUT_MS = 15_000;

/** Where the operator records its Events about cluster-scoped objects, and the component it names. */
const NODE_EVENT_NAMESPACE = 'default';
const OPERATOR_COMPONENT = 'sandbox-remediator';
/** Requests in flight at once for the per-pod Event reads. */
const PARALLEL_READS = 8;

const raw = (o: unknown) => o as RawObject;

/** Reads what `diagnose NODE` needs. Throws a DiagnosisReadError when it cannot read the SandboxHealth or the Node. */
export async function readNodeDiagnosisInput(
  kc: KubeConfig,
  nodeName: string,
): Promise<Omit<NodeDiagnosisInput, 'now'>> {
  const reads = new Reads(kc);
  const [health, node] = await Promise.all([reads.health(nodeName), reads.node(nodeName)]);
  const stuck = health?.status?.stuckPods ?? [];
  const policyName = health?.status?.policy ?? node?.view.stamps?.policy;
  const found = health !== undefined || node !== undefined;
  const [policy, failureEvents, nodeEvents, heldRollouts, gatedPods] = await Promise.all([
    policyName ? reads.policy(policyName) : undefined,
    reads.failureEvents(nodeName, stuck),
    found ? reads.nodeEvents(nodeName) : [],
    found ? reads.heldRollouts() : [],
    found ? reads.gatedPods() : [],
  ]);
  const input: Omit<NodeDiagnosisInput, 'now'> = {
    nodeName,
    failureEvents,
    nodeEvents,
    heldRollouts,
    gatedPods,
    unavailable: reads.problems,
  };
  if (health) input.health = health;
  if (node) input.node = node;
  if (policy) input.policy = policy;
  return input;
}

/** Reads what `diagnose` without a node needs: every SandboxHealth, Node and SandboxPolicy. */
export async function readClusterOverviewInput(kc: KubeConfig): Promise<Omit<ClusterOverviewInput, 'now'>> {
  const reads = new Reads(kc);
  const [healths, nodes, policies] = await Promise.all([reads.healths(), reads.nodes(), reads.policies()]);
  return { healths, nodes, policies, unavailable: reads.problems };
}

class Reads {
  readonly problems: ReadProblem[] = [];
  private readonly core: CoreV1Api;
  private readonly apps: AppsV1Api;
  private readonly custom: CustomObjectsApi;

  constructor(private readonly kc: KubeConfig) {
    this.core = kc.makeApiClient(CoreV1Api);
    this.apps = kc.makeApiClient(AppsV1Api);
    this.custom = kc.makeApiClient(CustomObjectsApi);
  }

  /** Listed by name rather than read: a 404 then means the CRD is missing, not the object. */
  async health(name: string): Promise<HealthObject | undefined> {
    const list = await this.required(
      'list sandboxhealths',
      () =>
        this.custom.listClusterCustomObject({
          group: GROUP,
          version: VERSION,
          plural: 'sandboxhealths',
          fieldSelector: `metadata.name=${name}`,
        }) as Promise<Page<unknown>>,
    );
    return list.items.map((item) => healthView(raw(item))).find((h) => h !== undefined);
  }

  async healths(): Promise<HealthObject[]> {
    const items = await this.required('list sandboxhealths', () =>
      listAll(
        (token) =>
          this.custom.listClusterCustomObject({
            group: GROUP,
            version: VERSION,
            plural: 'sandboxhealths',
            limit: PAGE,
            ...(token ? { _continue: token } : {}),
          }) as Promise<Page<unknown>>,
      ),
    );
    return items.flatMap((item) => healthView(raw(item)) ?? []);
  }

  async node(name: string): Promise<DiagnosedNode | undefined> {
    return this.required(`get node ${name}`, async () => {
      try {
        return diagnosedNode(raw(await this.core.readNode({ name })));
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    });
  }

  async nodes(): Promise<DiagnosedNode[]> {
    const items = await this.required('list nodes', () =>
      listAll((token) => this.core.listNode({ limit: PAGE, ...(token ? { _continue: token } : {}) })),
    );
    return items.flatMap((item) => diagnosedNode(raw(item)) ?? []);
  }

  async policy(name: string): Promise<PolicyObject | undefined> {
    return this.optional(`get sandboxpolicy ${name}`, undefined, async () => {
      try {
        return policyView(
          raw(
            await this.custom.getClusterCustomObject({
              group: GROUP,
              version: VERSION,
              plural: 'sandboxpolicies',
              name,
            }),
          ),
        );
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    });
  }

  async policies(): Promise<PolicyObject[]> {
    return this.optional('list sandboxpolicies', [], async () => {
      const list = (await this.custom.listClusterCustomObject({
        group: GROUP,
        version: VERSION,
        plural: 'sandboxpolicies',
      })) as Page<unknown>;
      return list.items.flatMap((item) => policyView(raw(item)) ?? []);
    });
  }

  /**
   * The latest FailedCreatePodSandBox Event of each pod (by name and reason: not every sender sets the uid), of those
   * the kubelet of its node wrote, as the operator counts them (ignoredEventReason): a forged one is not shown.
   */
  async failureEvents(
    nodeName: string,
    pods: readonly { namespace: string; name: string; uid: string }[],
  ): Promise<Map<string, EventView>> {
    const latest = new Map<string, EventView>();
    const failed: string[] = [];
    await forEachLimit(pods, PARALLEL_READS, async (pod) => {
      try {
        const list = await this.core.listNamespacedEvent({
          namespace: pod.namespace,
          fieldSelector: `involvedObject.name=${pod.name},reason=FailedCreatePodSandBox`,
        });
        for (const item of list.items) {
          const event = eventView(raw(item));
          // An Event of an earlier pod of the same name names another uid.
          if (!event || (event.involvedUid !== undefined && event.involvedUid !== pod.uid)) continue;
          if (ignoredEventReason(event, nodeName)) continue;
          const known = latest.get(pod.uid);
          if (!known || event.lastTime > known.lastTime) latest.set(pod.uid, event);
        }
      } catch (err) {
        failed.push(`${pod.namespace}/${pod.name}: ${describeError(err)}`);
      }
    });
    if (failed.length > 0)
      this.problems.push({
        what: `FailedCreatePodSandBox Events of ${failed.length} pod(s)`,
        message: failed.slice(0, 3).join('; '),
      });
    return latest;
  }

  async nodeEvents(node: string): Promise<OperatorEvent[]> {
    return this.optional(`Events on node ${node}`, [], async () => {
      const items = await listAll((token) =>
        this.core.listNamespacedEvent({
          namespace: NODE_EVENT_NAMESPACE,
          fieldSelector: `involvedObject.kind=Node,involvedObject.name=${node},source=${OPERATOR_COMPONENT}`,
          limit: PAGE,
          ...(token ? { _continue: token } : {}),
        }),
      );
      return items.map((item) => {
        const event = raw(item);
        return {
          type: typeof event.type === 'string' ? event.type : '',
          reason: typeof event.reason === 'string' ? event.reason : '',
          message: typeof event.message === 'string' ? event.message : '',
          ...eventOccurrences(event),
        };
      });
    });
  }

  /**
   * Every rollout of every kind carrying our pause stamps (annotations: no selector finds them, so all are listed).
   * Argo Rollouts only where it is installed: its list answering 404 is no problem.
   */
  async heldRollouts(): Promise<WorkloadView[]> {
    const apis = { apps: this.apps, custom: this.custom };
    const kinds = await Promise.all(
      ROLLOUT_KINDS.map((kind) =>
        this.optional(
          kind === 'Rollout' ? 'list rollouts.argoproj.io' : `list ${kind.toLowerCase()}s`,
          [],
          async () =>
            (await listRollouts(apis, kind)).flatMap((item) => {
              const view = WORKLOAD_VIEWS[kind](item);
              return view?.stamps ? [view] : [];
            }),
        ),
      ),
    );
    return kinds.flat();
  }

  /** Unscheduled Pending pods carrying our pacing gate. */
  async gatedPods(): Promise<GatedPodView[]> {
    return this.optional('list gated pods', [], async () => {
      const items = await listAll((token) =>
        this.core.listPodForAllNamespaces({
          fieldSelector: 'status.phase=Pending,spec.nodeName=',
          limit: PAGE,
          ...(token ? { _continue: token } : {}),
        }),
      );
      return items.flatMap((item) => gatedPodView(raw(item)) ?? []);
    });
  }

  private async required<T>(what: string, read: () => Promise<T>): Promise<T> {
    try {
      return await read();
    } catch (err) {
      throw new DiagnosisReadError(explainFailure(this.kc, what, err), { cause: err });
    }
  }

  private async optional<T>(what: string, fallback: T, read: () => Promise<T>): Promise<T> {
    try {
      return await read();
    } catch (err) {
      this.problems.push({ what, message: describeError(err) });
      return fallback;
    }
  }
}

function diagnosedNode(object: RawObject): DiagnosedNode | undefined {
  const view = nodeView(object);
  if (!view) return undefined;
  const annotations = Object.fromEntries(
    Object.entries(object.metadata?.annotations ?? {}).filter(([key]) => key.startsWith(KEY_PREFIX)),
  );
  return { view, annotations };
}

/** Why a read the diagnosis needs failed, in one line that names the fix. */
export function explainFailure(kc: KubeConfig, what: string, err: unknown): string {
  const server = serverOf(kc) ?? '(no server)';
  const status = apiStatus(err);
  if (status?.code === 401)
    return `${server} does not accept the credentials of kubeconfig user ${JSON.stringify(kc.getCurrentUser()?.name ?? '')} (HTTP 401 Unauthorized): fix them, or pass --kubeconfig=<a kubeconfig this cluster accepts>`;
  if (status?.code === 403)
    return `not allowed to ${what} on ${server} (HTTP 403 Forbidden): diagnose needs get and list on nodes, pods, events, sandboxhealths and sandboxpolicies (and list on deployments, statefulsets, daemonsets and argoproj.io rollouts)`;
  if (status?.code === 404 && what.includes('sandboxhealths'))
    return `${server} does not serve sandboxhealths.${GROUP}: the operator is not installed here (kubectl apply -f crds/), or this is the wrong cluster (--kubeconfig, --context)`;
  const noAnswer = status ? undefined : describeNoAnswer(err, DIAGNOSE_TIMEOUT_MS);
  if (noAnswer)
    return `cannot reach the apiserver at ${server}: ${noAnswer}; start it, or pass --kubeconfig=<a kubeconfig whose server is up>`;
  return `${what} on ${server} failed: ${describeError(err)}`;
}
