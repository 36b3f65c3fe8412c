// Carries out a cleanup plan, one object at a time, saying what it did to each: through the operator's own actuator,
// the real one or the dry run (which changes nothing and is reported exactly alike but for the verb). Every write is
// made on the version it was planned on; one refused because the object changed since (409, or a gate list that
// changed) is read again and planned again from the object as it is then, a bounded number of times.
import { DryRunActuator, type Actuator } from '../actuation/actuator.js';
import type { RolloutKind } from '../api/v1alpha1/index.js';
import type { StatusWriter } from '../ports/writes.js';
import type { GatedPodView, NodeView, WorkloadView } from '../detection/index.js';
import type { NodeLeaseView } from '../policy/node-lease.js';
import {
  planGate,
  planHealth,
  planIoLimits,
  planLease,
  planNode,
  planNodeCondition,
  planWorkload,
  type CleanupPlan,
  type CleanupStep,
  type HealthLeftover,
  type LeftAlone,
  type ObjectPlan,
  type Versioned,
} from './plan.js';

/** The writes of a cleanup: the operator's actuator, and the deletion of a SandboxHealth on its version. */
export interface CleanupWriter
  extends
    Pick<
      Actuator,
      'dryRun' | 'patchNode' | 'patchWorkload' | 'releaseGate' | 'setNodeCondition' | 'releaseNodeLease'
    >,
    Pick<StatusWriter, 'patchHealthIoLimits'> {
  /** A 404 is no error; a SandboxHealth changed since `resourceVersion` is a 409. */
  deleteHealth(name: string, resourceVersion: string | undefined): Promise<void>;
}

/** Reads one object again, after a write made on an older version of it was refused. */
export interface CleanupRereader {
  node(name: string): Promise<Versioned<NodeView> | undefined>;
  workload(kind: RolloutKind, namespace: string, name: string): Promise<Versioned<WorkloadView> | undefined>;
  /** Undefined too when the pod is no longer at our gate. */
  gatedPod(namespace: string, name: string): Promise<Versioned<GatedPodView> | undefined>;
  lease(node: string): Promise<Versioned<NodeLeaseView> | undefined>;
  health(name: string): Promise<Versioned<HealthLeftover> | undefined>;
}

/** The operator's dry-run actuator, and a SandboxHealth deletion that deletes nothing. */
export class DryRunCleanupWriter extends DryRunActuator implements CleanupWriter {
  deleteHealth(): Promise<void> {
    return Promise.resolve();
  }
  patchHealthIoLimits(): Promise<string | undefined> {
    return Promise.resolve(undefined);
  }
}

export interface RunDeps {
  writer: CleanupWriter;
  reread: CleanupRereader;
  out: { write(text: string): unknown };
  isConflict(err: unknown): boolean;
  describeError(err: unknown): string;
  /** How long a SandboxHealth waits for its agent to report our IO limits lifted, read again every LIFT_POLL_MS. */
  liftTimeoutMs: number;
  sleep(ms: number): Promise<void>;
}

/** How often a SandboxHealth is read again while its agent lifts our IO limits (it reports within seconds). */
export const LIFT_POLL_MS = 2_000;
/** The agent reports a lift on its short heartbeat, seconds; two minutes allow for a slow or restarting one. */
export const DEFAULT_LIFT_TIMEOUT_SECONDS = 120;

export interface CleanupOutcome {
  done: number;
  failed: number;
  leftAlone: number;
}

/** A write refused for a stale version is tried this many times in all, each on the object read afresh. */
export const ATTEMPTS = 3;

const VERBS: Record<CleanupStep['kind'], { done: string; dryRun: string }> = {
  ReleaseGate: { done: 'Released', dryRun: 'Would release' },
  ReleaseRollout: { done: 'Released', dryRun: 'Would release' },
  ReleaseNode: { done: 'Released', dryRun: 'Would release' },
  RemoveNodeCondition: { done: 'Cleared', dryRun: 'Would clear' },
  DeleteLease: { done: 'Deleted', dryRun: 'Would delete' },
  DeleteHealth: { done: 'Deleted', dryRun: 'Would delete' },
  LiftIoLimits: { done: 'Withdrew', dryRun: 'Would withdraw' },
};

