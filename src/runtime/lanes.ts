/**
 * Writes keyed by the object they change, run in the background: at most one in flight per key (a merge patch is
 * computed against the write before it, so two to one object must not cross), at most `concurrency` in all, urgent
 * ones before routine ones, each kind first come first served. A key submitted again while it waits keeps its place
 * (raised to urgent when the new one is); while it is in flight, it is noted, and `settled` tells it was wanted again
 * so that the caller looks afresh once the write is back. What a key's write needs is read when it starts, so a key
 * carries no item: nothing waits here that the caller does not hold anyway.
 */
export class Lanes<K> {
  private readonly urgent = new Set<K>();
  private readonly routine = new Set<K>();
  private readonly inFlight = new Set<K>();
  private readonly wanted = new Set<K>();
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly options: {
      concurrency: number;
      /** Carries out the key's write. */
      run(key: K): Promise<void>;
      /** The key's write is back (`error`: it failed); `wanted`: it was submitted again meanwhile. */
      settled(key: K, wanted: boolean, error?: unknown): void;
    },
  ) {}

  /** Asks for the key's write; false when it is in flight (noted: `settled` will say it was wanted). */
  submit(key: K, urgent: boolean): boolean {
    if (this.inFlight.has(key)) {
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

  /** Waiting, not yet started. */
  get waiting(): number {
    return this.urgent.size + this.routine.size;
  }

  get size(): number {
    return this.waiting + this.inFlight.size;
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
    while (this.inFlight.size < this.options.concurrency) {
      const key = this.next();
      if (key === undefined) break;
      this.inFlight.add(key);
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
    this.inFlight.delete(key);
    const wanted = this.wanted.delete(key);
    try {
      this.options.settled(key, wanted, error);
    } finally {
      this.pump();
    }
  }
}
