// PURE: the remediation part of a node's SandboxHealth (recent actions, what is blocked, the Cordoned condition,
// the stamp mirror) and the Events its transitions call for.
import {
  formatTaint,
  MAX_RECORDED_ACTIONS,
  type ActionRecord,
  type BlockedAction as BlockedRecord,
  type NodeStamps,
  type RemediationRecord,
  type ActionKind,
  type SandboxHealthStatus,
} from '../api/v1alpha1/index.js';
import type { NodeView } from '../detection/index.js';
import {
  isEviction,
  isStampDrop,
  migratedPod,
  subjectOf,
  fenceStepOf,
  type Action,
  type BlockedAction,
} from '../policy/actions.js';
import { mergeConditions } from './conditions.js';
import type { RolloutAction } from '../policy/rollouts.js';
import type { Transition } from '../ports/writes.js';
import type { DetectionStatus } from './health-status.js';

export interface ActionResult {
  action: Action;
  outcome: 'Succeeded' | 'Failed';
  /** Why it failed or was refused (the API's words). */
  detail?: string;
  /**
   * Carried out by the dry-run actuator (reported as done, but nothing changed), or not; where unset, the mode of the
   * pass that tells it stands.
   */
  simulated?: boolean;
}

export type HealthStatus = DetectionStatus &
  Pick<SandboxHealthStatus, 'actions' | 'lastAction' | 'blocked' | 'remediation'>;

export function actionRecord(result: ActionResult, now: Date, dryRun: boolean): ActionRecord {
  const { action } = result;
  const record: ActionRecord = {
    kind: action.kind,
    target: action.target,
    time: now.toISOString(),
    outcome: result.outcome,
    // A result knows whether a dry run simulated it; the policy telling it may not be the one that did it.
    dryRun: result.simulated ?? dryRun,
    reason: action.reason,
    message: (result.detail ?? action.message).slice(0, 1024),
  };
  if (isEviction(action)) record.uid = action.pod.uid;
  return record;
}

type BlockIdentity = Pick<BlockedRecord, 'kind' | 'target' | 'guard'>;

/** One blocked action's identity: a block with the same key is the same standing block. */
export const blockKey = (b: BlockIdentity) => `${b.kind} ${b.target} ${b.guard}`;

/** The blocks that the stored status did not hold: news (an Event, a count); a standing block is not. */
export function newBlocks<B extends BlockIdentity>(
  previous: SandboxHealthStatus | undefined,
  blocked: readonly B[],
): B[] {
  const before = new Set((previous?.blocked ?? []).map(blockKey));
  return blocked.filter((b) => !before.has(blockKey(b)));
}

/** Whether the stored status holds exactly these blocks. */
export function sameBlocks(
  previous: SandboxHealthStatus | undefined,
  blocked: readonly BlockIdentity[],
): boolean {
  return (previous?.blocked ?? []).length === blocked.length && newBlocks(previous, blocked).length === 0;
}

function mirror(stamps: NodeStamps | undefined, dryRun: boolean): RemediationRecord | undefined {
  if (!stamps) return undefined;
  const record: RemediationRecord = {
    policy: stamps.policy,
    since: stamps.since.toISOString(),
    cordoned: stamps.cordoned,
    reason: stamps.reason.slice(0, 1024),
    dryRun,
  };
  if (stamps.taint) record.taint = formatTaint(stamps.taint);
  return record;
}

export interface RemediationStatusInput {
  detection: DetectionStatus;
  previous: SandboxHealthStatus | undefined;
  node: NodeView;
  /** What was carried out on this node in this pass, in order. */
  results: readonly ActionResult[];
  /** What guards (and PodDisruptionBudgets) hold back on this node now. */
  blocked: readonly BlockedAction[];
  stampsAfter: NodeStamps | undefined;
  /** Whether the node is unschedulable once this pass's actions are done. */
  unschedulable: boolean;
  /** Rollouts held because their pods were stuck on this node (RolloutsThrottled), as kind/namespace/name. */
  throttling?: readonly string[];
  /** Why nothing was started on a degraded node that is not ours, for the Cordoned condition. */
  notTriggered?: { reason: string; message: string } | undefined;
  /** Whether stampsAfter exist only in status (a dry run). */
  simulated: boolean;
  dryRun: boolean;
  now: Date;
}

