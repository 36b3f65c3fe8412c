// PURE: the one patch that carries out a rollout action on each kind, the hold and its record together, so that a
// kill -9 between holding and recording cannot happen: a Deployment or Argo Rollout is paused by spec.paused, a
// StatefulSet frozen by a partition where its rollout stands, a DaemonSet switched to OnDelete; a release puts back exactly what
// the hold replaced (the partition it had, the DaemonSet's whole strategy), and nothing else.
import type { WorkloadChange } from './actuator.js';
import {
  heldStrategyAnnotations,
  rolloutStampAnnotations,
  type HeldStrategy,
  type RolloutStamps,
  type UpdateStrategy,
} from '../api/v1alpha1/index.js';
import type { WorkloadView } from '../detection/index.js';
import type { RolloutAction } from '../policy/rollouts.js';

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The merge patch that turns `current` into exactly `wanted`: keys it lacks are removed, nested objects alike. */
export function replaceWith(current: Json, wanted: Json): Json {
  const patch: Json = {};
  for (const key of Object.keys(current)) if (!(key in wanted)) patch[key] = null;
  for (const [key, value] of Object.entries(wanted)) {
    const now = current[key];
    patch[key] = isObject(value) && isObject(now) ? replaceWith(now, value) : value;
  }
  return patch;
}

/**
 * Where a StatefulSet is frozen: ordinals at or above the partition run the update revision, and a pod recreated
 * there comes back at it, one below at the current revision. So the hold sets it at the lowest ordinal already updated
 * (the controller updates from the top down), never below its owner's partition: a pod of the rollout recreated during
 * the hold (evicted, by us too, or lost with its node) keeps its owner's change, and no pod that was not yet updated
 * is. At the replica count, as before, no updated pod would keep it.
 */
export function heldPartition(w: Pick<WorkloadView, 'replicas' | 'updatedReplicas' | 'strategy'>): number {
  const replicas = w.replicas ?? 1;
  const owners = Number(w.strategy?.rollingUpdate?.partition ?? 0);
  return Math.max(Number.isInteger(owners) ? owners : 0, replicas - (w.updatedReplicas ?? 0));
}

/** How a kind is held: the spec patch, and for a StatefulSet or DaemonSet the strategy it replaces. */
function hold(w: WorkloadView): { spec: Json; held?: HeldStrategy } {
  const strategy: UpdateStrategy = w.strategy ?? {};
  switch (w.kind) {
    case 'Deployment':
    case 'Rollout':
      return { spec: { paused: true } };
    case 'StatefulSet': {
      return {
        spec: { updateStrategy: { rollingUpdate: { partition: heldPartition(w) } } },
        held: { strategy, partition: heldPartition(w) },
      };
    }
    case 'DaemonSet':
      return { spec: { updateStrategy: { type: 'OnDelete', rollingUpdate: null } }, held: { strategy } };
  }
}

/** How a kind is released: spec.paused reset alone, or the held strategy put back exactly; nothing when not held. */
function release(w: WorkloadView): Json | undefined {
  if (!w.paused) return undefined;
  switch (w.kind) {
    case 'Deployment':
      return { paused: null };
    case 'Rollout':
      return { paused: false }; // never a promotion: its pause conditions and canary steps are its own
    case 'StatefulSet': {
      // The hold changed the partition alone: only it goes back, so what its owner edited meanwhile stays.
      if (!w.held) return undefined;
      const had = w.held.strategy.rollingUpdate;
      const now = Object.keys(w.strategy?.rollingUpdate ?? {}).filter((k) => k !== 'partition');
      // It had no rollingUpdate: the hold's is removed, unless its owner has since put fields of their own in it.
      if (had === undefined && now.length === 0) return { updateStrategy: { rollingUpdate: null } };
      return { updateStrategy: { rollingUpdate: { partition: had?.partition ?? null } } };
    }
    case 'DaemonSet':
      return w.held
        ? { updateStrategy: replaceWith({ ...(w.strategy ?? {}) }, { ...w.held.strategy }) }
        : undefined;
  }
}

/** The change that carries out a rollout action (or, for the orphan sweep, releases one we held). */
export function workloadChange(
  w: WorkloadView,
  action: Pick<RolloutAction, 'kind'> & { stamps?: RolloutStamps; handsOffUntil?: Date },
  version: string | undefined,
): WorkloadChange {
  const change: WorkloadChange = { kind: w.kind, namespace: w.namespace, name: w.name, annotations: {} };
  if (version) change.resourceVersion = version;
  if (action.kind === 'PauseRollout') {
    const { spec, held } = hold(w);
    change.spec = spec;
    change.annotations = {
      ...rolloutStampAnnotations(action.stamps, w.uid),
      ...heldStrategyAnnotations(held),
    };
    return change;
  }
  const handsOff = action.kind === 'ReleaseRollout' ? action.handsOffUntil : undefined;
  change.annotations = {
    ...rolloutStampAnnotations(undefined, w.uid, handsOff),
    ...heldStrategyAnnotations(undefined),
  };
  const spec = action.kind === 'ResumeRollout' ? release(w) : undefined;
  if (spec) change.spec = spec;
  return change;
}
