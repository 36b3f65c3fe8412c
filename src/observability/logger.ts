import winston from 'winston';
import { LOG_LEVELS, type Logger, type LogLevel } from './log.js';

export { LOG_LEVELS, silentLogger, type Logger, type LogLevel } from './log.js';

/** JSON lines on stderr: {"level","message","time", ...fields}. */
export function createLogger(level: LogLevel = 'info', component = 'operator'): Logger {
  const logger = winston.createLogger({
    level,
    defaultMeta: { component },
    format: winston.format.combine(winston.format.timestamp({ alias: 'time' }), winston.format.json()),
    transports: [new winston.transports.Console({ stderrLevels: [...LOG_LEVELS] })],
  });
  const at =
    (method: LogLevel) =>
    (message: string, fields: Record<string, unknown> = {}) => {
      logger.log(method, message, fields);
    };
  return { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') };
}
