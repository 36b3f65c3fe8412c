// Carries out a cleanup plan, one object at a time, saying what it did to each: through a CleanupWriter, the real one
// (src/kube) or the dry run below, which changes nothing and is reported exactly alike but for the verb. An object
// changed between the list and the write (409) is read again and planned again, from its stamps as they are then.
import type { Actuator, NodeChange, WorkloadChange } from '../actuation/actuator.js';
import type { RolloutKind } from '../api/v1alpha1/index.js';
import type { GatedPodView, NodeView, WorkloadView } from '../detection/index.js';
import {
  planGate,
  planNode,
  planWorkload,
  type CleanupPlan,
  type CleanupStep,
  type LeaseView,
  type LeftAlone,
  type Versioned,
} from './plan.js';

/** The writes of a cleanup: the operator's own actuator for nodes, rollouts and gates, and three of its own. */
export interface CleanupWriter extends Pick<Actuator, 'patchNode' | 'patchWorkload' | 'releaseGate'> {
  readonly dryRun: boolean;
  /** Removes our condition from Node.status.conditions (a no-op when it is not there). */
  removeNodeCondition(node: string): Promise<void>;
  /** Deletes the lease if it is still the one listed (uid and resourceVersion preconditions); 404 is no error. */
  deleteLease(lease: LeaseView): Promise<void>;
  deleteHealth(name: string): Promise<void>;
}

/** Reads one object again, after a write made on an older version of it was refused (409). */
export interface CleanupRereader {
  node(name: string): Promise<Versioned<NodeView> | undefined>;
  workload(kind: RolloutKind, namespace: string, name: string): Promise<Versioned<WorkloadView> | undefined>;
  gatedPod(namespace: string, name: string): Promise<GatedPodView | undefined>;
}

/** Changes nothing; the runner reports what it would have done. */
export class DryRunCleanupWriter implements CleanupWriter {
  readonly dryRun = true;
  patchNode(_change: NodeChange): Promise<string | undefined> {
    return Promise.resolve(undefined);
  }
  patchWorkload(_change: WorkloadChange): Promise<string | undefined> {
    return Promise.resolve(undefined);
  }
  releaseGate(): Promise<boolean> {
    return Promise.resolve(true);
  }
  removeNodeCondition(): Promise<void> {
    return Promise.resolve();
  }
  deleteLease(): Promise<void> {
    return Promise.resolve();
  }
  deleteHealth(): Promise<void> {
    return Promise.resolve();
  }
}

export interface RunDeps {
  writer: CleanupWriter;
  reread: CleanupRereader;
  out: { write(text: string): unknown };
  isConflict(err: unknown): boolean;
  describeError(err: unknown): string;
}

export interface CleanupOutcome {
  done: number;
  failed: number;
  leftAlone: number;
}

/** A write on a stale version is tried again this many times, each on the object read afresh. */
const ATTEMPTS = 3;

const VERBS: Record<CleanupStep['kind'], { done: string; dryRun: string }> = {
  ReleaseGate: { done: 'Released', dryRun: 'Would release' },
  ReleaseRollout: { done: 'Released', dryRun: 'Would release' },
  ReleaseNode: { done: 'Released', dryRun: 'Would release' },
  RemoveNodeCondition: { done: 'Cleared', dryRun: 'Would clear' },
  DeleteLease: { done: 'Deleted', dryRun: 'Would delete' },
  DeleteHealth: { done: 'Deleted', dryRun: 'Would delete' },
};

/** What became of one step: done (with the step as finally carried out), nothing left to do, or what was left. */
type StepResult =
  | { result: 'done'; step: CleanupStep }
  | { result: 'nothing'; why: string }
  | { result: 'left'; leftAlone: LeftAlone[] };

