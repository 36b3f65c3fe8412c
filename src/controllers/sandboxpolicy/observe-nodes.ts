import {
  MAX_IO_LIMITS_PER_NODE,
  NO_LIMIT_LABEL,
  type IoAttribution,
  type IoReadingStatus,
  type SandboxHealthStatus,
  type SandboxPolicySpec,
  type WantedIoLimitSpec,
} from '../../api/v1alpha1/index.js';
import {
  detectNodeFindings,
  detectStuckPods,
  nextStuckAt,
  type MeasuredPod,
  type NodeFindings,
  type NodeView,
} from '../../detection/index.js';
import { describeError } from '../../ports/errors.js';
import type { Logger } from '../../observability/log.js';
import {
  decideIoPressure,
  judgeReading,
  readingTime,
  staleAfterFor,
  type IoPressureDecision,
} from '../../policy/io-pressure.js';
import type { ClusterCache, WorkloadReader } from '../../ports/cluster.js';
import type { Expectations } from '../../runtime/expectations.js';
import { isMaterialChange } from '../../signals/material-change.js';
import type { IoSource, SourcedReading } from '../../signals/types.js';
import { conditionStatus } from '../../status/conditions.js';
import { desiredDetectionStatus } from '../../status/health-status.js';
import { forEachLimit } from '../../runtime/limit.js';
import { resolveAttribution } from './culprits.js';
import type { IgnoredEvents } from './ignored-events.js';
import { needsLiveReads, readRunningRollouts, resolveClaims } from './observe-live.js';
import { ioState } from './observe.js';
import type { NodeObservation, PolicyMemory } from '../policy-memory.js';
import type { UnreportedResults } from '../reporting/unreported.js';
import type { MutationCache } from '../reporting/mutation-cache.js';
import type { StampRefusals } from '../iolimits/measured-pods.js';

export interface ObserveDeps {
  cache: ClusterCache;
  unreported: UnreportedResults;
  expectations: Expectations;
  mutations: MutationCache;
  workloads?: WorkloadReader | undefined;
  logger: Logger;
  /** Tells of the failure Events detection did not count (not written by the kubelet of the pod's node). */
  ignoredEvents?: IgnoredEvents | undefined;
  /** The pods whose limit stamps the apiserver refused lately (IoLimitStamps): no limit is set on them, so they may move. */
  stamps?: StampRefusals | undefined;
}

export interface ObserveRequest {
  policy: string;
  spec: SandboxPolicySpec;
  nodes: readonly string[];
  now: Date;
  source: IoSource | undefined;
  /** Ask a polled source again (full passes, every pollMs); in between, its last answer stands. */
  refresh: boolean;
}

/**
 * Looks at the nodes from the cache: their stuck pods, their IO readings judged, their SandboxHealth as stored (or as
 * we wrote it). Nodes whose own write the cache does not show yet are unsettled, and no decision is made on them: a
 * node patch or lease of ours (the node is looked at all the same, so its stuck pods are reported meanwhile), or a
 * SandboxHealth write with nothing cached for it (nothing about the node is read until the cache shows it).
 */
export async function observeNodes(
  deps: ObserveDeps,
  request: ObserveRequest,
  memory: PolicyMemory,
): Promise<{ observations: NodeObservation[]; unsettled: string[] }> {
  const { cache, logger } = deps;
  const { source, spec, now } = request;
  if (source && request.refresh) await refreshSource(source, request, memory, logger);
  const pods = request.nodes.flatMap((node) => cache.pendingPodsOn(node));
  const stuck = detectStuckPods(pods, cache.failureEventsByPod(), {
    stuckThresholdSeconds: spec.detection.stuckThresholdSeconds,
    now,
  });
  deps.ignoredEvents?.note(stuck);
  const findings = detectNodeFindings(stuck, request.nodes, spec.detection.minStuckPods);
  const drafts: Draft[] = [];
  const unsettled: string[] = [];
  for (const [nodeName, nodeFindings] of findings) {
    const node = cache.node(nodeName);
    if (!node) continue;
    const seen = observeNode(deps, request, node, nodeFindings);
    if (seen.draft) drafts.push(seen.draft);
    if (!seen.settled) unsettled.push(nodeName);
  }
  // Each node's live reads, in one bounded round: who does its IO, the pods to move, their claims, its rollouts.
  await forEachLimit(drafts, LIVE_READS, (draft) => readLive(deps, request, draft, memory));
  return { observations: drafts.map((draft) => finish(request, draft)), unsettled };
}

