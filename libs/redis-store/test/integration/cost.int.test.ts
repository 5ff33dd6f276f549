import { createCacheAwarePolicy, decide } from '@kvroute/routing';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { poolKeys } from '../../src/keys';
import { commandCalls, openRedisTestContext, type RedisTestContext } from './redis-test-context';

// A Redis of this file's own: the test reads and resets its command statistics.
let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-cost', fresh: true });
});
beforeEach(() => ctx.beginTest('cost'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

const callsOf = (command: string): Promise<number> => commandCalls(ctx.redis, command);

describe('owner index cost', () => {
  it('reads the chain in a ladder and log2(rung spacing) rounds of bisection, whatever the number of backends', async () => {
    const state = ctx.createState();
    const chain = Array.from({ length: 128 }, (_, i) => 10_000 + i);
    const backends = Array.from({ length: 16 }, (_, i) => `10.0.0.${i}:8000`);
    // Four owners at two depths; twelve backends hold nothing of this chain.
    await state.reserve('m', backends[0] as string, 'l0', chain, 0);
    await state.reserve('m', backends[1] as string, 'l1', chain, 0);
    await state.reserve('m', backends[2] as string, 'l2', chain.slice(0, 37), 0);
    await state.reserve('m', backends[3] as string, 'l3', chain.slice(0, 37), 0);
    const readsFor = async (asked: readonly string[]): Promise<number> => {
      await state.snapshot('m', asked, chain); // cache the script
      await ctx.redis.config('RESETSTAT');
      const snapshot = await state.snapshot('m', asked, chain);
      expect(snapshot.matchBlocks.get(backends[0] as string)).toBe(128);
      expect(snapshot.matchBlocks.get(backends[3] as string)).toBe(37);
      expect(await callsOf('hget')).toBe(0);
      return callsOf('hmget');
    };
    // 8 rungs, 16 blocks apart (1, 17, …, 113, 128). No candidate holds block 1 in the previous
    // generation (there is none yet), so it is read no further than that block: in-flight and backlog (2),
    // the current generation's ladder (1), the previous generation's block 1 (1), and the change point
    // between rungs 33 and 49 (depth 37) by bisection, one block a round: 41, 37, 39, 38 (4).
    expect(await readsFor(backends)).toBe(8);
    // A backend that holds the chain's first block in the previous generation: its ladder is read (1), and
    // the change after block 1 there is found in the same rounds as the one at 37 (blocks 9, 5, 3, 2), each
    // round now reading both generations (4 more).
    await ctx.redis.hset(
      poolKeys('m', ctx.namespace).ownersOld,
      String(chain[0]),
      `\x01${backends[0] as string}\x02${Date.now()}`,
    );
    const all = await readsFor(backends);
    expect(all).toBe(13);
    // The same reads for 4 candidates as for 16: the rounds split the chain, not the backends.
    expect(await readsFor(backends.slice(0, 4))).toBe(all);
  });
});
describe('route.lua cost', () => {
  it('reads the blocks the request names as boundaries with the ladder: a change point among them takes no round', async () => {
    const state = ctx.createState();
    const chain = Array.from({ length: 128 }, (_, i) => 30_000 + i);
    const backends = Array.from({ length: 16 }, (_, i) => ({ id: `10.0.1.${i}:8000`, weight: 1 }));
    await state.reserve('m', backends[0]?.id as string, 'l0', chain, 0);
    await state.reserve('m', backends[2]?.id as string, 'l2', chain.slice(0, 37), 0);
    const readsFor = async (boundaryBlocks: readonly number[] | undefined, leaseId: string): Promise<number[]> => {
      const input = {
        pool: 'm',
        request: {
          model: 'm',
          blockHashes: chain,
          blockSizeBytes: 256,
          textBytes: 256 * 130,
          contextBlocks: 0,
          headHash: 30_000,
          sessionKey: null,
          ...(boundaryBlocks === undefined ? {} : { boundaryBlocks }),
        },
        backends,
        policy: createCacheAwarePolicy(),
        context: { nowMs: Date.now(), random: () => 0 },
      };
      await decide(state, { ...input, leaseId: `${leaseId}-warm` }); // the member set stored, the script cached
      await ctx.redis.config('RESETSTAT');
      const { candidates } = await decide(state, { ...input, leaseId });
      return [await callsOf('hmget'), ...candidates.map((candidate) => candidate.matchBlocks)];
    };
    const [without = 0, ...depths] = await readsFor(undefined, 'plain');
    expect(depths[0]).toBe(128);
    expect(depths[2]).toBe(37);
    // The figures (3), the ladder, the previous generation's block 1, and the change point after block 37 by
    // bisection between rungs 33 and 49 (41, 37, 39, 38: 4 rounds); the member set, parsed by the warm-up's
    // call, is only checked for (HEXISTS).
    expect(without).toBe(9);
    // Named as boundaries (37 and 38, as a message's end there would), they are read with the ladder.
    const [hinted = 0, ...sameDepths] = await readsFor([37, 38], 'hinted');
    expect(sameDepths).toEqual(depths);
    expect(hinted).toBe(without - 4);
  });

  it('writes only the blocks a backend does not yet hold in the current generation, in one HSET', async () => {
    const state = ctx.createState();
    const chain = Array.from({ length: 128 }, (_, i) => 20_000 + i);
    await state.reserve('m', 'a', 'l0', chain.slice(0, 120), 0);
    await ctx.redis.config('RESETSTAT');
    await state.reserve('m', 'a', 'l1', chain, 0); // the next turn: 8 new blocks
    expect(await callsOf('hset')).toBe(2); // the lease's prefill field, then the 8 owner fields at once
    expect(await ctx.redis.hlen(poolKeys('m', ctx.namespace).ownersNew)).toBe(128);
    await ctx.redis.config('RESETSTAT');
    await state.reserve('m', 'a', 'l2', chain, 0); // nothing new
    expect(await callsOf('hset')).toBe(1);
  });
});
