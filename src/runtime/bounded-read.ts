// Reading an HTTP body up to a bound: no domain words, used by the polled IO sources and the kubelet fetcher.

/**
 * The most a polled source reads of one answer. A Prometheus answer is about 300 bytes a series and one series a
 * node, so 8 MiB is some 25,000 nodes; a kubelet Summary (indented JSON) is a few KiB a pod, so 8 MiB is well over
 * a thousand pods. Anything bigger is not an answer to us, and reading it whole cost over 300 MiB of heap for one
 * 50 MB answer (the JSON text, then the parsed objects).
 */
export const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;

/**
 * Reads a body to its end, failing as soon as more than maxBytes arrived. Leaving the loop early cancels the
 * stream (fetch) or destroys it (node:http), which closes the connection: the rest is never read.
 */
export async function readBounded(
  body: AsyncIterable<Uint8Array>,
  maxBytes: number,
  what: string,
): Promise<Buffer> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.byteLength;
    if (size > maxBytes) throw new Error(`${what} is larger than ${maxBytes} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size);
}
