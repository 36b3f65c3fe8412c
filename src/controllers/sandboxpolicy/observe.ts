// PURE: turns what the cache and this pass's detection say about a node into the facts decideRemediation reads.
import {
  CONTROL_PLANE_LABEL,
  parseTaint,
  type ActionRecord,
  type NodeStamps,
  type SandboxHealthStatus,
} from '../../api/v1alpha1/index.js';
import { isIoCause, type NodeFindings, type NodeView, type PodView } from '../../detection/index.js';
import type { IoCauseDecision } from '../../policy/io-cause.js';
import type { IoPressureDecision } from '../../policy/io-pressure.js';
import type { MeasuredPod } from '../../detection/index.js';
import { isNoMigrate } from './culprits.js';
import { evictedPod, fenceStepOf, isFrozenByDryRun, isStampDrop, migratedPod } from '../../policy/actions.js';
import type { CandidatePod, IoState, NodeFacts } from '../../policy/node-facts.js';
import type { NodeLeaseView } from '../../policy/node-lease.js';
import { explainedByIo, type DetectionStatus } from '../../status/health-status.js';

/** The IoPressureHigh decision reduced to what acting needs; no source at all is Unknown. */
export function ioState(decision: IoPressureDecision | undefined): IoState {
  if (!decision) return 'Unknown';
  const { status, reason } = decision.condition;
  if (status === 'True') {
    if (reason === 'ThresholdSustained') return 'High';
    return reason === 'RecoveryPending' ? 'Recovering' : 'Unknown';
  }
  if (status === 'False') return reason === 'ThresholdNotSustained' ? 'Rising' : 'Low';
  return 'Unknown';
}

const candidate = (pod: MeasuredPod): CandidatePod => {
  const c: CandidatePod = { namespace: pod.namespace, name: pod.name, uid: pod.uid };
  if (pod.controllerKind) c.controllerKind = pod.controllerKind;
  if (pod.mirror) c.mirror = true;
  if (isNoMigrate(pod)) c.noMigrate = true;
  if (pod.sharePercent !== undefined) c.sharePercent = pod.sharePercent;
  if (pod.data) c.data = pod.data;
  return c;
};

/** The stamps a dry run would have written, kept in status since nothing was written to the node. */
function simulatedStamps(previous: SandboxHealthStatus | undefined): NodeStamps | undefined {
  const record = previous?.remediation;
  if (!record?.dryRun) return undefined;
  const stamps: NodeStamps = {
    policy: record.policy,
    since: new Date(record.since),
    reason: record.reason,
    cordoned: record.cordoned,
  };
  const taint = record.taint ? parseTaint(record.taint) : undefined;
  if (taint) stamps.taint = taint;
  return stamps;
}

/**
 * Pods moved off the node since its remediation began: the count status keeps for it (which the recent actions,
 * capped and shared, would lose), or the recent actions' where status has none yet (a status from before the count),
 * and those no report holds yet.
 */
function migratedSince(
  previous: SandboxHealthStatus | undefined,
  unreported: readonly ActionRecord[],
  since: Date,
): number {
  const migrated = (a: ActionRecord) => migratedPod(a.kind, a.outcome) && new Date(a.time) >= since;
  const kept =
    previous?.remediation?.since === since.toISOString() ? (previous.remediation.migrated ?? 0) : 0;
  const recent = (previous?.actions ?? []).filter(migrated).length;
  return Math.max(kept, recent) + unreported.filter(migrated).length;
}

/**
 * An eviction that happened, as this run counts it: a real run ignores dry-run records (those pods are still there
 * and may need it); a dry run counts both.
 */
const evictedBy = (dryRun: boolean) => (a: ActionRecord) =>
  evictedPod(a.kind, a.outcome) && (dryRun || !a.dryRun);

/** Pods an earlier pass already evicted (in a dry run, also those reported as evicted): never evicted twice. */
export function evictedUids(actions: readonly ActionRecord[] | undefined, dryRun: boolean): Set<string> {
  return new Set((actions ?? []).filter(evictedBy(dryRun)).flatMap((a) => (a.uid ? [a.uid] : [])));
}

