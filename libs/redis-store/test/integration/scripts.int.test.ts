import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RedisBackendSet } from '../../src/backend-set';
import { RedisBackendStateStore } from '../../src/backend-state-store';
import { KEY_SUFFIX, poolHashTag, poolKeys } from '../../src/keys';
import { RedisFlowQueue } from '../../src/flow-queue';
import { KvEventsIndex, KvEventsLeases } from '../../src/kv-events-index';
import { RECORD_BLOCKS_PER_CALL } from '../../src/store-limits';
import { RedisStoreError } from '../../src/redis-store-error';
import { RedisAdapterLoads } from '../../src/adapter-loads';
import { integerArrayReply, runScript, SCRIPTS, type RedisClient } from '../../src/scripts';
import { TenantLimits } from '../../src/tenant-limits';
import { createRedis, waitUntilReady } from '../../src/connection';
import { RedisApiKeyStore } from '../../src/api-key-store';
import {
  commandCalls,
  manualClock,
  openRedisTestContext,
  singleServer,
  type RedisTestContext,
} from './redis-test-context';

// A Redis of this file's own: SCRIPT FLUSH must not disturb anyone else's scripts.
let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-scripts', fresh: true });
});
beforeEach(() => ctx.beginTest('scripts'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

/** NOSCRIPT replies this Redis has sent (INFO errorstats). */
async function noScriptErrors(): Promise<number> {
  const match = /errorstat_NOSCRIPT:count=(\d+)/.exec(await ctx.redis.info('errorstats'));
  return match ? Number(match[1]) : 0;
}

/** Runs `use` with a client of an ACL user of this file's Redis with `rules` (password 'secret'), then removes the user. */
async function asUser(
  user: string,
  rules: readonly string[],
  use: (client: RedisClient) => Promise<void>,
): Promise<void> {
  await ctx.redis.call('ACL', ['SETUSER', user, 'reset', 'on', '>secret', ...rules]);
  const url = new URL(ctx.server.url);
  url.username = user;
  url.password = 'secret';
  const client = createRedis(url.toString(), 'worker');
  try {
    await waitUntilReady(client);
    await use(client);
  } finally {
    client.disconnect();
    await ctx.redis.call('ACL', ['DELUSER', user]);
  }
}

describe('script loading', () => {
  it('recovers from NOSCRIPT (SCRIPT FLUSH) for every script and caches it again', async () => {
    const clock = manualClock();
    const state = ctx.createState({ nowMs: clock.nowMs });
    const everyScript = async (): Promise<void> => {
      await state.reserve('m', 'a', 'l1', [1, 2], 10);
      // A chain longer than one call records: record-ownership.lua records the rest.
      await state.prefillDone(
        'm',
        'b',
        'none',
        Array.from({ length: RECORD_BLOCKS_PER_CALL + 1 }, (_, i) => 1000 + i),
      );
      await state.renew('m', 'a', 'l1');
      await state.prefillDone('m', 'a', 'l1');
      await state.clearBacklog('m', 'a', 'l1');
      await state.sendBacklogClears(); // clear-backlogs.lua
      await state.snapshot('m', ['a'], [1, 2]);
      await state.release('m', 'a', 'l1');
      await state.forgetBackend('m', 'b');
      await state.learn('m', {
        correction: {
          backendId: 'a',
          outcome: 'overpredicted',
          blockHashes: [1, 2],
          routedAtMs: clock.nowMs(),
          matchRecordedAtMs: clock.nowMs(),
        },
        calibration: { bytesPerToken: { samples: 2, sum: 7 } },
      }); // learn.lua
      await new RedisBackendSet({ redis: ctx.redis, nowMs: clock.nowMs, keyNamespace: ctx.namespace }).remove('none'); // change-backend-set.lua, writes nothing
      await new RedisBackendStateStore({ redis: ctx.redis, keyNamespace: ctx.namespace }).record(
        {
          backendId: 'polled',
          healthPassed: true,
          observation: {
            engine: 'vllm',
            failure: null,
            kvUsage: 0.5,
            kvCapacityTokens: 100,
            running: 1,
            waiting: 0,
            prefixCacheHitRate: null,
            preemptionsTotal: 0,
            engineStartedAtMs: null,
            loraAdapters: null,
          },
          scrapedAtMs: clock.nowMs(),
          carry: null,
        },
        { failuresToUnhealthy: 2, successesToHealthy: 2, ttlMs: 60_000 },
      ); // record-backend-scrape.lua
      const limits = new TenantLimits({ redis: ctx.redis, keyNamespace: ctx.namespace });
      const admission = {
        tenant: 't',
        keyId: 'k',
        leaseId: 'tl',
        nowMs: clock.nowMs(),
        leaseTtlMs: 1000,
        rates: [],
        reservedTokens: 0,
        concurrency: { key: 1 },
      };
      await limits.admit(admission); // admit-tenant.lua
      await limits.release({ ...admission, usedTokens: 0 }); // settle-tenant.lua
      await new RedisApiKeyStore({ redis: ctx.redis, keyNamespace: ctx.namespace }).revoke('none'); // change-api-keys.lua, writes nothing
      await new KvEventsIndex({
        redis: ctx.redis,
        nowMs: clock.nowMs,
        blockIdleTtlMs: 0,
        maxBlocksPerPool: 10,
        keyNamespace: ctx.namespace,
      }).apply('m', 'a', { clear: false, ops: [{ kind: 'removed', blocks: [1] }] }); // apply-kv-events.lua
      await new KvEventsLeases({
        redis: ctx.redis,
        replicaId: 'r',
        leaseTtlMs: 1000,
        keyNamespace: ctx.namespace,
      }).renew('none'); // kv-events-lease.lua, writes nothing
      const flow = new RedisFlowQueue({ redis: ctx.redis, keyNamespace: ctx.namespace });
      await flow.enter(
        'm',
        { id: 'f', flow: 't', costTokens: 1, weight: 1, priorityClass: 1 },
        { capacity: 1, enginesSaturated: false, leaseTtlMs: 1000, expressSlots: 0 },
        1000,
      ); // flow-queue.lua
      await new RedisAdapterLoads({ redis: ctx.redis, keyNamespace: ctx.namespace }).unloaded('m', 'a', 'b'); // adapter-load.lua
    };
    await everyScript();
    // The scripts run by EVALSHA (release.lua runs as a Redis Function: the next test).
    const shas = Object.values(SCRIPTS)
      .filter((script) => script.asFunction === undefined)
      .map((script) => script.sha1);
    expect(shas.length).toBe(Object.values(SCRIPTS).length - 1);
    expect(await ctx.redis.script('EXISTS', ...shas)).toEqual(shas.map(() => 1));

    await ctx.redis.script('FLUSH');
    expect(await ctx.redis.script('EXISTS', ...shas)).toEqual(shas.map(() => 0));
    const noScriptBefore = await noScriptErrors();
    await everyScript();
    expect(await ctx.redis.script('EXISTS', ...shas)).toEqual(shas.map(() => 1));
    expect((await noScriptErrors()) - noScriptBefore).toBe(shas.length); // one EVALSHA miss each, then EVAL
    await everyScript();
    expect((await noScriptErrors()) - noScriptBefore).toBe(shas.length);
    await state.reserve('m', 'a', 'l2', [1, 2, 3], 0);
    expect((await state.snapshot('m', ['a'], [1, 2, 3])).matchBlocks.get('a')).toBe(3);
  });

  it('loads a Redis Function once when it is missing (FUNCTION FLUSH), however many calls find it so', async () => {
    const release = SCRIPTS.release;
    const name = release.asFunction?.name ?? '';
    expect(name).toMatch(/^kvroute_release_[0-9a-f]{16}$/);
    const functionLoads = (): Promise<number> => commandCalls(ctx.redis, 'function|load');
    const libraries = async (): Promise<unknown[]> =>
      ctx.redis.call('FUNCTION', ['LIST', 'LIBRARYNAME', name]) as Promise<unknown[]>;
    const state = ctx.createState({ nowMs: manualClock().nowMs });
    await state.reserve('m', 'a', 'l1', [], 10);
    await state.release('m', 'a', 'l1');
    expect(await libraries()).toHaveLength(1);

    await ctx.redis.call('FUNCTION', ['FLUSH']);
    expect(await libraries()).toHaveLength(0);
    const loadsBefore = await functionLoads();
    for (let k = 0; k < 20; k++) await state.reserve('m', 'a', `c${k}`, [], 10);
    // 20 releases at once all find the function missing: one FUNCTION LOAD, and every release done.
    await Promise.all(Array.from({ length: 20 }, (_, k) => state.release('m', 'a', `c${k}`)));
    expect((await functionLoads()) - loadsBefore).toBe(1);
    expect(await libraries()).toHaveLength(1);
    expect((await state.snapshot('m', ['a'], [])).inflight.get('a') ?? 0).toBe(0);
    await state.reserve('m', 'a', 'l2', [], 10);
    await state.release('m', 'a', 'l2');
    expect((await functionLoads()) - loadsBefore).toBe(1);
  });

  it.each([
    ['a user without FCALL and FUNCTION', '-fcall -fcall_ro -function'],
    ['a user who may call functions but not load them', '-function'],
  ])('runs by EVALSHA for %s (as on a Redis without functions)', async (_label, denied) => {
    // A user of this file's own Redis; FUNCTION FLUSH first, so no library is there to call.
    await ctx.redis.call('FUNCTION', ['FLUSH']);
    await asUser(`no-functions-${denied.length}`, ['~*', '&*', '+@all', ...denied.split(' ')], async (limited) => {
      const evalCalls = (): Promise<number> => commandCalls(ctx.redis, 'evalsha', 'eval');
      const state = ctx.createState({ redis: singleServer(limited), nowMs: manualClock().nowMs });
      const before = await evalCalls();
      for (let k = 0; k < 3; k++) {
        await state.reserve('m', 'a', `l${k}`, [1, 2, 3], 10);
        await state.release('m', 'a', `l${k}`, [1, 2, 3]);
      }
      // Each reserve and release ran, the releases as scripts (reserve.lua is one anyway): 6 calls by EVALSHA
      // or EVAL, none left failing, and the library never loaded.
      expect((await evalCalls()) - before).toBeGreaterThanOrEqual(6);
      expect((await state.snapshot('m', ['a'], [1, 2, 3])).inflight.get('a') ?? 0).toBe(0);
      expect((await state.snapshot('m', ['a'], [1, 2, 3])).matchBlocks.get('a')).toBe(3);
      expect(await ctx.redis.call('FUNCTION', ['LIST'])).toEqual([]);
    });
  });

  it('keeps running functions for a user refused a key (NOPERM for the key, not for FCALL)', async () => {
    // Keys of the pool 'open' only (its hash tag); every command allowed.
    await asUser('one-pool-only', [`~*{${poolHashTag('open')}}*`, '&*', '+@all'], async (limited) => {
      const state = ctx.createState({ redis: singleServer(limited), nowMs: manualClock().nowMs });
      await expect(state.release('closed', 'a', 'l0')).rejects.toThrow(/NOPERM/);
      const fcalls = await commandCalls(ctx.redis, 'fcall');
      const evalshas = await commandCalls(ctx.redis, 'evalsha');
      await state.release('open', 'a', 'l1');
      expect((await commandCalls(ctx.redis, 'fcall')) - fcalls).toBeGreaterThanOrEqual(1);
      expect((await commandCalls(ctx.redis, 'evalsha')) - evalshas).toBe(0);
    });
  });

  it('reports a failing script as REDIS_STORE_ERR_SCRIPT_FAILED with the Redis error as cause', async () => {
    const keys = Array.from({ length: SCRIPTS.reserve.numberOfKeys }, (_, i) => `k${i + 1}`);
    const error = await runScript(ctx.redis, SCRIPTS.reserve, keys, ['not-a-number']).catch(
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(RedisStoreError);
    expect((error as RedisStoreError).code).toBe('REDIS_STORE_ERR_SCRIPT_FAILED');
    expect((error as RedisStoreError).script).toBe('reserve');
    expect((error as RedisStoreError).cause).toBeInstanceOf(Error);
  });

  it('rejects a reply of the wrong shape as REDIS_STORE_ERR_BAD_REPLY', () => {
    expect(() => integerArrayReply(SCRIPTS.release, [1, 'x'], 2)).toThrow(
      expect.objectContaining({ code: 'REDIS_STORE_ERR_BAD_REPLY' }),
    );
    expect(() => integerArrayReply(SCRIPTS.release, [1], 2)).toThrow(RedisStoreError);
    expect(integerArrayReply(SCRIPTS.release, [1, 0], 2)).toEqual([1, 0]);
  });
});

describe('key schema', () => {
  it('scripts create exactly the keys keys.ts names, all in the pool hash tag', async () => {
    const clock = manualClock();
    const state = ctx.createState({ nowMs: clock.nowMs });
    const pool = 'llama-3-8b';
    await state.reserve(pool, '10.0.0.1:8000', 'l1', [11, 22], 5);
    await state.forgetBackend(pool, '10.0.0.2:8000');
    const keys = poolKeys(pool, ctx.namespace);
    const expected = [
      keys.ownersNew,
      keys.generation,
      keys.prefill('10.0.0.1:8000'),
      keys.leaseDeadlines,
      keys.inflight,
      keys.pending,
      keys.forgotten,
    ].sort();
    expect(await ctx.keysOfTest()).toEqual(expected);
    for (const key of expected) expect(key.startsWith(`${ctx.namespace}:{${pool}}:`)).toBe(true);
    expect(expected).toContain(`${ctx.namespace}:{${pool}}:${KEY_SUFFIX.ownersNew}`);
    expect(await ctx.redis.type(keys.ownersNew)).toBe('hash');
    expect(await ctx.redis.type(keys.generation)).toBe('string');
    // The previous generation appears when the current one turns (same type, same slot).
    await ctx.createState({ nowMs: clock.nowMs, maxBlocksPerPool: 2 }).reserve(pool, '10.0.0.1:8000', 'l2', [33], 0);
    expect(await ctx.redis.type(keys.ownersOld)).toBe('hash');
    expect(await ctx.redis.type(keys.prefill('10.0.0.1:8000'))).toBe('hash');
    expect(await ctx.redis.type(keys.forgotten)).toBe('hash');
    expect(await ctx.redis.type(keys.leaseDeadlines)).toBe('zset');
    expect(await ctx.redis.type(keys.inflight)).toBe('hash');
    expect(await ctx.redis.type(keys.pending)).toBe('hash');
  });
});
