import type { Clock } from './clock.js';

/**
 * Read-your-writes fence (client-go's controller expectations, keyed by object): after this process writes an
 * object it records the resourceVersion the API returned, and until the watch-fed cache shows that version (or
 * a newer one) the object is unsettled, so a reconcile never decides twice on the state from before its own
 * write. An expectation expires after ttlMs, so a lost watch event cannot hold an object forever.
 */
export class Expectations {
  private readonly pending = new Map<string, { version: string; expiresAt: number }>();

  constructor(
    private readonly clock: Clock,
    private readonly ttlMs = 30_000,
  ) {}

  expect(key: string, version: string | undefined): void {
    if (version === undefined) return;
    this.pending.set(key, { version, expiresAt: this.clock.now() + this.ttlMs });
  }

  /** Whether the cache, which shows `observed` for key, has caught up with our last write of it. */
  isSettled(key: string, observed: string | undefined): boolean {
    const entry = this.pending.get(key);
    if (!entry) return true;
    if (
      this.clock.now() >= entry.expiresAt ||
      (observed !== undefined && isAtLeast(observed, entry.version))
    ) {
      this.pending.delete(key);
      return true;
    }
    return false;
  }

  forget(key: string): void {
    this.pending.delete(key);
  }

  get size(): number {
    return this.pending.size;
  }
}

/**
 * resourceVersions are opaque to clients, except that equal means equal. Every apiserver backed by etcd hands
 * out its revision, an integer, so a larger one is newer; anything else is compared for equality only.
 */
export function isAtLeast(observed: string, expected: string): boolean {
  if (observed === expected) return true;
  if (!/^\d+$/.test(observed) || !/^\d+$/.test(expected)) return false;
  return BigInt(observed) >= BigInt(expected);
}
