/** Per-key exponential backoff: base * 2^failures, capped (controller-runtime's defaults: 5 ms to 1000 s). */
export class ExponentialBackoff<K> {
  private failures = new Map<K, number>();
  constructor(
    private readonly baseMs = 5,
    private readonly maxMs = 1_000_000,
  ) {}

  /** Records a failure of key and returns how long to wait before its next try. */
  next(key: K): number {
    const failures = this.failures.get(key) ?? 0;
    this.failures.set(key, failures + 1);
    return Math.min(this.maxMs, this.baseMs * 2 ** failures);
  }
  forget(key: K): void {
    this.failures.delete(key);
  }
  failuresOf(key: K): number {
    return this.failures.get(key) ?? 0;
  }
}

/** A token bucket shared by every key: at most `burst` at once, refilled at `perSecond`. */
export class TokenBucket {
  private tokens: number;
  private last: number;
  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
    private readonly now: () => number,
  ) {
    this.tokens = burst;
    this.last = now();
  }
  /** Takes a token and returns how long to wait until it is due (0 when one is available now). */
  reserve(): number {
    const now = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.perSecond);
    this.last = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : (-this.tokens / this.perSecond) * 1000;
  }
}

/** Full-jitter delay for restarting a watch: random in [0, min(max, base * 2^attempt)]. */
export function jitteredDelay(attempt: number, baseMs = 500, maxMs = 30_000, random = Math.random): number {
  return random() * Math.min(maxMs, baseMs * 2 ** attempt);
}
