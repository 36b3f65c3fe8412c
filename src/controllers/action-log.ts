import type { ActionKind } from '../api/v1alpha1/index.js';
import type { Logger } from '../observability/log.js';
import { isStampDrop } from '../policy/actions.js';
import type { RolloutAction } from '../policy/rollouts.js';
import { ACTION_WORDS, ROLLOUT_WORDS, type ActionResult } from '../status/remediation-status.js';

export type ActionOutcome = 'Succeeded' | 'Failed';

/** What the operator's own metrics hear of its actions (the Manager counts them). */
export interface ActionHooks {
  onAction?(kind: ActionKind | RolloutAction['kind'], outcome: ActionOutcome, dryRun: boolean): void;
}

/**
 * The log line and the count of each action carried out, alike for a real run and a dry run (which says so): the one
 * place that words them. Letting go of a stamp someone else reverted is logged, not counted: it is not our action.
 */
export class ActionLog {
  constructor(
    private readonly logger: Logger,
    private readonly hooks: ActionHooks = {},
  ) {}

  /** A node or pod action's result. */
  record(policy: string, result: ActionResult, dryRun: boolean): void {
    const { action } = result;
    const fields = {
      policy,
      node: action.node,
      target: action.target,
      reason: action.reason,
      dryRun,
      ...(result.detail ? { error: result.detail } : {}),
    };
    if (isStampDrop(action)) {
      this.logger.info('Dropped our stamp: changed by someone else', fields);
      return;
    }
    if (result.outcome === 'Succeeded')
      this.logger.info(done(ACTION_WORDS[action.kind].done, dryRun), fields);
    else this.logger.warn(`Failed to ${action.kind.toLowerCase()}`, fields);
    this.hooks.onAction?.(action.kind, result.outcome, dryRun);
  }

  /** A rollout held, released or let go of. */
  recordRollout(policy: string, action: RolloutAction, dryRun: boolean): void {
    const fields = { policy, rollout: action.target, reason: action.reason, dryRun };
    if (action.kind === 'ReleaseRollout') {
      this.logger.info(ROLLOUT_WORDS.ReleaseRollout.done, fields);
      return;
    }
    this.logger.info(done(ROLLOUT_WORDS[action.kind].done, dryRun), fields);
    this.hooks.onAction?.(action.kind, 'Succeeded', dryRun);
  }
}

const done = (words: string, dryRun: boolean) => `${words}${dryRun ? ' (dry run)' : ''}`;
