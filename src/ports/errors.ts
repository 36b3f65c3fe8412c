// How a port's call fails, in the apiserver's words: the status code and Status it answered, read from whatever the
// adapter rejected with (client-node's ApiException, a watch's Error with statusCode). The controllers and the
// signals classify failures through this, never through the adapters (src/kube).

/** The longest any single API request may take before it fails (watches excepted: they are long by design). */
export const REQUEST_TIMEOUT_MS = 30_000;

/** What the apiserver said, from an error carrying its code and Status body; undefined for other errors. */
export interface ApiStatus {
  code: number;
  reason?: string;
  message: string;
  retryAfterSeconds?: number;
}

interface StatusBody {
  reason?: string;
  message?: string;
  details?: { retryAfterSeconds?: number };
}

function parseBody(body: unknown): StatusBody | undefined {
  if (typeof body === 'string') {
    try {
      return JSON.parse(body) as StatusBody;
    } catch {
      return undefined;
    }
  }
  return typeof body === 'object' && body !== null ? body : undefined;
}

export function apiStatus(err: unknown): ApiStatus | undefined {
  // client-node's Watch rejects with a plain Error carrying statusCode.
  const statusCode = (err as { statusCode?: unknown } | null)?.statusCode;
  if (err instanceof Error && typeof statusCode === 'number')
    return { code: statusCode, message: err.message };
  // client-node's ApiException carries code and body; so does any adapter's error that answers with a Status.
  if (!(typeof err === 'object' && err !== null && 'code' in err && 'body' in err)) return undefined;
  const { code, body } = err;
  if (typeof code !== 'number') return undefined;
  const status = parseBody(body);
  const result: ApiStatus = { code, message: status?.message ?? `HTTP ${code}` };
  if (status?.reason) result.reason = status.reason;
  if (status?.details?.retryAfterSeconds !== undefined)
    result.retryAfterSeconds = status.details.retryAfterSeconds;
  return result;
}

export const isNotFound = (err: unknown) => apiStatus(err)?.code === 404;
export const isConflict = (err: unknown) => apiStatus(err)?.code === 409;
export const isGone = (err: unknown) => apiStatus(err)?.code === 410;
export const isTooManyRequests = (err: unknown) => apiStatus(err)?.code === 429;
/**
 * Refused for what it is, not for when it was sent: retrying the same request cannot succeed. That includes a 403 from
 * a ValidatingAdmissionPolicy (the operator's own, config/rbac, refuses any change remediation does not make) or from
 * an admission webhook that denied it, unlike a 403 from RBAC, which a binding applied meanwhile can lift.
 */
export const isInvalid = (err: unknown) => {
  const status = apiStatus(err);
  return (
    status?.code === 400 ||
    status?.code === 422 ||
    (status?.code === 403 &&
      /ValidatingAdmissionPolicy '[^']+' with binding '[^']+' denied request|admission webhook "[^"]+" denied the request/.test(
        status.message,
      ))
  );
};

/** One line for logs and CLI errors: the apiserver's own message when there is one. */
export function describeError(err: unknown): string {
  const status = apiStatus(err);
  if (status) return `${status.message} (HTTP ${status.code}${status.reason ? ` ${status.reason}` : ''})`;
  // Our request timeouts abort the request: say so rather than "The user aborted a request".
  if (err instanceof Error && err.name === 'AbortError')
    return 'timed out: no answer within the request timeout';
  return err instanceof Error ? err.message : String(err);
}

/**
 * A write sent before the one it follows was back, refused by the API because that one had not landed (or failed, or
 * the object is gone): nothing was written.
 */
export class OutOfTurnError extends Error {
  constructor(what: string, options?: ErrorOptions) {
    super(`${what} refused: the write it follows has not landed`, options);
    this.name = 'OutOfTurnError';
  }
}
