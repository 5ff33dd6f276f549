import { createRedis, KvEventsLeases, readFollowedKvEventStreams } from '@kvroute/redis-store';
import { startRedis, uniqueKeyPrefix, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cacheViewOf, EventStreamsWatch } from './cache-views';

describe('cache views', () => {
  let server: TestRedis;
  let redis: ReturnType<typeof createRedis>;
  beforeAll(async () => {
    server = await startRedis();
    redis = createRedis(server.url, 'worker');
  });
  afterAll(async () => {
    redis.disconnect();
    await server.stop();
  });

  it('shows `events` for the backends whose streams a poller replica holds and has applied a batch from', async () => {
    const namespace = uniqueKeyPrefix('cache-views');
    const leases = new KvEventsLeases({ redis, replicaId: 'poller-1', leaseTtlMs: 10_000, keyNamespace: namespace });
    await leases.acquire('a'); // held, nothing applied yet: the publisher may not exist
    await leases.acquire('b@1');
    await leases.advance('b@1', 41n);
    const read = (ids: readonly string[]) => readFollowedKvEventStreams(redis, ids, namespace);
    expect([...(await read(['a', 'b@1', 'c']))]).toEqual(['b@1']);

    const watch = new EventStreamsWatch({ read, backendIds: () => ['a', 'b@1', 'c'], intervalMs: 60_000 });
    await watch.refresh();
    expect(cacheViewOf(watch.isFollowed('b@1'), true)).toBe('events');
    expect(cacheViewOf(watch.isFollowed('a'), true)).toBe('closed-loop');
    expect(cacheViewOf(watch.isFollowed('c'), false)).toBe('open-loop');
    // The holder lets the stream go (a graceful stop): no longer followed.
    await leases.release('b@1', 42n);
    await watch.refresh();
    expect(watch.isFollowed('b@1')).toBe(false);
  });

  it('keeps the last answer when a read fails', async () => {
    let fail = false;
    const errors: unknown[] = [];
    const watch = new EventStreamsWatch({
      read: async () => {
        if (fail) throw new Error('redis down');
        return new Set(['a']);
      },
      backendIds: () => ['a'],
      intervalMs: 60_000,
      onError: (error) => errors.push(error),
    });
    await watch.refresh();
    fail = true;
    await watch.refresh();
    expect(watch.isFollowed('a')).toBe(true);
    expect(errors).toHaveLength(1);
  });
});
