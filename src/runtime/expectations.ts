import type { Clock } from './clock.js';

/**
 * How soon to look again at an object whose cache has not yet shown our own write of it (unsettled): soon, but not
 * pass after pass at once.
 */
export const SETTLE_RETRY_MS = 500;

/**
 * What this process wrote and the watch has not shown yet (client-go's ControllerExpectations and
 * UIDTrackingControllerExpectations, in one object, as a reconcile needs both to read its own writes):
 *
 * - Versions, by object: after a write, the resourceVersion the API returned. Until the watch-fed cache shows that
 *   version (or a newer one) the object is unsettled, so a reconcile never decides twice on the state from before
 *   its own write. An expectation expires after ttlMs, so a lost watch event cannot hold an object for ever.
 * - Removals, by uid in a group (pods evicted, gates lifted): until the cache no longer shows the object, or ttlMs
 *   of its own, it is counted as gone, so a pod is never evicted twice nor a gate lifted twice.
 */
export class Expectations {
  private readonly pending = new Map<string, { version: string; expiresAt: number }>();
  private readonly removals = new Map<string, Map<string, number>>();

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

  /** We removed the object `uid` of `group` (evicted a pod, lifted a gate): count it gone for `ttlMs`. */
  expectRemoval(group: string, uid: string, ttlMs: number): void {
    let removals = this.removals.get(group);
    if (!removals) this.removals.set(group, (removals = new Map<string, number>()));
    removals.set(uid, this.clock.now() + ttlMs);
  }

  /**
   * The removals of `group` the cache does not show yet; `isGone` tells which the cache shows done, and those (and
   * the expired) are dropped first.
   */
  pendingRemovals(group: string, isGone: (uid: string) => boolean = () => false): ReadonlySet<string> {
    const removals = this.removals.get(group);
    if (!removals) return new Set();
    const now = this.clock.now();
    for (const [uid, until] of removals) if (until <= now || isGone(uid)) removals.delete(uid);
    return new Set(removals.keys());
  }

  get size(): number {
    let removals = 0;
    for (const group of this.removals.values()) removals += group.size;
    return this.pending.size + removals;
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
