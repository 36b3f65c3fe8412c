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
 * Requests that may go out twice: reads, and PUT, which replaces with a resourceVersion precondition (a second
 * one that arrives after the first applied is refused as a conflict, not applied twice). Never a POST (an
 * Eviction, a create) or a PATCH (a cordon): a reset after they were sent leaves open whether they were applied,
 * and the controller that asked finds out from its cache, not by sending again.
 */
const REPLAYABLE = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT']);

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
  const lane = agent instanceof PooledAgent ? agent.lane : undefined;
  const replayable = lane !== undefined && REPLAYABLE.has(request.getHttpMethod());
  try {
    return await attempt(request, options, replayable && lane === 'lease' ? LEASE_STALL_MS : undefined);
  } catch (err) {
    if (!(err instanceof StaleConnection)) throw err;
    if (!replayable) throw err.original ?? err;
    options.onRetry?.(lane, err.reason);
    // The stale connection is gone (destroyed), and with LIFO reuse the next one is the freshest or a new one.
    return await attempt(request, options, undefined);
  }
}

const isReset = (err: unknown) =>
  ['ECONNRESET', 'EPIPE', 'ECONNABORTED'].includes(String((err as { code?: unknown } | null)?.code));

function attempt(request: RequestContext, options: SendOptions, stallMs: number | undefined) {
  const url = new URL(request.getUrl());
  const signal = request.getSignal();
  const body = bodyOf(request);
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
    req.on('socket', () => {
      if (stallMs !== undefined && req.reusedSocket)
        stall = setTimeout(() => req.destroy(new StaleConnection('stalled')), stallMs);
    });
    req.on('response', (res) => {
      answered = true;
      clearTimeout(stall);
      resolve(res);
    });
    req.on('error', (err) => {
      clearTimeout(stall);
      if (err instanceof StaleConnection) reject(err);
      else if (!answered && req.reusedSocket && isReset(err)) reject(new StaleConnection('reset', err));
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
  const encoding = res.headers['content-encoding'];
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
