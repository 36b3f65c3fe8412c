// The slim views the cache keeps of what rolls out, for rollout throttling: progress, whether it is held and by whom,
// the revision an updated pod carries, and for a StatefulSet or DaemonSet the strategy a hold replaces. Each kind's
// hold is read into the same words (WorkloadView.paused), so that one decision serves every kind.
import {
  readHeldStrategy,
  readRolloutStamps,
  ROLLOUT_STAMP,
  type RolloutKind,
  type UpdateStrategy,
} from '../api/v1alpha1/index.js';
import type { WorkloadView } from '../detection/index.js';
import type { RawObject } from './informer.js';
import { arr, labels, numOr, obj, placementOf, str, toDate, type Json } from './views.js';

/** The DaemonSet controller's record of its template's generation; its pods carry it as pod-template-generation. */
const DAEMONSET_TEMPLATE_GENERATION = 'deprecated.daemonset.template.generation';

/** Identity, our stamps and hands-off, which every kind shares; not held and not rolling out until its kind says. */
function base(
  kind: RolloutKind,
  raw: RawObject,
): { view: WorkloadView; annotations: Record<string, string> } | undefined {
  const meta = obj(raw.metadata);
  const name = str(meta.name);
  const namespace = str(meta.namespace);
  if (!name || !namespace) return undefined;
  const annotations = labels(meta.annotations);
  const view: WorkloadView = {
    kind,
    namespace,
    name,
    uid: str(meta.uid) ?? '',
    generation: numOr(meta.generation, 0),
    paused: false,
    createdAt: toDate(meta.creationTimestamp) ?? new Date(0),
    rollingOut: false,
  };
  const stamps = readRolloutStamps(annotations, view.uid);
  if (stamps) view.stamps = stamps;
  const held = stamps && readHeldStrategy(annotations);
  if (held) view.held = held;
  const handsOff = toDate(annotations[ROLLOUT_STAMP.handsOffUntil]);
  if (handsOff) view.handsOffUntil = handsOff;
  const placement = placementOf(obj(obj(obj(raw.spec).template).spec));
  if (placement) view.placement = placement;
  return { view, annotations };
}

/** spec.updateStrategy as plain JSON (a list's deserialised model has undefined keys; a restore writes it back). */
function updateStrategy(v: unknown): UpdateStrategy {
  return JSON.parse(JSON.stringify(obj(v))) as UpdateStrategy;
}

const partitionOf = (strategy: UpdateStrategy): number => numOr(obj(strategy.rollingUpdate).partition, 0);

/**
 * Rolling out: the controller has not seen this spec yet, not every replica runs it, old replicas are left, or the
 * new ones are not yet available while the controller still reports progress. Not: a finished one whose pods merely
 * crash (NewReplicaSetAvailable). One past its progress deadline still rolls out (it is `stalled`: no slot).
 */
function isDeploymentRollingOut(status: Json, generation: number, replicas: number): boolean {
  const progressing = arr(status.conditions).find((c) => c.type === 'Progressing');
  const updated = numOr(status.updatedReplicas, 0);
  return (
    numOr(status.observedGeneration, 0) < generation ||
    updated < replicas ||
    numOr(status.replicas, 0) > updated ||
    (numOr(status.availableReplicas, 0) < updated && progressing?.reason !== 'NewReplicaSetAvailable')
  );
}

export function deploymentView(raw: RawObject): WorkloadView | undefined {
  const found = base('Deployment', raw);
  if (!found) return undefined;
  const { view } = found;
  const spec = obj(raw.spec);
  view.paused = spec.paused === true;
  const status = obj(raw.status);
  view.rollingOut = isDeploymentRollingOut(status, view.generation, numOr(spec.replicas, 1));
  // Past its own progress deadline: it holds no slot, but still rolls out (its owner's progressDeadlineSeconds must
  // not let it past a hold while it feeds a saturated node).
  const progressing = arr(status.conditions).find((c) => c.type === 'Progressing');
  if (view.rollingOut && progressing?.status === 'False') view.stalled = true;
  return view;
}

/**
 * A StatefulSet is held by a partition where its rollout stands (rollout-changes.ts heldPartition). Ours stands while the partition is
 * the one we set (its owner changing it lets it go); one its owner holds (OnDelete, or a partition at or above its
 * replicas) is never touched. It rolls out while fewer pods run the update revision than its owner's partition asks
 * (the one before our hold), or the update revision is not yet everyone's and pods are not all ready (settling).
 */
