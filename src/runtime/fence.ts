/** Thrown by a fenced write: this replica no longer acts. */
export class NotActingError extends Error {
  constructor(method: string) {
    super(`refused ${method}: this replica is not the leader (any more)`);
    this.name = 'NotActingError';
  }
}

/**
 * Whether this replica may act: opened when it leads (or runs without leader election), closed synchronously the
 * moment it stops, so that a reconcile still running fails its next write instead of acting beside the new leader.
 */
export class Fence {
  private open = false;

  mayAct(): boolean {
    return this.open;
  }
  allow(): void {
    this.open = true;
  }
  close(): void {
    this.open = false;
  }

  /** The same object, whose every (async) method first checks that this replica may still act. */
  guard<T extends object>(target: T): T {
    return fenced(target, () => this.open);
  }
}

export function fenced<T extends object>(target: T, mayAct: () => boolean): T {
  return new Proxy(target, {
    get(object, property, receiver) {
      const value: unknown = Reflect.get(object, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        if (!mayAct()) return Promise.reject(new NotActingError(String(property)));
        return (value as (...a: unknown[]) => unknown).apply(object, args);
      };
    },
  });
}
