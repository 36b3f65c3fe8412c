/**
 * Work handed off to be done soon, out of the caller's way: at most `concurrency` items in flight, at most `limit`
 * waiting (beyond it the oldest waiting item is dropped and reported). For writes that are best effort and must
 * not hold up the caller, such as Events after the status that records the same transition.
 */
export class BackgroundQueue<T> {
  private readonly waiting: T[] = [];
  private inFlight = 0;
  private idle: (() => void)[] = [];

  constructor(
    private readonly options: {
      concurrency: number;
      limit: number;
      run: (item: T) => Promise<void>;
      onError: (item: T, err: unknown) => void;
      onDrop: (item: T) => void;
    },
  ) {}

  push(item: T): void {
    if (this.waiting.length >= this.options.limit) {
      const dropped = this.waiting.shift();
      if (dropped !== undefined) this.options.onDrop(dropped);
    }
    this.waiting.push(item);
    this.pump();
  }

  get size(): number {
    return this.waiting.length + this.inFlight;
  }

  /** Resolves once nothing waits or runs, or after `timeoutMs`, whichever is first. */
  async drain(timeoutMs: number): Promise<void> {
    if (this.size === 0) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.idle.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private pump(): void {
    while (this.inFlight < this.options.concurrency && this.waiting.length > 0) {
      const item = this.waiting.shift() as T;
      this.inFlight++;
      this.options
        .run(item)
        .catch((err: unknown) => {
          this.options.onError(item, err);
        })
        .finally(() => {
          this.inFlight--;
          this.pump();
          if (this.size === 0) for (const done of this.idle.splice(0)) done();
        });
    }
  }
}
