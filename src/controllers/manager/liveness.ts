// Whether the operator is alive, for /healthz: a reconcile that has run far past every request's timeout (10
// minutes by default) is wedged, and stops every policy its worker would reach; only a restart frees it.
import type { Logger } from '../../observability/log.js';
import type { Controller } from '../../runtime/controller.js';

export class Liveness {
  /** The reconcile last reported wedged, so that each is said once. */
  private wedged: string | undefined;

  constructor(
    private readonly logger: Pick<Logger, 'error'>,
    private readonly wedgedAfterMs = 600_000,
  ) {}

  /** False while some controller's longest-running reconcile is older than wedgedAfterMs. */
  check(controllers: readonly Controller<string>[]): boolean {
    for (const controller of controllers) {
      const longest = controller.longestRunning();
      if (!longest || longest.ms <= this.wedgedAfterMs) continue;
      const key = `${controller.name}/${longest.key}`;
      if (this.wedged !== key)
        this.logger.error('A reconcile is wedged: reporting not alive, for a restart', {
          reconcile: key,
          runningSeconds: Math.round(longest.ms / 1000),
        });
      this.wedged = key;
      return false;
    }
    this.wedged = undefined;
    return true;
  }
}
