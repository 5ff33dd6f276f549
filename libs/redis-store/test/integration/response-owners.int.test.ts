import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { responseOwnerKey } from '../../src/keys';
import { RedisResponseOwners } from '../../src/response-owners';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-response-owners' });
});
beforeEach(() => ctx.beginTest('response-owners'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

describe('RedisResponseOwners', () => {
  it('remembers an owner per scope with its TTL, shared by every client of the store, and forgets it', async () => {
    const writer = new RedisResponseOwners({ redis: ctx.redis, ttlMs: 60_000, namespace: ctx.namespace });
    const reader = new RedisResponseOwners({ redis: ctx.redis, ttlMs: 60_000, namespace: ctx.namespace });
    await writer.remember('tenant\u0000a', 'resp_1', 'gpu-0');
    expect(await reader.ownerOf('tenant\u0000a', 'resp_1')).toBe('gpu-0');
    expect(await reader.ownerOf('tenant\u0000b', 'resp_1')).toBeNull();
    expect(await reader.ownerOf('', 'resp_1')).toBeNull();
    const ttl = await ctx.redis.pttl(responseOwnerKey('tenant\u0000a', 'resp_1', ctx.namespace));
    expect(ttl).toBeGreaterThan(59_000);
    expect(ttl).toBeLessThanOrEqual(60_000);
    await reader.forget('tenant\u0000a', 'resp_1');
    expect(await writer.ownerOf('tenant\u0000a', 'resp_1')).toBeNull();
  });

  it('lets an entry expire by itself', async () => {
    const owners = new RedisResponseOwners({ redis: ctx.redis, ttlMs: 50, namespace: ctx.namespace });
    await owners.remember('', 'resp_2', 'gpu-1');
    expect(await owners.ownerOf('', 'resp_2')).toBe('gpu-1');
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(await owners.ownerOf('', 'resp_2')).toBeNull();
  });
});
