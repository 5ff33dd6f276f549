import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RedisApiKeyStore } from '../../src/api-key-store';
import { apiKeyKeys } from '../../src/keys';
import { RouterReplicas } from '../../src/router-replicas';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-api-keys' });
});
beforeEach(() => ctx.beginTest('api-keys'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

const DIGEST_A = 'a'.repeat(64);
const DIGEST_B = 'b'.repeat(64);

describe('RedisApiKeyStore', () => {
  it('adds a key by digest and revokes it by id, both hashes together', async () => {
    const store = new RedisApiKeyStore({ redis: ctx.redis, keyNamespace: ctx.namespace });
    expect(await store.add('k1', DIGEST_A, '{"id":"k1","tenant":"t"}')).toBe(true);
    expect(await store.lookup(DIGEST_A)).toBe('{"id":"k1","tenant":"t"}');
    // Neither the id nor the digest can be taken twice.
    expect(await store.add('k1', DIGEST_B, '{}')).toBe(false);
    expect(await store.add('k2', DIGEST_A, '{}')).toBe(false);
    expect(await store.list()).toEqual(['{"id":"k1","tenant":"t"}']);
    expect(await store.revoke('k1')).toBe(true);
    expect(await store.lookup(DIGEST_A)).toBeNull();
    expect(await store.revoke('k1')).toBe(false);
    const keys = apiKeyKeys(ctx.namespace);
    expect(await ctx.redis.exists(keys.byDigest, keys.byId)).toBe(0);
    await expect(store.add('k3', 'not-a-digest', '{}')).rejects.toThrow(RangeError);
  });

  it('shares one cache-salt secret: the first replica sets it, later ones read it', async () => {
    const store = new RedisApiKeyStore({ redis: ctx.redis, keyNamespace: ctx.namespace });
    const first = await store.sharedCacheSaltSecret('secret-of-replica-one');
    const second = await store.sharedCacheSaltSecret('secret-of-replica-two');
    expect([first, second]).toEqual([
      { secret: 'secret-of-replica-one', stored: true },
      { secret: 'secret-of-replica-one', stored: false },
    ]);
    // Lost (a Redis restarted without persistence): the next call, with the secret in use, puts it back.
    await ctx.redis.del(apiKeyKeys(ctx.namespace).cacheSaltSecret);
    expect(await store.sharedCacheSaltSecret('secret-of-replica-one')).toEqual({
      secret: 'secret-of-replica-one',
      stored: true,
    });
  });
});

describe('RouterReplicas', () => {
  it('counts the replicas heard from recently, and forgets one that left or went quiet', async () => {
    const one = new RouterReplicas({
      redis: ctx.redis,
      replicaId: 'r1',
      staleAfterMs: 6_000,
      keyNamespace: ctx.namespace,
    });
    const two = new RouterReplicas({
      redis: ctx.redis,
      replicaId: 'r2',
      staleAfterMs: 6_000,
      keyNamespace: ctx.namespace,
    });
    const three = new RouterReplicas({
      redis: ctx.redis,
      replicaId: 'r3',
      staleAfterMs: 6_000,
      keyNamespace: ctx.namespace,
    });
    expect(await one.heartbeat(10_000)).toBe(1);
    expect(await two.heartbeat(10_000)).toBe(2);
    expect(await three.heartbeat(11_000)).toBe(3);
    await two.leave();
    expect(await one.heartbeat(12_000)).toBe(2);
    // r3 says nothing more: 6 s after its last word it no longer counts.
    expect(await one.heartbeat(17_500)).toBe(1);
  });
});
