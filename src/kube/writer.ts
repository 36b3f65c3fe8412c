import {
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
} from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import {
  API_VERSION,
  GROUP,
  isRolloutKind,
  VERSION,
  type SandboxHealthStatus,
  type SandboxPolicyStatus,
  type WantedIoLimitSpec,
} from '../api/v1alpha1/index.js';
import type { EventRecorder, StatusWriter, Transition } from '../ports/writes.js';
import type { NodeView } from '../detection/index.js';
import { isConflict, isNotFound, isPatchNotApplicable, OutOfTurnError, terminalIfInvalid } from './errors.js';
import type { RawObject } from './informer.js';
import { healthView } from './views.js';

export const MANAGED_BY = { 'app.kubernetes.io/managed-by': 'sandbox-remediator' };
const mergePatch = () => setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const jsonPatch = () => setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);

/**
 * A JSON Patch of the status that applies only while its reportId is `after`: each key set whole, or removed (null).
 * The keys are the status's own field names (letters only), so the paths need no escaping.
 */
function fencedOps(status: Record<string, unknown>, after: string): object[] {
  return [
    { op: 'test', path: '/status/reportId', value: after },
    ...Object.entries(status).map(([key, value]) =>
      value === null
        ? { op: 'remove', path: `/status/${key}` }
        : { op: 'add', path: `/status/${key}`, value },
    ),
  ];
}

/**
 * Writes SandboxHealth objects and the status of both kinds, through /status with merge patches; a SandboxHealth
 * status write that follows one in flight, as a JSON Patch fenced on that one's reportId.
 */
export class KubeStatusWriter implements StatusWriter {
  private readonly custom: CustomObjectsApi;
  constructor(kc: KubeConfig) {
    this.custom = kc.makeApiClient(CustomObjectsApi);
  }

  async createHealth(node: NodeView): Promise<void> {
    const body = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'SandboxHealth',
      metadata: {
        name: node.name,
        labels: MANAGED_BY,
        // The garbage collector removes it with its Node.
        ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: node.name, uid: node.uid }],
      },
      spec: { nodeName: node.name },
    };
    try {
      await this.custom.createClusterCustomObject({
        group: GROUP,
        version: VERSION,
        plural: 'sandboxhealths',
        body,
      });
    } catch (err) {
      if (!isConflict(err)) throw err;
    }
  }

  async patchHealthStatus(
    name: string,
    status: Parameters<StatusWriter['patchHealthStatus']>[1],
    after?: string,
  ): Promise<{ version?: string; status?: SandboxHealthStatus }> {
    const what = `status patch of sandboxhealth/${name}`;
    try {
      const updated = (await this.custom.patchClusterCustomObjectStatus(
        {
          group: GROUP,
          version: VERSION,
          plural: 'sandboxhealths',
          name,
          body: after === undefined ? { status } : fencedOps(status, after),
        },
        after === undefined ? mergePatch() : jsonPatch(),
      )) as RawObject;
      const view = healthView(updated); // read as the cache reads it, so the two compare alike
      return {
        ...(updated.metadata?.resourceVersion ? { version: updated.metadata.resourceVersion } : {}),
        ...(view?.status ? { status: view.status } : {}),
      };
    } catch (err) {
      // A failed test, or no object to test: the write it follows has not landed (a body refused for what it says is
      // refused as a merge patch would be).
      if (after !== undefined && (isPatchNotApplicable(err) || isNotFound(err)))
        throw new OutOfTurnError(what, { cause: err });
      throw terminalIfInvalid(err, what);
    }
  }

  async patchHealthIoLimits(
    name: string,
    limits: readonly WantedIoLimitSpec[],
    read: readonly WantedIoLimitSpec[] | undefined,
    version: string | undefined,
  ): Promise<string | undefined> {
    const what = `spec.ioLimits patch of sandboxhealth/${name}`;
    // Tested on the list alone, not the object's version: the agent's reports change the object every few seconds.
    // An absent list cannot be tested: it is added only to the version it was read on (add would replace one).
    const ops: object[] =
      read === undefined
        ? [
            ...(version ? [{ op: 'test', path: '/metadata/resourceVersion', value: version }] : []),
            { op: 'add', path: '/spec/ioLimits', value: limits },
          ]
        : [
            { op: 'test', path: '/spec/ioLimits', value: read },
            limits.length > 0
              ? { op: 'replace', path: '/spec/ioLimits', value: limits }
              : { op: 'remove', path: '/spec/ioLimits' },
          ];
    try {
      const updated = (await this.custom.patchClusterCustomObject(
        { group: GROUP, version: VERSION, plural: 'sandboxhealths', name, body: ops },
        jsonPatch(),
      )) as { metadata?: { resourceVersion?: string } };
      return updated.metadata?.resourceVersion;
    } catch (err) {
      // The list is not what was read (someone lifted a limit, or it is gone with its object): changed meanwhile.
      if (isPatchNotApplicable(err) || isNotFound(err))
        throw Object.assign(new Error(`${what}: changed meanwhile`, { cause: err }), { code: 409, body: {} });
      throw terminalIfInvalid(err, what);
    }
  }

  /** With a resourceVersion, one changed since is a 409 rather than deleted. */
  async deleteHealth(name: string, resourceVersion?: string): Promise<void> {
    try {
      await this.custom.deleteClusterCustomObject({
        group: GROUP,
        version: VERSION,
        plural: 'sandboxhealths',
        name,
        ...(resourceVersion ? { body: { preconditions: { resourceVersion } } } : {}),
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  async patchPolicyStatus(name: string, status: SandboxPolicyStatus): Promise<string | undefined> {
    try {
      const updated = (await this.custom.patchClusterCustomObjectStatus(
        { group: GROUP, version: VERSION, plural: 'sandboxpolicies', name, body: { status } },
        mergePatch(),
      )) as { metadata?: { resourceVersion?: string } };
      return updated.metadata?.resourceVersion;
    } catch (err) {
      if (!isNotFound(err)) throw terminalIfInvalid(err, `status patch of sandboxpolicy/${name}`); // 404: deleted meanwhile
      return undefined;
    }
  }
}

/** Records core/v1 Events that kubectl describe shows on the Node or Pod. */
export class KubeEventRecorder implements EventRecorder {
  private readonly core: CoreV1Api;
  private readonly instance = hostname();
  constructor(kc: KubeConfig) {
    this.core = kc.makeApiClient(CoreV1Api);
  }

  async record(transition: Transition): Promise<void> {
    const { target } = transition;
    // Events about cluster-scoped objects live in "default", as kubelet's Node events do.
    const namespace = 'namespace' in target ? target.namespace : 'default';
    const apiVersion =
      target.kind === 'SandboxPolicy'
        ? API_VERSION
        : target.kind === 'Rollout'
          ? 'argoproj.io/v1alpha1'
          : isRolloutKind(target.kind)
            ? 'apps/v1'
            : 'v1';
    const now = new Date();
    await this.core.createNamespacedEvent({
      namespace,
      body: {
        metadata: { name: `${target.name}.${randomBytes(8).toString('hex')}`, namespace },
        involvedObject: {
          apiVersion,
          kind: target.kind,
          name: target.name,
          uid: target.uid,
          ...('namespace' in target ? { namespace: target.namespace } : {}),
        },
        type: transition.type,
        reason: transition.reason,
        message: transition.message.slice(0, 1024),
        source: { component: 'sandbox-remediator' },
        reportingComponent: 'sandbox.remediator.io/operator',
        reportingInstance: this.instance,
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
      },
    });
  }
}
