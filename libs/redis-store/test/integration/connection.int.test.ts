import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createRedis, waitUntilReady } from '../../src/connection';
import { RedisStoreError } from '../../src/redis-store-error';
import { openRedisTestContext, singleServer, type RedisTestContext } from './redis-test-context';

// A Redis of this file's own: the tests pause, kill and restart it.
let ctx: RedisTestContext;
const opened: Redis[] = [];
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-connection', fresh: true });
});
beforeEach(() => ctx.beginTest('connection'));
afterEach(async () => {
  for (const client of opened.splice(0)) client.disconnect();
  await waitUntilReady(ctx.redis);
  await ctx.cleanup();
});
afterAll(() => ctx.close());

async function open(role: 'request-path' | 'worker'): Promise<Redis> {
  const client = singleServer(createRedis(ctx.server.url, role));
  opened.push(client);
  await waitUntilReady(client);
  return client;
}

async function elapsedMs(work: () => Promise<unknown>): Promise<{ ms: number; error: unknown }> {
  const started = performance.now();
  const error = await work().then(
    () => undefined,
    (caught: unknown) => caught,
  );
  return { ms: performance.now() - started, error };
}

describe('createRedis', () => {
  it('request-path: a command stalled by the server times out after ~50 ms', async () => {
    const state = ctx.createState({ redis: await open('request-path') });
    await state.snapshot('m', ['a'], [1]); // scripts cached, connection warm
    await ctx.redis.client('PAUSE', 300, 'ALL');
    const { ms, error } = await elapsedMs(() => state.snapshot('m', ['a'], [1]));
    expect(error).toBeInstanceOf(RedisStoreError);
    expect(((error as RedisStoreError).cause as Error).message).toMatch(/timed out/i);
    expect(ms).toBeGreaterThanOrEqual(45);
    expect(ms).toBeLessThan(250);
  });

  it('request-path: fails at once while Redis is down, and works again once it is back', async () => {
    const client = await open('request-path');
    const state = ctx.createState({ redis: client });
    await ctx.server.kill();
    const { ms, error } = await elapsedMs(() => state.snapshot('m', ['a'], [1]));
    expect(error).toBeInstanceOf(RedisStoreError);
    expect(ms).toBeLessThan(100);
    await ctx.server.restart();
    await waitUntilReady(client, 10_000);
    expect((await state.snapshot('m', ['a'], [1])).inflight.get('a')).toBe(0);
  });

  it('worker: a command waits through an outage and completes after it', async () => {
    const client = await open('worker');
    await ctx.server.kill();
    const pong = client.ping();
    await new Promise((resolve) => setTimeout(resolve, 150));
    await ctx.server.restart();
    await expect(pong).resolves.toBe('PONG');
  });
});
