/**
 * A small leveled logger writing one line per event to stderr. A call below the active level costs
 * one comparison; nothing here runs per request unless debug logging is switched on.
 */

export const LogLevel = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 } as const;
export type LogLevelName = keyof typeof LogLevel;

export interface Logger {
  debug(msg: string): void;
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
}

/** A logger that writes lines at or above `level` to `write` (default: stderr). */
export function createLogger(
  level: LogLevelName = 'info',
  write: (line: string) => void = (l) => process.stderr.write(l),
): Logger {
  const min = LogLevel[level];
  const emit = (name: LogLevelName, msg: string): void => {
    if (LogLevel[name] >= min) write(`${new Date().toISOString()} ${name} ${msg}\n`);
  };
  return {
    debug: (m) => emit('debug', m),
    info: (m) => emit('info', m),
    warn: (m) => emit('warn', m),
    error: (m) => emit('error', m),
  };
}

/** The level named by `SLUICE_LOG_LEVEL`, or `fallback`. */
export function levelFromEnv(fallback: LogLevelName): LogLevelName {
  const v = process.env['SLUICE_LOG_LEVEL'];
  return v !== undefined && v in LogLevel ? (v as LogLevelName) : fallback;
}
