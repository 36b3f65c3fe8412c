// PURE: the Events of the in-place remedy (limitIo), on the limited pod, with the figures: what was limited to what,
// stepped from what, lifted and why, handed on, and a limit a person lifted.
import type { WantedIoLimitSpec } from '../api/v1alpha1/index.js';
import type { IoRates, LimitDecision, LiftReason, PodLimit } from '../policy/io-limit.js';
import { podOf } from '../policy/io-limit-wish.js';
import type { Transition } from '../ports/writes.js';
import { DRY_RUN_PREFIX } from './remediation-status.js';

const MIB = 1024 * 1024;
const bytes = (perSecond: number) =>
  perSecond >= MIB ? `${(perSecond / MIB).toFixed(1)} MiB/s` : `${Math.round(perSecond / 1024)} KiB/s`;

/** A limit in words: reads and writes, bytes and operations, per second. */
export function describeRates(r: IoRates): string {
  return `read ${bytes(r.rbps)} and ${Math.round(r.riops)} ops/s, write ${bytes(r.wbps)} and ${Math.round(r.wiops)} ops/s`;
}

const LIFTED: Record<LiftReason, string> = {
  NoLongerNeeded: 'it no longer wants more than its limit (its rates under the cap, its own IO pressure low)',
  PodGone: 'the pod left the node',
  PolicyGone: 'the policy no longer limits IO (limitIo removed, or the policy paused)',
  MaxDuration: 'it reached maxLimitSeconds',
  Exempted: 'it is labelled sandbox.remediator.io/no-limit=true',
};

const podTarget = (pod: PodLimit) =>
  ({ kind: 'Pod', namespace: pod.namespace, name: pod.name, uid: pod.uid }) as const;

/** The Event of a decision on a limit; undefined for a pod held (cooldown, rate, exempt), which is no change. */
export function limitEvent(decision: LimitDecision, node: string, dryRun: boolean): Transition | undefined {
  const prefix = dryRun ? DRY_RUN_PREFIX : '';
  const on = (pod: PodLimit) => `on ${pod.device} of node ${node}`;
  switch (decision.kind) {
    case 'Set':
      return {
        target: podTarget(decision.pod),
        type: 'Warning',
        reason: 'IoLimited',
        message: `${prefix}IO limited ${on(decision.pod)} while its disk is saturated: ${describeRates(decision.pod.limit)}, from ${describeRates(decision.from)}; floor ${describeRates(decision.pod.floor)}`,
      };
    case 'Step':
      return {
        target: podTarget(decision.pod),
        type: 'Warning',
        reason: 'IoLimitStepped',
        message: `${prefix}IO limit stepped down ${on(decision.pod)}, the disk still saturated: ${describeRates(decision.pod.limit)}, from ${describeRates(decision.before)}`,
      };
    case 'Lift':
      return {
        target: podTarget(decision.pod),
        type: 'Normal',
        reason: 'IoLimitLifted',
        message: `${prefix}IO limit lifted ${on(decision.pod)}: ${LIFTED[decision.reason]}; the files get back what they held`,
      };
    case 'Exhausted':
      return {
        target: podTarget(decision.pod),
        type: 'Warning',
        reason: 'IoLimitExhausted',
        message:
          decision.why === 'StampsRefused'
            ? `${prefix}IO limit kept where it is ${on(decision.pod)}, not stepped though the disk is still saturated: the pod's stamps were refused, and a step is never asked for unstamped; the pod is handed to the next remedy the policy allows (migration, if it may move)`
            : `${prefix}IO limit at its floor ${on(decision.pod)} and the disk still saturated: the limit is kept, and the pod handed to the next remedy the policy allows (migration, if it may move)`,
      };
    case 'Held':
      return undefined;
    default:
      return unnamed(decision);
  }
}

function unnamed(decision: never): never {
  throw new Error(`no Event for limit decision ${(decision as { kind: string }).kind}`);
}

/** A limit of ours someone removed from spec.ioLimits: theirs, and the pod is left alone for the cooldown. */
export function liftedByOthersEvent(
  node: string,
  lifted: WantedIoLimitSpec,
  cooldownSeconds: number,
): Transition {
  return {
    target: { kind: 'Pod', ...podOf(lifted) },
    type: 'Normal',
    reason: 'IoLimitLiftedByOthers',
    message: `IO limit on ${lifted.device} of node ${node} removed by someone else: the agent puts the files back, and the pod is not limited again for ${cooldownSeconds}s`,
  };
}

/** Why the agent did not apply a limit: its report says so, or it never answered. */
export type NotAppliedState = 'Refused' | 'NoCgroup' | 'Failed' | 'Unreported';

const NOT_APPLIED: Record<NotAppliedState, string> = {
  Refused: "the node's agent runs without --allow-io-limits (the chart's agent.allowIoLimits)",
  NoCgroup: "the node's agent found no cgroup of the pod",
  Failed: "the node's agent could not write the pod's cgroup files (its report says why)",
  Unreported:
    "the node's agent has not reported it applied (is it running, and a version that applies limits?)",
};

/** A limit the agent did not apply: the pod is handed on to the next remedy as if exhausted. */
export function notAppliedEvent(node: string, limit: PodLimit, state: NotAppliedState): Transition {
  const why = NOT_APPLIED[state];
  return {
    target: podTarget(limit),
    type: 'Warning',
    reason: 'IoLimitNotApplied',
    message: `IO limit on ${limit.device} of node ${node} not applied: ${why}; the pod is handed to the next remedy the policy allows`,
  };
}

/**
 * A limit not set, or not stepped (`limited`: the pod has one already): the apiserver refused the pod's stamps, and no
 * limit is asked for on a pod without them.
 */
export function stampsRefusedEvent(refusal: {
  node: string;
  pod: { namespace: string; name: string; uid: string };
  why: string;
  limited: boolean;
  retrySeconds: number;
}): Transition {
  const { node, pod, why, limited, retrySeconds } = refusal;
  const refused = `the pod's stamps (annotations sandbox.remediator.io/io-limit*) were refused (${why}), and no limit is asked for on a pod without them`;
  const moved = 'moved only where the policy moves measured culprits (migrateWorkloads.by measuredIo)';
  const message = limited
    ? `IO limit on node ${node} not stepped: ${refused}; its limit stays as it is until lifted, and the pod is ${moved}`
    : `IO limit on node ${node} not set: ${refused}; the pod is left unlimited for ${retrySeconds}s, then stamped again, and ${moved}`;
  return {
    target: { kind: 'Pod', ...pod },
    type: 'Warning',
    reason: 'IoLimitNotApplied',
    message: message.slice(0, 1024),
  };
}

/** Another policy's limit on a node this policy now owns: lifted, as nothing serves it any more. */
export function otherPolicyLiftedEvent(node: string, lifted: WantedIoLimitSpec, policy: string): Transition {
  return {
    target: { kind: 'Pod', ...podOf(lifted) },
    type: 'Normal',
    reason: 'IoLimitLifted',
    message: `IO limit on ${lifted.device} of node ${node} lifted: it was policy ${lifted.policy}'s, and node ${node} is policy ${policy}'s now; the files get back what they held`,
  };
}
