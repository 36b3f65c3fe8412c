// PURE: one node's diagnosis from what was read: the checklist an SRE runs by hand for this incident.
import {
  parseTaint,
  type Condition,
  type IoReadingStatus,
  type NodeStamps,
  type SandboxHealthStatus,
  type SandboxPolicySpec,
} from '../api/v1alpha1/index.js';
import { assessRuntimeVersion, classifyFailureMessage } from '../detection/index.js';
import { evictedPod } from '../policy/actions.js';
import { consumerName } from '../policy/io-cause.js';
import { limitKey, readBack } from '../policy/io-limit-wish.js';
import { judgeReading, readingTime, staleAfterFor } from '../policy/io-pressure.js';
import type { NodeDiagnosisInput } from './inputs.js';
import { deriveBlockers, deriveNextSteps, type NodeSituation } from './next-steps.js';
import { summarisePolicy } from './policy.js';
import type { DiagnosedStuckPod, NodeDiagnosis } from './schema.js';
import { ageSeconds, formatAgo } from './time.js';

/** Gated pods listed by name; the count has them all. */
export const MAX_LISTED_GATED_PODS = 10;

export function diagnoseNode(input: NodeDiagnosisInput): NodeDiagnosis {
  const { now } = input;
  const status = input.health?.status;
  const conditions = status?.conditions ?? [];
  const condition = (type: string) => conditions.find((c) => c.type === type);
  // The Node's annotations are the truth about what the operator changed; status mirrors them, and holds what a dry
  // run would have stamped.
  const realStamps = input.node?.view.stamps;
  const stamps =
    realStamps ?? (status?.remediation?.dryRun === true || !input.node ? stampsOfRecord(status) : undefined);
  const policyName = status?.policy ?? stamps?.policy;
  const policy = policyName ? summarisePolicy(policyName, input.policy) : undefined;

  const diagnosis: NodeDiagnosis = {
    kind: 'NodeDiagnosis',
    node: input.nodeName,
    generatedAt: now.toISOString(),
    found: { sandboxHealth: input.health !== undefined, node: input.node !== undefined },
    summary: '',
    stuckPods: {
      count: status?.stuckPodCount ?? 0,
      listed: (status?.stuckPods ?? []).map((pod) => stuckPod(pod, input)),
      causes: status?.causes ?? [],
    },
    io: ioEvidence(status, input.health?.readingWrittenTime, policy?.spec, now),
    nodeEvidence: {
      dStateTasks: [...(status?.ioReading?.dStateTasks ?? [])].sort(
        (a, b) => Number(b.runtime) - Number(a.runtime),
      ),
    },
    ioLimits: ioLimitsOf(input.health),
    done: {
      cordonedByOperator: realStamps?.cordoned === true,
      stamps: { ...input.node?.annotations },
      actions: (status?.actions ?? []).map((a) => ({ ...a, ageSeconds: ageSeconds(a.time, now) })),
      nodeEvents: [...input.nodeEvents]
        .sort((a, b) => b.lastTime.getTime() - a.lastTime.getTime())
        .map((e) => ({
          type: e.type,
          reason: e.reason,
          message: e.message,
          count: e.count,
          lastTime: e.lastTime.toISOString(),
          ageSeconds: ageSeconds(e.lastTime, now),
        })),
      heldRollouts: heldRollouts(input, policyName),
      gatedPods: gatedPods(input, policyName),
      conditions,
    },
    next: [],
    blocking: [],
    unavailable: [...input.unavailable],
  };
  if (status?.state) diagnosis.state = status.state;
  if (status?.ioCause) diagnosis.ioCause = status.ioCause;
  if (policy) diagnosis.policy = policy.summary;
  if (status?.ioEvidence) diagnosis.stuckPods.ioEvidence = status.ioEvidence;
  const degraded = condition('SandboxCreationDegraded');
  if (degraded) diagnosis.stuckPods.degraded = degraded;
  const kworker = status?.ioReading?.kworkerCpuPercent;
  if (kworker !== undefined) diagnosis.nodeEvidence.kworkerCpuPercent = kworker;
  const runtime = runtimeOf(input, status);
  if (runtime) diagnosis.runtime = runtime;
  if (input.node) diagnosis.done.unschedulable = input.node.view.unschedulable;
  if (status?.remediation) diagnosis.done.remediation = status.remediation;
  if (status?.lastAction) diagnosis.done.lastAction = status.lastAction;

  const situation: NodeSituation = {
    now,
    found: diagnosis.found,
    state: status?.state,
    status,
    conditions,
    stamps,
    unschedulable: input.node?.view.unschedulable,
    policyName,
    policy: policy?.summary,
    spec: policy?.spec,
  };
  diagnosis.next = deriveNextSteps(situation);
  diagnosis.blocking = deriveBlockers(situation);
  diagnosis.summary = summarise(diagnosis, stamps);
  return diagnosis;
}