/** Carries out every step in order, one line for each; a failed one does not stop the rest. */
export async function runCleanup(plan: CleanupPlan, deps: RunDeps): Promise<CleanupOutcome> {
  const outcome: CleanupOutcome = { done: 0, failed: 0, leftAlone: 0 };
  const line = (text: string) => deps.out.write(`${text}\n`);
  const leave = (left: readonly LeftAlone[]) => {
    for (const l of left) {
      outcome.leftAlone++;
      line(`Left alone ${l.target}: ${l.why}`);
    }
  };
  for (const step of plan.steps) {
    try {
      const result = await carryOut(step, deps);
      if (result.result === 'done') {
        outcome.done++;
        const verb = VERBS[result.step.kind][deps.writer.dryRun ? 'dryRun' : 'done'];
        line(`${verb} ${result.step.target}: ${result.step.changes.join(', ')}`);
      } else if (result.result === 'nothing') line(`Skipped ${step.target}: ${result.why}`);
      else leave(result.leftAlone);
    } catch (err) {
      outcome.failed++;
      line(`Failed ${step.target}: ${deps.describeError(err)}`);
    }
  }
  leave(plan.leftAlone);
  return outcome;
}

async function carryOut(step: CleanupStep, deps: RunDeps): Promise<StepResult> {
  const { writer } = deps;
  switch (step.kind) {
    case 'ReleaseNode':
      return retryOnConflict(step, deps, async (current) => {
        if (current.kind !== 'ReleaseNode') return undefined;
        await writer.patchNode(current.change);
        return current;
      });
    case 'ReleaseRollout':
      return retryOnConflict(step, deps, async (current) => {
        if (current.kind !== 'ReleaseRollout') return undefined;
        await writer.patchWorkload(current.change);
        return current;
      });
    case 'ReleaseGate':
      return releaseGate(step, deps);
    case 'RemoveNodeCondition':
      await writer.removeNodeCondition(step.node);
      return { result: 'done', step };
    case 'DeleteLease':
      await writer.deleteLease(step.lease);
      return { result: 'done', step };
    case 'DeleteHealth':
      await writer.deleteHealth(step.name);
      return { result: 'done', step };
  }
}

/** A node or rollout step, planned again on the object as it is now when the write met a newer version. */
async function retryOnConflict(
  step: CleanupStep,
  deps: RunDeps,
  write: (step: CleanupStep) => Promise<CleanupStep | undefined>,
): Promise<StepResult> {
  let current = step;
  for (let attempt = 1; ; attempt++) {
    try {
      const done = await write(current);
      if (done) return { result: 'done', step: done };
    } catch (err) {
      if (!deps.isConflict(err) || attempt >= ATTEMPTS) throw err;
    }
    const again = await replan(current, deps.reread);
    if (again.step === undefined)
      return again.leftAlone.length > 0
        ? { result: 'left', leftAlone: again.leftAlone }
        : { result: 'nothing', why: 'nothing of ours on it any more (changed meanwhile)' };
    current = again.step;
  }
}

async function replan(
  step: CleanupStep,
  reread: CleanupRereader,
): Promise<{ step?: CleanupStep; leftAlone: LeftAlone[] }> {
  if (step.kind === 'ReleaseNode') {
    const node = await reread.node(step.node.name);
    return node ? planNode(node) : { leftAlone: [] };
  }
  if (step.kind === 'ReleaseRollout') {
    const { kind, namespace, name } = step.workload;
    const workload = await reread.workload(kind, namespace, name);
    return workload ? planWorkload(workload) : { leftAlone: [] };
  }
  return { leftAlone: [] };
}

/** Lifts our gate; when the pod changed meanwhile (its gates, or a new pod of that name), from the pod as it is now. */
async function releaseGate(step: CleanupStep & { kind: 'ReleaseGate' }, deps: RunDeps): Promise<StepResult> {
  let pod = step.pod;
  for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
    if (await deps.writer.releaseGate(pod)) return { result: 'done', step: planGate(pod) };
    const now = await deps.reread.gatedPod(pod.namespace, pod.name);
    if (!now) return { result: 'nothing', why: 'gone, or no longer at our gate' };
    pod = now;
  }
  throw new Error(`its scheduling gates kept changing (${ATTEMPTS} attempts)`);
}
