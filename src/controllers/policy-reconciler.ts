import { isDeepStrictEqual } from 'node:util';
import { validateSandboxPolicySpec, type SandboxPolicySpec } from '../api/v1alpha1/index.js';
import {
  detectNodeFindings,
  detectStuckPods,
  STUCK_WAITING_REASONS,
  type PodView,
} from '../detection/index.js';
import { decideIoPressure, judgeReading } from '../policy/io-pressure.js';
import type { ReconcileResult } from '../runtime/controller.js';
import { isMaterialChange } from '../signals/material-change.js';
import type { IoSource } from '../signals/types.js';
import type { Clock } from '../runtime/clock.js';
import { conditionStatus } from '../status/conditions.js';
import {
  desiredDetectionStatus,
  type HealthInput,
  detectionTransitions,
  storedDetectionStatus,
  type DetectionStatus,
} from '../status/health-status.js';
import { invalidPolicyStatus, validPolicyStatus } from '../status/policy-status.js';
import { assignNodes, type NodeAssignment, type PolicyCandidate } from './ownership.js';
import type { ClusterCache, EventRecorder, PolicyObject, StatusWriter } from './ports.js';

export interface ReconcileLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  debug(message: string, fields?: Record<string, unknown>): void;
}

export interface PolicyReconcilerDeps {
  cache: ClusterCache;
  writer: StatusWriter;
  recorder: EventRecorder;
  clock: Clock;
  logger: ReconcileLogger;
  /** Safety net: reconcile every policy at least this often. */
  resyncMs?: number;
  /** The IO-pressure source a policy's spec asks for. */
  sources?(policyName: string, spec: SandboxPolicySpec): IoSource;
  onNodeStatus?(policy: string, node: string, status: DetectionStatus): void;
}

/** Valid policies with their parsed specs; invalid ones are left out of node ownership. */
// Informers replace a view object on every change, so the object identity keys the validation result.
const validations = new WeakMap<PolicyObject, ReturnType<typeof validateSandboxPolicySpec>>();
export function validatePolicy(object: PolicyObject): ReturnType<typeof validateSandboxPolicySpec> {
  let result = validations.get(object);
  if (!result) validations.set(object, (result = validateSandboxPolicySpec(object.spec)));
  return result;
}

export function validPolicies(
  policies: Iterable<PolicyObject>,
): (PolicyCandidate & { object: PolicyObject })[] {
  const valid: (PolicyCandidate & { object: PolicyObject })[] = [];
  for (const object of policies) {
    const result = validatePolicy(object);
    if (result.valid)
      valid.push({ name: object.name, createdAt: object.createdAt, spec: result.spec, object });
  }
  return valid;
}

/** When the next pending pod on these nodes will cross the threshold, in ms from now (undefined: none). */
export function nextThresholdCrossing(
  pods: Iterable<PodView>,
  thresholdSeconds: number,
  now: number,
): number | undefined {
  let earliest: number | undefined;
  for (const pod of pods) {
    if (
      pod.deleting ||
      !pod.containers.every((c) => c.state === 'waiting' && STUCK_WAITING_REASONS.has(c.reason ?? ''))
    )
      continue;
    const due = (pod.scheduledAt ?? pod.createdAt).getTime() + thresholdSeconds * 1000 - now;
    if (due > 0 && (earliest === undefined || due < earliest)) earliest = due;
  }
  return earliest;
}

/**
 * Reconciles one SandboxPolicy, level-based: from the cache it computes what every owned node's SandboxHealth
 * and the policy's status should say, writes only what differs, and records Events only for transitions.
 */
export class PolicyReconciler {
  private readonly resyncMs: number;
  constructor(private readonly deps: PolicyReconcilerDeps) {
    this.resyncMs = deps.resyncMs ?? 5 * 60_000;
  }

  /** The owning policy of each node, over all valid policies in the cache. */
  assignment(): NodeAssignment {
    return assignNodes(validPolicies(this.deps.cache.policies()), this.deps.cache.nodes());
  }

  async reconcile(name: string): Promise<ReconcileResult> {
    const { cache, writer, clock, logger } = this.deps;
    const now = new Date(clock.now());
    const policy = cache.policy(name);
    const assignment = this.assignment();
    await this.deleteOrphanHealths(assignment);
    if (!policy) return {};

    const validation = validatePolicy(policy);
    if (!validation.valid) {
      const status = invalidPolicyStatus(
        { generation: policy.generation, previous: policy.status, now },
        validation.problems,
      );
      if (!this.sameStatus(policy.status, status)) {
        logger.info('Refused invalid SandboxPolicy', { policy: name, problems: validation.problems });
        await writer.patchPolicyStatus(name, status);
      }
      return {};
    }
    const spec = validation.spec;
    const owned = [...assignment.owner].filter(([, owner]) => owner === name).map(([node]) => node);
    const { degraded, recheckAfterMs } = await this.reconcileNodes(name, spec, owned, now);

    const status = validPolicyStatus(
      { generation: policy.generation, previous: policy.status, now },
      {
        matchedNodes: owned.length,
        degradedNodes: degraded,
        remediatingNodes: 0,
        overlappingNodes: assignment.overlaps.get(name) ?? [],
        paused: spec.safety.paused,
        dryRun: spec.safety.dryRun,
      },
    );
    if (!this.sameStatus(policy.status, status)) await writer.patchPolicyStatus(name, status);

    const crossing = nextThresholdCrossing(
      owned.flatMap((node) => cache.pendingPodsOn(node)),
      spec.detection.stuckThresholdSeconds,
      now.getTime(),
    );
    return { requeueAfterMs: Math.min(this.resyncMs, crossing ?? Infinity, recheckAfterMs ?? Infinity) };
  }