/** The node's whole desired status: detection plus remediation. */
export function desiredHealthStatus(input: RemediationStatusInput): HealthStatus {
  const { previous, now, dryRun } = input;
  const previousBlocked = new Map((previous?.blocked ?? []).map((b) => [blockKey(b), b]));
  const blocked: BlockedRecord[] = input.blocked.slice(0, MAX_RECORDED_ACTIONS).map((b) => ({
    kind: b.kind,
    target: b.target,
    guard: b.guard,
    message: b.message.slice(0, 1024),
    since: previousBlocked.get(blockKey(b))?.since ?? now.toISOString(),
  }));
  const newlyBlocked: ActionRecord[] = newBlocks(previous, input.blocked).map((b) => ({
    kind: b.kind,
    target: b.target,
    time: now.toISOString(),
    outcome: 'Blocked',
    dryRun,
    reason: b.guard,
    message: b.message.slice(0, 1024),
  }));
  const fresh = [...input.results.map((r) => actionRecord(r, now, dryRun)), ...newlyBlocked].reverse();
  const actions = [...fresh, ...(previous?.actions ?? [])].slice(0, MAX_RECORDED_ACTIONS);
  const stamps = input.stampsAfter;
  const cordoned = stamps?.cordoned
    ? {
        type: 'Cordoned',
        status: 'True' as const,
        reason: dryRun ? 'DryRun' : 'CordonedForIoPressure',
        message: `${dryRun ? 'Dry run: would have cordoned' : 'Cordoned'} by policy ${stamps.policy} since ${stamps.since.toISOString()}: ${stamps.reason}`,
      }
    : input.unschedulable
      ? {
          type: 'Cordoned',
          status: 'False' as const,
          reason: 'CordonedByOthers',
          message: 'The node is unschedulable, but not by this operator: it is never uncordoned here.',
        }
      : {
          type: 'Cordoned',
          status: 'False' as const,
          reason: input.notTriggered?.reason ?? 'NotCordoned',
          message: input.notTriggered?.message ?? 'Not cordoned.',
        };
  const throttling = input.throttling ?? [];
  const throttled =
    throttling.length > 0
      ? {
          type: 'RolloutsThrottled',
          status: 'True' as const,
          reason: dryRun ? 'DryRun' : 'RolloutsHeld',
          message: `${dryRun ? 'Dry run: would have held' : 'Held'} ${throttling.length} rollout(s) whose pods were stuck here: ${throttling.slice(0, 10).join(', ')}.`,
        }
      : {
          type: 'RolloutsThrottled',
          status: 'False' as const,
          reason: 'NoneThrottled',
          message: 'No rollout is held for this node.',
        };
  const mine = new Set(['Cordoned', 'RolloutsThrottled']);
  const conditions = [
    ...input.detection.conditions.filter((c) => !mine.has(c.type)),
    ...mergeConditions(
      input.detection.conditions.filter((c) => mine.has(c.type)),
      [cordoned, throttled],
      now,
    ),
  ];
  const status: HealthStatus = {
    ...input.detection,
    conditions,
    state: stamps && input.detection.state !== 'Recovering' ? 'Remediating' : input.detection.state,
    actions,
    blocked,
  };
  const latest = actions[0];
  if (latest) status.lastAction = `${latest.kind} ${latest.outcome}${latest.dryRun ? ' (dry run)' : ''}`;
  const record = mirror(stamps, input.simulated);
  if (record) {
    // Counted here, not from the recent actions (20, shared with every other kind): maxPodsPerNode holds for the
    // whole remediation, however long it lasts, and across restarts.
    const before = previous?.remediation?.since === record.since ? (previous.remediation.migrated ?? 0) : 0;
    const moved = input.results.filter((r) => migratedPod(r.action.kind, r.outcome)).length;
    if (before + moved > 0) record.migrated = before + moved;
    status.remediation = record;
  }
  return status;
}

/** What an Event of an action a dry run only simulated begins with. */
export const DRY_RUN_PREFIX = 'Dry run, nothing changed: ';

/** How each rollout action is told: the log line once it is done, and the reason of its Event. */
export const ROLLOUT_WORDS: Record<RolloutAction['kind'], { done: string; event: string }> = {
  PauseRollout: { done: 'Held rollout', event: 'RolloutPaused' },
  ResumeRollout: { done: 'Released rollout', event: 'RolloutResumed' },
  ReleaseRollout: { done: 'Dropped our stamp: changed by someone else', event: 'RemediationReleased' },
};

/** How each action is told: the log line once it is done, and the reason of its Event. */
export const ACTION_WORDS: Record<Action['kind'], { done: string; event: string }> = {
  Cordon: { done: 'Cordoned Node', event: 'Cordoned' },
  Taint: { done: 'Tainted Node', event: 'Tainted' },
  Evict: { done: 'Evicted stuck Pod', event: 'EvictedStuckPod' },
  Migrate: { done: 'Migrated IO-heavy Pod', event: 'MigratedIoHeavyPod' },
  Uncordon: { done: 'Uncordoned Node', event: 'Uncordoned' },
  Untaint: { done: 'Untainted Node', event: 'Untainted' },
};

/** Events for what was done in this pass and for each newly blocked action; a standing block repeats none. */
export function remediationTransitions(input: RemediationStatusInput, desired: HealthStatus): Transition[] {
  const { node, dryRun } = input;
  const nodeRef = { kind: 'Node' as const, name: node.name, uid: node.uid };
  const prefix = dryRun ? DRY_RUN_PREFIX : '';
  const transitions: Transition[] = [];
  // The fence says how a person takes it over: their own cordon on top of ours changes nothing the operator can see.
  const takeOver = (action: { kind: ActionKind }, node: string) =>
    fenceStepOf(action.kind) === 'Up'
      ? ` It is undone on recovery; to keep the node fenced for your own work, take it over: kubectl sandbox release ${node}.`
      : '';
  for (const result of input.results) {
    const { action } = result;
    const target = subjectOf(action, node);
    if (result.outcome === 'Succeeded' && isStampDrop(action)) {
      // Not an action of ours: someone else reverted what we did, and we let go of the claim.
      transitions.push({ target, type: 'Normal', reason: 'RemediationReleased', message: action.message });
    } else if (result.outcome === 'Succeeded') {
      transitions.push({
        target,
        type: 'Normal',
        reason: ACTION_WORDS[action.kind].event,
        // As it was done: a policy made again under the name may tell its namesake's, in the other mode.
        message:
          (result.simulated ?? dryRun)
            ? `${DRY_RUN_PREFIX}${action.message}`
            : `${action.message}${takeOver(action, nodeRef.name)}`,
      });
    } else {
      transitions.push({
        target,
        type: 'Warning',
        reason: 'RemediationFailed',
        message: `${action.kind} ${action.target} failed: ${result.detail ?? ''}`,
      });
    }
  }
  for (const b of newBlocks(input.previous, desired.blocked ?? [])) {
    transitions.push({
      target: nodeRef,
      type: 'Warning',
      reason: 'RemediationBlocked',
      message: `${prefix}${b.kind} ${b.target} blocked by ${b.guard}: ${b.message}`,
    });
  }
  return transitions;
}
