import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { poolKeys } from '../../src/keys';
import { manualClock, openRedisTestContext, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-leases' });
});
beforeEach(() => ctx.beginTest('leases'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

describe('reserve.lua / release.lua / renew.lua: leases', () => {
  it('counts leases in flight and releases each once, idempotently', async () => {
    const state = ctx.createState();
    await state.reserve('m', 'a', 'l1', [], 0);
    await state.reserve('m', 'a', 'l2', [], 0);
    await state.release('m', 'a', 'l1');
    await state.release('m', 'a', 'l1');
    await state.release('m', 'a', 'never-taken');
    await state.release('m', 'z', 'never-taken');
    expect((await state.snapshot('m', ['a'], [])).inflight.get('a')).toBe(1);
    expect(state.inflightCounts().get('a')).toBe(1);
  });

  it('stops counting an expired lease and purges it', async () => {
    const clock = manualClock();
    const state = ctx.createState({ leaseTtlMs: 1000, nowMs: clock.nowMs });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'a', 'old', [], 500);
    clock.advance(600);
    await state.reserve('m', 'a', 'new', [], 70);
    clock.advance(500); // 'old' is 1100 ms old, 'new' 500 ms
    const snapshot = await state.snapshot('m', ['a'], []);
    expect(snapshot.inflight.get('a')).toBe(1);
    expect(snapshot.pendingPrefillTokens.get('a')).toBe(70);
    expect(await ctx.redis.zrange(keys.leases('a'), 0, -1)).toEqual(['new']);
    expect(await ctx.redis.hkeys(keys.prefill('a'))).toEqual(['new']);
  });

  it('renews a live lease past its first deadline, and refuses to revive an expired or released one', async () => {
    const clock = manualClock();
    const state = ctx.createState({ leaseTtlMs: 1000, nowMs: clock.nowMs });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'a', 'stream', [], 0);
    await state.reserve('m', 'a', 'short', [], 0);
    clock.advance(800);
    expect(await state.renew('m', 'a', 'stream')).toBe(true);
    clock.advance(800); // 'stream' renewed at 800 lives to 1800; 'short' died at 1000
    expect((await state.snapshot('m', ['a'], [])).inflight.get('a')).toBe(1);
    expect(await state.renew('m', 'a', 'short')).toBe(false);
    await state.reserve('m', 'a', 'late', [], 0);
    clock.advance(1100);
    expect(await state.renew('m', 'a', 'late')).toBe(false); // past its deadline, not yet purged by a snapshot
    expect(await ctx.redis.zscore(keys.leases('a'), 'late')).toBeNull();
    expect(await state.renew('m', 'a', 'never-taken')).toBe(false);
    await state.release('m', 'a', 'stream');
    expect(await state.renew('m', 'a', 'stream')).toBe(false);
  });

  it('lets the lease keys of a vanished backend expire with their last lease (real time)', async () => {
    const state = ctx.createState({ leaseTtlMs: 150 });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'gone', 'l1', [], 10);
    expect(await ctx.redis.pttl(keys.leases('gone'))).toBeGreaterThan(0);
    expect(await ctx.redis.pttl(keys.prefill('gone'))).toBeGreaterThan(0);
    await sleep(200);
    expect(await ctx.redis.exists(keys.leases('gone'), keys.prefill('gone'))).toBe(0);
  });

  it('never shortens the lease keys’ TTL when a replica with a shorter lease TTL reserves', async () => {
    const clock = manualClock();
    const keys = poolKeys('m', ctx.namespace);
    await ctx.createState({ leaseTtlMs: 60_000, nowMs: clock.nowMs }).reserve('m', 'a', 'long', [], 0);
    await ctx.createState({ leaseTtlMs: 1000, nowMs: clock.nowMs }).reserve('m', 'a', 'short', [], 0);
    expect(await ctx.redis.pttl(keys.leases('a'))).toBeGreaterThan(50_000);
  });
});

