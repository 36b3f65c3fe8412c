import type { WorkQueue } from './work-queue.js';

/** What a reconcile asks of the queue when it succeeds. */
export interface ReconcileResult {
  /** Reconcile again after this long (a time-based wait, not an error). */
  requeueAfterMs?: number;
  /**
   * The failure that backed the key off is not settled by this reconcile: it hands its retry on (the apply
   * controller's retry asks for a new decision), or what it started may still fail (an apply whose reports are
   * answered after it). The key's backoff stands, and grows if that fails too.
   */
  keepBackoff?: boolean;
}

/** An error that retrying cannot fix (bad input): logged, not retried, key forgotten. */
export class TerminalError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'TerminalError';
  }
}

export interface ControllerHooks<K> {
  onSuccess?(key: K, durationMs: number): void;
  onError?(key: K, err: unknown, retryInMs: number | undefined): void;
}

/**
 * Runs reconcile for queued keys with `workers` concurrent workers. Because the queue hands a key to one
 * worker at a time, two reconciles of the same key never interleave at an await.
 */
export class Controller<K> {
  private running: Promise<void>[] = [];
  /** The keys being reconciled, with when each began (performance.now()). */
  private readonly inFlight = new Map<K, number>();

  constructor(
    readonly name: string,
    private readonly queue: WorkQueue<K>,
    private readonly reconcile: (key: K) => Promise<ReconcileResult | undefined>,
    private readonly hooks: ControllerHooks<K> = {},
  ) {}

  start(workers = 2): void {
    for (let i = 0; i < workers; i++) this.running.push(this.work());
  }

  /** Stops taking keys and waits for the reconciles in flight to finish. */
  async stop(): Promise<void> {
    this.queue.shutDown();
    await Promise.all(this.running);
    this.running = [];
  }

  /** The reconcile running longest now, and for how long; undefined when none runs. */
  longestRunning(): { key: K; ms: number } | undefined {
    let longest: { key: K; ms: number } | undefined;
    const now = performance.now();
    for (const [key, started] of this.inFlight)
      if (!longest || now - started > longest.ms) longest = { key, ms: now - started };
    return longest;
  }

  private async work(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      const started = performance.now();
      this.inFlight.set(key, started);
      try {
        const result = await this.reconcile(key);
        if (!result?.keepBackoff) this.queue.forget(key);
        if (result?.requeueAfterMs !== undefined) this.queue.addAfter(key, result.requeueAfterMs);
        this.hooks.onSuccess?.(key, performance.now() - started);
      } catch (err) {
        if (err instanceof TerminalError) {
          this.queue.forget(key);
          this.hooks.onError?.(key, err, undefined);
        } else {
          this.hooks.onError?.(key, err, this.queue.addRateLimited(key));
        }
      } finally {
        this.inFlight.delete(key);
        this.queue.done(key, performance.now() - started);
      }
    }
  }
}
