import { describeError } from '../ports/errors.js';
import type { Logger } from '../observability/log.js';
import { TerminalError } from '../runtime/controller.js';

/**
 * Logs a failed write once, as what it is: refused by the apiserver for what it is (never sent again as it is), or
 * to be retried. Returns whether it is retriable.
 */
export function logWriteFailure(
  logger: Logger,
  fields: Record<string, string>,
  what: string,
  err: unknown,
): boolean {
  if (err instanceof TerminalError) {
    logger.warn('Gave up on a refused write', { ...fields, what, error: err.message });
    return false;
  }
  logger.warn('Failed a write; will retry', { ...fields, what, error: describeError(err) });
  return true;
}

/**
 * What one reconcile or apply could not write. One failure does not stop the others' writes; at the end the retriable
 * ones fail it (an apply through Applier.fail, the sweep through throwIfAny), and its queue retries it with backoff.
 * Terminal ones (the API refused the write for what it is) are logged and not retried.
 */
export class Failures {
  readonly retriable: unknown[] = [];
  constructor(
    private readonly logger: Logger,
    private readonly key: Record<string, string>,
  ) {}

  add(what: string, err: unknown): void {
    if (logWriteFailure(this.logger, this.key, what, err)) this.retriable.push(err);
  }

  throwIfAny(): void {
    if (this.retriable.length === 0) return;
    const [first] = this.retriable;
    throw new Error(
      `${this.retriable.length} write(s) failed, first: ${first instanceof Error ? first.message : String(first)}`,
      { cause: first },
    );
  }
}