/** The stamps status mirrors: what a dry run would have stamped, or what a Node no longer there carried. */
function stampsOfRecord(status: SandboxHealthStatus | undefined): NodeStamps | undefined {
  const record = status?.remediation;
  if (!record) return undefined;
  const since = new Date(record.since);
  const stamps: NodeStamps = {
    policy: record.policy,
    since: Number.isNaN(since.getTime()) ? new Date(0) : since,
    reason: record.reason,
    cordoned: record.cordoned,
  };
  const taint = record.taint ? parseTaint(record.taint) : undefined;
  if (taint) stamps.taint = taint;
  return stamps;
}

function stuckPod(
  pod: NonNullable<SandboxHealthStatus['stuckPods']>[number],
  input: NodeDiagnosisInput,
): DiagnosedStuckPod {
  const { now } = input;
  const result: DiagnosedStuckPod = {
    namespace: pod.namespace,
    name: pod.name,
    uid: pod.uid,
    waitingReason: pod.waitingReason,
    waitingSince: pod.waitingSince,
    waitingSeconds: ageSeconds(pod.waitingSince, now),
    cause: pod.cause,
    failureCount: pod.failureCount,
  };
  if (pod.causeSince) result.causeSince = pod.causeSince;
  if (pod.runtime) result.runtime = pod.runtime;
  if (pod.lastMessage !== undefined) result.lastMessage = pod.lastMessage;
  const event = input.failureEvents.get(pod.uid);
  const message = pod.lastMessage ?? event?.message;
  if (message !== undefined) {
    const classified = classifyFailureMessage(message);
    if (classified.cause === 'NameReserved' && classified.name) result.reservedName = classified.name.raw;
    const holder = pod.reservedFor ?? classified.reservedFor;
    if (classified.cause === 'NameReserved' && holder) result.reservedFor = holder;
  }
  if (!result.reservedFor && pod.reservedFor) result.reservedFor = pod.reservedFor;
  if (event) {
    result.latestEvent = {
      count: event.count,
      lastTime: event.lastTime.toISOString(),
      ageSeconds: ageSeconds(event.lastTime, now),
      message: event.message,
    };
  }
  return result;
}

function ioEvidence(
  status: SandboxHealthStatus | undefined,
  writtenTime: string | undefined,
  spec: SandboxPolicySpec | undefined,
  now: Date,
): NodeDiagnosis['io'] {
  const io: NodeDiagnosis['io'] = {};
  const reading = status?.ioReading;
  const limited = (status?.ioLimits?.applied?.length ?? 0) > 0;
  if (reading) io.reading = readingEvidence(reading, writtenTime, spec, now, limited);
  const tracking = status?.ioPressure;
  if (tracking) {
    io.pressure = {
      observation: tracking.observation,
      since: tracking.since,
      sinceSeconds: ageSeconds(tracking.since, now),
    };
    if (tracking.exceeded) io.pressure.exceeded = tracking.exceeded;
  }
  const high = status?.conditions?.find((c) => c.type === 'IoPressureHigh');
  if (high) io.condition = high;
  return io;
}

/**
 * A reading's age, from the earlier of its own time and when the apiserver took it (readingTime): an agent whose
 * clock is ahead cannot make its reading look newer than it is.
 */
export function readingAgeSeconds(
  reading: IoReadingStatus,
  writtenTime: string | undefined,
  now: Date,
): number {
  return ageSeconds(new Date(readingTime(writtenTime ? { ...reading, writtenTime } : reading)), now);
}

function readingEvidence(
  reading: IoReadingStatus,
  writtenTime: string | undefined,
  spec: SandboxPolicySpec | undefined,
  now: Date,
  limited: boolean,
): NonNullable<NodeDiagnosis['io']['reading']> {
  const timed = writtenTime ? { ...reading, writtenTime } : reading;
  const evidence: NonNullable<NodeDiagnosis['io']['reading']> = {
    source: reading.source,
    observedTime: reading.observedTime,
    ageSeconds: readingAgeSeconds(reading, writtenTime, now),
    devices: reading.devices ?? [],
    over: [],
  };
  for (const key of [
    'psiSomeAvg10Percent',
    'psiSomeAvg60Percent',
    'psiFullAvg10Percent',
    'diskBusyPercent',
    'blockedProcesses',
  ] as const) {
    const value = reading[key];
    if (value !== undefined) evidence[key] = value;
  }
  if (reading.conditionTrue !== undefined) evidence.conditionTrue = reading.conditionTrue;
  if (spec) {
    const staleAfter = staleAfterFor(reading, spec.ioPressure.staleAfterSeconds);
    evidence.staleAfterSeconds = Math.round(staleAfter);
    evidence.stale = evidence.ageSeconds > staleAfter;
    evidence.thresholds = { ...spec.ioPressure.thresholds };
    const judgement = judgeReading(
      timed,
      spec.ioPressure.thresholds,
      now,
      spec.ioPressure.staleAfterSeconds,
      limited,
    );
    if (judgement.observation === 'Over') evidence.over = judgement.details;
  }
  return evidence;
}

function runtimeOf(
  input: NodeDiagnosisInput,
  status: SandboxHealthStatus | undefined,
): NodeDiagnosis['runtime'] {
  if (status?.runtime) return { ...status.runtime, from: 'status' };
  const version = input.node?.view.runtimeVersion;
  return version ? { ...assessRuntimeVersion(version), from: 'node' } : undefined;
}

