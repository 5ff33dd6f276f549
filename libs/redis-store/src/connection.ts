import { settlesWithin } from '@kvroute/platform';
import { Redis, type RedisOptions } from 'ioredis';

/**
 * Who uses the connection, which decides what it does when Redis is slow or away:
 *
 * - `request-path`: the router's routing state, read and written while a client waits for its first
 *   token. Routing state is an optimisation (a request routed without it still gets an answer), so a
 *   slow or absent Redis must cost a request a few tens of ms, not seconds: every command times out
 *   after `commandTimeoutMs` (50 ms), commands issued while disconnected fail at once instead of
 *   queueing (no offline queue), and a command cut off by a dropped connection is not resent
 *   (`maxRetriesPerRequest: 0`). The caller falls back (e.g. routes without shared state) and the
 *   client reconnects in the background with capped exponential backoff (50 ms doubling to 2 s).
 * - `worker`: background jobs (health polling, BullMQ) that have no one waiting: commands wait for the
 *   connection to come back (offline queue on, `maxRetriesPerRequest: null`, as BullMQ requires, no
 *   command timeout), reconnecting with capped backoff (200 ms steps to 5 s).
 */
export type RedisRole = 'request-path' | 'worker';

export interface CreateRedisOptions {
  /** Request-path command timeout (default 50 ms). Raise it for Redis behind a slow network. */
  readonly commandTimeoutMs?: number;
  /** Connection errors (ioredis emits them on every failed reconnect; without a listener it prints them). */
  readonly onError?: (error: Error) => void;
  /** Extra ioredis options, applied last (tests, TLS, a connection name). */
  readonly overrides?: RedisOptions;
}

export const REQUEST_PATH_COMMAND_TIMEOUT_MS = 50;

/** Reconnect delay after the `attempt`-th failure: `stepMs · 2^(attempt−1)`, capped. */
export function reconnectDelayMs(attempt: number, stepMs: number, capMs: number): number {
  return Math.min(capMs, stepMs * 2 ** Math.min(Math.max(attempt - 1, 0), 16));
}

export function redisOptionsFor(role: RedisRole, options: CreateRedisOptions = {}): RedisOptions {
  const roleOptions: RedisOptions =
    role === 'request-path'
      ? {
          commandTimeout: options.commandTimeoutMs ?? REQUEST_PATH_COMMAND_TIMEOUT_MS,
          enableOfflineQueue: false,
          maxRetriesPerRequest: 0,
          connectTimeout: 1000,
          retryStrategy: (attempt) => reconnectDelayMs(attempt, 50, 2000),
        }
      : {
          enableOfflineQueue: true,
          maxRetriesPerRequest: null,
          connectTimeout: 10_000,
          retryStrategy: (attempt) => Math.min(attempt * 200, 5000),
        };
  return { keepAlive: 10_000, connectionName: `kvroute-${role}`, ...roleOptions, ...options.overrides };
}

/**
 * A Redis connection for `role` (see RedisRole). It connects at once; a request-path connection refuses
 * commands until it is ready, so await `waitUntilReady` before serving. The caller closes it (`quitRedis`).
 */
export function createRedis(url: string, role: RedisRole, options: CreateRedisOptions = {}): Redis {
  const redis = new Redis(url, redisOptionsFor(role, options));
  redis.on('error', (error: Error) => options.onError?.(error));
  return redis;
}

/**
 * Closes a connection: QUIT, so the replies to commands already sent arrive first, but never waiting
 * more than `timeoutMs` for a Redis that is away; then the socket is closed either way.
 */
export async function quitRedis(redis: Redis, timeoutMs = 1000): Promise<void> {
  await settlesWithin(redis.quit(), timeoutMs);
  redis.disconnect();
}

/** Resolves once the connection is ready; rejects after `timeoutMs` (the connection keeps trying). */
export function waitUntilReady(redis: Redis, timeoutMs = 5000): Promise<void> {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const onReady = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      redis.off('ready', onReady);
      reject(new Error(`Redis was not ready within ${timeoutMs} ms (status ${redis.status})`));
    }, timeoutMs);
    redis.once('ready', onReady);
  });
}
