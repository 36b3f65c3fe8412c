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
