import { ApiException } from '@kubernetes/client-node';
import { TerminalError } from '../runtime/controller.js';

/** What the apiserver said, from client-node's ApiException or a Status body; undefined for other errors. */
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
  if (
    !(err instanceof ApiException) &&
    !(typeof err === 'object' && err !== null && 'code' in err && 'body' in err)
  ) {
    return undefined;
  }
  const { code, body } = err as { code: unknown; body: unknown };
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
 * a ValidatingAdmissionPolicy (the operator's own, config/rbac, refuses any change remediation does not make), unlike
 * a 403 from RBAC, which a binding applied meanwhile can lift.
 */
export const isInvalid = (err: unknown) => {
  const status = apiStatus(err);
  return (
    status?.code === 400 ||
    status?.code === 422 ||
    (status?.code === 403 &&
      /ValidatingAdmissionPolicy '[^']+' with binding '[^']+' denied request/.test(status.message))
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

/** A request that got no answer, in words: "connection refused" rather than a FetchError's 150 characters. */
export function describeNoAnswer(err: unknown, timeoutMs: number): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  if (err instanceof Error && err.name === 'AbortError') return `no answer within ${timeoutMs / 1000} s`;
  if (typeof code !== 'string') return undefined;
  if (code === 'ECONNREFUSED') return 'connection refused';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'host not found';
  if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH') return 'host unreachable';
  if (code === 'ECONNRESET') return 'connection reset';
  if (code === 'ETIMEDOUT') return 'connection timed out';
  if (/CERT|SELF_SIGNED|UNABLE_TO_|ERR_TLS/.test(code))
    return `TLS failed (${code}): check the certificate-authority of the cluster`;
  return undefined;
}

/** A 400 or 422 becomes a TerminalError: the queue must not retry what the apiserver refused for what it is. */
export function terminalIfInvalid(err: unknown, what: string): unknown {
  return isInvalid(err) ? new TerminalError(`${what} refused: ${describeError(err)}`, { cause: err }) : err;
}

/**
 * A JSON Patch the apiserver could not apply to the object as stored (a `test` that failed, a path that is not
 * there): 422 naming no field. A body the schema refuses names its fields ("... is invalid: status.x: ..."), and an
 * admission policy's refusal names the policy; neither is this.
 */
export function isPatchNotApplicable(err: unknown): boolean {
  const status = apiStatus(err);
  return (
    status?.code === 422 &&
    !status.message.includes(' is invalid: ') &&
    !status.message.includes('ValidatingAdmissionPolicy')
  );
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
