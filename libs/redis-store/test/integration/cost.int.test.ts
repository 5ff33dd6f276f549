import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { poolKeys } from '../../src/keys';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

// A Redis of this file's own: the test reads and resets its command statistics.
let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-cost', fresh: true });
});
beforeEach(() => ctx.beginTest('cost'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

async function callsOf(command: string): Promise<number> {
  const match = new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(await ctx.redis.info('commandstats'));
  return match ? Number(match[1]) : 0;
}

describe('owner index cost', () => {
  it('probes O(log(blocks) × distinct depths) block keys, not backends × blocks', async () => {
    const state = ctx.createState();
    const chain = Array.from({ length: 128 }, (_, i) => 10_000 + i);
    const backends = Array.from({ length: 16 }, (_, i) => `10.0.0.${i}:8000`);
    // Four owners at two depths; twelve backends hold nothing of this chain.
    await state.reserve('m', backends[0] as string, 'l0', chain, 0);
    await state.reserve('m', backends[1] as string, 'l1', chain, 0);
    await state.reserve('m', backends[2] as string, 'l2', chain.slice(0, 37), 0);
    await state.reserve('m', backends[3] as string, 'l3', chain.slice(0, 37), 0);
    await state.snapshot('m', backends, chain); // cache the script
    await ctx.redis.config('RESETSTAT');
    const snapshot = await state.snapshot('m', backends, chain);
    expect(snapshot.matchBlocks.get(backends[0] as string)).toBe(128);
    expect(snapshot.matchBlocks.get(backends[3] as string)).toBe(37);
    expect(snapshot.matchBlocks.size).toBe(4);
    // A probe reads one field of each generation; block 1 once, then ≤ ⌈log2 128⌉ = 7 probes per
    // distinct depth, shared by owners of that depth.
    const probes = (await callsOf('hget')) / 2;
    expect(probes).toBeLessThanOrEqual(1 + 2 * 7);
    expect(probes).toBeGreaterThan(0);
  });
});

describe('route.lua cost', () => {
  it('writes only the blocks a backend does not yet hold in the current generation, in one HSET', async () => {
    const state = ctx.createState();
    const chain = Array.from({ length: 128 }, (_, i) => 20_000 + i);
    await state.reserve('m', 'a', 'l0', chain.slice(0, 120), 0);
    await ctx.redis.config('RESETSTAT');
    await state.reserve('m', 'a', 'l1', chain, 0); // the next turn: 8 new blocks
    expect(await callsOf('hset')).toBe(2); // the lease's prefill field, then the 8 owner fields at once
    const readsWithNewBlocks = await callsOf('hmget'); // 3 figure reads + 1 of the owner fields to extend
    expect(await ctx.redis.hlen(poolKeys('m', ctx.namespace).ownersNew)).toBe(128);
    await ctx.redis.config('RESETSTAT');
    await state.reserve('m', 'a', 'l2', chain, 0); // nothing new
    expect(await callsOf('hset')).toBe(1);
    expect(readsWithNewBlocks - (await callsOf('hmget'))).toBe(1);
  });
});
