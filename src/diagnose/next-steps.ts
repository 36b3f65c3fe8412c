// PURE: what the operator does next on a node and what holds it back, derived from its status, the Node's stamps and
// the owning policy, never guessed: where status does not say, the answer is Unknown. They read the conditions and
// records the operator's decisions left; the times of an undo (cooldown from the stamp, recoverySeconds) are
// estimates from those records, not policy/remediation.ts's own reckoning, and the text says so.
import type {
  Condition,
  NodeStamps,
  NodeState,
  SandboxHealthStatus,
  SandboxPolicySpec,
} from '../api/v1alpha1/index.js';
import { IO_CAUSES } from '../detection/index.js';
import type { PolicySummary } from './policy.js';
import type { Blocker, NextStep } from './schema.js';
import { formatDuration } from './time.js';

export interface NodeSituation {
  now: Date;
  found: { sandboxHealth: boolean; node: boolean };
  state: NodeState | undefined;
  status: SandboxHealthStatus | undefined;
  conditions: readonly Condition[];
  /** What the operator changed on the Node (or, in a dry run, would have). */
  stamps: NodeStamps | undefined;
  unschedulable: boolean | undefined;
  policyName: string | undefined;
  policy: PolicySummary | undefined;
  /** The owning policy's spec with defaults, when it is valid. */
  spec: SandboxPolicySpec | undefined;
}

/** IoPressureHigh reasons that mean "no verified reading": nothing is done, or undone, on them. */
const UNKNOWN_READING_REASONS = new Set([
  'ReadingUnknown',
  'SourceUnavailable',
  'SourceForbidden',
  'ClockSkew',
]);

const find = (s: NodeSituation, type: string) => s.conditions.find((c) => c.type === type);
const plus = (time: string | Date, seconds: number) => new Date(new Date(time).getTime() + seconds * 1000);
const later = (a: Date, b: Date) => (a.getTime() >= b.getTime() ? a : b);
const seconds = (name: string, value: number | undefined) =>
  value === undefined ? name : `${name} (${formatDuration(value)})`;

/** Pods stuck from an IO cause: `all` of them, and those no guard holds in status.blocked (`evictable`). */
function ioStuck(status: SandboxHealthStatus | undefined): { all: number; evictable: number } {
  const pods = (status?.stuckPods ?? []).filter((p) => (IO_CAUSES as ReadonlySet<string>).has(p.cause));
  const held = new Set((status?.blocked ?? []).map((b) => b.target));
  return {
    all: pods.length,
    evictable: pods.filter((p) => !held.has(`pod/${p.namespace}/${p.name}`)).length,
  };
}

/** What the operator does next, in order. */
export function deriveNextSteps(s: NodeSituation): NextStep[] {
  if (!s.found.sandboxHealth) {
    return [
      {
        action: 'Unknown',
        text: s.stamps
          ? `no SandboxHealth, though the Node carries the stamps of policy ${s.stamps.policy}: the operator writes one when it runs and a policy selects the node`
          : 'no SandboxHealth: no SandboxPolicy selects this node, or the operator is not running',
      },
    ];
  }
  if (!s.policyName)
    return [
      { action: 'Unknown', text: 'status names no owning policy: the operator has not judged this node yet' },
    ];
  if (s.policy && !s.policy.found)
    return [
      {
        action: 'Unknown',
        text: `the owning policy ${s.policyName} does not exist: status does not say what becomes of this node`,
      },
    ];
  if (s.policy?.valid === false)
    return [{ action: 'Nothing', text: `nothing until policy ${s.policyName} is valid (see blocking)` }];
  if (s.policy?.paused)
    return [{ action: 'Nothing', text: 'nothing new, and nothing undone, while spec.safety.paused is true' }];
  const steps = stepsForState(s);
  const dry = s.policy?.dryRun ? 'dry run, changes nothing: ' : '';
  return steps.map((step) =>
    dry && step.action !== 'Nothing' && step.action !== 'Unknown' && step.action !== 'Wait'
      ? { ...step, text: `${dry}${step.text}` }
      : step,
  );
}

function stepsForState(s: NodeSituation): NextStep[] {
  const spec = s.spec;
  const high = find(s, 'IoPressureHigh');
  const stuck = ioStuck(s.status);
  if (s.stamps) return undoOrHold(s, high, stuck);
  switch (s.state) {
    case 'Healthy':
      return [
        { action: 'Nothing', text: 'nothing: no pod is stuck and nothing of the operator is on the node' },
      ];
    case 'Degraded':
      return waitForEvidence(s, high);
    case 'IoPressure':
      return remediate(s, stuck);
    case 'Recovering':
      return [
        {
          action: 'Nothing',
          text: `nothing to undo here; IoPressureHigh clears after ${seconds('recoverySeconds', spec?.ioPressure.recoverySeconds)} under every threshold`,
        },
      ];
    default:
      return [{ action: 'Unknown', text: `status does not say (state ${s.state ?? 'unset'})` }];
  }
}

