import type { IgnoredEventReason, StuckPod } from '../../detection/index.js';
import type { Logger } from '../../observability/log.js';
import { BoundedMap } from '../../runtime/bounded-map.js';

export interface IgnoredEventHooks {
  /** A failure Event about a stuck pod that detection did not count, once per Event. */
  onIgnoredEvent?(reason: IgnoredEventReason): void;
}

/** Stuck pods whose ignored Events are remembered; past it the oldest are forgotten (and may be reported again). */
const MAX_PODS = 10_000;

/**
 * Tells of the failure Events detection did not count because the kubelet of the pod's node did not write them
 * (ignoredEventReason): each Event once to the metric, each pod once to the log. Shared by every policy's passes,
 * so a pod two policies look at, or one looked at pass after pass, is reported once.
 */
export class IgnoredEvents {
  private readonly reported = new BoundedMap<string, Set<string>>(MAX_PODS);

  constructor(
    private readonly logger: Logger,
    private readonly hooks: IgnoredEventHooks = {},
  ) {}

  note(stuck: readonly StuckPod[]): void {
    for (const { pod, nodeName, ignoredEvents } of stuck) {
      if (!ignoredEvents) continue;
      const reported = this.reported.get(pod.uid);
      const fresh = ignoredEvents.filter((e) => !reported?.has(e.uid));
      if (fresh.length === 0) continue;
      if (!reported)
        this.logger.warn('Ignored failure Events about a Pod not written by the kubelet of its Node', {
          pod: `${pod.namespace}/${pod.name}`,
          node: nodeName,
          writtenBy: fresh.map(
            (e) => `${e.reportingController || '(none)'}@${e.reportingInstance || '(none)'}`,
          ),
          reasons: [...new Set(fresh.map((e) => e.reason))],
        });
      for (const event of fresh) this.hooks.onIgnoredEvent?.(event.reason);
      // Only the Events the pod has now: one deleted goes (the cache holds at most 24 a pod), so a pod stuck for days
      // whose Events come and go keeps no more than that.
      this.reported.set(pod.uid, new Set(ignoredEvents.map((e) => e.uid)));
    }
  }
}
