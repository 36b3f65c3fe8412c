// The in-place remedy, the operator's side (spec.remediation.limitIo, issue 44, ADR 0031): for each node a policy
// owns, the IO limits it wants on the node's culprit pods, decided by decideLimits on the node's reading and the
// limits read back from the node's SandboxHealth (spec.ioLimits, the agent's report in status.ioLimits), and written
// there. The node's agent applies them and reports. A limit is taken to work only once the report shows it applied;
// an entry someone else removed is theirs (the pod is held for cooldownSeconds); a limit the agent could not apply
// hands the pod on to the next remedy.
import {
  MAX_IO_LIMITS_PER_NODE,
  LimitIoSchema,
  type LimitIo,
  type SandboxPolicySpec,
  type WantedIoLimitSpec,
} from '../../api/v1alpha1/index.js';
import type { PodView } from '../../detection/index.js';
import { decideLimits, type LimitDecision, type PodLimit } from '../../policy/io-limit.js';
import { limitKey, readBack, wishOf } from '../../policy/io-limit-wish.js';
import type { NodeFacts } from '../../policy/node-facts.js';
import type { ClusterCache, HealthObject, PolicyObject } from '../../ports/cluster.js';
import { isConflict } from '../../ports/errors.js';
import type { EventRecorder, StatusWriter } from '../../ports/writes.js';
import { TerminalError } from '../../runtime/controller.js';
import type { Expectations } from '../../runtime/expectations.js';
import { REFUSAL_RETRY_MS } from '../remediation/refused-changes.js';
import {
  limitEvent,
  liftedByOthersEvent,
  notAppliedEvent,
  otherPolicyLiftedEvent,
} from '../../status/io-limit-events.js';
import type { Failures } from '../failures.js';
import type { NodeObservation } from '../policy-memory.js';
import { fingerprint, notAppliedOf, sameList, type NotApplied } from './lists.js';
import { inIoIncident, measuredPods, ripeCulprits, type StampRefusals } from './measured-pods.js';
const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;
/** A limit the agent has not reported applied within this long (or twice sustainSeconds) counts as not applied. */
const UNREPORTED_MIN_MS = 60_000;
/** The settings a policy without limitIo lifts its limits with (only `active: false` is read then). */
const DEFAULTS: LimitIo = LimitIoSchema.parse({});

/** What a pass decided about one node's limits, with what it needs to write them. */
export interface NodeLimitPlan {
  node: string;
  /** spec.ioLimits as read (undefined: absent): the write applies only while it still holds this. */
  read: readonly WantedIoLimitSpec[] | undefined;
  /** The SandboxHealth's version it was read on: an absent list is added only to that version. */
  version: string | undefined;
  /** spec.ioLimits to write, whole; undefined: as it is. */
  wish: WantedIoLimitSpec[] | undefined;
  decisions: LimitDecision[];
  /** This policy's entries someone else removed since the operator last wrote the list: lifted by a person. */
  liftedByOthers: WantedIoLimitSpec[];
  /** Another policy's entries (one deleted, or the node's former owner), lifted by this write. */
  othersLifted: WantedIoLimitSpec[];
  /** Limits the agent's report says it did not apply, and why: the pod goes on to the next remedy. */
  notApplied: NotApplied[];
}

export interface IoLimitPlan {
  policy: string;
  dryRun: boolean;
  /** How long a pod whose limit a person lifted is left alone. */
  cooldownSeconds: number;
  nodes: NodeLimitPlan[];
}

export interface IoLimitPlanInput {
  policy: PolicyObject;
  spec: SandboxPolicySpec;
  dryRun: boolean;
  now: Date;
  observations: readonly NodeObservation[];
  facts: ReadonlyMap<string, NodeFacts>;
  /**
   * What the pass looked at: every owned node (a full pass), or those changed since the last. Any other node is
   * planned again only if it has or wants a limit: so a pass that looked at one node costs one node, not every node.
   */
  looked: { full: boolean; observed: ReadonlySet<string> };
  /**
   * Per node, as the policy's look left them: its running pods by UID, as last read (none: not read, so no pod is
   * known gone or new), and since when (ms) each pod has been a culprit (the clock migration waits on).
   */
  memory: {
    /** The policy's nodes, each with the look its last pass took (absent: not looked at since the last full pass). */
    nodes: ReadonlyMap<string, { observation?: NodeObservation }>;
    state(node: string): {
      pods?: { byId: ReadonlyMap<string, PodView> } | undefined;
      culprits?: ReadonlyMap<string, number> | undefined;
    };
  };
}

export interface IoLimiterHooks {
  onIoLimit?(policy: string, action: LimitDecision['kind'] | 'LiftedByOthers' | 'NotApplied'): void;
}

