/**
 * The process's one root logger (house rule 9). Components get `logger.child({ component })` from their caller;
 * nothing else creates a pino instance.
 *
 * Output choices: ISO timestamps (readable in any log store without conversion), level as a label rather than pino's
 * number (greppable, and what log stores index), and `base` limited to service/version so every line says which
 * process wrote it without pid/hostname noise (the container runtime adds those).
 */
import { destination as fileDestination, pino, stdTimeFunctions, type DestinationStream, type Logger } from 'pino';
import type { LogLevel } from './log-level';
import { createPrettyLogStream } from './pretty-log-stream';
import { REDACT_PATHS, REDACTED } from './redact-paths';

export interface CreateLoggerOptions {
  /** Process name, e.g. `router`, `vllm-sim`; on every line as `service`. */
  service: string;
  level: LogLevel;
  /** Package version, on every line as `version` when given. */
  version?: string;
  /** Human-readable lines for local development instead of JSON. */
  pretty?: boolean;
  /** Where lines go; default stdout (fd 1). Tests pass a stream and read what was written. */
  destination?: DestinationStream;
}

export function createLogger(options: CreateLoggerOptions): Logger {
  const base: Record<string, string> = { service: options.service };
  if (options.version !== undefined) base['version'] = options.version;

  // fd 1 through pino's synchronous sonic-boom: lines written just before `process.exit` are not lost.
  const output = options.destination ?? fileDestination(1);
  const destination = options.pretty === true ? createPrettyLogStream(output) : output;

  return pino(
    {
      level: options.level,
      base,
      timestamp: stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: [...REDACT_PATHS], censor: REDACTED },
    },
    destination,
  );
}
