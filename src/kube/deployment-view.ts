// The slim Deployment view the cache keeps for rollout throttling: progress counts, spec.paused and our stamps.
import { readRolloutStamps, ROLLOUT_STAMP } from '../api/v1alpha1/index.js';
import type { DeploymentView } from '../detection/index.js';
import type { RawObject } from './informer.js';
import { toDate } from './views.js';

type Json = Record<string, unknown>;
const obj = (v: unknown): Json =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : {};
const num = (v: unknown, fallback: number): number => (typeof v === 'number' ? v : fallback);
const strings = (v: unknown): Record<string, string> =>
  Object.fromEntries(Object.entries(obj(v)).filter((e): e is [string, string] => typeof e[1] === 'string'));

/**
 * Rolling out: the controller has not seen this spec yet, not every replica runs it, old replicas are left, or the
 * new ones are not yet available while the controller still reports progress. Not: a rollout past its progress
 * deadline (it holds no slot), or a finished one whose pods merely crash (NewReplicaSetAvailable).
 */
function isRollingOut(status: Json, generation: number, replicas: number): boolean {
  const progressing = Array.isArray(status.conditions)
    ? (status.conditions as unknown[]).map(obj).find((c) => c.type === 'Progressing')
    : undefined;
  if (progressing?.status === 'False' && progressing.reason === 'ProgressDeadlineExceeded') return false;
  const updated = num(status.updatedReplicas, 0);
  return (
    num(status.observedGeneration, 0) < generation ||
    updated < replicas ||
    num(status.replicas, 0) > updated ||
    (num(status.availableReplicas, 0) < updated && progressing?.reason !== 'NewReplicaSetAvailable')
  );
}

export function deploymentView(raw: RawObject): DeploymentView | undefined {
  const meta = obj(raw.metadata);
  const spec = obj(raw.spec);
  const status = obj(raw.status);
  const name = typeof meta.name === 'string' ? meta.name : undefined;
  const namespace = typeof meta.namespace === 'string' ? meta.namespace : undefined;
  if (!name || !namespace) return undefined;
  const annotations = strings(meta.annotations);
  const replicas = num(spec.replicas, 1);
  const generation = num(meta.generation, 0);
  const view: DeploymentView = {
    namespace,
    name,
    uid: typeof meta.uid === 'string' ? meta.uid : '',
    generation,
    paused: spec.paused === true,
    createdAt: toDate(meta.creationTimestamp) ?? new Date(0),
    rollingOut: isRollingOut(status, generation, replicas),
  };
  const stamps = readRolloutStamps(annotations);
  if (stamps) view.stamps = stamps;
  const handsOff = toDate(annotations[ROLLOUT_STAMP.handsOffUntil]);
  if (handsOff) view.handsOffUntil = handsOff;
  return view;
}
