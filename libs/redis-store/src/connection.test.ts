import { describe, expect, it } from 'vitest';
import { reconnectDelayMs, redisOptionsFor, REQUEST_PATH_COMMAND_TIMEOUT_MS } from './connection';

describe('redisOptionsFor', () => {
  it('makes request-path connections fail fast', () => {
    const options = redisOptionsFor('request-path');
    expect(options.commandTimeout).toBe(REQUEST_PATH_COMMAND_TIMEOUT_MS);
    expect(options.enableOfflineQueue).toBe(false);
    expect(options.maxRetriesPerRequest).toBe(0);
    expect(options.retryStrategy?.(1)).toBe(50);
    expect(options.retryStrategy?.(100)).toBe(2000);
  });

  it('makes worker connections wait for Redis', () => {
    const options = redisOptionsFor('worker');
    expect(options.commandTimeout).toBeUndefined();
    expect(options.enableOfflineQueue).toBe(true);
    expect(options.maxRetriesPerRequest).toBeNull();
    expect(options.retryStrategy?.(100)).toBe(5000);
  });

  it('applies a command timeout and overrides', () => {
    expect(redisOptionsFor('request-path', { commandTimeoutMs: 200 }).commandTimeout).toBe(200);
    expect(redisOptionsFor('worker', { overrides: { connectionName: 'poller' } }).connectionName).toBe('poller');
  });
});

describe('reconnectDelayMs', () => {
  it('doubles from the step up to the cap', () => {
    expect([1, 2, 3, 4, 5, 6, 7].map((attempt) => reconnectDelayMs(attempt, 50, 2000))).toEqual([50, 100, 200, 400, 800, 1600, 2000]);
    expect(reconnectDelayMs(10_000, 50, 2000)).toBe(2000);
  });
});