/** Degraded, IO not proven: what it waits for, from the Cordoned and IoPressureHigh conditions. */
function waitForEvidence(s: NodeSituation, high: Condition | undefined): NextStep[] {
  const cordoned = find(s, 'Cordoned');
  if (cordoned?.reason === 'NotIoCaused' || s.status?.ioEvidence === 'NotIo')
    return [
      {
        action: 'Nothing',
        text: 'nothing: the failures do not point at disk IO (network, image or runtime configuration)',
      },
    ];
  if (s.status?.ioEvidence === 'Inconclusive')
    return [{ action: 'Wait', text: 'waits for the failure messages to say why the pods are stuck' }];
  if (s.spec && !s.spec.remediation.requireIoPressure) return remediate(s, ioStuck(s.status));
  const sustain = s.spec?.ioPressure.sustainSeconds;
  const tracking = s.status?.ioPressure;
  const step: NextStep = {
    action: 'Wait',
    text: `waits for IO evidence: cordons when IoPressureHigh holds ${seconds('sustainSeconds', sustain)}; IoPressureHigh is ${high?.status ?? 'not set'}${high ? ` (${high.reason})` : ''}`,
  };
  if (high?.reason === 'ThresholdNotSustained' && tracking?.observation === 'Over' && sustain !== undefined)
    step.notBefore = plus(tracking.since, sustain).toISOString();
  return [step];
}

/** Triggered and not yet acted on: the fence, then the evictions. */
function remediate(s: NodeSituation, stuck: { evictable: number }): NextStep[] {
  const remediation = s.spec?.remediation;
  if (!remediation)
    return [{ action: 'Unknown', text: 'acts on the node, but the policy spec cannot be read to say how' }];
  const steps: NextStep[] = [];
  if (remediation.cordon) steps.push({ action: 'Cordon', text: 'cordons the node' });
  if (remediation.taint)
    steps.push({
      action: 'Taint',
      text: `taints it ${remediation.taint.key}=${remediation.taint.value}:${remediation.taint.effect}`,
    });
  if (remediation.evictStuckPods && stuck.evictable > 0)
    steps.push({
      action: 'Evict',
      text: `${steps.length > 0 ? 'then ' : ''}evicts its ${stuck.evictable} stuck pod(s), once the fence is seen (maxEvictionsPerMinute ${s.spec?.safety.maxEvictionsPerMinute ?? '?'})`,
    });
  if (steps.length === 0) steps.push({ action: 'Nothing', text: 'nothing: the policy allows no action' });
  if (s.status?.blocked?.length)
    steps.unshift({ action: 'Wait', text: 'held by a guard first (see blocking)' });
  return steps;
}

