import { isDeepStrictEqual } from 'node:util';
import type { SandboxHealthStatus } from '../api/v1alpha1/index.js';
import { isNotFound } from '../kube/errors.js';
import type { Logger } from '../observability/log.js';
import type { EventRecorder, StatusWriter, Transition } from '../ports/writes.js';
import type { Clock } from '../runtime/clock.js';
import { forEachLimit } from '../runtime/limit.js';
import { conditionStatus } from '../status/conditions.js';
import {
  detectionTransitions,
  EVENT_WINDOW_MS,
  podsOfNewlyKnownCause,
  POD_EVENTS_PER_NODE,
  type DetectionStatus,
  type EventBudget,
} from '../status/health-status.js';
import { applyMergePatch, mergePatchFrom, stored } from '../status/merge-patch.js';
import {
  desiredHealthStatus,
  newBlocks,
  remediationTransitions,
  sameBlocks,
  type HealthStatus,
  type RemediationStatusInput,
} from '../status/remediation-status.js';
import type { Failures } from './failures.js';
import type { NodeObservation } from './observe-nodes.js';
import type { PolicyMemory } from './policy-memory.js';
import type { StatusOverlay } from './status-overlay.js';

/** SandboxHealths a pass writes besides the urgent ones; the rest are written by the next pass, at once. */
export const REPORTS_PER_PASS = 64;

/**
 * The status keys the operator writes, removed when the desired status drops them (a merge patch of the desired keys
 * alone would leave them, and the node would be rewritten on every pass). ioReading is the agent's, or a polled
 * source's reading written only when it moved: it is written when desired, and never removed.
 */
const OWNED_KEYS = [
  'policy',
  'state',
  'stuckPodCount',
  'stuckPods',
  'causes',
  'ioEvidence',
  'ioPressure',
  'ioCause',
  'topConsumer',
  'runtime',
  'lastAction',
  'actions',
  'remediation',
  'blocked',
  'conditions',
] as const satisfies readonly (keyof HealthStatus)[];

/** The merge patch that makes the stored status the desired one; empty when it already is. */
export function healthPatch(
  previous: SandboxHealthStatus | undefined,
  desired: HealthStatus,
): Record<string, unknown> {
  return mergePatchFrom(previous, desired, desired.ioReading ? [...OWNED_KEYS, 'ioReading'] : OWNED_KEYS);
}

/** One node's report as a pass would make it. */
export interface ReportRequest {
  observation: NodeObservation;
  /** Looked at in this pass (else only what was done or blocked there can be new). */
  observed: boolean;
  remediation: Omit<RemediationStatusInput, 'detection' | 'previous' | 'node'>;
}

interface PlannedReport {
  observation: NodeObservation;
  input: RemediationStatusInput;
  desired: HealthStatus;
  patch: Record<string, unknown>;
  urgent: boolean;
}

export interface ReporterHooks {
  onNodeStatus?(policy: string, node: string, status: DetectionStatus): void;
  /** Called once for each newly blocked action, with the guard that holds it. */
  onBlocked?(guard: string): void;
}

/**
 * Writes each node's SandboxHealth where it changed, most urgent first, under the write limit (one node's failure does
 * not stop the others), then the Events of its transitions. A pass writes at most REPORTS_PER_PASS routine reports
 * beyond the urgent ones: in a storm that changes every node, the rest wait for the next pass (at once, longest
 * deferred first), and new evidence is not queued behind a thousand count updates. It owns each node's stuck-pod
 * Event budget.
 */
export class Reporter {
  /** Stuck-pod Events each node got within EVENT_WINDOW_MS: when, for the pods' own and for the node's listing. */
  private readonly stuckEvents = new Map<string, { pods: number[]; node: number | undefined }>();

  constructor(
    private readonly deps: {
      writer: StatusWriter;
      recorder: EventRecorder;
      overlay: StatusOverlay;
      clock: Clock;
      logger: Logger;
      writeConcurrency: number;
      hooks?: ReporterHooks;
    },
  ) {}

