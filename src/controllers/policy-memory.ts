import type {
  IoAttribution,
  NodeStamps,
  SandboxHealthStatus,
  SandboxPolicySpec,
} from '../api/v1alpha1/index.js';
import type { MeasuredPod, NodeFindings, NodeView, PodView } from '../detection/index.js';
import type { BlockedAction } from '../policy/actions.js';
import type { IoCauseDecision } from '../policy/io-cause.js';
import type { IoPressureDecision } from '../policy/io-pressure.js';
import type { NodeFacts } from '../policy/node-facts.js';
import type { NodeLeaseView } from '../policy/node-lease.js';
import type { IoSource } from '../signals/types.js';
import type { DetectionStatus } from '../status/health-status.js';

/** One node as a pass sees it: the cache, this pass's detection and IO judgement, and its stored status. */
export interface NodeObservation {
  node: NodeView;
  previous: SandboxHealthStatus | undefined;
  exists: boolean;
  findings: NodeFindings;
  io: IoPressureDecision | undefined;
  detection: DetectionStatus;
  /** Running pods to migrate: those selected by label, or the measured culprits (by measuredIo). */
  ioHeavyPods: MeasuredPod[];
  /** Who does the device's IO, its pods named; absent on a quiet node with no attribution. */
  attribution?: IoAttribution | undefined;
  /**
   * The reading's attribution as measured, its pods by UID alone, whatever the pressure: what a limited pod does on a
   * node no longer saturated (its IO limit is lifted once it wants no more).
   */
  measured?: IoAttribution | undefined;
  cause?: IoCauseDecision | undefined;
  /** Its medik8s lease (node-<node> in medik8s-leases), when there is one. */
  lease?: NodeLeaseView | undefined;
  /**
   * The rollouts (workloadKey) that run a pod on the node: read only for a saturated node of a policy that throttles
   * rollouts; absent when not read (a rollout is then held there only for its stuck pods).
   */
  runningRollouts?: ReadonlySet<string> | undefined;
  /** The node's resourceVersion when observed: a change decided on this view is made on this version or not at all. */
  version: string | undefined;
  /** When the node's state changes with time alone (a pod crossing the threshold, sustain, recovery, a reading going stale). */
  dueAt: number;
  /**
   * How many of our SandboxHealth writes of the node had applied when its `previous` was read (UnreportedResults): one
   * applying after that makes this look stale, and it is looked at again before anything is decided on it.
   */
  reportsApplied: number;
}

/**
 * The remediation part of a node's report, as the policy's last carried-out decision left it: what is blocked, the
 * stamps it carries (only what was written), whether it is unschedulable, the rollouts held for it. Set only once the
 * decision's writes are back, so a report never claims what is still in flight.
 */
export interface RemediationParts {
  blocked: readonly BlockedAction[];
  stampsAfter: NodeStamps | undefined;
  unschedulable: boolean;
  throttling: readonly string[];
  notTriggered: { reason: string; message: string } | undefined;
  /** Whether stampsAfter exist only in status (a dry run). */
  simulated: boolean;
  dryRun: boolean;
}

/** What one policy's passes keep of one of its nodes. */
export interface NodeState {
  /** The node as the last pass that looked at it saw it; absent until a pass looks (again, after a full pass). */
  observation?: NodeObservation;
  /**
   * Its facts as last computed, and what they were computed from: reused while the node's observation, unreported
   * results (UnreportedResults.changed, `reported`) and dry run are the same (the policy reconciler's); dropped when
   * its remediation changes (setRemediation).
   */
  facts?: { dryRun: boolean; reported: number; observation: NodeObservation; facts: NodeFacts };
  /** The remediation its reports say; absent until a decision about it has been carried out in this process. */
  remediation?: RemediationParts;
  /** The blocks counted already (blockKey): each is counted once, when first decided. */
  countedBlocks?: ReadonlySet<string>;
  /** The running pods the node's IO consumers were named from, while the same consumers are named. */
  pods?: { key: string; byId: ReadonlyMap<string, PodView> };
  /**
   * The node's culprits (by UID, or namespace/name) and since when each has been one, in ms: kept across full passes
   * (a culprit must be one for sustainSeconds before it moves), gone with the attribution.
   */
  culprits?: Map<string, number>;
  /** Of its candidates to move, by pod UID, the claims bound to the node (read once per pod while a candidate). */
  claims?: ReadonlyMap<string, string[]>;
  /** The rollouts (workloadKey) with a pod running on the node, and when that was read (ms): a live read, kept a while. */
  rollouts?: { at: number; keys: ReadonlySet<string> };
}

/** Each look's first version: a look our reports moved along is still the same look. */
const firstOf = new WeakMap<NodeObservation, NodeObservation>();
const lookOf = (observation: NodeObservation) => firstOf.get(observation) ?? observation;

