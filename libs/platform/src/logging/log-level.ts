/**
 * Log levels as config values: apps put `logLevel: z.enum(LOG_LEVELS).default('info')` in their schema, so an unknown
 * level fails at startup with the list of valid ones instead of pino throwing later.
 */
import type { LevelWithSilent } from 'pino';

export const LOG_LEVELS = [
  'fatal',
  'error',
  'warn',
  'info',
  'debug',
  'trace',
  'silent',
] as const satisfies readonly LevelWithSilent[];

export type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * Log line formats as config values (`logFormat: z.enum(LOG_FORMATS).default('json')`): JSON for log stores, one
 * object per line; `pretty` for a person at a terminal (pretty-log-stream.ts, the same redacted fields).
 */
export const LOG_FORMATS = ['json', 'pretty'] as const;

export type LogFormat = (typeof LOG_FORMATS)[number];