/**
 * Sets, steps and lifts the IO limits of the policies' nodes' culprit pods, and says so (an Event on each pod, a metric).
 * It owns what the API does not hold: each pod's last lift (the cooldown), since when each limited pod has been quiet,
 * the limits set per policy in the last minute (the rate), what it last wrote per node (a person's lift), a dry run's.
 */
export class IoLimiter {
  private readonly liftedAt = new Map<string, Date>();
  private readonly quietSince = new Map<string, Date>();
  private readonly recent = new Map<string, number[]>();
  /** By node, this policy's entries as the operator last wrote them, by limitKey. */
  private readonly written = new Map<string, Map<string, WantedIoLimitSpec>>();
  private readonly simulated = new Map<string, WantedIoLimitSpec[]>();
  /** By node, a list the apiserver refused for what it is (403, 422), and when: not sent again as it is for a while. */
  private readonly refused = new Map<string, { wish: string; at: number }>();
  /** The nodes whose list held entries when last planned (a full pass plans every node): planned at every pass. */
  private readonly limited = new Set<string>();
  /** "key state" of each limit whose not being applied was said, so it is said once. */
  private readonly announced = new Set<string>();

  constructor(
    private readonly deps: {
      cache: ClusterCache;
      writer: StatusWriter;
      expectations: Expectations;
      recorder: EventRecorder;
      operatorNamespace?: string | undefined;
      hooks?: IoLimiterHooks | undefined;
      stamps?: StampRefusals | undefined;
    },
  ) {}

  /** The limits of each node of the policy that has or wants some; undefined when none has or wants any. */
  plan(input: IoLimitPlanInput): IoLimitPlan | undefined {
    const { cache, expectations } = this.deps;
    const { policy, spec, dryRun, now } = input;
    const settings = spec.remediation.limitIo;
    const active = settings !== undefined && !spec.safety.paused;
    let budget = active ? this.budget(policy.name, settings.maxLimitsPerMinute, now) : 0;
    // No cooldown is longer than a day (the schema's bound): older lifts are forgotten.
    for (const [uid, at] of this.liftedAt)
      if (now.getTime() - at.getTime() > DAY_MS) this.liftedAt.delete(uid);
    const nodes: NodeLimitPlan[] = [];
    const { full, observed } = input.looked;
    for (const observation of this.candidates(input, active)) {
      const name = observation.node.name;
      if (!dryRun) this.simulated.delete(name); // a dry run ended: its limits were never set
      // Unchanged since the last pass, with no limit, and no culprit to limit: nothing to plan.
      const wants = active && observation.cause?.cause === 'Pod';
      if (!full && !observed.has(name) && !wants && !this.holds(name)) continue;
      const health = cache.health(name);
      // No SandboxHealth yet (its report makes it), or a list that is none of ours to rewrite: left alone.
      if (!health || health.ioLimitsUnreadable) continue;
      const read = dryRun ? this.simulated.get(name) : health.ioLimits;
      const entries = read?.length ?? 0;
      if (entries > 0) this.limited.add(name);
      else this.limited.delete(name);
      if (!active && entries === 0) continue;
      // Our last write of the list not yet shown by the watch: decided on once it is.
      if (!expectations.isSettled(ioLimitsKey(name), cache.observedVersion('SandboxHealth', name))) continue;
      const node = this.planNode(input, observation, health, read, budget);
      budget -= node.spent;
      if (node.plan) nodes.push(node.plan);
    }
    const cooldownSeconds = (settings ?? DEFAULTS).cooldownSeconds;
    return nodes.length > 0 ? { policy: policy.name, dryRun, cooldownSeconds, nodes } : undefined;
  }

