// The stamps on the pods the operator limits in place (limitIo, ADR 0031): each pod with an entry in its node's
// spec.ioLimits carries IO_LIMIT_STAMP (whose limit, io.max's line, since when), written before the list that asks
// the agent for the limit, and taken off once the list names the pod no more and the agent's report holds no limit of
// ours on it. The operator does not watch running pods, so it keeps what it last wrote on each: a restarted operator
// writes each pod's stamps once again (a patch that changes nothing), and cleanup takes off any left where the
// operator was not running to.
import type { Actuator } from '../../actuation/actuator.js';
import { IO_LIMIT_UNSTAMPED } from '../../api/v1alpha1/index.js';
import { stampChanges, type StampChange, type StampedPod } from '../../policy/io-limit-stamp.js';
import type { ClusterCache } from '../../ports/cluster.js';
import type { EventRecorder } from '../../ports/writes.js';
import type { Clock } from '../../runtime/clock.js';
import { TerminalError } from '../../runtime/controller.js';
import { forEachLimit } from '../../runtime/limit.js';
import { stampsRefusedEvent } from '../../status/io-limit-events.js';
import type { Failures } from '../failures.js';
import type { Expectations } from '../../runtime/expectations.js';
import { REFUSAL_RETRY_MS } from '../remediation/refused-changes.js';
import { ioLimitsKey, type IoLimiterHooks, type IoLimitPlan, type NodeLimitPlan } from './limiter.js';

/** Pod patches in flight at once: a restarted operator stamps every limited pod of its nodes once. */
const STAMP_CONCURRENCY = 4;

export class IoLimitStamps {
  /** By node, then pod UID: what the operator last wrote on each pod, or that the pod was gone. */
  private readonly stamped = new Map<string, Map<string, StampedPod>>();
  /**
   * By pod UID, the pods whose stamps the apiserver refused for what they are (a webhook or an admission policy of the
   * cluster's that denies their update), with their node and when: none is stamped again, nor a limit set or stepped
   * on it, for REFUSAL_RETRY_MS, and migration may take it meanwhile. Only pods the plan stamps get one (the limits'
   * rate and each node's list bound them); lapsed ones go at the next plan, and a node's with it.
   */
  private readonly refusals = new Map<string, { node: string; at: number }>();

  constructor(
    private readonly deps: {
      cache: ClusterCache;
      expectations: Expectations;
      recorder: EventRecorder;
      clock: Clock;
      hooks?: IoLimiterHooks | undefined;
    },
  ) {}

  /** Whether the pod's stamps were refused lately: no limit can be asked for on it (not unstamped), so it may move. */
  refused(uid: string, now: Date): boolean {
    const refusal = this.refusals.get(uid);
    return refusal !== undefined && now.getTime() - refusal.at < REFUSAL_RETRY_MS;
  }

  /**
   * The stamps to write on the policy's nodes the pass looked at (every one on a full pass), those the limit plan
   * writes, and those with pods stamped: each node's list as the plan will write it, else as read, and the agent's
   * report. None in a dry run (it writes nothing), nor on a node whose list does not parse, nor on one whose last
   * list write the watch does not show yet (read there, the list is older than what the operator wrote).
   */
  plan(input: {
    dryRun: boolean;
    owned: readonly string[];
    looked: { full: boolean; observed: ReadonlySet<string> };
    limits: IoLimitPlan | undefined;
  }): StampChange[] {
    if (input.dryRun) return [];
    const { cache, expectations, clock } = this.deps;
    const now = new Date(clock.now());
    for (const [uid, { at }] of this.refusals)
      if (now.getTime() - at >= REFUSAL_RETRY_MS) this.refusals.delete(uid);
    const planned = new Map(input.limits?.nodes.map((n) => [n.node, n.wish]));
    const wanted = (node: string) =>
      input.looked.full || input.looked.observed.has(node) || planned.has(node) || this.stamped.has(node);
    const changes: StampChange[] = [];
    for (const node of input.owned) {
      if (!wanted(node)) continue;
      const health = cache.health(node);
      const read = health?.ioLimits ?? [];
      const list = planned.get(node) ?? read;
      // Nothing of ours listed nor stamped there (nearly every node, on a full pass): nothing allocated for it.
      if (list.length === 0 && read.length === 0 && !this.stamped.has(node)) continue;
      if (health?.ioLimitsUnreadable) continue;
      // (The limiter plans no such node: a planned one is settled.)
      if (!expectations.isSettled(ioLimitsKey(node), cache.observedVersion('SandboxHealth', node))) continue;
      const stamped = this.stamped.get(node) ?? new Map<string, StampedPod>();
      const held = new Set((health?.status?.ioLimits?.applied ?? []).map((a) => a.podUid));
      // Refused lately: not sent again (a restarted operator, which has written none, would at every pass).
      for (const change of stampChanges({ node, list, read, held, stamped }))
        if (change.annotations === IO_LIMIT_UNSTAMPED || !this.refused(change.pod.uid, now))
          changes.push(change);
      // A pod found gone is forgotten once the list names it no more.
      const named = new Set(read.map((e) => e.podUid));
      for (const [uid, last] of stamped) if (!last.stamps && !named.has(uid)) stamped.delete(uid);
      if (stamped.size === 0) this.stamped.delete(node);
    }
    return changes;
  }

