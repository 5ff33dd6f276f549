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

/** A lease's member in the pool's `lease-deadlines` index, as lib/lease-accounting.lua's leaseMember builds it. */
function leaseMember(backendId: string, leaseId: string): string {
  return `${Buffer.byteLength(backendId, 'utf8')}:${backendId}${leaseId}`;
}

describe('route.lua / release.lua / renew.lua: leases', () => {
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
    expect(await ctx.redis.zscore(keys.leaseDeadlines, leaseMember('a', 'old'))).toBeNull();
    expect(await ctx.redis.zscore(keys.leaseDeadlines, leaseMember('a', 'new'))).not.toBeNull();
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
    expect(await ctx.redis.zscore(keys.leaseDeadlines, leaseMember('a', 'late'))).toBeNull();
    expect(await state.renew('m', 'a', 'never-taken')).toBe(false);
    await state.release('m', 'a', 'stream');
    expect(await state.renew('m', 'a', 'stream')).toBe(false);
  });

  it('lets the lease keys of a vanished backend expire within two lease TTLs of their last lease (real time)', async () => {
    const state = ctx.createState({ leaseTtlMs: 150 });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'gone', 'l1', [], 10);
    expect(await ctx.redis.pttl(keys.prefill('gone'))).toBeGreaterThan(150);
    await sleep(350);
    expect(await ctx.redis.exists(keys.prefill('gone'))).toBe(0);
  });

  it('never shortens the lease keys’ TTL when a replica with a shorter lease TTL reserves', async () => {
    const clock = manualClock();
    const keys = poolKeys('m', ctx.namespace);
    await ctx.createState({ leaseTtlMs: 60_000, nowMs: clock.nowMs }).reserve('m', 'a', 'long', [], 0);
    await ctx.createState({ leaseTtlMs: 1000, nowMs: clock.nowMs }).reserve('m', 'a', 'short', [], 0);
    expect(await ctx.redis.pttl(keys.prefill('a'))).toBeGreaterThan(50_000);
  });
});