/**
 * The live reads one node needs, in order. Who does the IO is asked only of a node whose pressure is proven
 * (IoPressureHigh True: a fresh reading, held for sustainSeconds): no live read, cause or Event for a node that is
 * merely busy. Then the pods to move by label, and, only where a decision needs them, where their claims are bound
 * and which rollouts run there (a node with none goes on without another read).
 */
async function readLive(
  deps: ObserveDeps,
  request: ObserveRequest,
  draft: Draft,
  memory: PolicyMemory,
): Promise<void> {
  if (draft.io?.condition.status === 'True') {
    const { attribution, cause, culprits, dueAt } = await resolveAttribution(
      deps,
      request,
      draft.node.name,
      { attribution: draft.reading?.attribution, busyPercent: busyOf(draft.reading) },
      memory,
    );
    draft.cause = cause;
    draft.attribution = attribution;
    const limitIo = request.spec.remediation.limitIo;
    draft.ioHeavyPods = limitIo
      ? movableDespiteLimits(
          culprits,
          deps.cache.health(draft.node.name)?.ioLimits,
          request.policy,
          attribution,
          {
            minSharePercent: limitIo.minSharePercent,
            stampRefused: (uid) => deps.stamps?.refused(uid, request.now) ?? false,
          },
        )
      : culprits;
    if (dueAt !== undefined) draft.dueAt = Math.min(draft.dueAt, dueAt);
  } else delete memory.state(draft.node.name).culprits;
  await readIoHeavyPods(deps, request, draft);
  if (!needsLiveReads(request.spec, draft, memory)) return;
  await resolveClaims(deps, request.policy, draft, memory);
  await readRunningRollouts(deps, request, draft, memory);
}

/**
 * With limitIo, a culprit is limited in place first: one with a limit of ours may move only once the limit is
 * exhausted (at the floor with the node still saturated, or not applied by the agent); one without may move when no
 * limit will be set on it: labelled never to be limited, its stamps refused by the apiserver, a source that gives no
 * device or no rates to limit, a share under limitIo's minSharePercent (migration's may be lower), or the node's list
 * full. Else it would be neither limited nor moved.
 */
function movableDespiteLimits(
  culprits: MeasuredPod[],
  limits: readonly WantedIoLimitSpec[] | undefined,
  policy: string,
  attribution: IoAttribution | undefined,
  unlimited: { minSharePercent: number; stampRefused: (uid: string) => boolean },
): MeasuredPod[] {
  const { minSharePercent, stampRefused } = unlimited;
  const ours = new Map((limits ?? []).filter((l) => l.policy === policy).map((l) => [l.podUid, l]));
  const full = ours.size >= MAX_IO_LIMITS_PER_NODE;
  const limitable = (uid: string) => {
    const c = attribution?.consumers.find((x) => x.podUid === uid);
    const rates = [c?.readBytesPerSecond, c?.writeBytesPerSecond, c?.readOpsPerSecond, c?.writeOpsPerSecond];
    return (
      attribution?.deviceNumber !== undefined &&
      rates.every((r) => r !== undefined) &&
      (c?.sharePercent ?? 0) >= minSharePercent &&
      !full
    );
  };
  return culprits.filter((p) => {
    const limit = ours.get(p.uid);
    if (limit) return limit.exhausted === true;
    return p.labels[NO_LIMIT_LABEL] === 'true' || stampRefused(p.uid) || !limitable(p.uid);
  });
}