/** Ours already: evict what is left, hold while saturated, undo after recovery and cooldown. */
function undoOrHold(
  s: NodeSituation,
  high: Condition | undefined,
  stuck: { all: number; evictable: number },
): NextStep[] {
  const stamps = s.stamps as NodeStamps;
  const spec = s.spec;
  const undo: NextStep['action'] = stamps.cordoned ? 'Uncordon' : 'Untaint';
  const undoText = stamps.cordoned
    ? `uncordons the node${stamps.taint ? ' and removes its taint' : ''}`
    : 'removes its taint';
  const cooldownEnds = spec ? plus(stamps.since, spec.safety.cooldownSeconds) : undefined;
  const keep: NextStep[] = [
    {
      action: 'Nothing',
      text: 'leaves the node as it is on recovery: spec.remediation.undoOnRecovery is false',
    },
  ];
  if (high === undefined) return [{ action: 'Unknown', text: 'status has no IoPressureHigh condition' }];
  if (high.status === 'True' && UNKNOWN_READING_REASONS.has(high.reason))
    return [
      {
        action: 'Wait',
        text: `keeps the node as it is: IO readings are unknown (${high.reason}), and nothing is undone on unknown readings`,
      },
    ];
  if (high.status === 'True' && high.reason === 'RecoveryPending') {
    if (spec && !spec.remediation.undoOnRecovery) return keep;
    const recovery = spec?.ioPressure.recoverySeconds;
    const tracking = s.status?.ioPressure;
    const recovered =
      recovery !== undefined && tracking?.observation === 'Under'
        ? plus(tracking.since, recovery)
        : undefined;
    const step: NextStep = {
      action: undo,
      text: `${undoText} once readings stay under every threshold for ${seconds('recoverySeconds', recovery)}, no pod is stuck from IO, and ${seconds('cooldownSeconds', spec?.safety.cooldownSeconds)} since it acted have passed`,
    };
    const earliest = recovered && cooldownEnds ? later(recovered, cooldownEnds) : undefined;
    if (earliest) step.notBefore = earliest.toISOString();
    return [step];
  }
  if (high.status === 'True') {
    const steps: NextStep[] = [];
    if (spec?.remediation.evictStuckPods && stuck.evictable > 0)
      steps.push({
        action: 'Evict',
        text: `evicts the ${stuck.evictable} pod(s) still stuck on the node${stuck.all > stuck.evictable ? ` (${stuck.all - stuck.evictable} more held by a guard)` : ''}`,
      });
    steps.push({
      action: 'Wait',
      text: `keeps the node ${stamps.cordoned ? 'cordoned' : 'tainted'} while IoPressureHigh holds; undoes it after ${seconds('recoverySeconds', spec?.ioPressure.recoverySeconds)} under every threshold`,
    });
    return steps;
  }
  if (stuck.all > 0)
    return [
      {
        action: 'Wait',
        text: `keeps the node ${stamps.cordoned ? 'cordoned' : 'tainted'} until no pod is stuck from IO (${stuck.all} still are)`,
      },
    ];
  if (spec && !spec.remediation.undoOnRecovery) return keep;
  const step: NextStep = {
    action: undo,
    text: `${undoText}: IO pressure is gone${cooldownEnds ? `, after cooldownSeconds (${formatDuration(spec?.safety.cooldownSeconds ?? 0)}) since it acted` : ''}`,
  };
  if (cooldownEnds) step.notBefore = later(cooldownEnds, s.now).toISOString();
  return [step];
}

/** What holds the operator back: the policy, the guards in status.blocked, and conditions that say why not. */
export function deriveBlockers(s: NodeSituation): Blocker[] {
  const blockers: Blocker[] = [];
  const policy = s.policy;
  if (s.found.sandboxHealth && !s.policyName)
    blockers.push({ source: 'Policy', name: 'NoPolicy', message: 'status names no owning SandboxPolicy' });
  if (policy && !policy.found)
    blockers.push({
      source: 'Policy',
      name: 'PolicyMissing',
      message: `SandboxPolicy ${policy.name} does not exist`,
    });
  if (policy?.valid === false)
    for (const problem of policy.problems)
      blockers.push({
        source: 'Policy',
        name: 'InvalidSpec',
        message: `SandboxPolicy ${policy.name} ${problem.field}: ${problem.message}`,
      });
  if (policy?.paused)
    blockers.push({
      source: 'Policy',
      name: 'Paused',
      message: `SandboxPolicy ${policy.name} spec.safety.paused: detects and reports, acts on nothing, undoes nothing`,
    });
  if (policy?.dryRun)
    blockers.push({
      source: 'Policy',
      name: 'DryRun',
      message: `SandboxPolicy ${policy.name} acts in a dry run (spec.safety.dryRun or the operator's --dry-run): nothing is changed`,
    });
  if (policy?.stormDetected)
    blockers.push({
      source: 'Policy',
      name: 'StormLimitReached',
      message: `SandboxPolicy ${policy.name}: too many unhealthy nodes (maxUnhealthyNodes); nothing new is started`,
    });
  for (const b of s.status?.blocked ?? [])
    blockers.push({
      source: 'Guard',
      name: b.guard,
      message: `${b.kind} ${b.target}: ${b.message}`,
      since: b.since,
    });
  const cordoned = find(s, 'Cordoned');
  if (cordoned?.status === 'False' && cordoned.reason !== 'NotCordoned')
    blockers.push(conditionBlocker(cordoned));
  const high = find(s, 'IoPressureHigh');
  const degraded = find(s, 'SandboxCreationDegraded')?.status === 'True';
  if (
    high &&
    ((degraded && high.status !== 'True') || (s.stamps && UNKNOWN_READING_REASONS.has(high.reason)))
  )
    blockers.push(conditionBlocker(high));
  return blockers;
}

const conditionBlocker = (c: Condition): Blocker => ({
  source: 'Condition',
  name: c.reason,
  message: `${c.type}=${c.status}: ${c.message}`,
  since: c.lastTransitionTime,
});
