import { createCacheAwarePolicy, createPrefixAwarePolicy, decide, type DecideInput } from '@kvroute/routing';
import { seededRandom } from '@kvroute/workloads';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { packBlockHashes, poolKeys } from '../../src/keys';
import { RECORD_BLOCKS_PER_CALL } from '../../src/store-limits';
import { runScript, SCRIPTS } from '../../src/scripts';
import { manualClock, openRedisTestContext, scriptCalls, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-match' });
});
beforeEach(() => ctx.beginTest('match'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

describe('snapshot.lua: match depth', () => {
  it('matches the longest recorded prefix per backend and stops at the first miss', async () => {
    const state = ctx.createState();
    await state.reserve('m', 'a', 'lease-1', [1, 2, 3, 4], 0);
    await state.reserve('m', 'b', 'lease-2', [1, 2], 0);
    const snapshot = await state.snapshot('m', ['a', 'b', 'c'], [1, 2, 3, 9, 4]);
    expect(snapshot.matchBlocks.get('a')).toBe(3);
    expect(snapshot.matchBlocks.get('b')).toBe(2);
    expect(snapshot.matchBlocks.has('c')).toBe(false);
    expect(snapshot.inflight.get('a')).toBe(1);
    expect(snapshot.inflight.get('c')).toBe(0);
    expect(snapshot.pendingPrefillTokens.get('c')).toBe(0);
  });

  it('matches nothing when the first block is missing, even if deeper ones are held', async () => {
    const state = ctx.createState();
    await state.reserve('m', 'a', 'l1', [1, 2, 3], 0);
    expect((await state.snapshot('m', ['a'], [7, 2, 3])).matchBlocks.has('a')).toBe(false);
  });

  it('answers for backends without any request blocks, and for an empty backend list', async () => {
    const state = ctx.createState();
    await state.reserve('m', 'a', 'l1', [1, 2], 40);
    const snapshot = await state.snapshot('m', ['a'], []);
    expect(snapshot.matchBlocks.size).toBe(0);
    expect(snapshot.inflight.get('a')).toBe(1);
    expect(snapshot.pendingPrefillTokens.get('a')).toBe(40);
    const empty = await state.snapshot('m', [], [1, 2]);
    expect(empty.inflight.size).toBe(0);
  });

  it('keeps pools apart, including pools whose names cannot be a hash tag', async () => {
    const state = ctx.createState();
    await state.reserve('model-x', 'a', 'l', [1, 2], 0);
    await state.reserve('odd{model}', 'a', 'l', [1, 2, 3], 0);
    expect((await state.snapshot('model-y', ['a'], [1, 2])).matchBlocks.has('a')).toBe(false);
    expect((await state.snapshot('model-x', ['a'], [1, 2, 3])).matchBlocks.get('a')).toBe(2);
    expect((await state.snapshot('odd{model}', ['a'], [1, 2, 3])).matchBlocks.get('a')).toBe(3);
  });

  it('handles real 53-bit block hashes exactly', async () => {
    const state = ctx.createState();
    const chain = [9_007_199_254_740_991, 4_503_599_627_370_496, 123_456_789_012_345];
    await state.reserve('m', 'a', 'l', chain, 0);
    expect((await state.snapshot('m', ['a'], chain)).matchBlocks.get('a')).toBe(3);
    expect((await state.snapshot('m', ['a'], [9_007_199_254_740_990])).matchBlocks.has('a')).toBe(false);
    expect(await ctx.redis.hexists(poolKeys('m', ctx.namespace).ownersNew, '9007199254740991')).toBe(1);
  });

  it('finds the same depth as a linear scan on random prefix-closed data (binary search)', async () => {
    const random = seededRandom(7);
    const state = ctx.createState();
    const backends = ['a', 'b', 'c', 'd', 'e', 'f'];
    // One long chain; each backend holds a random prefix of it, some hold two diverging branches.
    const trunk = Array.from({ length: 300 }, (_, i) => 1000 + i);
    const branch = (from: number, length: number): number[] => [
      ...trunk.slice(0, from),
      ...Array.from({ length }, (_, i) => 500_000 + from * 1000 + i),
    ];
    const held = new Map<string, Set<number>>();
    let lease = 0;
    for (const backend of backends) {
      const set = new Set<number>();
      held.set(backend, set);
      const recordings = 1 + Math.floor(random() * 3);
      for (let r = 0; r < recordings; r++) {
        const chain =
          random() < 0.5
            ? trunk.slice(0, Math.floor(random() * (trunk.length + 1)))
            : branch(Math.floor(random() * 200), 1 + Math.floor(random() * 50));
        await state.reserve('m', backend, `l${lease++}`, chain, 0);
        for (const hash of chain) set.add(hash);
      }
    }
    const linearDepth = (backend: string, request: readonly number[]): number => {
      const set = held.get(backend) as Set<number>;
      let depth = 0;
      while (depth < request.length && set.has(request[depth] as number)) depth++;
      return depth;
    };
    for (let query = 0; query < 60; query++) {
      const request =
        random() < 0.5
          ? trunk.slice(0, 1 + Math.floor(random() * trunk.length))
          : branch(Math.floor(random() * 200), 1 + Math.floor(random() * 60));
      const snapshot = await state.snapshot('m', backends, request);
      for (const backend of backends) {
        expect(snapshot.matchBlocks.get(backend) ?? 0, `query ${query}, backend ${backend}`).toBe(
          linearDepth(backend, request),
        );
      }
      // route.lua (the atomic decision) finds the same depths whatever blocks the request names as its
      // boundaries (a hint of where to read first): none, the true change points, or any at all.
      const depths = backends.map((backend) => linearDepth(backend, request));
      const hinted = query % 3;
      const boundaryBlocks =
        hinted === 0
          ? undefined
          : hinted === 1
            ? [...new Set(depths.flatMap((depth) => [depth, depth + 1]))]
                .filter((block) => block >= 1 && block <= request.length)
                .sort((a, b) => a - b)
            : Array.from({ length: 10 }, () => 1 + Math.floor(random() * (request.length + 40))).sort((a, b) => a - b);
      const routed = await decide(state, {
        pool: 'm',
        request: {
          model: 'm',
          blockHashes: request,
          blockSizeBytes: 256,
          textBytes: 256 * request.length,
          contextBlocks: 0,
          headHash: request[0] as number,
          sessionKey: null,
          ...(boundaryBlocks === undefined ? {} : { boundaryBlocks }),
        },
        backends: backends.map((id) => ({ id, weight: 1 })),
        policy: createCacheAwarePolicy(),
        context: { nowMs: Date.now(), random: () => 0 },
        leaseId: `q${query}`,
      });
      expect(
        routed.candidates.map((candidate) => candidate.matchBlocks),
        `query ${query}, boundary blocks ${String(boundaryBlocks)}`,
      ).toEqual(depths);
    }
  });

  it('does not count blocks a backend recorded before it was forgotten, and counts them again once re-recorded', async () => {
    const clock = manualClock();
    const state = ctx.createState({ nowMs: clock.nowMs });
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    await state.reserve('m', 'b', 'l2', [1, 2], 0);
    clock.advance(5);
    await state.forgetBackend('m', 'a');
    let snapshot = await state.snapshot('m', ['a', 'b'], [1, 2]);
    expect(snapshot.matchBlocks.has('a')).toBe(false);
    expect(snapshot.matchBlocks.get('b')).toBe(2);
    expect(snapshot.inflight.get('a')).toBe(1); // leases are untouched
    clock.advance(5); // recorded again in the same generation: the forgotten entries do not count as held
    await state.reserve('m', 'a', 'l3', [1], 0);
    snapshot = await state.snapshot('m', ['a'], [1, 2]);
    expect(snapshot.matchBlocks.get('a')).toBe(1);
  });

  it(
    "answers when each backend's deepest matched block was recorded, from the generation whose " +
      'entry counts, on the snapshot and the atomic path alike',
    async () => {
      const clock = manualClock(1_000_000);
      const state = ctx.createState({ nowMs: clock.nowMs, blockIdleTtlMs: 10_000 });
      const request = Array.from({ length: 40 }, (_, i) => 500 + i);
      await state.reserve('m', 'a', 'la', request.slice(0, 4), 0); // t0
      clock.advance(10_000); // the next recording turns the generation: a's entries are in `old`
      await state.reserve('m', 'b', 'lb', request.slice(0, 30), 0); // t0 + 10 s, a depth between two rungs
      clock.advance(2_000);
      await state.reserve('m', 'c', 'lc', request, 0); // t0 + 12 s, the whole chain
      clock.advance(1_000);
      const expected = { a: 1_000_000, b: 1_010_000, c: 1_012_000 };
      const snapshot = await state.snapshot('m', ['a', 'b', 'c', 'd'], request);
      expect(Object.fromEntries(snapshot.matchBlocks)).toEqual({ a: 4, b: 30, c: 40 });
      expect(Object.fromEntries(snapshot.matchRecordedAtMs ?? [])).toEqual(expected);
      // route.lua reads the same, before its own recording (the chosen backend's entries are then rewritten or extended).
      const routed = await decide(state, {
        pool: 'm',
        request: {
          model: 'm',
          blockHashes: request,
          blockSizeBytes: 256,
          textBytes: 256 * 40,
          contextBlocks: 0,
          headHash: 500,
          sessionKey: null,
        },
        backends: ['a', 'b', 'c', 'd'].map((id) => ({ id, weight: 1 })),
        policy: createCacheAwarePolicy({ ownershipAt: 'routing' }),
        context: { nowMs: clock.nowMs(), random: () => 0 },
        leaseId: 'routed',
      });
      expect(routed.candidates.map((candidate) => candidate.matchRecordedAtMs)).toEqual([
        expected.a,
        expected.b,
        expected.c,
        null,
      ]);
      // Re-recorded in the current generation, a's entry there is the one that counts.
      clock.advance(1_000);
      await state.reserve('m', 'a', 'la2', request.slice(0, 4), 0);
      expect((await state.snapshot('m', ['a'], request)).matchRecordedAtMs?.get('a')).toBe(1_014_000);
    },
  );
});

describe('decide / prefill-done.lua: when ownership is recorded', () => {
  const backends = [
    { id: 'a', weight: 1 },
    { id: 'b', weight: 1 },
  ];
  const blocks = [11, 12, 13];
  const inputOf = (policy: DecideInput['policy'], leaseId: string): DecideInput => ({
    pool: 'm',
    request: {
      model: 'm',
      blockHashes: blocks,
      blockSizeBytes: 256,
      textBytes: 800,
      contextBlocks: 0,
      headHash: 11,
      sessionKey: null,
    },
    backends,
    policy,
    context: { nowMs: 0, random: () => 0 },
    leaseId,
  });
  const depths = async (state: ReturnType<RedisTestContext['createState']>): Promise<number[]> => {
    const snapshot = await state.snapshot('m', ['a', 'b'], blocks);
    return ['a', 'b'].map((id) => snapshot.matchBlocks.get(id) ?? 0);
  };

  it('cacheaware (default): not at routing, but at the first token, on the atomic path', async () => {
    const state = ctx.createState();
    const first = await decide(state, inputOf(createCacheAwarePolicy(), 'l1'));
    expect(first.decision.kind).toBe('routed');
    const chosen = first.decision.kind === 'routed' ? first.decision.backendId : '';
    expect(await depths(state)).toEqual([0, 0]);
    // A sibling while the first prefills: nobody holds the prefix yet, so it goes by load (the other backend).
    const sibling = await decide(state, inputOf(createCacheAwarePolicy(), 'l2'));
    expect(sibling.decision).toMatchObject({ kind: 'routed' });
    expect(sibling.decision.kind === 'routed' && sibling.decision.backendId).not.toBe(chosen);
    await state.prefillDone('m', chosen, 'l1', blocks);
    expect(await depths(state)).toEqual(chosen === 'a' ? [3, 0] : [0, 3]);
    // Its backlog left with the first token; the lease is still in flight.
    const snapshot = await state.snapshot('m', [chosen], []);
    expect(snapshot.pendingPrefillTokens.get(chosen)).toBe(0);
    expect(snapshot.inflight.get(chosen)).toBe(1);
  });

  it('cacheaware with ownershipAt routing, and the seed policies: at routing', async () => {
    const state = ctx.createState();
    const routed = await decide(state, inputOf(createCacheAwarePolicy({ ownershipAt: 'routing' }), 'l1'));
    const chosen = routed.decision.kind === 'routed' ? routed.decision.backendId : '';
    expect(await depths(state)).toEqual(chosen === 'a' ? [3, 0] : [0, 3]);
    // The snapshot path (prefixaware has no atomic rule) records at routing as well: on a pool that
    // holds nothing yet, the backend it chose holds the chain as soon as it is routed.
    const seed = await decide(state, { ...inputOf(createPrefixAwarePolicy(), 'l2'), pool: 'seed-pool' });
    const seedChosen = seed.decision.kind === 'routed' ? seed.decision.backendId : '';
    expect((await state.snapshot('seed-pool', [seedChosen], blocks)).matchBlocks.get(seedChosen)).toBe(3);
  });

  it('a non-streaming response: the release records the chain and frees the lease in one script call', async () => {
    const counted = countingScriptCalls(await ctx.connect());
    const state = ctx.createState({ redis: counted.redis });
    const first = await decide(state, inputOf(createCacheAwarePolicy(), 'l1'));
    const chosen = first.decision.kind === 'routed' ? first.decision.backendId : '';
    expect(await depths(state)).toEqual([0, 0]);
    await state.release('m', 'a', 'never-taken'); // the script loaded (a first call may find it missing: one call more)
    const before = counted.calls();
    await state.release('m', chosen, 'l1', first.blocksAtFirstOutput);
    // One call: release.lua (the chain fits in one), where prefill-done + release made two.
    expect(counted.calls() - before).toBe(1);
    expect(await depths(state)).toEqual(chosen === 'a' ? [3, 0] : [0, 3]);
    const snapshot = await state.snapshot('m', [chosen], []);
    expect(snapshot.inflight.get(chosen)).toBe(0);
    expect(snapshot.pendingPrefillTokens.get(chosen) ?? 0).toBe(0);
    // A release without blocks records nothing.
    await state.reserve('m', 'a', 'l3', [], 10);
    await state.forgetBackend('m', 'a');
    await state.release('m', 'a', 'l3');
    expect((await depths(state))[0]).toBe(0);
  });

  it('records at the first token even when the lease is gone, without bringing the lease back', async () => {
    const state = ctx.createState();
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'b', 'l1', [], 700);
    await state.release('m', 'b', 'l1');
    await state.prefillDone('m', 'b', 'l1', blocks);
    expect(await depths(state)).toEqual([0, 3]);
    expect(await ctx.redis.exists(keys.prefill('b'))).toBe(0);
    expect((await state.snapshot('m', ['b'], [])).inflight.get('b')).toBe(0);
  });
});

describe('RedisRoutingState options', () => {
  it('rejects options the scripts cannot honour', () => {
    expect(() => ctx.createState({ maxBlocksPerPool: 0 })).toThrow(RangeError);
    expect(() => ctx.createState({ leaseTtlMs: 0 })).toThrow(RangeError);
    expect(() => ctx.createState({ blockIdleTtlMs: -1 })).toThrow(RangeError);
    expect(() => ctx.createState({ blockIdleTtlMs: 0 })).not.toThrow();
  });

  it('rejects a backend id with a control character (the owner index delimits ids with them)', async () => {
    await expect(ctx.createState().snapshot('m', ['a\u0001b'], [1])).rejects.toThrow(RangeError);
    await expect(ctx.createState().reserve('m', 'tab\there', 'l', [1], 0)).rejects.toThrow(RangeError);
  });

  it('rejects a negative or fractional maxInflight before calling Redis', async () => {
    await expect(ctx.createState().reserve('m', 'a', 'l', [], 0, 1.5)).rejects.toThrow(RangeError);
  });
});

describe('long chains: recorded RECORD_BLOCKS_PER_CALL blocks per script call, prefix-closed throughout', () => {
  const chain = Array.from({ length: 2 * RECORD_BLOCKS_PER_CALL + 100 }, (_, i) => 5_000_000 + i);

  it('records a whole long chain at routing and at the first output, in bounded calls', async () => {
    const state = ctx.createState();
    const before = await scriptCalls(ctx.redis);
    await state.reserve('m', 'a', 'l1', chain, 0);
    await state.prefillDone('m', 'b', 'l2', chain);
    const snapshot = await state.snapshot('m', ['a', 'b'], chain);
    expect([snapshot.matchBlocks.get('a'), snapshot.matchBlocks.get('b')]).toEqual([chain.length, chain.length]);
    // route + 2 record-ownership, prefill-done + 2 record-ownership, snapshot; an EVAL more for a script
    // not cached yet (and other tests' calls, on a shared Redis, only add).
    expect((await scriptCalls(ctx.redis)) - before).toBeGreaterThanOrEqual(7);
  });

  it('starts over from the first block when the anchor is gone (a generation turned or the backend was forgotten)', async () => {
    const state = ctx.createState();
    const keys = poolKeys('m', ctx.namespace);
    const run = (anchor: string, blocks: readonly number[]) =>
      runScript(
        ctx.redis,
        SCRIPTS.recordOwnership,
        [keys.forgotten, keys.ownersNew, keys.ownersOld, keys.generation],
        ['a', Date.now(), 60_000, 10_000, anchor, packBlockHashes(blocks), RECORD_BLOCKS_PER_CALL],
      );
    // Not held: nothing written.
    expect(await run(String(chain[9]), chain.slice(10, 20))).toBe(-1);
    expect(await ctx.redis.hlen(keys.ownersNew)).toBe(0);
    // Held: the next blocks are recorded after it.
    await state.reserve('m', 'a', 'l1', chain.slice(0, 10), 0);
    expect(await run(String(chain[9]), chain.slice(10, 20))).toBe(10);
    expect((await state.snapshot('m', ['a'], chain.slice(0, 20))).matchBlocks.get('a')).toBe(20);
    // Forgotten since: the anchor no longer counts.
    await new Promise((resolve) => setTimeout(resolve, 2));
    await state.forgetBackend('m', 'a');
    expect(await run(String(chain[19]), chain.slice(20, 30))).toBe(-1);
    // The store starts over from block 1 and ends with the whole chain held.
    await state.prefillDone('m', 'a', 'none', chain);
    expect((await state.snapshot('m', ['a'], chain)).matchBlocks.get('a')).toBe(chain.length);
  });
});

/** The scripts a connection sends (runScript's `call`/`callBuffer`), counted on this connection only: other test files may share the Redis. */
function countingScriptCalls(redis: Redis): { redis: Redis; calls: () => number } {
  let calls = 0;
  const call = redis.call.bind(redis);
  const callBuffer = redis.callBuffer.bind(redis);
  Object.assign(redis, {
    call: (...args: Parameters<typeof call>) => (calls++, call(...args)),
    callBuffer: (...args: Parameters<typeof callBuffer>) => (calls++, callBuffer(...args)),
  });
  return { redis, calls: () => calls };
}