/** The attributed device's busy time in the reading it came with (the busiest disk's where the source lists none). */
function busyOf(reading: SourcedReading | undefined): number | undefined {
  const device = reading?.attribution?.device;
  const listed = reading?.devices?.find((d) => d.name === device);
  return listed ? listed.busyPercent : reading?.diskBusyPercent;
}

/** Live reads (the running pods of a node) in flight at once. */
const LIVE_READS = 8;

/** A node observed but for its desired detection status, which waits for its IO consumers to be named. */
interface Draft extends Omit<NodeObservation, 'detection'> {
  reading: SourcedReading | undefined;
  readingToWrite: IoReadingStatus | undefined;
}

function finish(request: ObserveRequest, draft: Draft): NodeObservation {
  const { spec, now } = request;
  const { reading: _reading, readingToWrite, ...observation } = draft;
  const detection = desiredDetectionStatus({
    policyName: request.policy,
    node: draft.node,
    findings: draft.findings,
    minStuckPods: spec.detection.minStuckPods,
    thresholdSeconds: spec.detection.stuckThresholdSeconds,
    previous: draft.previous,
    now,
    ...(draft.io ? { io: { decision: draft.io, ...(readingToWrite ? { readingToWrite } : {}) } } : {}),
    ...(draft.cause ? { cause: { decision: draft.cause, attribution: draft.attribution } } : {}),
  });
  const measured = draft.reading?.attribution;
  return { ...observation, ...(measured ? { measured } : {}), detection };
}

async function refreshSource(
  source: IoSource,
  request: ObserveRequest,
  memory: PolicyMemory,
  logger: Logger,
): Promise<void> {
  const fields = { policy: request.policy, source: source.kind };
  try {
    await source.refresh(request.nodes);
    if (memory.sourceFailed(undefined)) logger.info('Reading IO pressure again', fields);
  } catch (err) {
    // Readings stay unknown (and so act on nothing); the Unknown condition says why in each node's status. Said once
    // per change of error, not on every poll.
    const error = describeError(err);
    if (memory.sourceFailed(error)) logger.warn('Failed to read IO pressure', { ...fields, error });
  }
}

/**
 * One node; settled false while a write of ours to it is not back through the watch, and no draft at all while its
 * SandboxHealth is awaited with nothing cached for it.
 */
function observeNode(
  deps: ObserveDeps,
  request: ObserveRequest,
  node: NodeView,
  findings: NodeFindings,
): { draft?: Draft; settled: boolean } {
  const { cache, expectations, mutations, logger } = deps;
  const { spec, now } = request;
  const waiting = (kind: string) => {
    logger.debug('Waiting for the watch to show our write', {
      policy: request.policy,
      node: node.name,
      kind,
    });
  };
  // A node patch of ours (a cordon) not back through the watch yet holds every decision, as the old node would be
  // decided on again; likewise a lease of ours just written: a guard must not read the lease from before it. Its
  // stuck pods are still looked at: they do not depend on either.
  let settled = true;
  for (const kind of ['Node', 'NodeLease'] as const)
    if (!expectations.isSettled(`${kind}/${node.name}`, cache.observedVersion(kind, node.name))) {
      waiting(kind);
      settled = false;
    }
  const standIn = mutations.health(node.name);
  if (standIn === null) {
    waiting('SandboxHealth');
    return { settled: false };
  }
  const health = standIn ? undefined : cache.health(node.name);
  const previous = standIn ?? health?.status; // read before writing: a cache may update in place
  // With its status, in the same turn: a report of ours may apply while the live reads that follow are awaited.
  const reportsApplied = deps.unreported.applied(node.name);
  let dueAt = nextStuckAt(
    cache.pendingPodsOn(node.name),
    spec.detection.stuckThresholdSeconds,
    now,
  )?.getTime();
  const io = request.source ? judgeIo(request, node.name, previous) : undefined;
  if (io?.dueAt !== undefined) dueAt = Math.min(dueAt ?? Infinity, io.dueAt);
  const draft: Draft = {
    node,
    previous,
    exists: standIn !== undefined || health !== undefined,
    findings,
    io: io?.decision,
    ioHeavyPods: [],
    lease: cache.nodeLease(node.name),
    version: cache.observedVersion('Node', node.name),
    dueAt: dueAt ?? Infinity,
    reportsApplied,
    reading: io?.reading,
    readingToWrite: io?.readingToWrite,
  };
  return { draft, settled };
}

