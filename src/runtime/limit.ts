/**
 * Runs `fn` over every item with at most `limit` calls in flight, in the items' order of start; resolves when all
 * have settled. `fn` handles its own errors: one item's failure must not stop the others.
 */
export async function forEachLimit<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  // One iterator shared by the workers: each takes the next item when it is free.
  const iterator = items[Symbol.iterator]();
  const worker = async (): Promise<void> => {
    for (let next = iterator.next(); next.done !== true; next = iterator.next()) await fn(next.value);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
}

/**
 * Awaits every promise, then resolves with their values in order, or rejects with the first rejection: unlike
 * Promise.all, only once all have settled, so nothing started here is still running when the caller goes on.
 */
export async function allSettledOrFirstError<T extends readonly unknown[]>(
  promises: readonly [...{ [K in keyof T]: Promise<T[K]> }],
): Promise<T> {
  const settled = await Promise.allSettled(promises as readonly Promise<unknown>[]);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) throw failed.reason;
  return settled.map((s) => (s as PromiseFulfilledResult<unknown>).value) as unknown as T;
}
