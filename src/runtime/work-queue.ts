import { ExponentialBackoff, TokenBucket } from './backoff.js';
import { realClock, type Clock } from './clock.js';

export interface WorkQueueOptions {
  clock?: Clock;
  /** Per-key backoff for failed items. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Global limit across keys for rate-limited re-adds (controller-runtime: 10 qps, burst 100). */
  qps?: number;
  burst?: number;
  /**
   * After a run that took d ms, its key is handed out again no sooner than min(maxMs, factor * d) after it ended: the
   * changes that arrive meanwhile are taken together by one run, not one run each, so that a run whose cost grows
   * with the cluster takes at most about 1 / (1 + factor) of the time however fast changes come, and a cheap one is
   * held back hardly at all.
   */
  spacing?: { factor: number; maxMs: number };
}

/**
 * A keyed work queue in the manner of client-go's: a key is queued at most once (de-duplicated), is handed to
 * at most one worker at a time (a key added while in flight is queued again when that worker is done), can be
 * added after a delay, and re-added with per-key exponential backoff under a global rate limit.
 */
export class WorkQueue<K> {
  private readonly queue: K[] = [];
  private readonly queued = new Set<K>();
  private readonly processing = new Set<K>();
  private readonly dirty = new Set<K>();
  private readonly delayed = new Map<K, { at: number; cancel: () => void }>();
  /** Until when each key is held back after its last run (spacing). */
  private readonly spacedUntil = new Map<K, number>();
  private readonly spacing: { factor: number; maxMs: number } | undefined;
  private readonly waiters: ((key: K | undefined) => void)[] = [];
  private readonly clock: Clock;
  private readonly backoff: ExponentialBackoff<K>;
  private readonly bucket: TokenBucket;
  private shuttingDown = false;

  constructor(options: WorkQueueOptions = {}) {
    this.clock = options.clock ?? realClock;
    this.backoff = new ExponentialBackoff<K>(options.baseDelayMs ?? 5, options.maxDelayMs ?? 1_000_000);
    this.bucket = new TokenBucket(options.qps ?? 10, options.burst ?? 100, () => this.clock.now());
    this.spacing = options.spacing;
  }

  add(key: K): void {
    if (this.shuttingDown) return;
    if (this.processing.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    const until = this.spacedUntil.get(key);
    if (until !== undefined) {
      const wait = until - this.clock.now();
      if (wait > 0) {
        this.addAfter(key, wait);
        return;
      }
      this.spacedUntil.delete(key);
    }
    this.queued.add(key);
    const waiter = this.waiters.shift();
    if (waiter) {
      this.queued.delete(key);
      this.processing.add(key);
      waiter(key);
    } else {
      this.queue.push(key);
    }
  }

  /** Adds key after ms; an earlier pending delay for the same key wins. */
  addAfter(key: K, ms: number): void {
    if (this.shuttingDown) return;
    if (ms <= 0) {
      this.add(key);
      return;
    }
    const at = this.clock.now() + ms;
    const existing = this.delayed.get(key);
    if (existing && existing.at <= at) return;
    existing?.cancel();
    const cancel = this.clock.schedule(ms, () => {
      this.delayed.delete(key);
      this.add(key);
    });
    this.delayed.set(key, { at, cancel });
  }

  /** Re-adds a failed key after its backoff (and the global limit); returns the delay chosen. */
  addRateLimited(key: K): number {
    const delay = Math.max(this.backoff.next(key), this.bucket.reserve());
    this.addAfter(key, delay);
    return delay;
  }

  /** Clears the key's failure history (call after a success or a terminal error). */
  forget(key: K): void {
    this.backoff.forget(key);
  }

  failures(key: K): number {
    return this.backoff.failuresOf(key);
  }

  /** Resolves with the next key (marked in flight), or undefined once shut down and drained. */
  get(): Promise<K | undefined> {
    const key = this.queue.shift();
    if (key !== undefined) {
      this.queued.delete(key);
      this.processing.add(key);
      return Promise.resolve(key);
    }
    if (this.shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Marks key done (its run took `runMs`, for the spacing); if it was added while in flight, queues it again. */
  done(key: K, runMs = 0): void {
    this.processing.delete(key);
    if (this.spacing) {
      const hold = Math.min(this.spacing.maxMs, this.spacing.factor * runMs);
      const now = this.clock.now();
      // Holds gone by go: a key that never comes back (a deleted policy) leaves nothing behind.
      for (const [other, until] of this.spacedUntil) if (until <= now) this.spacedUntil.delete(other);
      if (hold > 0) this.spacedUntil.set(key, now + hold);
    }
    if (this.dirty.delete(key)) this.add(key);
  }

  get length(): number {
    return this.queue.length;
  }

  inFlight(): number {
    return this.processing.size;
  }

  shutDown(): void {
    this.shuttingDown = true;
    for (const { cancel } of this.delayed.values()) cancel();
    this.delayed.clear();
    for (const waiter of this.waiters.splice(0)) waiter(undefined);
  }
}
