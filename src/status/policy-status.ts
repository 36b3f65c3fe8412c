import { MAX_LISTED_OVERLAPS, type PolicyProblem, type SandboxPolicyStatus } from '../api/v1alpha1/index.js';
import { mergeConditions, type ConditionInput } from './conditions.js';

export interface PolicyStatusInput {
  generation: number;
  previous: SandboxPolicyStatus | undefined;
  now: Date;
}

/** Status of a policy that failed validation: Valid=False with every problem, nothing else claimed. Pure. */
export function invalidPolicyStatus(
  input: PolicyStatusInput,
  problems: readonly PolicyProblem[],
): SandboxPolicyStatus {
  const summary = problems.map((p) => `${p.field}: ${p.message}`).join('; ');
  return {
    observedGeneration: input.generation,
    conditions: mergeConditions(
      input.previous?.conditions,
      [
        {
          type: 'Valid',
          status: 'False',
          reason: 'InvalidSpec',
          message: `${problems.length} problem(s): ${summary}`,
        },
        {
          type: 'Active',
          status: 'False',
          reason: 'InvalidSpec',
          message: 'Nothing is done for an invalid policy.',
        },
      ],
      input.now,
      input.generation,
    ),
    problems: [...problems],
    matchedNodes: 0,
    degradedNodes: 0,
    remediatingNodes: 0,
    overlappingNodes: [],
    overlappingNodeCount: 0,
  };
}

export interface ValidPolicyCounts {
  matchedNodes: number;
  degradedNodes: number;
  remediatingNodes: number;
  overlappingNodes: { node: string; ownedBy: string }[];
  paused: boolean;
  dryRun: boolean;
  /** Absent when no decision was made in this pass: the stored condition is kept. */
  storm?: { detected: boolean; unhealthy: number; limit: number } | undefined;
  actionCount: number;
  blockedActionCount: number;
  recentEvictions: string[];
  throttledRollouts: NonNullable<SandboxPolicyStatus['throttledRollouts']>;
  gatedPods: number;
  recentGateReleases: string[];
}

function stormCondition(
  storm: ValidPolicyCounts['storm'],
  previous: SandboxPolicyStatus | undefined,
): ConditionInput {
  const stored = previous?.conditions?.find((c) => c.type === 'StormDetected');
  if (!storm)
    return (
      stored ?? {
        type: 'StormDetected',
        status: 'Unknown',
        reason: 'NotEvaluated',
        message: 'Not evaluated yet.',
      }
    );
  return storm.detected
    ? {
        type: 'StormDetected',
        status: 'True',
        reason: 'StormLimitReached',
        message: `${storm.unhealthy} unhealthy node(s) exceed maxUnhealthyNodes (${storm.limit}): no new cordons or evictions.`,
      }
    : {
        type: 'StormDetected',
        status: 'False',
        reason: 'WithinLimit',
        message: `${storm.unhealthy} unhealthy node(s), within maxUnhealthyNodes (${storm.limit}).`,
      };
}

export function validPolicyStatus(input: PolicyStatusInput, counts: ValidPolicyCounts): SandboxPolicyStatus {
  const active = counts.paused
    ? {
        type: 'Active',
        status: 'False' as const,
        reason: 'Paused',
        message: 'spec.safety.paused: detecting and reporting only.',
      }
    : {
        type: 'Active',
        status: 'True' as const,
        reason: counts.dryRun ? 'DryRun' : 'Watching',
        message: `Watching ${counts.matchedNodes} node(s)${counts.dryRun ? '; actions are dry runs' : ''}.`,
      };
  return {
    observedGeneration: input.generation,
    conditions: mergeConditions(
      input.previous?.conditions,
      [
        { type: 'Valid', status: 'True', reason: 'SpecValid', message: 'The spec is valid.' },
        active,
        stormCondition(counts.storm, input.previous),
      ],
      input.now,
      input.generation,
    ),
    problems: [],
    matchedNodes: counts.matchedNodes,
    degradedNodes: counts.degradedNodes,
    remediatingNodes: counts.remediatingNodes,
    overlappingNodes: counts.overlappingNodes.slice(0, MAX_LISTED_OVERLAPS),
    overlappingNodeCount: counts.overlappingNodes.length,
    actionCount: counts.actionCount,
    blockedActionCount: counts.blockedActionCount,
    recentEvictions: counts.recentEvictions,
    throttledRollouts: counts.throttledRollouts.slice(0, MAX_LISTED_OVERLAPS),
    throttledRolloutCount: counts.throttledRollouts.length,
    gatedPods: counts.gatedPods,
    recentGateReleases: counts.recentGateReleases,
  };
}
