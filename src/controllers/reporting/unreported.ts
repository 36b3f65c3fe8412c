import { MAX_RECORDED_ACTIONS } from '../../api/v1alpha1/index.js';
import type { ActionResult } from '../../status/remediation-status.js';

/**
 * Per node, whichever policy decided about it: what was done on it that no SandboxHealth written holds yet, and when
 * our last write of its SandboxHealth applied. Kept apart from the policies' memories, so that a policy made again
 * under its name counts what its namesake did and has still to tell (its facts would otherwise miss a migration or
 * an eviction), and a look that read the status before another memory's report applied is known to be stale.
 *
 * Moments are numbers from one sequence that only grows, for every node: a node forgotten and made again under its
 * name never repeats a number a look holds.
 */
export class UnreportedResults {
  private readonly nodes = new Map<
    string,
    { unreported?: ActionResult[]; applied: number; changed: number }
  >();
  private sequence = 0;

  /** Results no report holds yet: the next report of the node does (its Events too). */
  results(node: string): readonly ActionResult[] {
    return this.nodes.get(node)?.unreported ?? [];
  }

  /** When our last SandboxHealth write of the node applied: a look that read its status before it is stale. */
  applied(node: string): number {
    return this.nodes.get(node)?.applied ?? 0;
  }

  /** When the node's unreported results last changed (added or reported): facts counted before then count the wrong ones. */
  changed(node: string): number {
    return this.nodes.get(node)?.changed ?? 0;
  }

  /** Whether a look read the node's status before the last of our writes of it applied: no ground for a decision. */
  stale(look: { node: { name: string }; reportsApplied: number }): boolean {
    return look.reportsApplied !== this.applied(look.node.name);
  }

  /** Notes what was done on the node; a report holds the latest MAX_RECORDED_ACTIONS, so no more are kept. */
  add(node: string, results: readonly ActionResult[]): void {
    if (results.length === 0) return;
    const entry = this.entry(node);
    entry.unreported = [...(entry.unreported ?? []), ...results].slice(-MAX_RECORDED_ACTIONS);
    entry.changed = ++this.sequence;
  }

  /** A report of the node applied, holding these results (others may have come meanwhile, and stay unreported). */
  appliedWith(node: string, reported: readonly ActionResult[]): void {
    const entry = this.entry(node);
    entry.applied = entry.changed = ++this.sequence;
    dropReported(entry, reported);
  }

  /**
   * A report of the node applied before one we already took to have applied after it (its answer came back later): its
   * results are reported; the looks stay as they are, as the later report holds what it wrote.
   */
  reportedBy(node: string, reported: readonly ActionResult[]): void {
    const entry = this.nodes.get(node);
    if (entry && dropReported(entry, reported)) entry.changed = ++this.sequence;
  }

  /** The node is gone (and no write of it is in flight): what was done on it has no report to go to. */
  forget(node: string): void {
    this.nodes.delete(node);
  }

  private entry(node: string) {
    let entry = this.nodes.get(node);
    if (!entry) this.nodes.set(node, (entry = { applied: 0, changed: 0 }));
    return entry;
  }
}

/** Drops the results `reported` from what the entry has still to tell; whether any was there. */
function dropReported(entry: { unreported?: ActionResult[] }, reported: readonly ActionResult[]): boolean {
  const held = new Set(reported);
  const unreported = entry.unreported ?? [];
  const left = unreported.filter((result) => !held.has(result));
  if (left.length > 0) entry.unreported = left;
  else delete entry.unreported;
  return left.length < unreported.length;
}
