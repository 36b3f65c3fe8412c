import type { Logger } from '../observability/log.js';
import { TerminalError } from '../runtime/controller.js';

const describe = (err: unknown) => (err instanceof Error ? err.message : String(err));

/**
 * What one reconcile could not write. One failure does not stop the others' writes; at the end of the pass the
 * retriable ones fail the reconcile, and the queue retries it with backoff. Terminal ones (the API refused the
 * write for what it is) are logged and not retried.
 */
export class Failures {
  readonly retriable: unknown[] = [];
  constructor(
    private readonly logger: Logger,
    private readonly key: Record<string, string>,
  ) {}

  add(what: string, err: unknown): void {
    if (err instanceof TerminalError) {
      this.logger.warn('Gave up on a refused write', { ...this.key, what, error: err.message });
      return;
    }
    this.retriable.push(err);
    this.logger.warn('Failed a write; will retry', { ...this.key, what, error: describe(err) });
  }

  throwIfAny(): void {
    if (this.retriable.length === 0) return;
    const [first] = this.retriable;
    throw new Error(`${this.retriable.length} write(s) failed, first: ${describe(first)}`, { cause: first });
  }
}
