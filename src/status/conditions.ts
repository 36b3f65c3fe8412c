import type { Condition, ConditionStatus } from '../api/v1alpha1/index.js';

export interface ConditionInput {
  type: string;
  status: ConditionStatus;
  reason: string;
  message: string;
}

/**
 * Builds the condition list from the desired conditions, keeping lastTransitionTime from the previous list
 * when a condition's status did not change (Kubernetes API conventions).
 */
export function mergeConditions(
  previous: readonly Condition[] | undefined,
  desired: readonly ConditionInput[],
  now: Date,
  observedGeneration?: number,
): Condition[] {
  return desired.map((input) => {
    const old = previous?.find((c) => c.type === input.type);
    const condition: Condition = {
      ...input,
      lastTransitionTime: old && old.status === input.status ? old.lastTransitionTime : now.toISOString(),
    };
    if (observedGeneration !== undefined) condition.observedGeneration = observedGeneration;
    return condition;
  });
}

export function conditionStatus(
  conditions: readonly Condition[] | undefined,
  type: string,
): ConditionStatus | undefined {
  return conditions?.find((c) => c.type === type)?.status;
}
