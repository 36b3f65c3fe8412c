import type { Transition } from '../../ports/writes.js';
import type { Clock } from '../../runtime/clock.js';
import { EVENT_WINDOW_MS, POD_EVENTS_PER_NODE, type EventBudget } from '../../status/health-status.js';

/** Stuck-pod Events each node got within EVENT_WINDOW_MS: when, for the pods' own and for the node's listing. */
export class StuckEventBudget {
  private readonly nodes = new Map<string, { pods: number[]; node: number | undefined }>();

  constructor(private readonly clock: Clock) {}

  /** What is left of a node's stuck-pod Events in the current window. */
  left(node: string): EventBudget {
    const log = this.nodes.get(node);
    if (!log) return { pods: POD_EVENTS_PER_NODE, node: true };
    const since = this.clock.now() - EVENT_WINDOW_MS;
    log.pods = log.pods.filter((at) => at > since);
    if (log.node !== undefined && log.node <= since) log.node = undefined;
    if (log.pods.length === 0 && log.node === undefined) this.nodes.delete(node);
    return { pods: POD_EVENTS_PER_NODE - log.pods.length, node: log.node === undefined };
  }

  /** The stuck-pod Events among `transitions` are reported now. */
  spend(node: string, transitions: readonly Transition[]): void {
    const now = this.clock.now();
    for (const t of transitions) {
      if (t.reason !== 'SandboxCreationStuck') continue;
      const log = this.nodes.get(node) ?? { pods: [], node: undefined };
      if (t.target.kind === 'Pod') log.pods.push(now);
      else log.node = now;
      this.nodes.set(node, log);
    }
  }

  /** A node is gone: its budget goes with it. */
  forget(node: string): void {
    this.nodes.delete(node);
  }
}