describe('route.lua / prefill-done.lua: prefill backlog', () => {
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

describe('route.lua (rule fixed): maxInflight', () => {
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
    const results = await Promise.all(
      states.map((state, i) => state.reserve('m', 'hot', `lease-${i}`, [1, 2, 3], 100, 4)),
    );
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

describe('pool-level lease accounting (lease-deadlines, inflight, pending)', () => {
  /** The counters as stored, and as recounted from the per-backend prefill hashes: they must agree. */
  async function accounting(
    pool: string,
    backends: readonly string[],
  ): Promise<{ inflight: Record<string, string>; pending: Record<string, string> }> {
    const keys = poolKeys(pool, ctx.namespace);
    const inflight = await ctx.redis.hgetall(keys.inflight);
    const pending = await ctx.redis.hgetall(keys.pending);
    let leases = 0;
    for (const backend of backends) {
      const count = await ctx.redis.hlen(keys.prefill(backend));
      const tokens = (await ctx.redis.hvals(keys.prefill(backend))).reduce((sum, value) => sum + Number(value), 0);
      expect(Number(inflight[backend] ?? 0), `inflight of ${backend}`).toBe(count);
      expect(Number(pending[backend] ?? 0), `pending of ${backend}`).toBe(tokens);
      leases += count;
    }
    expect(await ctx.redis.zcard(keys.leaseDeadlines)).toBe(leases);
    for (const value of [...Object.values(inflight), ...Object.values(pending)])
      expect(Number(value)).toBeGreaterThanOrEqual(0);
    return { inflight, pending };
  }

  it('purges an expired lease of a backend the snapshot did not ask about, and uncounts it once', async () => {
    const clock = manualClock();
    const state = ctx.createState({ leaseTtlMs: 1000, nowMs: clock.nowMs });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'b', 'old', [], 300);
    clock.advance(600);
    await state.reserve('m', 'b', 'new', [], 40);
    await state.reserve('m', 'a', 'l1', [], 500);
    clock.advance(500); // b's 'old' has expired
    const onlyA = await state.snapshot('m', ['a'], []);
    expect([onlyA.inflight.get('a'), onlyA.pendingPrefillTokens.get('a')]).toEqual([1, 500]);
    expect(await accounting('m', ['a', 'b'])).toEqual({ inflight: { a: '1', b: '1' }, pending: { a: '500', b: '40' } });
    expect(await ctx.redis.zscore(keys.leaseDeadlines, leaseMember('b', 'old'))).toBeNull();
    expect(await ctx.redis.zscore(keys.leaseDeadlines, leaseMember('b', 'new'))).not.toBeNull();
    expect(await ctx.redis.hkeys(keys.prefill('b'))).toEqual(['new']);
    const both = await state.snapshot('m', ['a', 'b'], []);
    expect([both.inflight.get('b'), both.pendingPrefillTokens.get('b')]).toEqual([1, 40]);
    clock.advance(1000); // everything expired: the counters' fields go with the last lease
    expect((await state.snapshot('m', ['a', 'b'], [])).inflight).toEqual(
      new Map([
        ['a', 0],
        ['b', 0],
      ]),
    );
    expect(await ctx.redis.exists(keys.inflight, keys.pending, keys.leaseDeadlines)).toBe(0);
  });

  it('uncounts each expired lease exactly once while 20 clients race to purge, renew, release and finish it', async () => {
    const clock = manualClock();
    const setup = ctx.createState({ leaseTtlMs: 1000, nowMs: clock.nowMs });
    for (let i = 0; i < 10; i++) await setup.reserve('m', i % 2 === 0 ? 'a' : 'b', `dead-${i}`, [], 100 + i);
    clock.advance(600);
    await setup.reserve('m', 'a', 'alive', [], 7);
    clock.advance(500); // the 10 'dead-' leases have expired, and no script has purged them yet
    expect(await accounting('m', ['a', 'b'])).toEqual({
      inflight: { a: '6', b: '5' },
      pending: { a: String(7 + 100 + 102 + 104 + 106 + 108), b: String(101 + 103 + 105 + 107 + 109) },
    });

    const clients: Redis[] = await Promise.all(Array.from({ length: 20 }, () => ctx.connect()));
    const states = clients.map((redis) => ctx.createState({ redis, leaseTtlMs: 1000, nowMs: clock.nowMs }));
    await Promise.all(
      states.map(async (state, i) => {
        const dead = `dead-${i % 10}`;
        const backend = i % 2 === 0 ? 'a' : 'b';
        switch (i % 5) {
          case 0:
            return state.snapshot('m', ['a', 'b'], []);
          case 1:
            return state.reserve('m', 'c', `fresh-${i}`, [], 10);
          case 2:
            return expect(await state.renew('m', backend, dead)).toBe(false);
          case 3:
            return state.release('m', backend, dead);
          default:
            return state.prefillDone('m', backend, dead);
        }
      }),
    );
    await Promise.all(clients.map((client) => client.quit()));

    const snapshot = await setup.snapshot('m', ['a', 'b', 'c'], []);
    expect(Object.fromEntries(snapshot.inflight)).toEqual({ a: 1, b: 0, c: 4 });
    expect(Object.fromEntries(snapshot.pendingPrefillTokens)).toEqual({ a: 7, b: 0, c: 40 });
    expect(await accounting('m', ['a', 'b', 'c'])).toEqual({
      inflight: { a: '1', c: '4' },
      pending: { a: '7', c: '40' },
    });
  });

  it('keeps the counters exact through prefill-done, re-reserving a lease id, and double releases', async () => {
    const state = ctx.createState();
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'a', 'l1', [], 100);
    await state.reserve('m', 'a', 'l2', [], 200);
    await state.prefillDone('m', 'a', 'l1');
    await state.prefillDone('m', 'a', 'l1');
    expect(await accounting('m', ['a'])).toEqual({ inflight: { a: '2' }, pending: { a: '200' } });
    await state.reserve('m', 'a', 'l2', [], 50); // same lease id again: new tokens, still one lease
    expect(await accounting('m', ['a'])).toEqual({ inflight: { a: '2' }, pending: { a: '50' } });
    await state.release('m', 'a', 'l2');
    await state.release('m', 'a', 'l2');
    await state.prefillDone('m', 'a', 'l2');
    expect(await accounting('m', ['a'])).toEqual({ inflight: { a: '1' }, pending: { a: '0' } });
    await state.release('m', 'a', 'l1');
    expect(await ctx.redis.exists(keys.inflight, keys.pending, keys.leaseDeadlines)).toBe(0);
  });

  it('purges more expired leases than one batch in a single snapshot', async () => {
    const clock = manualClock();
    const state = ctx.createState({ leaseTtlMs: 1000, nowMs: clock.nowMs });
    for (let i = 0; i < 250; i++) await state.reserve('m', `b${i % 3}`, `l${i}`, [], 1);
    clock.advance(600);
    await state.reserve('m', 'b0', 'live', [], 9);
    clock.advance(500);
    const snapshot = await state.snapshot('m', ['b0', 'b1', 'b2'], []);
    expect(Object.fromEntries(snapshot.inflight)).toEqual({ b0: 1, b1: 0, b2: 0 });
    expect(Object.fromEntries(snapshot.pendingPrefillTokens)).toEqual({ b0: 9, b1: 0, b2: 0 });
    expect(await accounting('m', ['b0', 'b1', 'b2'])).toEqual({ inflight: { b0: '1' }, pending: { b0: '9' } });
  });

  it('tells leases apart whatever the backend and lease ids contain', async () => {
    const clock = manualClock();
    const state = ctx.createState({ leaseTtlMs: 1000, nowMs: clock.nowMs });
    await state.reserve('m', 'ab', 'c', [], 1); // expires first
    clock.advance(600);
    await state.reserve('m', 'a', 'bc', [], 2);
    await state.reserve('m', '10.0.0.1:8000', '3:x\nlease', [], 4);
    clock.advance(500);
    const snapshot = await state.snapshot('m', ['a', 'ab', '10.0.0.1:8000'], []);
    expect(Object.fromEntries(snapshot.inflight)).toEqual({ a: 1, ab: 0, '10.0.0.1:8000': 1 });
    expect(Object.fromEntries(snapshot.pendingPrefillTokens)).toEqual({ a: 2, ab: 0, '10.0.0.1:8000': 4 });
    expect(await state.renew('m', '10.0.0.1:8000', '3:x\nlease')).toBe(true);
    await state.release('m', '10.0.0.1:8000', '3:x\nlease');
    expect(await accounting('m', ['a', 'ab', '10.0.0.1:8000'])).toEqual({ inflight: { a: '1' }, pending: { a: '2' } });
  });

  it('lets the pool lease keys expire within two lease TTLs of the last lease (real time)', async () => {
    const state = ctx.createState({ leaseTtlMs: 150 });
    const keys = poolKeys('m', ctx.namespace);
    await state.reserve('m', 'gone', 'l1', [], 10);
    for (const key of [keys.leaseDeadlines, keys.inflight, keys.pending])
      expect(await ctx.redis.pttl(key)).toBeGreaterThan(150);
    await sleep(350);
    expect(await ctx.redis.exists(keys.leaseDeadlines, keys.inflight, keys.pending)).toBe(0);
  });
});
