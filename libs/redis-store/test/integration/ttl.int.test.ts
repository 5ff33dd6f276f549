import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { poolKeys } from '../../src/keys';
import { manualClock, openRedisTestContext, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-ttl' });
});
beforeEach(() => ctx.beginTest('ttl'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

describe('route.lua: block idle TTL', () => {
  it('keeps a block used within each idle TTL and forgets one unused for two', async () => {
    const clock = manualClock();
    const state = ctx.createState({ blockIdleTtlMs: 1000, nowMs: clock.nowMs });
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    await state.reserve('m', 'a', 'l2', [3, 4], 0);
    for (let step = 0; step < 4; step++) {
      clock.advance(900);
      await state.reserve('m', 'a', `touch-${step}`, [1, 2], 0); // used: survives every turn
    }
    // 3.6 s later: [3, 4] was last used more than two idle TTLs ago.
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.get('a')).toBe(2);
    expect((await state.snapshot('m', ['a'], [3, 4])).matchBlocks.has('a')).toBe(false);
  });

  it('keeps a block for at least one idle TTL after its last use', async () => {
    const clock = manualClock();
    const state = ctx.createState({ blockIdleTtlMs: 1000, nowMs: clock.nowMs });
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    clock.advance(999);
    await state.reserve('m', 'a', 'l2', [7], 0); // no turn yet
    clock.advance(1); // 1000 ms: this recording turns the generation; [1, 2] moves to old
    await state.reserve('m', 'a', 'l3', [8], 0);
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.get('a')).toBe(2);
    clock.advance(1000);
    await state.reserve('m', 'a', 'l4', [9], 0); // second turn: [1, 2] is dropped
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.has('a')).toBe(false);
  });

  it('lets the index keys expire by themselves two idle TTLs after the last recording (real time)', async () => {
    const state = ctx.createState({ blockIdleTtlMs: 100 });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    const ttl = await ctx.redis.pttl(keys.ownersNew);
    expect(ttl).toBeGreaterThan(100);
    expect(ttl).toBeLessThanOrEqual(200);
    expect(await ctx.redis.pttl(keys.generation)).toBeGreaterThan(100);
    await sleep(250);
    expect(await ctx.redis.exists(keys.ownersNew, keys.ownersOld, keys.generation)).toBe(0);
  });

  it('keeps blocks forever with an idle TTL of 0', async () => {
    const clock = manualClock();
    const state = ctx.createState({ blockIdleTtlMs: 0, nowMs: clock.nowMs });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    clock.advance(365 * 24 * 3600 * 1000);
    await state.reserve('m', 'a', 'l2', [5], 0);
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.get('a')).toBe(2);
    expect(await ctx.redis.pttl(keys.ownersNew)).toBe(-1);
  });
});
