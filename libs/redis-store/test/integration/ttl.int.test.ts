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

describe('reserve.lua / snapshot.lua: block idle TTL', () => {
  it('keeps a touched block and lets an untouched one expire (real time, 200 ms TTL)', async () => {
    const state = ctx.createState({ blockIdleTtlMs: 200, refreshGranularityMs: 20 });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    await state.reserve('m', 'a', 'l2', [3, 4], 0);
    await sleep(120);
    await state.reserve('m', 'a', 'l3', [1, 2], 0); // touch chain 1..2 only
    await sleep(130); // 250 ms after the first recording, 130 ms after the touch
    const snapshot = await state.snapshot('m', ['a'], [1, 2]);
    expect(snapshot.matchBlocks.get('a')).toBe(2);
    expect((await state.snapshot('m', ['a'], [3, 4])).matchBlocks.has('a')).toBe(false);
    // The untouched block keys are gone by themselves; the touched ones carry a fresh TTL.
    expect(await ctx.redis.exists(keys.block(3), keys.block(4))).toBe(0);
    expect(await ctx.redis.pttl(keys.block(1))).toBeGreaterThan(0);
    await sleep(220);
    expect(await ctx.redis.exists(keys.block(1), keys.block(2))).toBe(0);
  });

  it('ignores a backend entry idle past the TTL while another backend keeps the block key alive', async () => {
    const clock = manualClock();
    const state = ctx.createState({ blockIdleTtlMs: 1000, refreshGranularityMs: 100, nowMs: clock.nowMs });
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    clock.advance(600);
    await state.reserve('m', 'b', 'l2', [1, 2], 0);
    clock.advance(500); // a's entries are 1100 ms old, b's 500 ms
    const snapshot = await state.snapshot('m', ['a', 'b'], [1, 2]);
    expect(snapshot.matchBlocks.has('a')).toBe(false);
    expect(snapshot.matchBlocks.get('b')).toBe(2);
  });

  it('skips blocks re-recorded within the refresh granularity, and refreshes them after it', async () => {
    const clock = manualClock();
    const state = ctx.createState({ refreshGranularityMs: 1000, nowMs: clock.nowMs });
    const keys = poolKeys('m', ctx.namespace);
    const first = clock.nowMs();
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    clock.advance(500);
    await state.reserve('m', 'a', 'l2', [1, 2, 3], 0);
    expect(await ctx.redis.hget(keys.block(1), 'a')).toBe(String(first));
    expect(await ctx.redis.hget(keys.block(3), 'a')).toBe(String(first + 500));
    clock.advance(600);
    await state.reserve('m', 'a', 'l3', [1, 2], 0);
    expect(await ctx.redis.hget(keys.block(1), 'a')).toBe(String(first + 1100));
  });

  it('drops idle members from the LRU and lets the LRU key expire with its blocks', async () => {
    const clock = manualClock();
    const state = ctx.createState({ blockIdleTtlMs: 1000, refreshGranularityMs: 100, nowMs: clock.nowMs });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    clock.advance(1500);
    await state.reserve('m', 'a', 'l2', [5], 0);
    expect(await ctx.redis.zrange(keys.lru, 0, -1)).toEqual(['5']);
    const ttl = await ctx.redis.pttl(keys.lru);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(1000);
  });

  it('keeps blocks forever with an idle TTL of 0', async () => {
    const clock = manualClock();
    const state = ctx.createState({ blockIdleTtlMs: 0, nowMs: clock.nowMs });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    clock.advance(365 * 24 * 3600 * 1000);
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.get('a')).toBe(2);
    expect(await ctx.redis.pttl(keys.block(1))).toBe(-1);
  });
});
