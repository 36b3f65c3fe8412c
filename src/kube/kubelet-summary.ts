import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import {
  CoreV1Api,
  ResponseContext,
  type HttpLibrary,
  type KubeConfig,
  type RequestContext,
} from '@kubernetes/client-node';
// client-node's HTTP layer speaks its own minimal Observable; `from` is not re-exported from the index.
import { from } from '@kubernetes/client-node/dist/gen/rxjsStub.js';
import { MAX_RESPONSE_BYTES, readBounded } from '../runtime/bounded-read.js';
import { withTimeout } from './client.js';

export const KUBELET_TIMEOUT_MS = 10_000;

/**
 * Fetches a node's kubelet Summary API (stats/summary) through the apiserver's node proxy. A kubelet that does
 * not answer costs at most timeoutMs, body included: the apiserver's own proxy timeout is far longer. An answer
 * over maxBytes is refused, and the rest of it never read.
 */
export function kubeletSummaryFetcher(
  kc: KubeConfig,
  timeoutMs = KUBELET_TIMEOUT_MS,
  maxBytes = MAX_RESPONSE_BYTES,
): (nodeName: string) => Promise<unknown> {
  const core = kc.makeApiClient(CoreV1Api);
  const options = { ...withTimeout(timeoutMs), httpApi: boundedHttp(maxBytes) };
  return async (name) => {
    const text: unknown = await core.connectGetNodeProxyWithPath({ name, path: 'stats/summary' }, options);
    return typeof text === 'string' ? (JSON.parse(text) as unknown) : text;
  };
}

/**
 * client-node's own HTTP library reads every body whole (node-fetch's text()), so a 50 MB Summary cost 300 MiB of
 * heap. This one sends the same request (client-node's headers, TLS agent and signal) and reads at most maxBytes.
 * It also follows no redirect and asks for no compression, which no apiserver needs here. The API-call hook of
 * loadKubeConfig does not see these requests: it counts writes, and this is a GET.
 */
function boundedHttp(maxBytes: number): HttpLibrary {
  return { send: (request) => from(sendBounded(request, maxBytes)) };
}

async function sendBounded(request: RequestContext, maxBytes: number): Promise<ResponseContext> {
  const url = new URL(request.getUrl());
  const signal = request.getSignal();
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  try {
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      send(
        url,
        {
          method: request.getHttpMethod(),
          headers: request.getHeaders(),
          agent: request.getAgent(),
          ...(signal ? { signal } : {}),
        },
        resolve,
      )
        .on('error', reject)
        .end(); // a GET: no body
    });
    const body = await readBounded(res, maxBytes, 'the kubelet Summary');
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
