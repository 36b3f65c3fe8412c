import { MAX_EVICTIONS_PER_MINUTE, type SandboxPolicyStatus } from '../../api/v1alpha1/index.js';
import type { Actuator } from '../../actuation/actuator.js';
import { apiStatus, REQUEST_TIMEOUT_MS } from '../../ports/errors.js';
import { isEviction, type Action, type BlockedAction, type Eviction } from '../../policy/actions.js';
import { RateBudget } from '../../policy/rate-window.js';
import type { ClusterCache } from '../../ports/cluster.js';
import { BoundedMap } from '../../runtime/bounded-map.js';
import type { Clock } from '../../runtime/clock.js';
import type { Expectations } from '../../runtime/expectations.js';
import { forEachLimit } from '../../runtime/limit.js';
import type { ActionResult } from '../../status/remediation-status.js';
import type { Failures } from '../failures.js';

/** Evictions one pass carries out; the rest are decided again by the next pass, at once. */
export const EVICTIONS_PER_PASS = 8;
/** How long a pod evicted by this process is counted gone while the cache still shows it. */
const EVICTION_IN_FLIGHT_MS = 60_000;
/** How long a pod whose eviction a disruption budget refused goes after the others. */
const EVICTION_REFUSED_MS = 30_000;
const EVICTED = 'evicted';

/** The evictions a pass carries out, and how many it left for the next one. */
export interface EvictionPlan {
  evictions: Eviction[];
  left: number;
}

/** What carrying out a pass's evictions came to: the blocks to report, and when each spent eviction was answered. */
export interface EvictionsDone {
  blocked: BlockedAction[];
  /** When each eviction that spent budget was answered (clock ms). */
  evictedAt: number[];
}

/**
 * The one place pods are evicted (descheduler's PodEvictor): it owns the evictions in flight (by uid, in the
 * expectations), the refusals of disruption budgets, the per-pass cap and order, and the policy's eviction log in
 * status, spent before any eviction so that a crash cannot reset the rate. The guards that decide whether a pod may
 * be evicted at all are decideRemediation's; this carries out what it decided, within the pass's share.
 */
export class Evictor {
  /** The eviction log in the policy's status: reserved before evicting, written again as answered. */
  private readonly budget = new RateBudget(MAX_EVICTIONS_PER_MINUTE);
  /** Pods whose eviction a disruption budget refused, by uid, with until when they go after the others. */
  private readonly refused = new Map<string, number>();
  /** When this process last evicted a pod off each node (a node's first eviction goes before others' next). */
  private readonly lastOn = new BoundedMap<string, number>(10_000);

  constructor(
    private readonly deps: {
      cache: Pick<ClusterCache, 'podByUid'>;
      clock: Clock;
      expectations: Expectations;
      writeConcurrency: number;
    },
  ) {}

  /** Pods evicted by this process that the cache still shows: never evicted twice. */
  inFlight(): ReadonlySet<string> {
    return this.deps.expectations.pendingRemovals(EVICTED, (uid) => {
      const pod = this.deps.cache.podByUid(uid);
      return !pod || pod.deleting;
    });
  }

  /** The node is gone: when we last evicted off it goes too. */
  forgetNode(node: string): void {
    this.lastOn.delete(node);
  }

  /** When this process last evicted (or, in a dry run, reported evicting) a pod off the node. */
  lastEvictionOn(node: string): Date | undefined {
    const at = this.lastOn.get(node);
    return at === undefined ? undefined : new Date(at);
  }

  /**
   * At most EVICTIONS_PER_PASS of the decided evictions, in order, those a disruption budget refused lately last, so
   * the others get their turn meanwhile. A pass stays short, so new evidence on other nodes is not reported behind a
   * queue of evictions.
   */
  plan(actions: readonly Action[]): EvictionPlan {
    const now = this.deps.clock.now();
    for (const [uid, until] of this.refused) if (until <= now) this.refused.delete(uid);
    const evictions = actions.filter(isEviction);
    const refusedLately = (a: Eviction) => (this.refused.get(a.pod.uid) ?? 0) > now;
    const ordered = [...evictions.filter((a) => !refusedLately(a)), ...evictions.filter(refusedLately)];
    return {
      evictions: ordered.slice(0, EVICTIONS_PER_PASS),
      left: Math.max(0, ordered.length - EVICTIONS_PER_PASS),
    };
  }

  /**
   * The eviction log to write before evicting: each planned eviction stamped with the latest moment it can be carried
   * out (its request times out then), so a crash leaves the window counted from then, never from before the apiserver
   * could have acted on it.
   */
  reservation(status: SandboxPolicyStatus | undefined, planned: number, now: Date): string[] | undefined {
    const deadline = new Date(this.deps.clock.now() + REQUEST_TIMEOUT_MS);
    return this.budget.reserve(status?.recentEvictions, now, planned, deadline);
  }

  /** Evicts, side by side under the write limit; each result is handed to `report` as it comes. */
  async evict(
    evictions: readonly Eviction[],
    actuator: Actuator,
    failures: Failures,
    report: (result: ActionResult) => void,
  ): Promise<EvictionsDone> {
    const { clock, expectations } = this.deps;
    const blocked: BlockedAction[] = [];
    const evictedAt: number[] = [];
    await forEachLimit(evictions, this.deps.writeConcurrency, async (action) => {
      try {
        const outcome = await actuator.evict(action.pod);
        if (outcome.result === 'Blocked') {
          this.refused.set(action.pod.uid, clock.now() + EVICTION_REFUSED_MS);
          blocked.push({
            kind: action.kind,
            node: action.node,
            target: action.target,
            guard: 'DisruptionBudget',
            message: outcome.message,
          });
          return;
        }
        if (outcome.result === 'Gone') return; // already gone: nothing was evicted, no budget spent
        // A simulated eviction leaves the pod where it is: nothing to wait for (a real run may need to evict it).
        if (outcome.result === 'Evicted')
          expectations.expectRemoval(EVICTED, action.pod.uid, EVICTION_IN_FLIGHT_MS);
        // The answer came after the apiserver acted: a moment no earlier than the eviction, as the window needs.
        evictedAt.push(clock.now());
        this.lastOn.set(action.node, clock.now());
        report({ action, outcome: 'Succeeded' });
      } catch (err) {
        failures.add(`eviction of ${action.target}`, err);
        report({ action, outcome: 'Failed', detail: err instanceof Error ? err.message : String(err) });
        // No answer (a timeout, a reset, a 5xx) may still have evicted it: it spends budget. A refusal did not.
        if (!isRefusal(err)) evictedAt.push(clock.now());
      }
    });
    return { blocked, evictedAt };
  }

  /**
   * The log after evicting: each eviction at the moment its answer came (no earlier than the apiserver acted);
   * counted from the pass's start, the next minute's first eviction followed the last one by 59.9 s. Refused ones
   * spent nothing.
   */
  log(status: SandboxPolicyStatus | undefined, evictedAt: readonly number[], now: Date): string[] {
    const answered = evictedAt.map((t) => new Date(t));
    return this.budget.spent(status?.recentEvictions, now, answered);
  }
}

/** The apiserver answered no: nothing was evicted (a 4xx; a 429 is a refusal too). */
function isRefusal(err: unknown): boolean {
  const code = apiStatus(err)?.code;
  return code !== undefined && code >= 400 && code < 500;
}
