// A stand-in apiserver over TLS for the connection pool's unit tests: it answers what each test tells it, and
// records every request with the connection it came on, and every connection it accepted and saw close.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateServingCert, type ServingCert } from '../../src/webhook/certs.js';

export interface SeenRequest {
  method: string;
  url: string;
  /** Which connection, counting from 1 in the order they were accepted. */
  connection: number;
  authorization: string | undefined;
  body: string;
}

/**
 * What to do with one request: answer it (the default answers a Namespace), or return 'destroy' to drop its
 * connection unanswered, or 'hold' to leave it unanswered until the server closes.
 */
export type Handler = (req: SeenRequest, res: ServerResponse, socket: Socket) => unknown;

export interface TlsApiserver {
  url: string;
  requests: SeenRequest[];
  /** Connections accepted, and of those, closed. */
  connections: { opened: number; closed: number };
  handle: Handler;
  /** A kubeconfig file trusting this server's CA and carrying `token`. */
  kubeconfig(token?: string): string;
  close(): Promise<void>;
}

let cert: ServingCert | undefined;

/** A kubeconfig at `file` for `server`, trusting `caPem` (or, without one, the system's CAs), carrying `token`. */
export function writeTokenKubeconfigFor(
  file: string,
  server: string,
  caPem: string | undefined,
  token: string,
) {
  writeFileSync(
    file,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        {
          name: 'c',
          cluster: {
            server,
            ...(caPem ? { 'certificate-authority-data': Buffer.from(caPem).toString('base64') } : {}),
          },
        },
      ],
      users: [{ name: 'u', user: { token } }],
      contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'x',
    }),
  );
}

export const ok: Handler = (_req, res) => {
  res.setHeader('content-type', 'application/json');
  res.end('{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"n"}}');
};

export async function startTlsApiserver(): Promise<TlsApiserver> {
  cert ??= generateServingCert('127.0.0.1');
  const dir = mkdtempSync(join(tmpdir(), 'tls-apiserver-'));
  const sockets = new Map<Socket, number>();
  const held: ServerResponse[] = [];
  const server: Server = createServer({ cert: cert.certPem, key: cert.keyPem });
  const state: TlsApiserver = {
    url: '',
    requests: [],
    connections: { opened: 0, closed: 0 },
    handle: ok,
    kubeconfig: (token = 'first') => {
      writeTokenKubeconfigFor(join(dir, 'kubeconfig'), state.url, cert!.caPem, token);
      return join(dir, 'kubeconfig');
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of held) res.destroy();
        for (const socket of sockets.keys()) socket.destroy();
        server.close(() => {
          rmSync(dir, { recursive: true, force: true });
          resolve();
        });
      }),
  };
  server.on('secureConnection', (socket) => {
    sockets.set(socket, ++state.connections.opened);
    socket.on('close', () => {
      sockets.delete(socket);
      state.connections.closed++;
    });
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const socket = req.socket;
      const seen: SeenRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        connection: sockets.get(socket) ?? 0,
        authorization: req.headers.authorization,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      state.requests.push(seen);
      void Promise.resolve(state.handle(seen, res, socket)).then((outcome) => {
        if (outcome === 'destroy') socket.destroy();
        else if (outcome === 'hold') held.push(res);
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return state;
}