export interface ObserveInput {
  node: NodeView;
  findings: NodeFindings;
  io: IoPressureDecision | undefined;
  detection: DetectionStatus;
  previous: SandboxHealthStatus | undefined;
  dryRun: boolean;
  /** Running pods selected by migrateWorkloads (read only for nodes being remediated), or its measured culprits. */
  ioHeavyPods: readonly MeasuredPod[];
  /** Who does the device's IO (absent: nothing to say, Unknown). */
  cause?: IoCauseDecision | undefined;
  /** Pods this process evicted whose removal the cache has not shown yet. */
  evictionsInFlight: ReadonlySet<string>;
  /** When this process last evicted a pod off the node (its report may not hold it yet). */
  lastEvictionAt?: Date | undefined;
  /** The node's medik8s lease, when there is one. */
  lease?: NodeLeaseView | undefined;
  /**
   * What was done on the node that no report written holds yet, newest first: counted as if its report held it (a pod
   * migrated, evicted, a node undone), so that the next decision does not wait for the report, nor go past a limit.
   */
  unreported?: readonly ActionRecord[] | undefined;
  /**
   * In a dry run, the stamps the last decision carried out in this process left in status alone (none: it left none),
   * which its report may not hold yet; absent when no decision was carried out here.
   */
  simulatedStamps?: { stamps: NodeStamps | undefined } | undefined;
}

/** The latest eviction off the node: its recent actions (newest first), or this process's own, later one. */
function lastEvictionOf(
  actions: readonly ActionRecord[] | undefined,
  dryRun: boolean,
  own: Date | undefined,
): Date | undefined {
  const recorded = (actions ?? []).find(evictedBy(dryRun));
  const at = recorded ? new Date(recorded.time) : undefined;
  return at && own ? (at > own ? at : own) : (at ?? own);
}

export function observeNode(input: ObserveInput): NodeFacts {
  const { node, findings, previous, detection } = input;
  const simulated =
    input.dryRun && !node.stamps
      ? input.simulatedStamps
        ? input.simulatedStamps.stamps
        : simulatedStamps(previous)
      : undefined;
  const stamps = node.stamps ?? simulated;
  const unreported = input.unreported ?? [];
  const actions = unreported.length > 0 ? [...unreported, ...(previous?.actions ?? [])] : previous?.actions;
  const evicted = evictedUids(actions, input.dryRun);
  const skip = (pod: PodView) => evicted.has(pod.uid) || input.evictionsInFlight.has(pod.uid);
  const explained = explainedByIo(previous);
  const degradedCondition = detection.conditions.find((c) => c.type === 'SandboxCreationDegraded');
  const taints = [...node.taints];
  const simulatedTaint = simulated?.taint;
  if (simulatedTaint && !taints.some((t) => t.key === simulatedTaint.key)) taints.push(simulatedTaint);
  const facts: NodeFacts = {
    name: node.name,
    ready: node.ready,
    controlPlane: Object.hasOwn(node.labels, CONTROL_PLANE_LABEL),
    unschedulable: node.unschedulable || simulated?.cordoned === true,
    taints,
    degradedByIo: findings.degraded && findings.evidence === 'IoSuspected',
    io: ioState(input.io),
    ioCause: input.cause?.cause ?? 'Unknown',
    ioStuckPods: findings.stuckPods
      .filter((s) => isIoCause(s.cause) && !skip(s.pod))
      .map((s) => {
        const c = candidate(s.pod);
        if (!explained(s.pod.uid)) c.unlisted = true;
        return c;
      }),
    ioHeavyPods: input.ioHeavyPods.filter((p) => !skip(p)).map(candidate),
    migrated: stamps ? migratedSince(previous, unreported, stamps.since) : 0,
  };
  if (stamps) facts.stamps = stamps;
  if (input.lease) facts.lease = input.lease;
  // A dry run cannot undo what a real run did: it would report the same undo on every pass.
  if (isFrozenByDryRun(input.dryRun, node.stamps)) facts.frozen = true;
  if (degradedCondition?.status === 'False')
    facts.quietSince = new Date(degradedCondition.lastTransitionTime);
  // Our undo on recovery, or someone else reverting us: either way the node is left alone for a cooldown.
  const lastUndo = (actions ?? []).find(
    (a) =>
      fenceStepOf(a.kind) === 'Down' &&
      a.outcome === 'Succeeded' &&
      (a.reason === 'Recovered' || isStampDrop(a)),
  );
  if (lastUndo) facts.lastUndoAt = new Date(lastUndo.time);
  const lastEviction = lastEvictionOf(actions, input.dryRun, input.lastEvictionAt);
  if (lastEviction) facts.lastEvictionAt = lastEviction;
  return facts;
}
