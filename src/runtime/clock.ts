/** Time as the runtime sees it; tests swap in a FakeClock to step through delays without sleeping. */
export interface Clock {
  now(): number;
  /** Calls fn after ms; returns a cancel function. */
  schedule(ms: number, fn: () => void): () => void;
}

export const realClock: Clock = {
  now: () => Date.now(),
  schedule(ms, fn) {
    const timer = setTimeout(fn, Math.max(0, ms));
    timer.unref();
    return () => {
      clearTimeout(timer);
    };
  },
};

/** A manual clock: advance() fires due timers in time order. */
export class FakeClock implements Clock {
  private timers: { at: number; seq: number; fn: () => void }[] = [];
  private seq = 0;
  constructor(private current = 0) {}
  now(): number {
    return this.current;
  }
  schedule(ms: number, fn: () => void): () => void {
    const timer = { at: this.current + Math.max(0, ms), seq: this.seq++, fn };
    this.timers.push(timer);
    return () => {
      this.timers = this.timers.filter((t) => t !== timer);
    };
  }
  advance(ms: number): void {
    const target = this.current + ms;
    for (;;) {
      this.timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const next = this.timers[0];
      if (!next || next.at > target) break;
      this.timers.shift();
      this.current = next.at;
      next.fn();
    }
    this.current = target;
  }
  pending(): number {
    return this.timers.length;
  }
}
