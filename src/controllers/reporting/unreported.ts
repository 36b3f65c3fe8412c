import { MAX_RECORDED_ACTIONS } from '../../api/v1alpha1/index.js';
import type { ActionResult } from '../../status/remediation-status.js';

/**
 * Per node, whichever policy decided about it: what was done on it that no SandboxHealth written holds yet, and when
 * our last write of its SandboxHealth landed. Kept apart from the policies' memories, so that a policy made again
 * under its name counts what its namesake did and has still to tell (its facts would otherwise miss a migration or
 * an eviction), and a look that read the status before another memory's report landed is known to be stale.
 *
 * Moments are numbers from one sequence that only grows, for every node: a node forgotten and made again under its
 * name never repeats a number a look holds.
 */
export class ReportLedger {
  private readonly nodes = new Map<string, { untold?: ActionResult[]; landed: number; changed: number }>();
  private sequence = 0;

  /** Results no report holds yet: the next report of the node does (its Events too). */
  untold(node: string): readonly ActionResult[] {
    return this.nodes.get(node)?.untold ?? [];
  }

  /** When our last SandboxHealth write of the node landed: a look that read its status before it is stale. */
  landed(node: string): number {
    return this.nodes.get(node)?.landed ?? 0;
  }

  /** When the node's untold results last changed (added or told): facts counted before then count the wrong ones. */
  changed(node: string): number {
    return this.nodes.get(node)?.changed ?? 0;
  }

  /** Whether a look read the node's status before the last of our writes of it landed: no ground for a decision. */
  stale(look: { node: { name: string }; reportsLanded: number }): boolean {
    return look.reportsLanded !== this.landed(look.node.name);
  }

  /** Notes what was done on the node; a report holds the latest MAX_RECORDED_ACTIONS, so no more are kept. */
  add(node: string, results: readonly ActionResult[]): void {
    if (results.length === 0) return;
    const entry = this.entry(node);
    entry.untold = [...(entry.untold ?? []), ...results].slice(-MAX_RECORDED_ACTIONS);
    entry.changed = ++this.sequence;
  }

  /** A report of the node landed, holding these results (others may have come meanwhile, and stay untold). */
  landedWith(node: string, told: readonly ActionResult[]): void {
    const entry = this.entry(node);
    entry.landed = entry.changed = ++this.sequence;
    untell(entry, told);
  }

  /**
   * A report of the node landed before one we already took to have landed after it (its answer came back later): its
   * results are told; the looks stay as they are, as the later report holds what it wrote.
   */
  toldBy(node: string, told: readonly ActionResult[]): void {
    const entry = this.nodes.get(node);
    if (entry && untell(entry, told)) entry.changed = ++this.sequence;
  }

  /** The node is gone (and no write of it is in flight): what was done on it has no report to go to. */
  forget(node: string): void {
    this.nodes.delete(node);
  }

  private entry(node: string) {
    let entry = this.nodes.get(node);
    if (!entry) this.nodes.set(node, (entry = { landed: 0, changed: 0 }));
    return entry;
  }
}

/** Drops the results `told` from what the entry has still to tell; whether any was there. */
function untell(entry: { untold?: ActionResult[] }, told: readonly ActionResult[]): boolean {
  const held = new Set(told);
  const untold = entry.untold ?? [];
  const left = untold.filter((result) => !held.has(result));
  if (left.length > 0) entry.untold = left;
  else delete entry.untold;
  return left.length < untold.length;
}
