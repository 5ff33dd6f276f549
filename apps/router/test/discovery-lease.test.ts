import { createRedis, waitUntilReady, type RedisClient } from '@kvroute/redis-store';
import { startRedis, uniqueKeyPrefix, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisDiscoveryLease } from '../src/discovery/discovery-leader';
import { waitFor } from './start-test-cluster';

/** The lease that lets one replica at a time apply what discovery finds, on a real Redis. */
describe('RedisDiscoveryLease', () => {
  let redis: TestRedis;
  let connection: RedisClient;
  beforeAll(async () => {
    redis = await startRedis();
    connection = createRedis(redis.url, 'request-path');
    await waitUntilReady(connection);
  });
  afterAll(async () => {
    connection.disconnect();
    await redis.stop();
  });

  it('one holder at a time; renewing keeps it; release hands it over at once', async () => {
    const key = `${uniqueKeyPrefix('discovery-lease')}:lease`;
    const a = new RedisDiscoveryLease({ redis: connection, key, holder: 'a', ttlMs: 10_000 });
    const b = new RedisDiscoveryLease({ redis: connection, key, holder: 'b', ttlMs: 10_000 });
    expect(await a.holds()).toBe(true);
    expect(await b.holds()).toBe(false);
    expect(await a.holds()).toBe(true);
    // b releasing what it does not hold changes nothing.
    await b.release();
    expect(await b.holds()).toBe(false);
    await a.release();
    expect(await b.holds()).toBe(true);
    expect(await a.holds()).toBe(false);
  });

  it('a holder that stops renewing (a crashed replica) loses the lease once its TTL has passed', async () => {
    const key = `${uniqueKeyPrefix('discovery-lease')}:lease`;
    const crashed = new RedisDiscoveryLease({ redis: connection, key, holder: 'crashed', ttlMs: 300 });
    const survivor = new RedisDiscoveryLease({ redis: connection, key, holder: 'survivor', ttlMs: 300 });
    expect(await crashed.holds()).toBe(true);
    expect(await survivor.holds()).toBe(false);
    await waitFor(() => survivor.holds(), 3_000);
    expect(await connection.get(key)).toBe('survivor');
    expect(await crashed.holds()).toBe(false);
  });

  it('Redis unreachable: not held (the set cannot be changed then anyway), never a throw', async () => {
    const unreachable = createRedis('redis://127.0.0.1:1', 'request-path');
    try {
      const lease = new RedisDiscoveryLease({ redis: unreachable, key: 'kvr:test:lease', holder: 'x', ttlMs: 1_000 });
      expect(await lease.holds()).toBe(false);
      await expect(lease.release()).resolves.toBeUndefined();
    } finally {
      unreachable.disconnect();
    }
  });
});