/** What became of one step: done (as finally carried out), nothing of ours left on it, or what it left. */
type StepResult =
  | { result: 'done'; step: CleanupStep }
  | { result: 'nothing'; why: string }
  | { result: 'left'; leftAlone: LeftAlone[] };

/** What a run learns as it goes: the versions its own node writes made, and the nodes it failed to release. */
interface RunState {
  nodeVersions: Map<string, string>;
  failedNodes: Set<string>;
}

/**
 * Carries out every step in order, one line for each, then one line for each thing left alone; a failed step does not
 * stop the rest.
 */
export async function runCleanup(plan: CleanupPlan, deps: RunDeps): Promise<CleanupOutcome> {
  const outcome: CleanupOutcome = { done: 0, failed: 0, leftAlone: 0 };
  const line = (text: string) => deps.out.write(`${text}\n`);
  const state: RunState = { nodeVersions: new Map(), failedNodes: new Set() };
  const leftAlone: LeftAlone[] = [];
  for (const step of plan.steps) {
    try {
      const result = await carryOut(step, deps, state);
      if (result.result === 'done') {
        outcome.done++;
        const verb = VERBS[result.step.kind][deps.writer.dryRun ? 'dryRun' : 'done'];
        line(`${verb} ${result.step.target}: ${result.step.changes.join(', ')}`);
      } else if (result.result === 'nothing') line(`Skipped ${step.target}: ${result.why}`);
      else leftAlone.push(...result.leftAlone);
    } catch (err) {
      outcome.failed++;
      if (step.kind === 'ReleaseNode') state.failedNodes.add(step.node.name);
      line(`Failed ${step.target}: ${deps.describeError(err)}`);
    }
  }
  for (const l of [...leftAlone, ...plan.leftAlone]) {
    outcome.leftAlone++;
    line(`Left alone ${l.target}: ${l.why}`);
  }
  return outcome;
}

async function carryOut(step: CleanupStep, deps: RunDeps, state: RunState): Promise<StepResult> {
  if (step.kind === 'DeleteLease' && state.failedNodes.has(step.lease.node))
    // As the operator: its lease goes only once nothing of ours is left on the node.
    return {
      result: 'left',
      leftAlone: [
        {
          target: step.target,
          why: `kept: node/${step.lease.node} still carries our stamps (its release failed)`,
        },
      ],
    };
  let current = withOwnVersion(step, state);
  for (let attempt = 1; ; attempt++) {
    try {
      if (await write(current, deps, state)) return { result: 'done', step: current };
      if (attempt >= ATTEMPTS) throw new Error(`it kept changing meanwhile (${ATTEMPTS} attempts)`);
    } catch (err) {
      if (!deps.isConflict(err) || attempt >= ATTEMPTS) throw err;
    }
    const again = await replan(current, deps.reread);
    if (again.step === undefined)
      return again.leftAlone.length > 0
        ? { result: 'left', leftAlone: again.leftAlone }
        : { result: 'nothing', why: 'nothing of ours on it any more (it changed meanwhile)' };
    current = again.step;
  }
}

/** A node step after a write of ours to that node: on the version that write made, not on the one listed. */
function withOwnVersion(step: CleanupStep, state: RunState): CleanupStep {
  if (step.kind === 'ReleaseNode') {
    const version = state.nodeVersions.get(step.node.name);
    return version ? { ...step, change: { ...step.change, resourceVersion: version } } : step;
  }
  if (step.kind === 'RemoveNodeCondition') {
    const version = state.nodeVersions.get(step.node);
    return version ? { ...step, version } : step;
  }
  return step;
}

