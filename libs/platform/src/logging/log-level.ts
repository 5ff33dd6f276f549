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
