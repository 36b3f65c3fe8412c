import { randomBytes } from 'node:crypto';
import type { SandboxHealthStatus } from '../../api/v1alpha1/index.js';
import type { ActionResult } from '../../status/remediation-status.js';

/** A write of a node's SandboxHealth under way. */
export interface Flight {
  /** The reportId it gives the status. */
  id: string;
  /** Its place among the node's writes: a later one that applied holds what this one wrote. */
  seq: number;
  /** What it leaves in the status once applied (of the keys we write), its reportId with it. */
  expected: SandboxHealthStatus;
  /** The results it tells: a write that follows it does not tell them again. */
  reported: readonly ActionResult[];
  /** A later write that followed it applied: so did this one, whatever its own answer says. */
  proven?: true;
  /** Resolves once it is back: whether it applied (as answered, or proven by a later one). */
  outcome: Promise<boolean>;
  settle(applied: boolean): void;
}

/**
 * A write back: whether it applied (as answered, or proven by a later one), whether it is the latest (of its node's writes
 * to apply), and the earlier writes its applying proves applied.
 */
export interface Back {
  applied: boolean;
  latest: boolean;
  proven: readonly Flight[];
}

/**
 * The Reporter's SandboxHealth writes in flight, by node: one, or two when the second follows the first, fenced on the
 * reportId the first gives the status (ADR 0026), so that the API is applied it right after the first or not at all. Each
 * write is named apart from every other this process makes. Answers can come back out of order: a write that applied
 * proves the ones it followed applied before it, and an older one answered after it is superseded.
 */
export class ReportsInFlight {
  /** Per node: writes not yet known to have applied, oldest first; writes not yet back; the latest applied (seq). */
  private readonly nodes = new Map<string, { open: Flight[]; out: number; newest: number }>();
  /** Nodes nothing may follow until no write of theirs flies: one was refused, or the node was forgotten. */
  private readonly refused = new Set<string>();
  private readonly prefix = randomBytes(4).toString('hex');
  private sequence = 0;

  /** The node's latest write not yet known to have applied: a report planned now follows it. */
  latest(node: string): Flight | undefined {
    return this.nodes.get(node)?.open.at(-1);
  }

  /**
   * Whether a report of the node may go now beside its write in flight: that one is the only one not known to have
   * applied (it follows it), or none is (the write has applied, and its answer or Events are still on their way).
   */
  mayFollow(node: string): boolean {
    return (this.nodes.get(node)?.open.length ?? 0) <= 1 && !this.refused.has(node);
  }

  /** A write of the node under way, leaving `expected` (and its reportId) and telling `reported`. */
  fly(node: string, expected: SandboxHealthStatus, reported: readonly ActionResult[]): Flight {
    const id = this.nextId();
    let settle: (applied: boolean) => void = () => undefined;
    const outcome = new Promise<boolean>((resolve) => (settle = resolve));
    const flight = {
      id,
      seq: this.sequence,
      expected: { ...expected, reportId: id },
      reported,
      outcome,
      settle,
    };
    const entry = this.nodes.get(node) ?? { open: [], out: 0, newest: 0 };
    entry.open.push(flight);
    entry.out++;
    this.nodes.set(node, entry);
    return flight;
  }

  /** The write is sent again, whole, under a new name: a write that followed it was planned on what it replaced. */
  rename(flight: Flight, expected: SandboxHealthStatus): void {
    flight.id = this.nextId();
    flight.expected = { ...expected, reportId: flight.id };
  }

  /**
   * The write that followed `flight` and is still open: when `flight` failed with no answer to say whether the API
   * applied it, that one's applying would prove it did.
   */
  follower(node: string, flight: Flight): Flight | undefined {
    return this.nodes.get(node)?.open.find((f) => f.seq > flight.seq);
  }

  /** The write is back, `answered` (it applied, as the API answered) or not (it failed, or wrote nothing). */
  back(node: string, flight: Flight, answered: boolean): Back {
    const applied = answered || flight.proven === true;
    flight.settle(applied);
    const entry = this.nodes.get(node);
    if (!entry) return { applied, latest: applied, proven: [] }; // never: flown, it is there until its last write is back
    const latest = applied && flight.seq > entry.newest;
    const proven = applied ? entry.open.filter((f) => f.seq < flight.seq) : [];
    for (const f of proven) f.proven = true;
    entry.open = entry.open.filter((f) => f !== flight && !proven.includes(f));
    if (latest) entry.newest = flight.seq;
    if (--entry.out === 0) this.nodes.delete(node);
    return { applied, latest, proven };
  }

  /** Nothing follows the node's writes in flight: one was refused for arriving first, or the node is gone. */
  refuse(node: string): void {
    this.refused.add(node);
  }

  /** Once no write of the node flies: whether one was refused, so that the node is looked at again (asked once). */
  lookAgain(node: string): boolean {
    return this.refused.delete(node);
  }

  private nextId(): string {
    return `${this.prefix}-${++this.sequence}`;
  }
}
