import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RedisAdapterLoads } from '../../src/adapter-loads';
import { adapterLoadKeys } from '../../src/keys';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-adapter-loads' });
});
beforeEach(() => ctx.beginTest('adapter-loads'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

const TIMES = { claimMs: 5_000, spacingMs: 0, unavailableMs: 60_000, loadedTtlMs: 600_000 };

describe('RedisAdapterLoads (adapter-load.lua)', () => {
  it('one claim per adapter and backend: the others are busy until it settles; then everyone sees it loaded', async () => {
    const first = new RedisAdapterLoads({ redis: ctx.redis, keyNamespace: ctx.namespace });
    const second = new RedisAdapterLoads({ redis: ctx.redis, keyNamespace: ctx.namespace });
    expect(await first.claim('base', 'a', 'gpu-0', 'token-1', TIMES)).toBe('claimed');
    expect(await second.claim('base', 'a', 'gpu-0', 'token-2', TIMES)).toBe('busy');
    // Loading there: other replicas route to it meanwhile.
    expect([...(await second.loadedOn('base', 'a'))]).toEqual(['gpu-0']);
    // Another backend, another claim.
    expect(await second.claim('base', 'a', 'gpu-1', 'token-2', TIMES)).toBe('claimed');
    // Only the holder settles a claim.
    await second.settle('base', 'a', 'gpu-0', 'token-2', 'loaded', 1_000, TIMES);
    expect(await ctx.redis.exists(adapterLoadKeys('base', ctx.namespace).claim('gpu-0', 'a'))).toBe(1);
    await first.settle('base', 'a', 'gpu-0', 'token-1', 'loaded', 1_000, TIMES);
    expect(await second.claim('base', 'a', 'gpu-0', 'token-3', TIMES)).toBe('loaded');
    await first.unloaded('base', 'a', 'gpu-0');
    expect(await second.claim('base', 'a', 'gpu-0', 'token-3', TIMES)).toBe('claimed');
  });

  it('a failed load keeps the adapter off that backend; loads on one backend are spaced', async () => {
    const loads = new RedisAdapterLoads({ redis: ctx.redis, keyNamespace: ctx.namespace });
    expect(await loads.claim('base', 'a', 'gpu-0', 't', TIMES)).toBe('claimed');
    await loads.settle('base', 'a', 'gpu-0', 't', 'failed', 1_000, TIMES);
    expect(await loads.claim('base', 'a', 'gpu-0', 't2', TIMES)).toBe('unavailable');
    expect(await loads.loadedOn('base', 'a')).toEqual(new Set());
    const pttl = await ctx.redis.pttl(adapterLoadKeys('base', ctx.namespace).unavailable('gpu-0', 'a'));
    expect(pttl).toBeGreaterThan(59_000);
    const spaced = { ...TIMES, spacingMs: 60_000 };
    expect(await loads.claim('base', 'b', 'gpu-1', 't3', spaced)).toBe('claimed');
    expect(await loads.claim('base', 'c', 'gpu-1', 't4', spaced)).toBe('spaced');
    expect(await loads.claim('base', 'c', 'gpu-2', 't4', spaced)).toBe('claimed');
  });

  it("keeps one base model's keys in one hash slot", () => {
    const keys = adapterLoadKeys('org/model-7b', ctx.namespace);
    const tags = [keys.claim('b', 'a'), keys.spacing('b'), keys.unavailable('b', 'a'), keys.loaded('a')].map(
      (key) => /\{[^}]*\}/.exec(key)?.[0],
    );
    expect(new Set(tags).size).toBe(1);
  });
});