  /**
   * Writes one node's stamps; the pods (UIDs) whose stamps could not be put on, so that no limit is asked for on them
   * without (see unstampedHeldBack). Said in the log; one that got no answer is retried by the queue (the pass fails),
   * and one the apiserver refused for what it is (a TerminalError: 400, 422, an admission policy's or webhook's 403) is
   * said on the pod and kept (refused), for the policy's pass (`policy`, which the metric counts).
   */
  async act(
    changes: readonly StampChange[],
    actuator: Actuator,
    failures: Failures,
    policy: string,
  ): Promise<Set<string>> {
    const unstamped = new Set<string>();
    await forEachLimit(changes, STAMP_CONCURRENCY, async ({ node, pod, annotations }) => {
      try {
        const found = await actuator.stampPod(pod, annotations);
        const stamped = this.stamped.get(node) ?? new Map<string, StampedPod>();
        if (annotations === IO_LIMIT_UNSTAMPED) stamped.delete(pod.uid);
        else stamped.set(pod.uid, { ...pod, node, stamps: found ? annotations : undefined });
        if (stamped.size > 0) this.stamped.set(node, stamped);
        else this.stamped.delete(node);
      } catch (err) {
        failures.add(`IO-limit stamps of pod/${pod.namespace}/${pod.name}`, err);
        if (annotations === IO_LIMIT_UNSTAMPED) return;
        unstamped.add(pod.uid);
        if (err instanceof TerminalError) await this.refuse(policy, node, pod, err);
      }
    });
    return unstamped;
  }

  /**
   * A pod whose stamps were refused for what they are: kept (refused) from the first refusal, said on the pod once
   * for each time it is kept (once per REFUSAL_RETRY_MS, and once more after a restart), and counted as not applied.
   */
  private async refuse(policy: string, node: string, pod: StampChange['pod'], err: TerminalError) {
    const { cache, recorder, clock, hooks } = this.deps;
    if (this.refused(pod.uid, new Date(clock.now()))) return;
    this.refusals.set(pod.uid, { node, at: clock.now() });
    hooks?.onIoLimit?.(policy, 'NotApplied');
    // Limited already: its entry is in the list as read (what the operator last wrote on the pod may be gone, restarted).
    const limited = (cache.health(node)?.ioLimits ?? []).some((e) => e.podUid === pod.uid);
    const why = err.message;
    // The Event is what an SRE reads of it; one lost is in the log above (failures).
    await recorder
      .record(stampsRefusedEvent({ node, pod, why, limited, retrySeconds: REFUSAL_RETRY_MS / 1000 }))
      .catch(() => undefined);
  }

  /** A node gone: the pods it held are gone with it. */
  forgetNode(node: string): void {
    this.stamped.delete(node);
    for (const [uid, refusal] of this.refusals) if (refusal.node === node) this.refusals.delete(uid);
  }
}

/**
 * A node's limit plan less what it would ask for on pods whose stamps could not be put on: their new or stepped
 * entries stay as read (and their Set and Step are not said), so no limit is asked for on an unstamped pod; the
 * node's other entries, lifts included, go as planned.
 */
export function unstampedHeldBack(node: NodeLimitPlan, unstamped: ReadonlySet<string>): NodeLimitPlan {
  if (unstamped.size === 0 || !node.wish) return node;
  const held = (uid: string) => unstamped.has(uid);
  return {
    ...node,
    wish: [...node.wish.filter((e) => !held(e.podUid)), ...(node.read ?? []).filter((e) => held(e.podUid))],
    decisions: node.decisions.filter((d) => !(d.kind === 'Set' || d.kind === 'Step') || !held(d.pod.uid)),
  };
}
