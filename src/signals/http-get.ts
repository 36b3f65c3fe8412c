// GET for the polled sources: global fetch, or node:https where the server's CA is one of the policy's own (fetch
// takes no CA without undici's Agent, which Node does not export).
import { request as httpsRequest } from 'node:https';

/** An HTTP GET with a timeout (signal), extra headers, and a CA of its own; global fetch is one without the CA. */
export type HttpGet = (
  url: URL,
  init: { signal: AbortSignal; headers: Record<string, string>; ca?: string },
) => Promise<{ ok: boolean; status: number; statusText: string; body: AsyncIterable<Uint8Array> | null }>;

export const httpGet: HttpGet = (url, init) => {
  const { ca, ...rest } = init;
  if (ca === undefined || url.protocol !== 'https:') return fetch(url, rest);
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      url,
      { method: 'GET', headers: rest.headers, ca, signal: rest.signal },
      (res) => {
        const status = res.statusCode ?? 0;
        resolve({
          ok: status >= 200 && status < 300,
          status,
          statusText: res.statusMessage ?? '',
          body: res,
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
};
