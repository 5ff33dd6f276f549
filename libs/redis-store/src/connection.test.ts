import { describe, expect, it } from 'vitest';
import {
  clusterOptionsFor,
  isClusterUrl,
  parseClusterUrl,
  reconnectDelayMs,
  redisOptionsFor,
  redisUrlNodes,
  REQUEST_PATH_COMMAND_TIMEOUT_MS,
} from './connection';

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
    expect([1, 2, 3, 4, 5, 6, 7].map((attempt) => reconnectDelayMs(attempt, 50, 2000))).toEqual([
      50, 100, 200, 400, 800, 1600, 2000,
    ]);
    expect(reconnectDelayMs(10_000, 50, 2000)).toBe(2000);
  });
});

describe('parseClusterUrl', () => {
  it('reads the seeds, credentials and TLS of a cluster URL', () => {
    expect(isClusterUrl('redis+cluster://a:1')).toBe(true);
    expect(isClusterUrl('REDISS+CLUSTER://a:1')).toBe(true);
    expect(isClusterUrl('redis://a:1')).toBe(false);
    expect(parseClusterUrl('redis+cluster://127.0.0.1:7000,127.0.0.1:7001,redis_2.internal')).toEqual({
      tls: false,
      nodes: [
        { host: '127.0.0.1', port: 7000 },
        { host: '127.0.0.1', port: 7001 },
        { host: 'redis_2.internal', port: 6379 },
      ],
      username: undefined,
      password: undefined,
    });
    expect(parseClusterUrl('rediss+cluster://kvroute:p%40ss@[::1]:7000,[fd00::2]/')).toEqual({
      tls: true,
      nodes: [
        { host: '::1', port: 7000 },
        { host: 'fd00::2', port: 6379 },
      ],
      username: 'kvroute',
      password: 'p@ss',
    });
    // The userinfo ends at the last '@': unencoded '@' and '/' in a password still parse.
    expect(parseClusterUrl('redis+cluster://:a@b/c@h:1')).toMatchObject({
      username: undefined,
      password: 'a@b/c',
      nodes: [{ host: 'h', port: 1 }],
    });
  });

  it('refuses a malformed URL without quoting it (it may hold a password)', () => {
    for (const url of [
      'redis+cluster://:hunter2-secret@',
      'redis+cluster://:hunter2-secret@h:1,,h:2',
      'redis+cluster://:hunter2-secret@h:0',
      'redis+cluster://:hunter2-secret@h:65536',
      'redis+cluster://:hunter2-secret@h:x',
      'redis+cluster://:hunter2-secret@h%1:1',
      'redis+cluster://:hunter2-secret@-h:1',
      'redis+cluster://:hunter2-secret@h:1/2',
      'redis+cluster://:hunter2-secret@h:1?tls=1',
      'redis+cluster://:hunter2-%zz@h:1',
      'redis://:hunter2-secret@h:1',
    ]) {
      let caught: unknown;
      try {
        parseClusterUrl(url);
      } catch (error) {
        caught = error;
      }
      expect(caught, url).toBeInstanceOf(RangeError);
      expect((caught as Error).message).not.toMatch(/hunter2/);
      expect((caught as Error).message).toMatch(/^Redis Cluster URL: /);
    }
  });

  it('names the nodes of any Redis URL, without credentials', () => {
    expect(redisUrlNodes('redis://:pw@Redis.internal')).toEqual([{ host: 'redis.internal', port: 6379 }]);
    expect(redisUrlNodes('rediss://[::1]:6380/0')).toEqual([{ host: '::1', port: 6380 }]);
    expect(redisUrlNodes('redis+cluster://:pw@a:7000,b:7001')).toEqual([
      { host: 'a', port: 7000 },
      { host: 'b', port: 7001 },
    ]);
    expect(redisUrlNodes('redis+cluster://')).toEqual([]);
    expect(redisUrlNodes('not a url')).toEqual([]);
  });
});

describe('clusterOptionsFor', () => {
  const url = parseClusterUrl('rediss+cluster://user:pw@a:7000');

  it('request-path: fails fast at the cluster and on every node', () => {
    const options = clusterOptionsFor('request-path', url);
    expect(options.enableOfflineQueue).toBe(false);
    expect(options.scaleReads).toBe('master');
    expect(options.maxRedirections).toBeLessThanOrEqual(4);
    expect(options.retryDelayOnFailover).toBeLessThanOrEqual(10);
    expect(options.retryDelayOnClusterDown).toBeLessThanOrEqual(10);
    expect(options.clusterRetryStrategy?.(1)).toBe(50);
    expect(options.clusterRetryStrategy?.(100)).toBe(2000);
    expect(options.redisOptions).toMatchObject({
      commandTimeout: REQUEST_PATH_COMMAND_TIMEOUT_MS,
      maxRetriesPerRequest: 0,
      connectTimeout: 1000,
      keepAlive: 10_000,
      connectionName: 'kvroute-request-path',
      username: 'user',
      password: 'pw',
      tls: {},
    });
    // The cluster owns queueing and reconnection: a node connection must not carry them.
    expect(options.redisOptions).not.toHaveProperty('enableOfflineQueue');
    expect(options.redisOptions).not.toHaveProperty('retryStrategy');
    expect(typeof options.dnsLookup).toBe('function');
  });

  it('worker: queues, waits through a failover, and keeps maxRetriesPerRequest null for BullMQ', () => {
    const options = clusterOptionsFor('worker', parseClusterUrl('redis+cluster://a:7000'), {
      overrides: { connectionName: 'poller' },
    });
    expect(options.enableOfflineQueue).toBe(true);
    expect(options.clusterRetryStrategy?.(100)).toBe(5000);
    expect((options.maxRedirections ?? 0) * (options.retryDelayOnFailover ?? 0)).toBeGreaterThanOrEqual(20_000);
    expect(options.redisOptions?.maxRetriesPerRequest).toBeNull();
    expect(options.redisOptions?.commandTimeout).toBeUndefined();
    expect(options.redisOptions?.connectionName).toBe('poller');
    expect(options.redisOptions).not.toHaveProperty('password');
    expect(options.redisOptions).not.toHaveProperty('tls');
    expect(options.dnsLookup).toBeUndefined();
  });
});
