// An HTTP server on 127.0.0.1 that answers however a test tells it to, down to the bytes: garbage, lies about
// Content-Length, a body streamed for ever, silence. Plain TCP, so nothing in node:http tidies the answer up.
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** What the client asked: the request line's target, as sent and parsed. */
export interface Asked {
  path: string;
  url: URL;
}

/** How one request is answered, given the socket it came on (the server never reuses a connection). */
export type Behaviour = (asked: Asked, socket: Socket, server: MisbehavingServer) => void | Promise<void>;

const MAX_HEAD_BYTES = 64 * 1024;

export class MisbehavingServer {
  behaviour: Behaviour = (_asked, socket) => {
    respond(socket, 404, '');
  };
  /** Requests seen, in order. */
  readonly asked: Asked[] = [];
  /** Body bytes the server got onto the wire (accepted by the kernel), summed over every response. */
  bodyBytesWritten = 0;
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  /** Connections that carried a request (fetch may also open spare ones, which it closes when idle). */
  private readonly answering = new Set<Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor() {
    this.server = createServer((socket) => {
      this.sockets.add(socket);
      socket.on('close', () => {
        this.sockets.delete(socket);
        this.answering.delete(socket);
      });
      socket.on('error', () => undefined); // the client hanging up mid-answer is the point of most tests
      let head = '';
      const onData = (chunk: Buffer) => {
        head += chunk.toString('latin1');
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) {
          if (head.length > MAX_HEAD_BYTES) socket.destroy();
          return;
        }
        socket.off('data', onData);
        const path = head.slice(0, end).split(' ')[1] ?? '/';
        const asked = { path, url: new URL(path, 'http://x') };
        this.asked.push(asked);
        this.answering.add(socket);
        void Promise.resolve(this.behaviour(asked, socket, this)).catch(() => socket.destroy());
      };
      socket.on('data', onData);
    });
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return this;
  }

  /** A timer the server clears when it closes. */
  every(ms: number, fn: () => void): NodeJS.Timeout {
    const timer = setInterval(fn, ms);
    this.timers.add(timer);
    return timer;
  }

  /** Whether every connection that carried a request is closed (the client hung up), waiting up to `ms`. */
  async idle(ms: number): Promise<boolean> {
    const deadline = performance.now() + ms;
    while (this.answering.size > 0 && performance.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 10));
    return this.answering.size === 0;
  }

  async close(): Promise<void> {
    for (const timer of this.timers) clearInterval(timer);
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) =>
      this.server.close(() => {
        resolve();
      }),
    );
  }
}

const REASONS: Record<number, string> = {
  200: 'OK',
  302: 'Found',
  404: 'Not Found',
  500: 'Internal Server Error',
};

/** A status line and headers, with nothing after them. */
export function head(status: number, headers: Record<string, string | number> = {}): string {
  const lines = Object.entries({ 'Content-Type': 'application/json', Connection: 'close', ...headers }).map(
    ([k, v]) => `${k}: ${v}`,
  );
  return `HTTP/1.1 ${status} ${REASONS[status] ?? 'Status'}\r\n${lines.join('\r\n')}\r\n\r\n`;
}

/** An honest, complete answer. */
export function respond(
  socket: Socket,
  status: number,
  body: string | Buffer,
  headers: Record<string, string | number> = {},
): void {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  socket.end(
    Buffer.concat([Buffer.from(head(status, { 'Content-Length': bytes.length, ...headers })), bytes]),
  );
}

/**
 * Streams `total` bytes of body (the `prefix`, then `filler` repeated, then `suffix`) with no Content-Length, so
 * only a cap on the reader can stop it; waits for the socket to drain between chunks, as a real server does.
 * Resolves when it is all written or the client hung up.
 */
export async function streamBody(
  socket: Socket,
  server: MisbehavingServer,
  parts: { prefix: string; filler: string; suffix: string; total: number },
): Promise<void> {
  socket.write(head(200));
  const chunk = Buffer.from(parts.filler.repeat(Math.ceil((64 * 1024) / parts.filler.length)));
  const write = (bytes: Buffer) =>
    new Promise<boolean>((resolve) => {
      if (socket.destroyed || !socket.writable) {
        resolve(false);
        return;
      }
      if (socket.write(bytes)) {
        server.bodyBytesWritten += bytes.length;
        resolve(true);
        return;
      }
      server.bodyBytesWritten += bytes.length;
      const done = (ok: boolean) => {
        socket.off('drain', onDrain);
        socket.off('close', onClose);
        resolve(ok);
      };
      const onDrain = () => {
        done(true);
      };
      const onClose = () => {
        done(false);
      };
      socket.once('drain', onDrain);
      socket.once('close', onClose);
    });
  if (!(await write(Buffer.from(parts.prefix)))) return;
  const chunks = Math.floor((parts.total - parts.prefix.length - parts.suffix.length) / chunk.length);
  for (let i = 0; i < chunks; i++) {
    if (!(await write(chunk))) return;
  }
  if (await write(Buffer.from(parts.suffix))) socket.end();
}

/** Sends a body one byte a second, for at most `body.length` seconds. */
export function trickle(socket: Socket, server: MisbehavingServer, body: string): void {
  socket.write(head(200, { 'Content-Length': body.length }));
  let i = 0;
  const timer = server.every(1000, () => {
    if (i >= body.length || socket.destroyed) {
      clearInterval(timer);
      return;
    }
    socket.write(body[i++] ?? '');
    server.bodyBytesWritten++;
  });
}

let gcFn: (() => void) | undefined;

/**
 * Full garbage collections, so that memory figures count what is still referenced. Two: the memory of a Buffer
 * is given back only after the collection that found it unreferenced.
 */
export function collectGarbage(): void {
  if (!gcFn) {
    setFlagsFromString('--expose-gc');
    gcFn = runInNewContext('gc') as () => void;
  }
  gcFn();
  gcFn();
}

/** Heap and off-heap (Buffers) bytes in use. */
export function memoryInUse(): number {
  const { heapUsed, external } = process.memoryUsage();
  return heapUsed + external;
}

/**
 * Runs fn while sampling memory every few milliseconds: the peak growth over the starting figure, and the growth
 * still there after a full collection at the end.
 */
export async function measureMemory(
  fn: () => Promise<void>,
): Promise<{ peakGrowth: number; retainedGrowth: number }> {
  collectGarbage();
  const start = memoryInUse();
  let peak = start;
  const sampler = setInterval(() => (peak = Math.max(peak, memoryInUse())), 5);
  try {
    await fn();
  } finally {
    clearInterval(sampler);
  }
  peak = Math.max(peak, memoryInUse());
  collectGarbage();
  return { peakGrowth: peak - start, retainedGrowth: memoryInUse() - start };
}

export const MB = 1024 * 1024;
