// A TCP pass-through to the apiserver for failure tests: TLS stays end to end, so through it the operator talks
// to the real apiserver; the test can freeze it (every connection goes silent, as a half-open one does), thaw it,
// or close it.
import { connect, createServer, type Socket } from 'node:net';

export interface Forwarder {
  /** Stops passing bytes without closing anything: every connection goes silent, as a half-open one does. */
  freeze(): void;
  /** Drops the frozen connections (as a TCP keepalive eventually does) and forwards again. */
  thaw(): void;
  /** The connections open now go silent, as half-open ones do; new ones are forwarded as ever. */
  halfOpen(): void;
  /** The connections open now are reset when the client next sends on them, before a byte reaches the apiserver. */
  resetOnNextSend(): void;
  close(): Promise<void>;
}

/** A TCP pass-through to the apiserver: TLS stays end to end, so it is the apiserver coming up at that port. */
export async function forward(port: number, to: URL): Promise<Forwarder> {
  const sockets = new Set<Socket>();
  const clients = new Set<Socket>();
  let frozen = false;
  const server = createServer((client) => {
    sockets.add(client);
    clients.add(client);
    client.on('close', () => {
      sockets.delete(client);
      clients.delete(client);
    });
    client.on('error', () => client.destroy());
    if (frozen) return; // accepted, never answered
    const upstream = connect(Number(to.port || 443), to.hostname);
    sockets.add(upstream);
    upstream.on('close', () => sockets.delete(upstream));
    for (const socket of [client, upstream])
      socket.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    freeze: () => {
      frozen = true;
      for (const socket of sockets) {
        socket.unpipe();
        socket.pause();
      }
    },
    halfOpen: () => {
      for (const socket of sockets) {
        socket.unpipe();
        socket.pause();
      }
    },
    resetOnNextSend: () => {
      for (const client of clients) {
        client.unpipe();
        client.once('data', () => client.resetAndDestroy());
        client.resume();
      }
    },
    thaw: () => {
      frozen = false;
      for (const socket of sockets) socket.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy(); // open watches would hold close() for minutes
        server.close(() => {
          resolve();
        });
      }),
  };
}