export function statefulSetView(raw: RawObject): WorkloadView | undefined {
  const found = base('StatefulSet', raw);
  if (!found) return undefined;
  const { view } = found;
  const spec = obj(raw.spec);
  const status = obj(raw.status);
  const replicas = numOr(spec.replicas, 1);
  const strategy = updateStrategy(spec.updateStrategy);
  const onDelete = strategy.type === 'OnDelete';
  const partition = partitionOf(strategy);
  view.strategy = strategy;
  view.replicas = replicas;
  const observed = numOr(status.observedGeneration, 0) >= view.generation;
  view.updatedReplicas = observed ? Math.min(replicas, Math.max(0, numOr(status.updatedReplicas, 0))) : 0;
  const revision = str(status.updateRevision);
  if (revision) view.revision = revision;
  view.paused = view.stamps
    ? view.held !== undefined && !onDelete && partition === view.held.partition
    : onDelete || partition >= replicas;
  const wanted = view.held ? partitionOf(view.held.strategy) : partition;
  const updating =
    numOr(status.observedGeneration, 0) < view.generation ||
    numOr(status.updatedReplicas, 0) < Math.max(0, replicas - wanted);
  const settling =
    wanted === 0 && str(status.currentRevision) !== revision && numOr(status.readyReplicas, 0) < replicas;
  view.rollingOut = !onDelete && (updating || settling);
  if (view.rollingOut && !updating) view.settling = true;
  return view;
}

/**
 * A DaemonSet cannot be paused: it is held by switching it to OnDelete, which updates no pod until one is deleted.
 * Ours stands while it is OnDelete (its owner switching it back lets it go); one its owner runs OnDelete is never
 * touched. It rolls out, as kubectl rollout status says, until every node it wants runs an updated pod that is
 * available, and the controller has seen its spec; settling once every pod is updated.
 */
export function daemonSetView(raw: RawObject): WorkloadView | undefined {
  const found = base('DaemonSet', raw);
  if (!found) return undefined;
  const { view, annotations } = found;
  const spec = obj(raw.spec);
  const status = obj(raw.status);
  const strategy = updateStrategy(spec.updateStrategy);
  const onDelete = strategy.type === 'OnDelete';
  view.strategy = strategy;
  const revision = annotations[DAEMONSET_TEMPLATE_GENERATION];
  if (revision) view.revision = revision;
  view.paused = view.stamps ? view.held !== undefined && onDelete : onDelete;
  const owners = view.held ? view.held.strategy.type === 'OnDelete' : onDelete;
  const desired = numOr(status.desiredNumberScheduled, 0);
  const updating =
    numOr(status.observedGeneration, 0) < view.generation ||
    numOr(status.updatedNumberScheduled, 0) < desired;
  view.rollingOut = !owners && (updating || numOr(status.numberAvailable, 0) < desired);
  if (view.rollingOut && !updating) view.settling = true;
  return view;
}

/**
 * An Argo Rollout (argoproj.io/v1alpha1) is held by spec.paused, and released by resetting only that: never a
 * promotion, which would clear its pause conditions or skip canary steps. One paused by its owner (spec.paused, or
 * a pause condition of a canary step) is never touched. It rolls out while its current pod hash is not the stable
 * one, not every replica is updated, or its phase says Progressing; not once aborted or Degraded.
 */
export function argoRolloutView(raw: RawObject): WorkloadView | undefined {
  const found = base('Rollout', raw);
  if (!found) return undefined;
  const { view } = found;
  const spec = obj(raw.spec);
  const status = obj(raw.status);
  const paused = spec.paused === true;
  const revision = str(status.currentPodHash);
  if (revision) view.revision = revision;
  view.paused = view.stamps
    ? paused
    : paused || arr(status.pauseConditions).length > 0 || status.controllerPause === true;
  const stable = str(status.stableRS);
  // Aborted, or past its progress deadline (Degraded): it waits for its owner, and holds no slot.
  const waiting = status.abort === true || str(status.phase) === 'Degraded';
  view.rollingOut =
    !waiting &&
    ((revision !== undefined && stable !== undefined && revision !== stable) ||
      numOr(status.updatedReplicas, 0) < numOr(spec.replicas, 1) ||
      str(status.phase) === 'Progressing');
  return view;
}
