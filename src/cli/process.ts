import type { Server } from 'node:http';
import type { BindError } from '../observability/server.js';

/** Resolves with the name of the first SIGTERM or SIGINT the process receives. */
export function untilStopSignal(): Promise<string> {
  return new Promise((resolve) => {
    for (const signal of ['SIGTERM', 'SIGINT'] as const) {
      process.once(signal, () => {
        resolve(signal);
      });
    }
  });
}

/** Closes the servers that were started (a disabled address gives undefined). */
export async function closeServers(...bound: ({ server: Server } | undefined)[]): Promise<void> {
  for (const b of bound) if (b) await new Promise((resolve) => b.server.close(resolve));
}

/** A server a flag places: "metrics" at --metrics-bind-address, which "0" turns off. */
export interface Listener {
  what: string;
  flag: string;
  /** Who likely holds the port, when it is taken. */
  holder: string;
}

/** The one line for a server that cannot listen where its flag says: what is wrong, and what to pass instead. */
export function bindRefusal(err: BindError, listener: Listener): string {
  const instead = {
    'in-use': '<free port>',
    denied: '<port above 1023>',
    'not-local': ':<port>',
    invalid: ':<port>',
  };
  const holder = err.problem === 'in-use' ? ` (${listener.holder})` : '';
  return `Refused to start: the ${listener.what} address ${err.message}${holder}; pass ${listener.flag}=${instead[err.problem]} or "0" to turn it off`;
}

/** All of standard input as text; with a terminal there, first a line on stderr saying what it waits for. */
export async function readStdin(waitingFor: string): Promise<string> {
  if (process.stdin.isTTY) process.stderr.write(`Reading ${waitingFor} from standard input (Ctrl-D ends).\n`);
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
