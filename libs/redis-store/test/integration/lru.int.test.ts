import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { poolKeys } from '../../src/keys';
import { manualClock, openRedisTestContext, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-lru' });
});
beforeEach(() => ctx.beginTest('lru'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

async function lruMembers(pool: string): Promise<string[]> {
  return ctx.redis.zrange(poolKeys(pool, ctx.namespace).lru, 0, -1);
}

describe('reserve.lua: pool LRU cap', () => {
  it('evicts the least recently recorded blocks over the cap and deletes their keys', async () => {
    const clock = manualClock();
    const state = ctx.createState({ maxBlocksPerPool: 4, nowMs: clock.nowMs });
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    clock.advance(2000);
    await state.reserve('m', 'a', 'l2', [10, 11], 0);
    clock.advance(2000);
    await state.reserve('m', 'a', 'l3', [1, 2], 0); // refreshes 1, 2
    clock.advance(2000);
    await state.reserve('m', 'a', 'l4', [20], 0); // evicts 11, the tail of the least recent chain
    expect((await lruMembers('m')).sort()).toEqual(['1', '10', '2', '20']);
    expect(await ctx.redis.exists(poolKeys('m', ctx.namespace).block(11))).toBe(0);
    expect((await state.snapshot('m', ['a'], [10, 11])).matchBlocks.get('a')).toBe(1);
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.get('a')).toBe(2);
  });

  it('evicts a chain from its tail, so the shallow blocks still match', async () => {
    const clock = manualClock();
    const state = ctx.createState({ maxBlocksPerPool: 5, nowMs: clock.nowMs });
    await state.reserve('m', 'a', 'l1', [1, 2, 3, 4], 0);
    clock.advance(2000);
    await state.reserve('m', 'a', 'l2', [7, 8], 0); // over the cap by one: block 4 (the tail) goes
    expect((await state.snapshot('m', ['a'], [1, 2, 3, 4])).matchBlocks.get('a')).toBe(3);
  });

  it('orders the blocks of one recording tail first although they share the millisecond', async () => {
    const state = ctx.createState({ maxBlocksPerPool: 10_000, nowMs: () => 1_780_000_000_000 });
    // Shallowest first in lexicographic order too: with equal scores Redis would pop the head first.
    const chain = [1, 2, 3, 4, 5, 6, 7, 8, 9].map((n) => n * 111);
    await state.reserve('m', 'a', 'l1', chain, 0);
    expect(await lruMembers('m')).toEqual(chain.map(String).reverse());
  });

  it('trims in batches down to cap − cap/16, oldest chains first, each from its tail', async () => {
    const clock = manualClock();
    const state = ctx.createState({ maxBlocksPerPool: 32, nowMs: clock.nowMs });
    // Eight chains of four blocks, recorded one per 2 s: exactly at the cap.
    for (let chain = 0; chain < 8; chain++) {
      await state.reserve('m', 'a', `l${chain}`, [1, 2, 3, 4].map((block) => chain * 100 + block), 0);
      clock.advance(2000);
    }
    expect(await ctx.redis.zcard(poolKeys('m', ctx.namespace).lru)).toBe(32);
    await state.reserve('m', 'a', 'l-new', [900], 0); // 33 > 32: pop 33 − (32 − 2) = 3
    const members = await lruMembers('m');
    expect(members).toHaveLength(30);
    // Chain 0 (the oldest) lost its three deepest blocks; its head and every other chain are intact.
    expect(members).toContain('1');
    for (const gone of ['2', '3', '4']) expect(members).not.toContain(gone);
    const snapshot = await state.snapshot('m', ['a'], [1, 2, 3, 4]);
    expect(snapshot.matchBlocks.get('a')).toBe(1);
    expect((await state.snapshot('m', ['a'], [101, 102, 103, 104])).matchBlocks.get('a')).toBe(4);
  });

  it('does not reorder blocks re-recorded within the refresh granularity', async () => {
    const clock = manualClock();
    const state = ctx.createState({ maxBlocksPerPool: 3, nowMs: clock.nowMs });
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    clock.advance(100);
    await state.reserve('m', 'a', 'l2', [9], 0);
    await state.reserve('m', 'a', 'l3', [1, 2], 0); // within 1 s: 1 and 2 stay older than 9
    clock.advance(100);
    await state.reserve('m', 'a', 'l4', [5], 0); // evicts 2 (oldest tail), not 9
    expect((await state.snapshot('m', ['a'], [9])).matchBlocks.get('a')).toBe(1);
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.get('a')).toBe(1);
  });

  it('shares the cap between the backends of a pool: evicting a block forgets it for all of them', async () => {
    const clock = manualClock();
    const state = ctx.createState({ maxBlocksPerPool: 3, nowMs: clock.nowMs });
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    await state.reserve('m', 'b', 'l2', [1, 2], 0);
    clock.advance(2000);
    await state.reserve('m', 'b', 'l3', [5, 6], 0); // 4 blocks > 3: block 2 goes, for a and b
    const snapshot = await state.snapshot('m', ['a', 'b'], [1, 2]);
    expect(snapshot.matchBlocks.get('a')).toBe(1);
    expect(snapshot.matchBlocks.get('b')).toBe(1);
  });
});