  /** Reports the policy's nodes; returns how many were written, deferred, and how many blocks are new. */
  async report(
    policy: string,
    memory: PolicyMemory,
    requests: readonly ReportRequest[],
    failures: Failures,
  ): Promise<{ written: number; deferred: number; blockedNew: number }> {
    const planned: PlannedReport[] = [];
    for (const request of requests) {
      const report = this.plan(policy, request);
      if (report) planned.push(report);
    }
    const ageOf = (r: PlannedReport) => memory.state(r.observation.node.name).deferredSince ?? Infinity;
    const urgent = planned.filter((r) => r.urgent);
    // Routine reports longest deferred first: in a long storm every node gets its turn.
    const routine = planned.filter((r) => !r.urgent).sort((a, b) => ageOf(a) - ageOf(b));
    const toWrite = [...urgent, ...routine.slice(0, REPORTS_PER_PASS)];
    const deferred = new Set(routine.slice(REPORTS_PER_PASS).map((r) => r.observation.node.name));
    const now = this.deps.clock.now();
    for (const [node, state] of memory.nodes) {
      if (!deferred.has(node)) delete state.deferredSince;
      else state.deferredSince ??= now;
    }
    for (const node of deferred) memory.markDirty(node);
    // Every status first, then the Events of its transitions: an Event never holds up another node's status.
    const written: { node: string; blockedNew: number; transitions: Transition[] }[] = [];
    await forEachLimit(toWrite, this.deps.writeConcurrency, async (report) => {
      const node = report.observation.node.name;
      try {
        written.push({ node, ...(await this.write(report, memory)) });
      } catch (err) {
        memory.markDirty(node); // what the API holds is uncertain now: read it afresh
        failures.add(`status of sandboxhealth/${node}`, err);
      }
    });
    await forEachLimit(written, this.deps.writeConcurrency, async ({ node, transitions }) => {
      for (const transition of transitions) await this.record(policy, node, transition);
    });
    return {
      written: toWrite.length,
      deferred: deferred.size,
      blockedNew: written.reduce((n, w) => n + w.blockedNew, 0),
    };
  }

  /** A node is gone: its Event budget goes with it. */
  forgetNode(node: string): void {
    this.stuckEvents.delete(node);
  }

  /**
   * What one node's SandboxHealth should say now, and whether that is urgent (news an SRE or the next decision waits
   * for: an action, a block, a state change, a pod newly stuck for a known cause); undefined when the API already
   * holds it, or when nothing about the node can have changed.
   */
  private plan(policy: string, request: ReportRequest): PlannedReport | undefined {
    const { observation, remediation } = request;
    const { node, previous } = observation;
    const throttling = remediation.throttling ?? [];
    const wasThrottling = conditionStatus(previous?.conditions, 'RolloutsThrottled') === 'True';
    if (
      !request.observed &&
      remediation.results.length === 0 &&
      sameBlocks(previous, remediation.blocked) &&
      wasThrottling === throttling.length > 0
    )
      return undefined;
    const input: RemediationStatusInput = {
      ...remediation,
      detection: observation.detection,
      previous,
      node,
    };
    const desired = desiredHealthStatus(input);
    this.deps.hooks?.onNodeStatus?.(policy, node.name, desired);
    const patch = healthPatch(previous, desired);
    if (Object.keys(patch).length === 0 && observation.exists) return undefined;
    const urgent =
      !observation.exists ||
      remediation.results.length > 0 ||
      !sameBlocks(previous, remediation.blocked) ||
      desired.state !== previous?.state ||
      desired.conditions.some((c) => conditionStatus(previous.conditions, c.type) !== c.status) ||
      podsOfNewlyKnownCause(previous, desired).length > 0;
    return { observation, input, desired, patch, urgent };
  }

