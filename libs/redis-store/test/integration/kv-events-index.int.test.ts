import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { KvEventsIndex, KvEventsLeases } from '../../src/kv-events-index';
import { poolKeys } from '../../src/keys';
import { manualClock, openRedisTestContext, type ManualClock, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-kv-events' });
});
beforeEach(() => ctx.beginTest('kv-events'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

function indexOf(clock: ManualClock, maxBlocksPerPool = 10_000): KvEventsIndex {
  return new KvEventsIndex({
    redis: ctx.redis,
    nowMs: clock.nowMs,
    blockIdleTtlMs: 60_000,
    maxBlocksPerPool,
    keyNamespace: ctx.namespace,
  });
}

describe('apply-kv-events.lua', () => {
  it('records stored blocks as held by the rank, chained on their anchor, and removes removed ones', async () => {
    const clock = manualClock();
    const index = indexOf(clock);
    const state = ctx.createState({ nowMs: clock.nowMs });
    const first = await index.apply('m', 'a@1', {
      clear: false,
      ops: [{ kind: 'stored', anchor: null, blocks: [11, 12] }],
    });
    expect(first).toEqual({ removedEntries: 0, stored: [2] });
    const next = await index.apply('m', 'a@1', {
      clear: false,
      ops: [
        { kind: 'stored', anchor: 12, blocks: [13, 14] },
        { kind: 'stored', anchor: 12, blocks: [23] },
      ],
    });
    expect(next.stored).toEqual([2, 1]);
    let snapshot = await state.snapshot('m', ['a@1', 'a@0'], [11, 12, 13, 14, 15]);
    expect(snapshot.matchBlocks.get('a@1')).toBe(4);
    expect(snapshot.matchBlocks.has('a@0')).toBe(false);
    expect((await state.snapshot('m', ['a@1'], [11, 12, 23])).matchBlocks.get('a@1')).toBe(3);

    // The tail goes first, as vLLM evicts; a block stored and removed in one batch ends removed.
    const removed = await index.apply('m', 'a@1', {
      clear: false,
      ops: [
        { kind: 'removed', blocks: [14, 13, 99] },
        { kind: 'stored', anchor: 23, blocks: [24] },
        { kind: 'removed', blocks: [24] },
      ],
    });
    expect(removed).toEqual({ removedEntries: 3, stored: [1] });
    snapshot = await state.snapshot('m', ['a@1'], [11, 12, 13, 14]);
    expect(snapshot.matchBlocks.get('a@1')).toBe(2);
    expect((await state.snapshot('m', ['a@1'], [11, 12, 23, 24])).matchBlocks.get('a@1')).toBe(3);
    // An owner list left empty is deleted, others keep their other owners.
    const keys = poolKeys('m', ctx.namespace);
    expect(await ctx.redis.hexists(keys.ownersNew, '13')).toBe(0);
    await state.reserve('m', 'b', 'l1', [11], 0);
    await index.apply('m', 'a@1', { clear: false, ops: [{ kind: 'removed', blocks: [11] }] });
    expect((await state.snapshot('m', ['a@1', 'b'], [11])).matchBlocks.get('b')).toBe(1);
  });

  it('answers -1 for an anchor the rank does not hold, and records the whole chain sent after', async () => {
    const clock = manualClock();
    const index = indexOf(clock);
    const state = ctx.createState({ nowMs: clock.nowMs });
    const orphan = await index.apply('m', 'a', { clear: false, ops: [{ kind: 'stored', anchor: 5, blocks: [6, 7] }] });
    expect(orphan.stored).toEqual([-1]);
    expect((await state.snapshot('m', ['a'], [5, 6, 7])).matchBlocks.has('a')).toBe(false);
    await index.apply('m', 'a', { clear: false, ops: [{ kind: 'stored', anchor: null, blocks: [5, 6, 7] }] });
    expect((await state.snapshot('m', ['a'], [5, 6, 7])).matchBlocks.get('a')).toBe(3);
  });

  it('forgets the rank at once on a clear, and counts the stores that follow in the same batch', async () => {
    const clock = manualClock();
    const index = indexOf(clock);
    const state = ctx.createState({ nowMs: clock.nowMs });
    await index.apply('m', 'a', { clear: false, ops: [{ kind: 'stored', anchor: null, blocks: [1, 2, 3] }] });
    await index.apply('m', 'b', { clear: false, ops: [{ kind: 'stored', anchor: null, blocks: [1, 2, 3] }] });
    clock.advance(5);
    const cleared = await index.apply('m', 'a', {
      clear: true,
      ops: [{ kind: 'stored', anchor: null, blocks: [1, 9] }],
    });
    expect(cleared.stored).toEqual([2]);
    const snapshot = await state.snapshot('m', ['a', 'b'], [1, 2, 3]);
    expect(snapshot.matchBlocks.get('a')).toBe(1);
    expect(snapshot.matchBlocks.get('b')).toBe(3);
    expect((await state.snapshot('m', ['a'], [1, 9])).matchBlocks.get('a')).toBe(2);
    // Applying the same batches again changes nothing (a replay after a takeover).
    await index.apply('m', 'a', { clear: false, ops: [{ kind: 'stored', anchor: 1, blocks: [9] }] });
    expect((await state.snapshot('m', ['a'], [1, 9])).matchBlocks.get('a')).toBe(2);
  });

  it('turns generations as the routers do; a chain whose anchor went with the turn is sent whole', async () => {
    const clock = manualClock();
    const index = indexOf(clock, 8);
    const state = ctx.createState({ nowMs: clock.nowMs, maxBlocksPerPool: 8 });
    await index.apply('m', 'a', { clear: false, ops: [{ kind: 'stored', anchor: null, blocks: [1, 2, 3, 4] }] });
    // `new` holds half the cap: the next call turns it into `old`, and the anchor is not in `new`.
    const turned = await index.apply('m', 'a', { clear: false, ops: [{ kind: 'stored', anchor: 4, blocks: [5] }] });
    expect(turned.stored).toEqual([-1]);
    expect((await state.snapshot('m', ['a'], [1, 2, 3, 4])).matchBlocks.get('a')).toBe(4);
    await index.apply('m', 'a', { clear: false, ops: [{ kind: 'stored', anchor: null, blocks: [1, 2, 3, 4, 5] }] });
    expect((await state.snapshot('m', ['a'], [1, 2, 3, 4, 5])).matchBlocks.get('a')).toBe(5);
  });
});

describe('kv-events-lease.lua', () => {
  it('gives a subscription to one replica at a time, moves its cursor for the holder only, hands it over', async () => {
    const options = { redis: ctx.redis, leaseTtlMs: 200, keyNamespace: ctx.namespace };
    const one = new KvEventsLeases({ ...options, replicaId: 'one' });
    const two = new KvEventsLeases({ ...options, replicaId: 'two' });
    expect(await one.acquire('a@0')).toEqual({ held: true, cursor: null });
    expect((await two.acquire('a@0')).held).toBe(false);
    expect(await one.advance('a@0', 18_446_744_073_709_551_614n)).toEqual({
      held: true,
      cursor: 18_446_744_073_709_551_614n,
    });
    expect((await two.advance('a@0', 1n)).held).toBe(false);
    expect(await two.cursor('a@0')).toBe(18_446_744_073_709_551_614n);
    // The holder dies: its lease expires and the other takes it, with the cursor.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await two.acquire('a@0')).toEqual({ held: true, cursor: 18_446_744_073_709_551_614n });
    expect((await one.renew('a@0')).held).toBe(false);
    expect((await two.release('a@0', 20n)).held).toBe(true);
    expect(await one.acquire('a@0')).toEqual({ held: true, cursor: 20n });
    expect(await one.liveReplicas(1000, 500)).toEqual(['one']);
    expect(await two.liveReplicas(1200, 500)).toEqual(['one', 'two']);
    expect(await two.liveReplicas(1600, 500)).toEqual(['two']);
  });
});
