// The logging contract, and a logger without dependencies for the node agent: winston alone adds about 10 MiB
// of RSS to a process (docs/adr/0011-lean-agent.md), and the agent logs a few lines an hour.

export const LOG_LEVELS = ['error', 'warn', 'info', 'debug'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface Logger {
  error(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  debug(message: string, fields?: Record<string, unknown>): void;
}

export const silentLogger: Logger = {
  error: () => undefined,
  warn: () => undefined,
  info: () => undefined,
  debug: () => undefined,
};

/**
 * JSON lines on stderr with the fields of logger.ts's winston logger: {"component","level","message",...fields,
 * "time"}. A field that does not serialise is written as its string.
 */
export function createLineLogger(
  level: LogLevel = 'info',
  component: string,
  write: (line: string) => void = (line) => process.stderr.write(line),
  now: () => Date = () => new Date(),
): Logger {
  const threshold = LOG_LEVELS.indexOf(level);
  const at =
    (method: LogLevel) =>
    (message: string, fields: Record<string, unknown> = {}) => {
      if (LOG_LEVELS.indexOf(method) > threshold) return;
      const entry = { component, level: method, message, ...fields, time: now().toISOString() };
      let line: string;
      try {
        line = JSON.stringify(entry);
      } catch {
        line = JSON.stringify({
          ...entry,
          ...Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, String(v)])),
        });
      }
      write(`${line}\n`);
    };
  return { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') };
}
