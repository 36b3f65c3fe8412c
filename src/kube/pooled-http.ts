// client-node's HttpLibrary over node:http, for kept-alive connections: node-fetch cannot say whether a request
// went out on a reused connection, and that decides whether a reset may be retried.
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { createGunzip, createInflate } from 'node:zlib';
import { ResponseContext, type HttpLibrary, type RequestContext } from '@kubernetes/client-node';
// client-node's HTTP layer speaks its own minimal Observable; `from` is not re-exported from the index.
import { from } from '@kubernetes/client-node/dist/gen/rxjsStub.js';
import { readBounded } from '../runtime/bounded-read.js';
import { PooledAgent, type Lane } from './connection-pool.js';

/**
 * How long a Lease request on a reused connection may go unanswered before it is sent again on a fresh one. A
 * renewal answers in milliseconds; a reused connection silent for 2 s is likely half-open (the peer gone without
 * a reset), where a fresh dial would get through, so the renewal is never worse off than without the pool.
 */
export const LEASE_STALL_MS = 2_000;

/**
 * Only a Lease request on a connection idle this long is given the stall deadline. A renewal's GET goes out after a
 * retry period's quiet (2 s) and is guarded; its PUT follows at once on the connection the GET just proved alive, and
 * is not: a PUT abandoned on a slow but live apiserver may still apply, and its replay would then be refused as a
 * conflict, a renewal lost that had succeeded.
 */
export const STALL_GUARD_IDLE_MS = 1_000;

/**
 * Requests that may go out twice: reads, and a PUT carrying the object's resourceVersion (a second one that arrives
 * after the first applied is refused as a conflict, not applied twice). Never a POST (an Eviction, a create) or a
 * PATCH (a cordon): a reset after they were sent leaves open whether they were applied, and the controller that
 * asked finds out from its cache, not by sending again.
 */
function replayable(method: string, body: string | undefined): boolean {
  if (method === 'GET' || method === 'HEAD' || method === 'OPTIONS') return true;
  if (method !== 'PUT' || body === undefined) return false;
  try {
    const parsed = JSON.parse(body) as { metadata?: { resourceVersion?: unknown } } | null;
    return typeof parsed?.metadata?.resourceVersion === 'string' && parsed.metadata.resourceVersion !== '';
  } catch {
    return false;
  }
}

export type RetryReason = 'reset' | 'stalled';

export interface SendOptions {
  /** The most of an answer's body read; more fails the request. Unbounded by default (client-node's lists). */
  maxBytes?: number;
  /** What the body is, for the error when it is too large. */
  what?: string;
  /** A replayable request was sent again, on a fresh connection. */
  onRetry?(lane: Lane, reason: RetryReason): void;
}

/** client-node's HttpLibrary, sending each request once, or twice when the first met a stale connection. */
export function pooledHttp(options: SendOptions = {}): HttpLibrary {
  return { send: (request) => from(sendRequest(request, options)) };
}

/** A reused connection that failed before any answer: the request may go again on a fresh one. */
class StaleConnection extends Error {
  constructor(
    readonly reason: RetryReason,
    readonly original?: Error,
  ) {
    super(
      reason === 'stalled'
        ? `no answer within ${LEASE_STALL_MS} ms on a reused connection`
        : `reused connection reset: ${original?.message ?? 'no reason given'}`,
    );
    this.name = 'StaleConnection';
  }
}

export async function sendRequest(
  request: RequestContext,
  options: SendOptions = {},
): Promise<ResponseContext> {
  const agent = request.getAgent();
  const pooled = agent instanceof PooledAgent ? agent : undefined;
  const body = bodyOf(request);
  const again = pooled !== undefined && replayable(request.getHttpMethod(), body);
  const send = { request, body, pooled, options };
  try {
    return await attempt(send, again && pooled.lane === 'lease');
  } catch (err) {
    if (!(err instanceof StaleConnection)) throw err;
    if (!again) throw err.original ?? err;
    options.onRetry?.(pooled.lane, err.reason);
    // The other idle connections are as old or older: close them, so the replay goes out on a new one.
    pooled.dropIdle();
    return await attempt(send, false);
  }
}

