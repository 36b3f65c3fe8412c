// The one place @dot-i/k8s-operator is used (ADR 0002): the operator's outer lifecycle. Its Operator base
// class runs init() on start and aborts its (unused) watches on stop. Its CRD registration only creates what
// is missing, so --install-crds uses src/kube/crds.ts (server-side apply) instead (ADR 0002). The hot path
// (informers, queue, reconcile, writes) never goes through it: it has no cache, serialises every event
// in one global queue, and exits the process on any watch error.
import dotI from '@dot-i/k8s-operator';
import type { Logger } from '../observability/logger.js';

const Operator = dotI.default;

export interface LifecycleHooks {
  start(): Promise<void>;
  stop(): Promise<void>;
  logger: Logger;
}

export class OperatorLifecycle extends Operator {
  constructor(private readonly hooks: LifecycleHooks) {
    super({
      info: (message: string) => {
        hooks.logger.info(message, { via: 'k8s-operator' });
      },
      debug: (message: string) => {
        hooks.logger.debug(message, { via: 'k8s-operator' });
      },
      warn: (message: string) => {
        hooks.logger.warn(message, { via: 'k8s-operator' });
      },
      error: (message: string) => {
        hooks.logger.error(message, { via: 'k8s-operator' });
      },
    });
  }

  protected async init(): Promise<void> {
    await this.hooks.start();
  }

  async shutdown(): Promise<void> {
    this.stop();
    await this.hooks.stop();
  }
}
