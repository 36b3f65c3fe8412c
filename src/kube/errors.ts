import { TerminalError } from '../runtime/controller.js';
import { apiStatus, describeError, isInvalid } from '../ports/errors.js';

export * from '../ports/errors.js';

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