  /** Writes one node's SandboxHealth as planned; returns how many blocks are new and the transitions to record. */
  private async write(
    report: PlannedReport,
    memory: PolicyMemory,
  ): Promise<{ blockedNew: number; transitions: Transition[] }> {
    const { writer, overlay } = this.deps;
    const { observation, input, desired } = report;
    const { node, previous } = observation;
    if (!observation.exists) await writer.createHealth(node);
    if (Object.keys(report.patch).length === 0) {
      observation.exists = true;
      return { blockedNew: 0, transitions: [] };
    }
    let sent = report.patch;
    let written: Awaited<ReturnType<StatusWriter['patchHealthStatus']>>;
    try {
      written = await writer.patchHealthStatus(node.name, sent);
    } catch (err) {
      if (!isNotFound(err)) throw err;
      // Gone behind our back, and the cache does not show it yet (or never will: a delete the watch missed). Create it
      // again and write the whole status, at once, rather than patch a phantom on every retry.
      overlay.forgetHealth(node.name);
      await writer.createHealth(node);
      sent = stored(desired);
      written = await writer.patchHealthStatus(node.name, sent);
    }
    // What the API holds now, as it answered (its merge of our patch, nested fields included): the next pass need not
    // read the node again to know it, and stands on it until the watch shows it. An answer that cannot be read stands
    // in for nothing: the node waits for the watch.
    observation.exists = true;
    observation.previous = written.status ?? (applyMergePatch(previous, sent) as SandboxHealthStatus);
    overlay.wroteHealth(node.name, written.version, written.status);
    delete memory.state(node.name).facts;
    const fresh = newBlocks(previous, desired.blocked ?? []);
    for (const b of fresh) this.deps.hooks?.onBlocked?.(b.guard);
    const stuck = detectionTransitions(node, previous, desired, this.budget(node.name));
    this.spend(node.name, stuck);
    return { blockedNew: fresh.length, transitions: [...stuck, ...remediationTransitions(input, desired)] };
  }

  /** Records one transition as an Event; the ones an SRE follows are logged too. */
  private async record(policy: string, node: string, transition: Transition): Promise<void> {
    const { logger, recorder } = this.deps;
    if (FOLLOWED.has(transition.reason) || transition.reason.endsWith('Recovered')) {
      logger.info(
        transition.reason === 'SandboxCreationStuck' ? 'Detected stuck Pod' : 'Changed Node state',
        {
          policy,
          node,
          ...(transition.target.kind === 'Pod'
            ? { pod: `${transition.target.namespace}/${transition.target.name}` }
            : {}),
          reason: transition.reason,
          message: transition.message,
        },
      );
    }
    try {
      await recorder.record(transition);
    } catch (err) {
      // The status holds what happened; a lost Event is logged, not retried (the transition will not repeat).
      logger.warn('Failed to record an Event', {
        policy,
        node,
        reason: transition.reason,
        error: err instanceof Error ? err.message : String(err),
      });
    }
  }

  /** What is left of a node's stuck-pod Events in the current window. */
  private budget(node: string): EventBudget {
    const log = this.stuckEvents.get(node);
    if (!log) return { pods: POD_EVENTS_PER_NODE, node: true };
    const since = this.deps.clock.now() - EVENT_WINDOW_MS;
    log.pods = log.pods.filter((at) => at > since);
    if (log.node !== undefined && log.node <= since) log.node = undefined;
    if (log.pods.length === 0 && log.node === undefined) this.stuckEvents.delete(node);
    return { pods: POD_EVENTS_PER_NODE - log.pods.length, node: log.node === undefined };
  }

  private spend(node: string, transitions: readonly Transition[]): void {
    const now = this.deps.clock.now();
    for (const t of transitions) {
      if (t.reason !== 'SandboxCreationStuck') continue;
      const log = this.stuckEvents.get(node) ?? { pods: [], node: undefined };
      if (t.target.kind === 'Pod') log.pods.push(now);
      else log.node = now;
      this.stuckEvents.set(node, log);
    }
  }
}

const FOLLOWED = new Set(['SandboxCreationStuck', 'SandboxCreationDegraded', 'IoPressureHigh']);

/** Whether two statuses are the same as the API stores them (no undefined fields). */
export const sameStatus = (a: unknown, b: unknown): boolean => isDeepStrictEqual(stored(a), stored(b));
