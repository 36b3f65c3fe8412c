// Small helpers for asserting on promises, chai having no promise assertions of its own.

/** What a promise was rejected with; throws (failing the test) if it resolved. */
export async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a rejection');
}