  /** One node's limits: read back, decided, and what to write and say; `spent` of the rate's budget. */
  private planNode(
    input: IoLimitPlanInput,
    observation: NodeObservation,
    health: HealthObject,
    read: readonly WantedIoLimitSpec[] | undefined,
    budget: number,
  ): { spent: number; plan?: NodeLimitPlan } {
    const { cache } = this.deps;
    const { policy, spec, dryRun, now } = input;
    const settings = spec.remediation.limitIo;
    const active = settings !== undefined && !spec.safety.paused;
    const name = observation.node.name;
    const back = readBack(read, health.status?.ioLimits, policy.name);
    const limits = back.limits.map((l) => {
      const quiet = this.quietSince.get(limitKey({ podUid: l.uid, device: l.device }));
      return quiet ? { ...l, quietSince: quiet } : l;
    });
    const state = (l: PodLimit) => back.states.get(limitKey({ podUid: l.uid, device: l.device }));
    // What we wrote that is gone, and not by our hand: a person lifted it, and its pod's cooldown starts now.
    const present = new Set((read ?? []).map(limitKey));
    // A dry run compares nothing with what a real run wrote: its list is its own.
    const liftedByOthers = dryRun
      ? []
      : [...(this.written.get(name)?.values() ?? [])].filter((e) => !present.has(limitKey(e)));
    const liftedAt = new Map(this.liftedAt);
    for (const lifted of liftedByOthers) liftedAt.set(lifted.podUid, now);
    const running = input.memory.state(name).pods?.byId;
    const goneUids = new Set(limits.filter((l) => state(l) === 'PodGone').map((l) => l.uid));
    const facts = input.facts.get(name);
    const device = observation.attribution?.deviceNumber;
    const decided = decideLimits({
      settings: settings ?? DEFAULTS,
      now,
      active,
      io: facts?.io ?? 'Unknown',
      ioStuck: inIoIncident(facts),
      ...(device ? { device } : {}),
      pods: ripeCulprits(
        measuredPods(observation, running, limits, this.deps.operatorNamespace, facts?.io === 'Low'),
        observation.cause,
        {
          since: input.memory.state(name).culprits,
          sustainSeconds: spec.ioPressure.sustainSeconds,
          now,
          stampRefused: (uid) => this.deps.stamps?.refused(uid, now) ?? false,
        },
      ),
      // Not read: no limited pod is known gone, and no pod new. One whose cgroup the agent found gone is gone.
      running: new Set(
        [...(running ? running.keys() : limits.map((l) => l.uid))].filter((uid) => !goneUids.has(uid)),
      ),
      limits,
      liftedAt,
      budget,
      maxLimits:
        MAX_IO_LIMITS_PER_NODE - (read ?? []).filter((e) => e.policy === policy.name).length + limits.length,
      unverified: new Set(limits.filter((l) => state(l) !== 'Applied').map((l) => l.uid)),
      unsteppable: new Set(limits.filter((l) => this.deps.stamps?.refused(l.uid, now)).map((l) => l.uid)),
    });
    const spent = decided.decisions.filter((d) => d.kind === 'Set' || d.kind === 'Step').length;
    // A limit the agent could not apply (no --allow-io-limits, no cgroup, a failed write, no answer) hands the pod on.
    const unreportedMs = Math.max(UNREPORTED_MIN_MS, 2 * (settings ?? DEFAULTS).sustainSeconds * 1000);
    const notApplied = dryRun ? [] : notAppliedOf(decided.limits, state, now, unreportedMs);
    const handed = new Set(notApplied.map((n) => n.limit.uid));
    const own = wishOf(
      decided.limits.map((l) => (handed.has(l.uid) ? { ...l, exhausted: true as const } : l)),
      policy.name,
    );
    // Entries of this policy that are none the operator writes stay as they are; others' are lifted.
    const kept = (read ?? []).filter(
      (e) =>
        e.policy === policy.name && !back.limits.some((l) => l.uid === e.podUid && l.device === e.device),
    );
    const wish = [...kept, ...own];
    for (const l of decided.limits) this.keepQuiet(l);
    if (
      decided.decisions.length === 0 &&
      sameList(read, wish) &&
      liftedByOthers.length === 0 &&
      notApplied.length === 0
    )
      return { spent };
    // A list the apiserver refused for what it is (an admission policy that does not know this ServiceAccount) is not
    // sent again, nor its decisions said, until it changes or REFUSAL_RETRY_MS pass: said once, in the log.
    const refused = this.refused.get(name);
    if (refused && refused.wish === fingerprint(wish) && now.getTime() - refused.at < REFUSAL_RETRY_MS)
      return { spent: 0 };
    const plan: NodeLimitPlan = {
      node: name,
      read,
      version: cache.observedVersion('SandboxHealth', name),
      wish: sameList(read, wish) ? undefined : wish,
      decisions: decided.decisions,
      liftedByOthers,
      othersLifted: back.others,
      notApplied,
    };
    return { spent, plan };
  }

  /** Writes each node's list (a dry run keeps it here) and says what changed; a failed write is retried by the queue. */
  async act(plan: IoLimitPlan | undefined, failures: Failures, now: Date, markDirty: (node: string) => void) {
    if (!plan) return;
    for (const node of plan.nodes) {
      if (node.wish) {
        if (plan.dryRun) this.simulated.set(node.node, node.wish);
        else if (!(await this.write(plan.policy, node, failures, markDirty, now))) continue;
      }
      await this.recordEvents(plan, node, now);
    }
  }

  /**
   * The nodes a pass may plan: every node on a full pass, or while the policy limits (a culprit may be on any node);
   * else only those it looked at and those with limits, so a pass about one node without limitIo walks no other.
   */
  private candidates(input: IoLimitPlanInput, active: boolean): Iterable<NodeObservation> {
    if (input.looked.full || active) return input.observations;
    const { observed } = input.looked;
    const names = new Set([...observed, ...this.limited, ...this.written.keys(), ...this.simulated.keys()]);
    return [...names].flatMap((name) => input.memory.nodes.get(name)?.observation ?? []);
  }

