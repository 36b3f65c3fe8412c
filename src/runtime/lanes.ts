/**
 * Writes keyed by the object they change, run in the background: at most one in flight per key (a merge patch is
 * computed against the write before it, so two to one object must not cross) unless `overlaps` lets a second one go
 * while the first flies (a write fenced on the one before it, so that it cannot land first), at most `concurrency` in
 * all, urgent ones before routine ones, each kind first come first served. A key submitted again while it waits keeps
 * its place (raised to urgent when the new one is); while it is in flight and may not overlap, it is noted, and
 * `settled` tells it was wanted again so that the caller looks afresh once the write is back. What a key's write needs
 * is read when it starts, so a key carries no item: nothing waits here that the caller does not hold anyway.
 */
export class Lanes<K> {
  private readonly urgent = new Set<K>();
  private readonly routine = new Set<K>();
  /** Writes in flight, by key: one, or two when the second overlaps the first. */
  private readonly inFlight = new Map<K, number>();
  /** Writes in flight, in all. */
  private running = 0;
  private readonly wanted = new Set<K>();
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly options: {
      concurrency: number;
      /** Carries out the key's write. */
      run(key: K): Promise<void>;
      /** The key's write is back (`error`: it failed); `wanted`: it was submitted again meanwhile. */
      settled(key: K, wanted: boolean, error?: unknown): void;
      /** Whether a write of the key, asked for while its one write is in flight, may go before that one is back. */
      overlaps?(key: K, urgent: boolean): boolean;
    },
  ) {}

  /**
   * Asks for the key's write; false when it is in flight and may not overlap (noted: `settled` will say it was
   * wanted).
   */
  submit(key: K, urgent: boolean): boolean {
    const flying = this.inFlight.get(key) ?? 0;
    const queued = this.urgent.has(key) || this.routine.has(key);
    if (flying > 1 || (flying === 1 && !queued && this.options.overlaps?.(key, urgent) !== true)) {
      this.wanted.add(key);
      return false;
    }
    if (urgent && this.routine.delete(key)) this.urgent.add(key);
    else if (!this.urgent.has(key)) (urgent ? this.urgent : this.routine).add(key);
    this.pump();
    return true;
  }

  /** Waiting or in flight. */
  busy(key: K): boolean {
    return this.inFlight.has(key) || this.urgent.has(key) || this.routine.has(key);
  }

  /** Writes of the key in flight. */
  flying(key: K): number {
    return this.inFlight.get(key) ?? 0;
  }

  /** Waiting, not yet started. */
  get waiting(): number {
    return this.urgent.size + this.routine.size;
  }

  get size(): number {
    return this.waiting + this.running;
  }

  /** Drops a key that waits (its object is gone); one in flight finishes. */
  drop(key: K): void {
    this.urgent.delete(key);
    this.routine.delete(key);
    this.wanted.delete(key);
    this.pump();
  }

  /** Drops every key that waits (nothing may be written any more); those in flight finish. */
  clear(): void {
    this.urgent.clear();
    this.routine.clear();
    this.wanted.clear();
    this.pump();
  }

  /** Resolves once nothing waits or runs. */
  idle(): Promise<void> {
    if (this.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private next(): K | undefined {
    for (const queue of [this.urgent, this.routine]) {
      const first = queue.values().next();
      if (first.done !== true) {
        queue.delete(first.value);
        return first.value;
      }
    }
    return undefined;
  }

  private pump(): void {
    while (this.running < this.options.concurrency) {
      const key = this.next();
      if (key === undefined) break;
      this.inFlight.set(key, (this.inFlight.get(key) ?? 0) + 1);
      this.running++;
      void this.start(key);
    }
    if (this.size === 0) for (const resolve of this.idleWaiters.splice(0)) resolve();
  }

  private async start(key: K): Promise<void> {
    let error: unknown;
    try {
      await this.options.run(key);
    } catch (err) {
      error = err ?? new Error('a write failed with no error');
    }
    this.running--;
    const left = (this.inFlight.get(key) ?? 1) - 1;
    if (left > 0) this.inFlight.set(key, left);
    else this.inFlight.delete(key);
    const wanted = this.wanted.delete(key);
    try {
      this.options.settled(key, wanted, error);
    } finally {
      this.pump();
    }
  }
}