function heldRollouts(input: NodeDiagnosisInput, policyName: string | undefined) {
  const throttled = input.policy?.status?.throttledRollouts ?? [];
  const feeding = new Set(
    throttled
      .filter((t) => t.feeds?.includes(input.nodeName))
      .map((t) => `${t.kind ?? 'Deployment'}/${t.name ?? t.deployment ?? ''}`),
  );
  return input.heldRollouts
    .flatMap((d) => (d.stamps && (!policyName || d.stamps.policy === policyName) ? [{ d, s: d.stamps }] : []))
    .sort((a, b) => a.s.since.getTime() - b.s.since.getTime())
    .map(({ d, s }) => ({
      kind: d.kind,
      namespace: d.namespace,
      name: d.name,
      policy: s.policy,
      reason: s.reason,
      since: s.since.toISOString(),
      sinceSeconds: ageSeconds(s.since, input.now),
      feedsThisNode: feeding.has(`${d.kind}/${d.namespace}/${d.name}`),
    }));
}

function gatedPods(input: NodeDiagnosisInput, policyName: string | undefined) {
  const ours = input.gatedPods
    .filter((p) => !policyName || p.policy === undefined || p.policy === policyName)
    .sort((a, b) => a.gatedAt.getTime() - b.gatedAt.getTime());
  return {
    count: ours.length,
    oldest: ours.slice(0, MAX_LISTED_GATED_PODS).map((p) => ({
      namespace: p.namespace,
      name: p.name,
      ...(p.policy ? { policy: p.policy } : {}),
      since: p.gatedAt.toISOString(),
      sinceSeconds: ageSeconds(p.gatedAt, input.now),
    })),
  };
}

const isTrue = (c: Condition | undefined) => c?.status === 'True';

/** The headline: state, stuck pods, IO evidence, what was done. */
function summarise(d: NodeDiagnosis, stamps: NodeStamps | undefined): string {
  if (!d.found.sandboxHealth && !d.found.node) return `${d.node}: no such node and no SandboxHealth`;
  const parts: string[] = [];
  if (!d.found.sandboxHealth)
    parts.push('no SandboxHealth (no policy selects the node, or the operator is not running)');
  else parts.push(d.state ?? 'Unknown');
  if (d.stuckPods.count > 0) {
    const causes = d.stuckPods.causes.map((c) => `${c.cause} ${c.count}`).join(', ');
    parts.push(`${d.stuckPods.count} pod(s) stuck${causes ? ` (${causes})` : ''}`);
  } else if (d.found.sandboxHealth) parts.push('no pod stuck');
  const reading = d.io.reading;
  const source = reading ? `${reading.source}, ${formatAgo(reading.ageSeconds)}` : 'no reading';
  const high = d.io.condition;
  if (isTrue(high) && high?.reason === 'ThresholdSustained') parts.push(`IO pressure proven (${source})`);
  else if (isTrue(high)) parts.push(`IO pressure held high: ${high?.reason ?? ''} (${source})`);
  else if (d.found.sandboxHealth) parts.push(`IO pressure not proven (${source})`);
  // Under cause Pod, the pod with the largest share (the operator's culprit, whatever role the agent gave it).
  const culprit = [...(d.ioCause?.consumers ?? [])]
    .filter((c) => c.kind === 'Pod' && c.role !== 'Victim')
    .sort((a, b) => (b.sharePercent ?? 0) - (a.sharePercent ?? 0))[0];
  if (d.ioCause?.cause === 'Pod' && culprit?.sharePercent !== undefined)
    parts.push(`culprit ${consumerName(culprit)} (${Math.round(culprit.sharePercent)}% of the IO)`);
  else if (d.ioCause?.cause === 'Runtime') parts.push("the container runtime's own IO");
  const dry = d.done.remediation?.dryRun ? ' (dry run)' : '';
  if (stamps?.cordoned) parts.push(`cordoned by policy ${stamps.policy}${dry}`);
  else if (stamps?.taint) parts.push(`tainted by policy ${stamps.policy}${dry}`);
  else if (d.done.unschedulable) parts.push('cordoned by someone else');
  const evicted = d.done.actions.filter((a) => evictedPod(a.kind, a.outcome)).length;
  if (evicted > 0) parts.push(`${evicted} pod(s) evicted`);
  return `${d.node}: ${parts.join('; ')}`;
}

/** The IO limits wanted on the node's pods, each with what its agent's report says of it. */
function ioLimitsOf(health: NodeDiagnosisInput['health']): NodeDiagnosis['ioLimits'] {
  const wish = health?.ioLimits ?? [];
  return wish.map((w) => {
    const back = readBack([w], health?.status?.ioLimits, w.policy);
    return {
      pod: w.pod,
      device: w.device,
      limit: w.limit,
      state: back.states.get(limitKey(w)) ?? 'Pending',
      since: w.since,
      exhausted: w.exhausted === true,
      policy: w.policy,
    };
  });
}