  /** Whether a node has limits of ours, read or written: planned at every pass, for its steps and lifts come with time. */
  private holds(node: string): boolean {
    return (
      this.limited.has(node) ||
      (this.written.get(node)?.size ?? 0) > 0 ||
      (this.simulated.get(node)?.length ?? 0) > 0
    );
  }

  /** A node, or its SandboxHealth, gone from the cluster: what the limiter keeps of its list goes. */
  forgetNode(node: string): void {
    this.limited.delete(node);
    this.written.delete(node);
    this.simulated.delete(node);
    this.refused.delete(node);
    this.deps.expectations.forget(ioLimitsKey(node));
  }

  private async write(
    policy: string,
    node: NodeLimitPlan,
    failures: Failures,
    markDirty: (node: string) => void,
    now: Date,
  ): Promise<boolean> {
    const wish = node.wish ?? [];
    try {
      const version = await this.deps.writer.patchHealthIoLimits(node.node, wish, node.read, node.version);
      this.deps.expectations.expect(ioLimitsKey(node.node), version);
      // Looked at again behind the expectation: what migration may take depends on the list (an exhausted limit).
      markDirty(node.node);
      this.written.set(
        node.node,
        new Map(wish.filter((e) => e.policy === policy).map((e) => [limitKey(e), e])),
      );
      return true;
    } catch (err) {
      markDirty(node.node);
      if (err instanceof TerminalError)
        this.refused.set(node.node, { wish: fingerprint(wish), at: now.getTime() });
      failures.add(
        isConflict(err)
          ? `spec.ioLimits of sandboxhealth/${node.node} (changed meanwhile)`
          : `spec.ioLimits of sandboxhealth/${node.node}`,
        err,
      );
      return false;
    }
  }

  /** The Events, the metric, and what the limiter keeps of what was done. */
  private async recordEvents(plan: IoLimitPlan, node: NodeLimitPlan, now: Date): Promise<void> {
    const { recorder, hooks } = this.deps;
    const count = (action: Parameters<NonNullable<IoLimiterHooks['onIoLimit']>>[1]) =>
      hooks?.onIoLimit?.(plan.policy, action);
    for (const decision of node.decisions) {
      if (decision.kind === 'Set' || decision.kind === 'Step') this.spend(plan.policy, now);
      if (decision.kind === 'Lift') this.forgetLimit(decision.pod.uid, decision.pod.device, now);
      const event = limitEvent(decision, node.node, plan.dryRun);
      if (event) {
        count(decision.kind);
        await recorder.record(event);
      }
    }
    for (const lifted of node.liftedByOthers) {
      this.forgetLimit(lifted.podUid, lifted.device, now);
      this.written.get(node.node)?.delete(limitKey(lifted));
      count('LiftedByOthers');
      await recorder.record(liftedByOthersEvent(node.node, lifted, plan.cooldownSeconds));
    }
    if (node.wish && !plan.dryRun)
      for (const other of node.othersLifted) {
        count('Lift');
        await recorder.record(otherPolicyLiftedEvent(node.node, other, plan.policy));
      }
    for (const { limit, state } of node.notApplied) {
      const key = `${limitKey({ podUid: limit.uid, device: limit.device })} ${state}`;
      if (this.announced.has(key)) continue;
      this.announced.add(key);
      count('NotApplied');
      await recorder.record(notAppliedEvent(node.node, limit, state));
    }
  }

  /** A limit lifted (by us or by a person): the pod's cooldown starts, and what was kept of the limit goes. */
  private forgetLimit(podUid: string, device: string, now: Date): void {
    const key = limitKey({ podUid, device });
    this.liftedAt.set(podUid, now);
    this.quietSince.delete(key);
    for (const one of this.announced) if (one.startsWith(`${key} `)) this.announced.delete(one);
  }

  private keepQuiet(limit: PodLimit): void {
    const key = limitKey({ podUid: limit.uid, device: limit.device });
    if (limit.quietSince) this.quietSince.set(key, limit.quietSince);
    else this.quietSince.delete(key);
  }

  /** Limits set or stepped for the policy in the last minute, less the cap. */
  private budget(policy: string, perMinute: number, now: Date): number {
    const kept = (this.recent.get(policy) ?? []).filter((t) => now.getTime() - t < MINUTE_MS);
    this.recent.set(policy, kept);
    return Math.max(0, perMinute - kept.length);
  }

  private spend(policy: string, now: Date): void {
    this.recent.set(policy, [...(this.recent.get(policy) ?? []), now.getTime()]);
  }
}

/** The expectation key of our writes of a node's spec.ioLimits. */
export const ioLimitsKey = (node: string) => `IoLimits/${node}`;
