import {
  createCacheAwarePolicy,
  createLeastLoadedPolicy,
  createPrefixAwarePolicy,
  decide,
  type DecideInput,
  type RoutingPolicy,
} from '@kvroute/routing';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { openRedisTestContext, scriptCalls, type RedisTestContext } from './redis-test-context';

/**
 * A decision evaluates the policy once. Policies with an atomic rule (cacheaware, leastloaded) are
 * evaluated by route.lua, in one script call, and their TypeScript `choose` does not run at all; the
 * others are evaluated by `choose`, once, on one snapshot, then one conditional reservation.
 */

// A Redis of this file's own: the test reads and resets its command statistics.
let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-decide-once', fresh: true });
});
beforeEach(() => ctx.beginTest('once'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

/** The policy with its `choose` calls counted; its atomic rule, if any, left as it is. */
function counted(policy: RoutingPolicy): { policy: RoutingPolicy; calls: () => number } {
  let calls = 0;
  return {
    policy: { ...policy, choose: (...args) => (calls++, policy.choose(...args)) },
    calls: () => calls,
  };
}

const inputOf = (policy: RoutingPolicy, leaseId: string): DecideInput => ({
  pool: 'm',
  request: {
    model: 'm',
    blockHashes: [1, 2, 3, 4],
    blockSizeBytes: 256,
    textBytes: 1100,
    contextBlocks: 0,
    headHash: 7,
    sessionKey: null,
  },
  backends: [
    { id: 'a', weight: 1 },
    { id: 'b', weight: 1 },
    { id: 'c', weight: 1 },
  ],
  policy,
  context: { nowMs: 0, random: () => 0.5 },
  leaseId,
});

describe('decide on the Redis store evaluates the policy once', () => {
  it.each<[string, () => RoutingPolicy]>([
    ['cacheaware', () => createCacheAwarePolicy()],
    ['cacheaware recording at routing', () => createCacheAwarePolicy({ ownershipAt: 'routing' })],
    ['leastloaded', () => createLeastLoadedPolicy()],
  ])('%s (atomic rule): one route.lua call per decision, and choose never runs', async (_label, make) => {
    const state = ctx.createState();
    const { policy, calls } = counted(make());
    await decide(state, inputOf(policy, 'warm-up')); // loads the script
    await ctx.redis.config('RESETSTAT');
    for (let k = 1; k <= 5; k++) {
      const result = await decide(state, inputOf(policy, `l${k}`));
      expect(result.decision.kind).toBe('routed');
      expect(result.conflicts).toEqual([]);
    }
    expect(calls()).toBe(0);
    expect(await scriptCalls(ctx.redis)).toBe(5);
    // The decision is the one choose would have made on the figures the script read.
    const result = await decide(state, inputOf(policy, 'last'));
    expect(result.decision).toStrictEqual(
      make().choose(inputOf(policy, '').request, result.candidates, inputOf(policy, '').context),
    );
  });

  it('prefixaware (no atomic rule): choose once per decision, on one snapshot, then one reservation', async () => {
    const state = ctx.createState();
    const { policy, calls } = counted(createPrefixAwarePolicy());
    await decide(state, inputOf(policy, 'warm-up'));
    await ctx.redis.config('RESETSTAT');
    for (let k = 1; k <= 5; k++) await decide(state, inputOf(policy, `l${k}`));
    expect(calls()).toBe(6);
    expect(await scriptCalls(ctx.redis)).toBe(10); // snapshot.lua + route.lua ('fixed') per decision
    expect(await ctx.redis.info('commandstats')).not.toMatch(/cmdstat_eval:/); // both scripts cached: EVALSHA only
  });
});