  private async reconcileNodes(
    policyName: string,
    spec: SandboxPolicySpec,
    nodeNames: string[],
    now: Date,
  ): Promise<{ degraded: number; recheckAfterMs: number | undefined }> {
    const { cache, writer, recorder, logger } = this.deps;
    const source = this.deps.sources?.(policyName, spec);
    let recheckAfterMs = source?.pollMs;
    if (source) {
      try {
        await source.refresh(nodeNames);
      } catch (err) {
        // Readings stay unknown (and so act on nothing); the Unknown condition says why in each node's status.
        logger.warn('Failed to read IO pressure', {
          policy: policyName,
          source: source.kind,
          error: (err as Error).message,
        });
      }
    }
    const pods = nodeNames.flatMap((node) => cache.pendingPodsOn(node));
    const stuck = detectStuckPods(pods, cache.failureEventsByPod(), {
      stuckThresholdSeconds: spec.detection.stuckThresholdSeconds,
      now,
    });
    const findings = detectNodeFindings(stuck, nodeNames, spec.detection.minStuckPods);
    let degraded = 0;
    for (const [nodeName, nodeFindings] of findings) {
      const node = cache.node(nodeName);
      if (!node) continue;
      if (nodeFindings.degraded) degraded++;
      const existing = cache.health(nodeName);
      const previous = existing?.status; // read before writing: a cache may update in place
      if (!existing) await writer.createHealth(node);
      let io: HealthInput['io'];
      if (source) {
        const reading = source.read(nodeName);
        const io_ = spec.ioPressure;
        const decision = decideIoPressure({
          previousStatus: conditionStatus(previous?.conditions, 'IoPressureHigh'),
          previousTracking: previous?.ioPressure
            ? { observation: previous.ioPressure.observation, since: new Date(previous.ioPressure.since) }
            : undefined,
          judgement: judgeReading(reading, io_.thresholds, now, io_.staleAfterSeconds),
          now,
          sustainSeconds: io_.sustainSeconds,
          recoverySeconds: io_.recoverySeconds,
        });
        if (decision.recheckAfterMs !== undefined)
          recheckAfterMs = Math.min(recheckAfterMs ?? Infinity, decision.recheckAfterMs);
        io = { decision };
        if (reading && source.kind !== 'agent') {
          // Polled readings are written when they moved, or before the stored one goes stale: not every poll.
          const stored = previous?.ioReading;
          const ageMs = stored ? now.getTime() - new Date(stored.observedTime).getTime() : Infinity;
          const refresh = isMaterialChange(stored, reading) || ageMs >= (io_.staleAfterSeconds * 1000) / 2;
          io.readingToWrite = refresh || !stored ? reading : stored;
        }
      }
      const desired = desiredDetectionStatus({
        policyName,
        node,
        findings: nodeFindings,
        minStuckPods: spec.detection.minStuckPods,
        thresholdSeconds: spec.detection.stuckThresholdSeconds,
        previous,
        now,
        ...(io ? { io } : {}),
      });
      this.deps.onNodeStatus?.(policyName, nodeName, desired);
      if (isDeepStrictEqual(storedDetectionStatus(previous, desired), withoutUndefined(desired))) continue;
      await writer.patchHealthStatus(nodeName, desired);
      for (const transition of detectionTransitions(node, previous, desired)) {
        logger.info(
          transition.reason === 'SandboxCreationStuck' ? 'Detected stuck Pod' : 'Changed Node state',
          {
            policy: policyName,
            node: nodeName,
            ...(transition.target.kind === 'Pod'
              ? { pod: `${transition.target.namespace}/${transition.target.name}` }
              : {}),
            reason: transition.reason,
            message: transition.message,
          },
        );
        await recorder.record(transition);
      }
    }
    return { degraded, recheckAfterMs };
  }

  /** SandboxHealths of nodes no valid policy owns, unless their policy still exists but is invalid (frozen). */
  private async deleteOrphanHealths(assignment: NodeAssignment): Promise<void> {
    const { cache, writer, logger } = this.deps;
    for (const health of cache.healths()) {
      if (assignment.owner.has(health.name)) continue;
      const recorded = health.status?.policy;
      const recordedPolicy = recorded ? cache.policy(recorded) : undefined;
      if (recordedPolicy && !validatePolicy(recordedPolicy).valid) continue;
      logger.info('Deleted SandboxHealth of an unowned Node', { node: health.name, policy: recorded });
      await writer.deleteHealth(health.name);
    }
  }

  private sameStatus(a: unknown, b: unknown): boolean {
    return isDeepStrictEqual(withoutUndefined(a), withoutUndefined(b));
  }
}

/** JSON round trip: what the apiserver would store (no undefined fields). */
function withoutUndefined<T>(value: T): T {
  return value === undefined ? value : (JSON.parse(JSON.stringify(value)) as T);
}
