import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { poolKeys } from '../../src/keys';
import { manualClock, openRedisTestContext, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  // A Redis of its own: the generation test counts the server's RENAME and UNLINK calls (CONFIG RESETSTAT, INFO
  // commandstats), which other test files running at the same time on a shared REDIS_URL would add to.
  ctx = await openRedisTestContext({ label: 'redis-store-lru', fresh: true });
});
beforeEach(() => ctx.beginTest('lru'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

async function fieldsOf(key: string): Promise<string[]> {
  return (await ctx.redis.hkeys(key)).sort((a, b) => Number(a) - Number(b));
}

describe('route.lua: owner generations (LRU with a cap)', () => {
  it('turns the generation at half the cap and drops the least recently used half', async () => {
    const state = ctx.createState({ maxBlocksPerPool: 8 }); // a generation holds up to 4
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    await state.reserve('m', 'a', 'l2', [10, 11], 0); // new = {1, 2, 10, 11}: full
    await state.reserve('m', 'a', 'l3', [20], 0); // turns: old = {1, 2, 10, 11}, new = {20}
    expect(await fieldsOf(keys.ownersNew)).toEqual(['20']);
    expect(await fieldsOf(keys.ownersOld)).toEqual(['1', '2', '10', '11']);
    await state.reserve('m', 'a', 'l4', [1, 2], 0); // used again: copied into new
    await state.reserve('m', 'a', 'l5', [30], 0); // new = {20, 1, 2, 30}: full
    await state.reserve('m', 'a', 'l6', [40], 0); // turns: {10, 11}, unused since, are gone
    expect((await state.snapshot('m', ['a'], [10, 11])).matchBlocks.has('a')).toBe(false);
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.get('a')).toBe(2);
    expect((await state.snapshot('m', ['a'], [20])).matchBlocks.get('a')).toBe(1);
    expect((await state.snapshot('m', ['a'], [40])).matchBlocks.get('a')).toBe(1);
    expect((await ctx.redis.hlen(keys.ownersNew)) + (await ctx.redis.hlen(keys.ownersOld))).toBeLessThanOrEqual(8 + 1);
  });

  it('never stores more entries than the cap plus one request, whatever the traffic', async () => {
    const state = ctx.createState({ maxBlocksPerPool: 64 });
    const keys = poolKeys('m', ctx.namespace);
    let largest = 0;
    for (let request = 0; request < 200; request++) {
      const chain = Array.from({ length: 1 + (request % 7) }, (_, i) => request * 100 + i);
      await state.reserve('m', `b${request % 3}`, `l${request}`, chain, 0);
      largest = Math.max(largest, (await ctx.redis.hlen(keys.ownersNew)) + (await ctx.redis.hlen(keys.ownersOld)));
    }
    expect(largest).toBeLessThanOrEqual(64 + 7);
    expect(largest).toBeGreaterThan(32); // and it does use the room
  });

  it('keeps chains prefix-closed across a turn: a chain extended after the turn still matches whole', async () => {
    const state = ctx.createState({ maxBlocksPerPool: 6 });
    await state.reserve('m', 'a', 'l1', [1, 2, 3], 0); // new = {1, 2, 3}: full
    await state.reserve('m', 'a', 'l2', [1, 2, 3, 4], 0); // turns, then writes 1..4 into new
    expect((await state.snapshot('m', ['a'], [1, 2, 3, 4, 5])).matchBlocks.get('a')).toBe(4);
  });

  it('shares the cap between the backends of a pool, and keeps each owner of a block', async () => {
    const state = ctx.createState({ maxBlocksPerPool: 1000 });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    await state.reserve('m', 'b', 'l2', [1, 2, 3], 0);
    expect(await ctx.redis.hlen(keys.ownersNew)).toBe(3);
    const snapshot = await state.snapshot('m', ['a', 'b'], [1, 2, 3]);
    expect(snapshot.matchBlocks.get('a')).toBe(2);
    expect(snapshot.matchBlocks.get('b')).toBe(3);
  });

  it('frees the dropped generation without blocking (UNLINK), and renames instead of copying', async () => {
    const clock = manualClock();
    const state = ctx.createState({ maxBlocksPerPool: 1_000_000, blockIdleTtlMs: 1000, nowMs: clock.nowMs });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve(
      'm',
      'a',
      'l1',
      Array.from({ length: 500 }, (_, i) => i + 1),
      0,
    );
    await ctx.redis.config('RESETSTAT');
    clock.advance(1000); // one idle TTL: the generation turns on the next recording
    await state.reserve('m', 'a', 'l2', [9999], 0);
    const stats = await ctx.redis.info('commandstats');
    expect(stats).toMatch(/cmdstat_rename:calls=1,/);
    expect(stats).toMatch(/cmdstat_unlink:calls=1,/);
    expect(await ctx.redis.hlen(keys.ownersOld)).toBe(500);
  });
});