/** Makes one step's write; false when a precondition other than the version refused it (a gate list changed). */
async function write(step: CleanupStep, deps: RunDeps, state: RunState): Promise<boolean> {
  const { writer } = deps;
  const record = (node: string, version: string | undefined) => {
    if (version) state.nodeVersions.set(node, version);
  };
  switch (step.kind) {
    case 'ReleaseNode':
      record(step.node.name, await writer.patchNode(step.change));
      return true;
    case 'RemoveNodeCondition':
      record(step.node, await writer.setNodeCondition(step.node, null, step.version));
      return true;
    case 'ReleaseRollout':
      await writer.patchWorkload(step.change);
      return true;
    case 'ReleaseGate':
      return writer.releaseGate({ ...step.pod, ...(step.version ? { resourceVersion: step.version } : {}) });
    case 'DeleteLease':
      await writer.releaseNodeLease({
        node: step.lease.node,
        uid: step.lease.uid,
        resourceVersion: step.version,
      });
      return true;
    case 'LiftIoLimits':
      await writer.patchHealthIoLimits(step.name, [], step.read, step.version);
      return true;
    case 'DeleteHealth': {
      // Deleted on the version the wait read last: our own lift changed the object since it was listed.
      const version = step.awaitLift && !writer.dryRun ? await awaitLift(step, deps) : step.version;
      await writer.deleteHealth(step.name, version);
      return true;
    }
  }
}

/**
 * Until the agent of a SandboxHealth's node reports no IO limit of ours in force: what its files held before is in that
 * report, so the object is not deleted before. An agent that does not report within the wait (stopped, uninstalled)
 * fails the step, and the object stays.
 */
async function awaitLift(
  step: Extract<CleanupStep, { kind: 'DeleteHealth' }>,
  deps: RunDeps,
): Promise<string | undefined> {
  const { name } = step;
  deps.out.write(
    `Waiting up to ${Math.round(deps.liftTimeoutMs / 1000)} s for the agent to report the IO limits on ${name} lifted\n`,
  );
  let inForce: readonly { podUid: string }[];
  for (let waited = 0; ; waited += LIFT_POLL_MS) {
    const health = await deps.reread.health(name);
    inForce = health?.view.applied ?? [];
    if (inForce.length === 0) return health?.version ?? step.version;
    if (waited >= deps.liftTimeoutMs) break;
    await deps.sleep(LIFT_POLL_MS);
  }
  // One name a pod: on cgroup v1 a limit is in force in each of its cgroups.
  const pods = [...new Set(inForce.map((l) => step.pods[l.podUid] ?? `uid ${l.podUid}`))];
  throw new Error(
    `kept: its node's agent has not reported the IO limits of ${pods.length} pod(s) lifted within ${Math.round(deps.liftTimeoutMs / 1000)} s (${pods.join(', ')}), and the SandboxHealth holds what their files held before (status.ioLimits.applied[].before). Is the agent running? Start it again (the chart's DaemonSet) and run cleanup again; or put those values back by hand and delete the SandboxHealth.`,
  );
}

/** The step planned again on its object as it is now: the same rules, on what changed meanwhile. */
async function replan(step: CleanupStep, reread: CleanupRereader): Promise<ObjectPlan> {
  const none: ObjectPlan = { leftAlone: [] };
  switch (step.kind) {
    case 'ReleaseNode': {
      const node = await reread.node(step.node.name);
      return node ? planNode(node) : none;
    }
    case 'RemoveNodeCondition': {
      const node = await reread.node(step.node);
      return node ? planNodeCondition(node) : none;
    }
    case 'ReleaseRollout': {
      const { kind, namespace, name } = step.workload;
      const workload = await reread.workload(kind, namespace, name);
      return workload ? planWorkload(workload) : none;
    }
    case 'ReleaseGate': {
      const pod = await reread.gatedPod(step.pod.namespace, step.pod.name);
      return pod ? planGate(pod) : none;
    }
    case 'DeleteLease': {
      const lease = await reread.lease(step.lease.node);
      return lease ? planLease(lease) : none;
    }
    case 'DeleteHealth': {
      const health = await reread.health(step.name);
      return health ? planHealth(health, false, !step.nodeGone) : none;
    }
    case 'LiftIoLimits': {
      const health = await reread.health(step.name);
      return health ? planIoLimits(health) : none;
    }
  }
}
