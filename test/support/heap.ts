// Reads another Node.js process's heap through its inspector (`node --inspect=127.0.0.1:0`): the heap in use right
// after a full garbage collection, which is what a leak grows, and heap snapshots to compare in Chrome's DevTools.
// RSS alone cannot tell a leak from V8 letting its heap grow before it bothers to collect.
import { createWriteStream } from 'node:fs';
import { once } from 'node:events';
import WebSocket from 'ws';

interface Reply {
  id?: number;
  method?: string;
  params?: { chunk?: string };
  result?: Record<string, unknown>;
  error?: { message: string };
}

/** The inspector's address from the line node prints on stderr, or undefined. */
export function inspectorUrl(line: string): string | undefined {
  return /Debugger listening on (ws:\/\/127\.0\.0\.1:\d+\/[\w-]+)/.exec(line)?.[1];
}

export class HeapProbe {
  private next = 1;
  private readonly pending = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void }>();
  private onChunk: ((chunk: string) => void) | undefined;

  private constructor(private readonly socket: WebSocket) {
    socket.on('message', (data: Buffer) => {
      const reply = JSON.parse(data.toString()) as Reply;
      if (reply.method === 'HeapProfiler.addHeapSnapshotChunk') this.onChunk?.(reply.params?.chunk ?? '');
      if (reply.id === undefined) return;
      const waiter = this.pending.get(reply.id);
      this.pending.delete(reply.id);
      if (reply.error) waiter?.reject(new Error(reply.error.message));
      else waiter?.resolve(reply);
    });
    socket.on('close', () => {
      for (const waiter of this.pending.values()) waiter.reject(new Error('inspector connection closed'));
      this.pending.clear();
    });
  }

  static async connect(url: string): Promise<HeapProbe> {
    const socket = new WebSocket(url);
    await once(socket, 'open');
    return new HeapProbe(socket);
  }

  private call(method: string, params: Record<string, unknown> = {}, timeoutMs = 120_000): Promise<Reply> {
    const id = this.next++;
    if (this.socket.readyState !== WebSocket.OPEN)
      return Promise.reject(new Error('inspector connection closed'));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`inspector: ${method} took over ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.socket.send(JSON.stringify({ id, method, params }));
    });
  }

  /** Bytes of JavaScript heap in use after two full collections (the second catches what finalizers let go). */
  async usedAfterGc(): Promise<number> {
    await this.call('HeapProfiler.collectGarbage');
    await this.call('HeapProfiler.collectGarbage');
    const usage = await this.call('Runtime.getHeapUsage');
    return Number(usage.result?.usedSize);
  }

  /** A heap snapshot (taken after a full collection) written to `path`. */
  async snapshot(path: string): Promise<void> {
    const file = createWriteStream(path);
    this.onChunk = (chunk) => file.write(chunk);
    try {
      await this.call('HeapProfiler.takeHeapSnapshot', { reportProgress: false }, 600_000);
    } finally {
      this.onChunk = undefined;
      file.end();
      await once(file, 'close');
    }
  }

  /**
   * Disconnects. Do it before stopping the process: a Node.js process with an inspector session attached does not
   * exit, even on process.exit, until the session ends ("Waiting for the debugger to disconnect...").
   */
  close(): void {
    this.socket.close();
  }
}