describe('reserve.lua / prefill-done.lua: prefill backlog', () => {
  it('counts the prefill backlog until the first token, and forgets it on release', async () => {
    const state = ctx.createState();
    await state.reserve('m', 'a', 'l1', [], 5000);
    await state.reserve('m', 'a', 'l2', [], 300);
    expect((await state.snapshot('m', ['a'], [])).pendingPrefillTokens.get('a')).toBe(5300);
    await state.prefillDone('m', 'a', 'l1');
    await state.prefillDone('m', 'a', 'l1');
    expect((await state.snapshot('m', ['a'], [])).pendingPrefillTokens.get('a')).toBe(300);
    await state.release('m', 'a', 'l2');
    const snapshot = await state.snapshot('m', ['a'], []);
    expect(snapshot.pendingPrefillTokens.get('a')).toBe(0);
    expect(snapshot.inflight.get('a')).toBe(1);
  });

  it('does not recreate a lease when the first token arrives after release', async () => {
    const state = ctx.createState();
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'a', 'l1', [], 900);
    await state.release('m', 'a', 'l1');
    await state.prefillDone('m', 'a', 'l1');
    expect(await ctx.redis.exists(keys.prefill('a'))).toBe(0);
    expect((await state.snapshot('m', ['a'], [])).pendingPrefillTokens.get('a')).toBe(0);
  });
});

describe('reserve.lua: maxInflight', () => {
  it('refuses a lease at the limit without recording anything, and takes it once a lease is released', async () => {
    const state = ctx.createState();
    expect(await state.reserve('m', 'a', 'l1', [1], 0, 2)).toBe(true);
    expect(await state.reserve('m', 'a', 'l2', [1], 0, 2)).toBe(true);
    expect(await state.reserve('m', 'a', 'l3', [1, 2, 3], 700, 2)).toBe(false);
    const snapshot = await state.snapshot('m', ['a'], [1, 2, 3]);
    expect(snapshot.inflight.get('a')).toBe(2);
    expect(snapshot.matchBlocks.get('a')).toBe(1);
    expect(snapshot.pendingPrefillTokens.get('a')).toBe(0);
    await state.release('m', 'a', 'l1');
    expect(await state.reserve('m', 'a', 'l3', [1, 2, 3], 700, 2)).toBe(true);
    expect(await state.reserve('m', 'a', 'l4', [], 0)).toBe(true); // no limit given: never refused
    expect(state.inflightCounts().get('a')).toBe(3);
  });

  it('lets exactly maxInflight of 20 concurrent reservations from 20 clients through', async () => {
    const clients: Redis[] = await Promise.all(Array.from({ length: 20 }, () => ctx.connect()));
    const states = clients.map((redis) => ctx.createState({ redis }));
    const results = await Promise.all(states.map((state, i) => state.reserve('m', 'hot', `lease-${i}`, [1, 2, 3], 100, 4)));
    expect(results.filter(Boolean)).toHaveLength(4);
    const snapshot = await ctx.createState().snapshot('m', ['hot'], []);
    expect(snapshot.inflight.get('hot')).toBe(4);
    expect(snapshot.pendingPrefillTokens.get('hot')).toBe(400);
    await Promise.all(clients.map((client) => client.quit()));
  });

  it('does not count an expired lease against the limit', async () => {
    const clock = manualClock();
    const state = ctx.createState({ leaseTtlMs: 1000, nowMs: clock.nowMs });
    expect(await state.reserve('m', 'a', 'crashed-replica', [], 0, 1)).toBe(true);
    expect(await state.reserve('m', 'a', 'l2', [], 0, 1)).toBe(false);
    clock.advance(1001);
    expect(await state.reserve('m', 'a', 'l2', [], 0, 1)).toBe(true);
  });
});

describe('inflightCounts (local cache)', () => {
  it('sums the last counts seen per backend over pools', async () => {
    const state = ctx.createState();
    await state.reserve('m1', 'a', 'l1', [], 0);
    await state.reserve('m2', 'a', 'l2', [], 0);
    await state.reserve('m2', 'b', 'l3', [], 0);
    // Another replica's lease shows up once this replica reads the backend again.
    await ctx.createState().reserve('m1', 'b', 'other-replica', [], 0);
    expect(Object.fromEntries(state.inflightCounts())).toEqual({ a: 2, b: 1 });
    await state.snapshot('m1', ['a', 'b'], []);
    expect(Object.fromEntries(state.inflightCounts())).toEqual({ a: 2, b: 2 });
    await state.release('m2', 'a', 'l2');
    expect(state.inflightCounts().get('a')).toBe(1);
  });
});
