// `sandbox-remediator cleanup`'s last step: the IO-limit stamps (limitIo) taken off the pods that carry them, once no
// limit of ours is in force on them. It runs after the rest, on a fresh read of the SandboxHealths: a node whose agent
// has not reported its limits lifted keeps its SandboxHealth, and its pods keep their stamps, which say so.
import type { Actuator } from '../actuation/actuator.js';
import { IO_LIMIT_UNSTAMPED } from '../api/v1alpha1/index.js';
import type { HealthLeftover, LeftAlone } from './plan.js';
import type { CleanupOutcome } from './run.js';

/** A pod that carries our IO-limit stamps (for its own uid), as listed. */
export interface StampedPodView {
  namespace: string;
  name: string;
  uid: string;
  nodeName?: string;
  /** The stamps' policy and limit, as written. */
  policy: string;
  limit: string;
}

export interface UnstampPlan {
  unstamp: StampedPodView[];
  leftAlone: LeftAlone[];
}

/**
 * Each stamped pod's stamps go, unless its node's SandboxHealth still wants or holds a limit on it (the agent has not
 * lifted it), or holds what does not parse. A dry run reads the SandboxHealths as the rest of the cleanup would leave
 * them: pass none.
 */
export function planUnstamp(
  pods: readonly StampedPodView[],
  healths: readonly HealthLeftover[],
): UnstampPlan {
  const byNode = new Map(healths.map((h) => [h.nodeName ?? h.name, h]));
  const plan: UnstampPlan = { unstamp: [], leftAlone: [] };
  for (const pod of pods) {
    const health = pod.nodeName ? byNode.get(pod.nodeName) : undefined;
    const held =
      health?.unreadableLimits === true ||
      (health?.ioLimits ?? []).some((e) => e.podUid === pod.uid) ||
      (health?.applied ?? []).some((a) => a.podUid === pod.uid);
    if (held && health)
      plan.leftAlone.push({
        target: `pod/${pod.namespace}/${pod.name}`,
        why: `kept its IO-limit stamps (${pod.limit}): sandboxhealth/${health.name} still holds its limit, not reported lifted by the node's agent`,
      });
    else plan.unstamp.push(pod);
  }
  return plan;
}

/** Takes the stamps off, one line for each pod; a failed write does not stop the rest. */
export async function runUnstamp(
  plan: UnstampPlan,
  deps: {
    writer: Pick<Actuator, 'dryRun' | 'stampPod'>;
    out: { write(text: string): unknown };
    describeError(err: unknown): string;
  },
): Promise<CleanupOutcome> {
  const outcome: CleanupOutcome = { done: 0, failed: 0, leftAlone: 0 };
  const verb = deps.writer.dryRun ? 'Would unstamp' : 'Unstamped';
  for (const pod of plan.unstamp) {
    const target = `pod/${pod.namespace}/${pod.name}`;
    try {
      if (await deps.writer.stampPod(pod, IO_LIMIT_UNSTAMPED)) {
        outcome.done++;
        deps.out.write(`${verb} ${target}: IO-limit stamps of policy ${pod.policy} (${pod.limit}) removed\n`);
      } else deps.out.write(`Skipped ${target}: gone meanwhile\n`);
    } catch (err) {
      outcome.failed++;
      deps.out.write(`Failed ${target}: ${deps.describeError(err)}\n`);
    }
  }
  for (const l of plan.leftAlone) {
    outcome.leftAlone++;
    deps.out.write(`Left alone ${l.target}: ${l.why}\n`);
  }
  return outcome;
}
