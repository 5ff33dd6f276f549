import { fleetKeys, poolKeys } from '@kvroute/redis-store';
import { startRedis, uniqueKeyPrefix, type TestRedis } from '@kvroute/testing';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseRouterList, RemoteTarget } from './remote-target';
import { parseRedisUrl, redisUrlForLog, RouterStateReset } from './router-state';

/**
 * `--router-redis` on a real Redis (REDIS_URL, else a container or a local redis-server): the runner's
 * own `startRun` clears the routers' pool state in their namespace and leaves the fleet's keys alone.
 * Each test gets its own namespace, so a shared REDIS_URL is never flushed.
 */
let server: TestRedis;
let redis: Redis;

beforeAll(async () => {
  server = await startRedis({ logger: () => undefined });
  redis = new Redis(server.url);
}, 60_000);

afterAll(async () => {
  await redis?.quit();
  await server?.stop();
}, 30_000);

const noFetch = (async () => new Response('', { status: 404 })) as typeof fetch;

describe('real deployment target with --router-redis', () => {
  it("deletes the routers' pool state before each run and keeps the fleet's keys", async () => {
    const namespace = uniqueKeyPrefix('bench-router-redis');
    const modelA = poolKeys('model-a', namespace);
    const modelB = poolKeys('model-b', namespace);
    const fleet = fleetKeys(namespace);
    const writePoolState = async (): Promise<void> => {
      await redis.hset(modelA.ownersNew, '11', '\x01b1\x021000');
      await redis.set(modelA.generation, '1000');
      await redis.zadd(modelA.leaseDeadlines, 5000, '2:b1lease-1');
      await redis.hset(modelA.inflight, 'b1', '1');
      await redis.hset(modelA.prefill('b1'), 'lease-1', '100');
      await redis.hset(modelB.ownersOld, '21', '\x01b2\x02900');
    };
    await writePoolState();
    await redis.hset(fleet.backends, 'b1', '{"id":"b1"}');
    await redis.set(fleet.version, '7');
    const poller = `${namespace}:{poller}:scrapes:meta`;
    await redis.hset(poller, 'version', '1');

    const logs: string[] = [];
    const target = new RemoteTarget({
      routers: parseRouterList('cacheaware=http://r1'),
      backendUrls: [],
      resetCache: false,
      routerRedisUrl: server.url,
      routerRedisNamespace: namespace,
      log: (line) => void logs.push(line),
      fetch: noFetch,
    });
    try {
      expect(await target.startRun('cacheaware')).toEqual(['http://r1']);
      expect((await redis.keys(`${namespace}:*`)).sort()).toEqual([fleet.backends, fleet.version, poller].sort());
      expect(await redis.hget(fleet.backends, 'b1')).toBe('{"id":"b1"}');

      // The next run clears what the previous one left, over the same connection.
      await writePoolState();
      await target.startRun('cacheaware');
      expect((await redis.keys(`${namespace}:*`)).sort()).toEqual([fleet.backends, fleet.version, poller].sort());
    } finally {
      await target.close();
    }
    const cleared = logs.filter((line) => line.startsWith('router state:'));
    expect(cleared).toEqual([
      `router state: 6 keys deleted from ${redisUrlForLog(server.url)} (namespace ${namespace})`,
      expect.stringContaining('router state: 6 keys deleted'),
    ]);
    expect(logs.some((line) => line.includes('not cleared between runs'))).toBe(false);
    await redis.del(fleet.backends, fleet.version, poller);
  });

  it('fails the run with a clear error when that Redis does not answer', async () => {
    // The reset RemoteTarget uses, with a short wait (a real deployment gets 10 s).
    const reset = new RouterStateReset({
      url: 'redis://:secret@127.0.0.1:1',
      log: () => undefined,
      readyTimeoutMs: 300,
    });
    const failure = reset.clear();
    await expect(failure).rejects.toThrow(/^--router-redis redis:\/\/127\.0\.0\.1:1: not ready within 0\.3 s/);
    await expect(failure).rejects.not.toThrow(/secret/);
    await reset.close();
  });
});

describe('parseRedisUrl', () => {
  it('takes redis:// and rediss:// URLs and names the flag otherwise, without echoing a password', () => {
    expect(parseRedisUrl(' redis://redis.internal:6379/0 ', '--router-redis')).toBe('redis://redis.internal:6379/0');
    expect(parseRedisUrl('rediss://user:secret@redis.example.com', '--router-redis')).toBe(
      'rediss://user:secret@redis.example.com',
    );
    expect(() => parseRedisUrl('http://redis:6379', '--router-redis')).toThrow(
      /^--router-redis: "http:\/\/redis:6379" is not a redis:\/\/, rediss:\/\/ or redis\+cluster:\/\/ URL/,
    );
    // A cluster's seeds (clearPoolState scans every master), refused with a reason that quotes nothing.
    expect(parseRedisUrl('redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7000', '--router-redis')).toBe(
      'redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7000',
    );
    expect(() => parseRedisUrl('redis+cluster://:pw@10.0.0.1:99999', '--router-redis')).toThrow(
      /^--router-redis: Redis Cluster URL: node 1 has no valid port/,
    );
    expect(() => parseRedisUrl('redis+cluster://:pw@10.0.0.1:99999', '--router-redis')).not.toThrow(/pw/);
    expect(redisUrlForLog('redis+cluster://user:pa@ss@h:1,[::1]:2')).toBe('redis+cluster://h:1,[::1]:2');
    expect(redisUrlForLog('rediss+cluster://:p/w@h:1')).toBe('rediss+cluster://h:1');
    expect(() => parseRedisUrl('redis.internal:6379', '--router-redis')).toThrow(
      /is not a redis:\/\/, rediss:\/\/ or redis\+cluster:\/\/ URL/,
    );
    expect(() => parseRedisUrl('redis://', '--router-redis')).toThrow(/is not a redis/);
    expect(() => parseRedisUrl('ftp://:secret@x', '--router-redis')).toThrow(/"ftp:\/\/x"/);
    expect(redisUrlForLog('redis://:secret@h:6380/2')).toBe('redis://h:6380/2');
  });
});