/** The node's IO reading judged against the policy, the polled reading to write, and when the verdict can change. */
function judgeIo(
  request: ObserveRequest,
  nodeName: string,
  previous: SandboxHealthStatus | undefined,
):
  | {
      decision: IoPressureDecision;
      reading?: SourcedReading;
      readingToWrite?: IoReadingStatus;
      dueAt?: number;
    }
  | undefined {
  const { source, now } = request;
  if (!source) return undefined;
  const io = request.spec.ioPressure;
  const reading: SourcedReading | undefined = source.read(nodeName);
  const problem = reading ? undefined : source.problem?.(nodeName);
  const decision = decideIoPressure({
    previousStatus: conditionStatus(previous?.conditions, 'IoPressureHigh'),
    previousTracking: previous?.ioPressure
      ? { observation: previous.ioPressure.observation, since: new Date(previous.ioPressure.since) }
      : undefined,
    judgement: problem
      ? { observation: 'Unknown', details: [problem.message], unknownReason: problem.reason }
      : judgeReading(
          reading,
          io.thresholds,
          now,
          io.staleAfterSeconds,
          (previous?.ioLimits?.applied?.length ?? 0) > 0,
        ),
    now,
    sustainSeconds: io.sustainSeconds,
    recoverySeconds: io.recoverySeconds,
  });
  const moments: number[] = [];
  // The moment the reading goes stale changes what may be done: look again then, even if nothing else moved. Only a
  // moment still ahead: a reading stale already (its agent gone) has nothing more to wait for, and counting it would
  // bring the node due on every pass, with the policy requeued at once, for ever.
  const staleAt = reading
    ? readingTime(reading) + staleAfterFor(reading, io.staleAfterSeconds) * 1000 + 1
    : NaN;
  if (Number.isFinite(staleAt) && staleAt > now.getTime()) moments.push(staleAt);
  if (decision.recheckAfterMs !== undefined) moments.push(now.getTime() + decision.recheckAfterMs);
  const result: {
    decision: IoPressureDecision;
    reading?: SourcedReading;
    readingToWrite?: IoReadingStatus;
    dueAt?: number;
  } = {
    decision,
  };
  if (reading) result.reading = reading;
  if (moments.length > 0) result.dueAt = Math.min(...moments);
  if (reading && source.kind !== 'agent') {
    // Polled readings are written when they moved, or before the stored one goes stale: not every poll.
    const stored = previous?.ioReading;
    const ageMs = stored ? now.getTime() - new Date(stored.observedTime).getTime() : Infinity;
    const refresh = isMaterialChange(stored, reading) || ageMs >= (io.staleAfterSeconds * 1000) / 2;
    result.readingToWrite = refresh || !stored ? reading : stored;
  }
  return result;
}

/** Running pods to migrate by label: a live read, only for a node under our remediation with verified pressure. */
async function readIoHeavyPods(deps: ObserveDeps, request: ObserveRequest, draft: Draft): Promise<void> {
  const migrate = request.spec.remediation.migrateWorkloads;
  const selector = migrate?.podSelector;
  const reader = deps.workloads;
  if (migrate?.by !== 'labels' || !selector || !reader) return;
  if (ioState(draft.io) !== 'High' || (!draft.node.stamps && !draft.previous?.remediation)) return;
  try {
    draft.ioHeavyPods = await reader.runningPodsOn(draft.node.name, selector);
  } catch (err) {
    deps.logger.warn('Failed to list IO-heavy pods', {
      policy: request.policy,
      node: draft.node.name,
      error: describeError(err),
    });
  }
}
