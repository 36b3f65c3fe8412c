import type { Server } from 'node:http';

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