/**
 * What this process remembers of one policy's passes, in one object, so that a deleted policy is forgotten in one
 * call: what its last pass saw and decided of each node, the nodes changed since, and its IO source. What the other
 * concerns keep of a policy is theirs (docs/architecture.md, Who owns what).
 */
export class PolicyMemory {
  /** The policy object it remembers: one deleted and made again under the same name starts afresh. */
  constructor(readonly uid: string) {}

  generation = Number.NaN;
  /** The owned node names: a change of ownership means a full pass. */
  private owned: readonly string[] = [];
  /** The next full pass: the resync, or the next poll of a polled IO source. */
  fullPassAt = 0;
  readonly nodes = new Map<string, NodeState>();
  private source: { key: string; source: IoSource; error?: string } | undefined;
  private dirty: Set<string> | 'all' = 'all';

  /** Notes what changed for the next pass: one node, or (no node) everything the policy owns. */
  markDirty(node?: string): void {
    if (this.dirty === 'all') return;
    if (node === undefined) this.dirty = 'all';
    else this.dirty.add(node);
  }

  /**
   * Starts a pass: whether it must look at every node (first pass, a policy edit, an ownership change, a change
   * that can touch every node, or the full pass come due), and the nodes changed since the last pass.
   */
  startPass(
    generation: number,
    owned: readonly string[],
    now: number,
  ): { full: boolean; dirty: ReadonlySet<string> } {
    const dirty = this.dirty;
    this.dirty = new Set();
    const full =
      dirty === 'all' ||
      this.generation !== generation ||
      !sameNodes(this.owned, owned) ||
      now >= this.fullPassAt;
    if (full) {
      this.generation = generation;
      this.owned = owned;
      this.fullPassAt = Infinity;
      const keep = new Set(owned);
      for (const [node, state] of this.nodes) {
        if (!keep.has(node)) this.nodes.delete(node);
        delete state.observation;
        delete state.facts;
        delete state.pods;
      }
    }
    return { full, dirty: dirty === 'all' ? new Set() : dirty };
  }

  state(node: string): NodeState {
    let state = this.nodes.get(node);
    if (!state) this.nodes.set(node, (state = {}));
    return state;
  }

  /**
   * Our report of the node applied: the look it was planned from, with what the API holds now. The look is replaced,
   * never changed, so that what holds it (a decision being carried out) reads what it was decided on. True when a
   * newer look was taken meanwhile: it read the status from before the write, and must be taken again.
   */
  reported(
    node: string,
    look: NodeObservation,
    now: Partial<Pick<NodeObservation, 'exists' | 'previous' | 'reportsApplied'>>,
  ): boolean {
    const state = this.nodes.get(node);
    const current = state?.observation;
    if (!state || !current) return false;
    if (lookOf(current) !== lookOf(look)) return true;
    const moved = { ...current, ...now };
    firstOf.set(moved, lookOf(current));
    state.observation = moved;
    return false;
  }

  observations(): NodeObservation[] {
    const observed: NodeObservation[] = [];
    for (const state of this.nodes.values()) if (state.observation) observed.push(state.observation);
    return observed;
  }

  /** The policy's IO source: kept while its ioPressure settings stay the same (polled ones keep their readings). */
  sourceFor(spec: SandboxPolicySpec, build: (spec: SandboxPolicySpec) => IoSource): IoSource {
    const io = spec.ioPressure;
    const key = JSON.stringify([io.source, io.prometheus, io.nodeCondition]);
    if (this.source?.key !== key) this.source = { key, source: build(spec) };
    return this.source.source;
  }

  /** Records the source's last error; true when it differs from the one before (said once per change). */
  sourceFailed(error: string | undefined): boolean {
    if (!this.source) return false;
    const changed = this.source.error !== error;
    if (error === undefined) delete this.source.error;
    else this.source.error = error;
    return changed;
  }
}

/** The same nodes in the same order (the same array, while ownership holds, costs nothing to compare). */
const sameNodes = (a: readonly string[], b: readonly string[]) =>
  a === b || (a.length === b.length && a.every((node, i) => node === b[i]));

/** The memories of every policy, by name. */
export class PolicyMemories {
  private readonly memories = new Map<string, PolicyMemory>();
  of(policy: string, uid: string): PolicyMemory {
    let memory = this.memories.get(policy);
    if (memory?.uid !== uid) this.memories.set(policy, (memory = new PolicyMemory(uid)));
    return memory;
  }

  /** A change for a policy's next pass; nothing to note for a policy with no pass yet (its first is full). */
  markDirty(policy: string, node?: string): void {
    this.memories.get(policy)?.markDirty(node);
  }

  forget(policy: string): void {
    this.memories.delete(policy);
  }

  /** The policy's memory, if it has had a pass. */
  get(policy: string): PolicyMemory | undefined {
    return this.memories.get(policy);
  }

  get size(): number {
    return this.memories.size;
  }
}
