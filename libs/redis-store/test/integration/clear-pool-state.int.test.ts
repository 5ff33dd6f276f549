import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { clearPoolState } from '../../src/clear-pool-state';
import { fleetKeys } from '../../src/keys';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-clear' });
});
beforeEach(() => ctx.beginTest('clear'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

describe('clearPoolState', () => {
  it("deletes every pool's routing state and keeps the fleet's keys and other namespaces", async () => {
    const state = ctx.createState();
    await state.reserve('model-a', 'a', 'l1', [11, 12, 13], 100);
    await state.reserve('model-b', 'b', 'l2', [21], 10);
    const fleet = fleetKeys(ctx.namespace);
    await ctx.redis.hset(fleet.backends, 'a', '{}');
    const pollerQueueKey = `${ctx.namespace}:{poller}:scrapes:meta`;
    await ctx.redis.hset(pollerQueueKey, 'version', '1');
    await ctx.redis.set('other-namespace:{model-a}:inflight', '1');
    expect((await ctx.keysOfTest()).filter((key) => !key.includes('{fleet}')).length).toBeGreaterThan(4);

    const deleted = await clearPoolState(ctx.redis, ctx.namespace);

    expect(deleted).toBeGreaterThan(4);
    expect(await ctx.keysOfTest()).toEqual([fleet.backends, pollerQueueKey].sort());
    expect(await ctx.redis.get('other-namespace:{model-a}:inflight')).toBe('1');
    await ctx.redis.del('other-namespace:{model-a}:inflight');
    const snapshot = await state.snapshot('model-a', ['a'], [11, 12, 13]);
    expect(snapshot.inflight.get('a') ?? 0).toBe(0);
    expect(snapshot.matchBlocks.get('a') ?? 0).toBe(0);
  });
});