const isReset = (err: unknown) =>
  ['ECONNRESET', 'EPIPE', 'ECONNABORTED'].includes(String((err as { code?: unknown } | null)?.code));

/** One request as sent, and again when replayed: its body is read (and, for a PUT, parsed) once. */
interface Send {
  request: RequestContext;
  body: string | undefined;
  pooled: PooledAgent | undefined;
  options: SendOptions;
}

function attempt({ request, body, pooled, options }: Send, guardStall: boolean) {
  const url = new URL(request.getUrl());
  const signal = request.getSignal();
  const headers: Record<string, string> = { 'accept-encoding': 'gzip, deflate', ...request.getHeaders() };
  if (body !== undefined) headers['content-length'] = String(Buffer.byteLength(body));
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise<IncomingMessage>((resolve, reject) => {
    let answered = false;
    let stall: NodeJS.Timeout | undefined;
    const req: ClientRequest = send(url, {
      method: request.getHttpMethod(),
      headers,
      agent: request.getAgent(),
      ...(signal ? { signal } : {}),
    });
    let reused = false;
    req.on('socket', (socket) => {
      const idleMs = pooled?.idleFor(socket);
      reused = idleMs !== undefined || req.reusedSocket;
      if (guardStall && idleMs !== undefined && idleMs >= STALL_GUARD_IDLE_MS)
        stall = setTimeout(() => req.destroy(new StaleConnection('stalled')), LEASE_STALL_MS);
    });
    req.on('response', (res) => {
      answered = true;
      clearTimeout(stall);
      resolve(res);
    });
    req.on('error', (err) => {
      clearTimeout(stall);
      if (err instanceof StaleConnection) reject(err);
      else if (!answered && reused && isReset(err)) reject(new StaleConnection('reset', err));
      else reject(err);
    });
    req.end(body);
  }).then((res) => answerOf(res, request, options));
}

function bodyOf(request: RequestContext): string | undefined {
  const body = request.getBody();
  if (body === undefined || typeof body === 'string') return body;
  if (body instanceof URLSearchParams) return body.toString();
  throw new Error('form bodies are not sent to the apiserver');
}

async function answerOf(res: IncomingMessage, request: RequestContext, options: SendOptions) {
  const signal = request.getSignal();
  // No body to inflate: an empty one would fail gunzip ("unexpected end of file"), as node-fetch knew.
  const method: string = request.getHttpMethod();
  const bodiless = method === 'HEAD' || res.statusCode === 204 || res.statusCode === 304;
  const encoding = bodiless ? undefined : res.headers['content-encoding'];
  const stream =
    encoding === 'gzip' ? res.pipe(createGunzip()) : encoding === 'deflate' ? res.pipe(createInflate()) : res;
  if (stream !== res) res.on('error', (err) => stream.destroy(err));
  try {
    const body = await readBounded(stream, options.maxBytes ?? Infinity, options.what ?? 'the answer');
    // A body that runs until the connection closes ends without an error when the timeout closes it, as if whole.
    if (signal?.aborted) throw abortError(signal);
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(res.headers))
      if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : value;
    return new ResponseContext(res.statusCode ?? 0, headers, {
      text: () => Promise.resolve(body.toString('utf8')),
      binary: () => Promise.resolve(body),
    });
  } catch (err) {
    res.destroy();
    // A timeout mid-body ends the response with a bare "aborted": say it was the timeout, as before the headers.
    throw signal?.aborted && !(err instanceof Error && err.name === 'AbortError') ? abortError(signal) : err;
  }
}

/** The error node:http gives when the signal ends a request before its answer, which describeError knows. */
function abortError(signal: AbortSignal): Error {
  const err = new Error('The operation was aborted', { cause: signal.reason });
  err.name = 'AbortError';
  return err;
}
