import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  RedisBackendSet,
  type BackendEntrySpec,
  type BackendSetList,
  type BackendSetWatch,
} from '../../src/backend-set';
import { createRedis, waitUntilReady } from '../../src/connection';
import type { RedisClient } from '../../src/scripts';
import { fleetKeys } from '../../src/keys';
import { manualClock, openRedisTestContext, type RedisTestContext } from './redis-test-context';

// A Redis of this file's own: the last test kills and restarts it.
let ctx: RedisTestContext;
const subscribers: RedisClient[] = [];
const watches: BackendSetWatch[] = [];
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-backend-set', fresh: true });
});
beforeEach(() => ctx.beginTest('backend-set'));
afterEach(async () => {
  for (const watch of watches.splice(0)) await watch.stop();
  for (const subscriber of subscribers.splice(0)) subscriber.disconnect();
  await ctx.cleanup();
});
afterAll(() => ctx.close());

const spec = (id: string, extra: Partial<BackendEntrySpec> = {}): BackendEntrySpec => ({
  id,
  url: `http://10.0.0.${id.length}:8000`,
  weight: 1,
  ...extra,
});

function createSet(nowMs: () => number = Date.now): RedisBackendSet {
  return new RedisBackendSet({ redis: ctx.redis, nowMs, keyNamespace: ctx.namespace });
}

/** A subscriber connection (worker role, as the router uses) collecting what the changes channel carries. */
async function listen(set: RedisBackendSet): Promise<string[]> {
  const subscriber = createRedis(ctx.server.url, 'worker');
  subscribers.push(subscriber);
  await waitUntilReady(subscriber);
  const messages: string[] = [];
  subscriber.on('message', (channel: string, message: string) => {
    if (channel === set.keys.changes) messages.push(message);
  });
  await subscriber.subscribe(set.keys.changes);
  return messages;
}

/** Follows the set the way a router replica does: seeding with the config first, later with the last set it applied. */
async function watchSet(
  set: RedisBackendSet,
  options: { pollIntervalMs: number; seed: BackendEntrySpec[] },
): Promise<{ watch: BackendSetWatch; lists: BackendSetList[]; errors: unknown[] }> {
  const subscriber = createRedis(ctx.server.url, 'worker');
  subscribers.push(subscriber);
  const lists: BackendSetList[] = [];
  const errors: unknown[] = [];
  const watch = set.watch({
    subscriber,
    pollIntervalMs: options.pollIntervalMs,
    seed: () => lists.at(-1)?.backends ?? options.seed,
    onChange: (list) => lists.push(list),
    onError: (error) => errors.push(error),
  });
  watches.push(watch);
  await waitUntilReady(subscriber);
  return { watch, lists, errors };
}

async function until(check: () => boolean, timeoutMs = 3000): Promise<number> {
  const started = performance.now();
  while (!check()) {
    if (performance.now() - started > timeoutMs) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  return performance.now() - started;
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 50));

describe('RedisBackendSet changes', () => {
  it('starts a new set at the current ms and lists it sorted by id, with every field', async () => {
    const clock = manualClock(1_760_000_000_000);
    const set = createSet(clock.nowMs);
    expect(await set.list()).toEqual({ version: 0, backends: [], unreadable: [] });
    expect(await set.seed([spec('gpu-b', { models: ['m1', 'm2'], weight: 2.5 }), spec('gpu-a')])).toEqual({
      version: 1_760_000_000_000,
      changed: 2,
      existed: false,
    });
    expect(await set.list()).toEqual({
      version: 1_760_000_000_000,
      backends: [
        { id: 'gpu-a', url: 'http://10.0.0.5:8000', weight: 1, drained: false, updatedAtMs: 1_760_000_000_000 },
        {
          id: 'gpu-b',
          url: 'http://10.0.0.5:8000',
          models: ['m1', 'm2'],
          weight: 2.5,
          drained: false,
          updatedAtMs: 1_760_000_000_000,
        },
      ],
      unreadable: [],
    });
  });

  it('seed adds only what is missing and never overwrites an entry, drained or not', async () => {
    const set = createSet();
    const messages = await listen(set);
    const first = await set.seed([spec('a', { weight: 1 }), spec('b')]);
    await set.setDrained('b', true);
    const afterDrain = await set.version();
    // Another replica starts with a different config: a's weight and b's state stay as they are.
    const second = await set.seed([spec('a', { weight: 9, url: 'http://elsewhere:1' }), spec('b'), spec('c')]);
    expect(second).toEqual({ version: afterDrain + 1, changed: 1, existed: false });
    const list = await set.list();
    expect(list.backends.map((entry) => [entry.id, entry.url, entry.weight, entry.drained])).toEqual([
      ['a', 'http://10.0.0.1:8000', 1, false],
      ['b', 'http://10.0.0.1:8000', 1, true],
      ['c', 'http://10.0.0.1:8000', 1, false],
    ]);
    // Nothing new: the version stays and nothing is published.
    expect(await set.seed([spec('a'), spec('c')])).toEqual({ version: afterDrain + 1, changed: 0, existed: false });
    await settle();
    expect(messages).toEqual([String(first.version), String(afterDrain), String(afterDrain + 1)]);
  });

  it('add, remove and drain each bump the version by one and publish it; no-ops do neither', async () => {
    const clock = manualClock(1_760_000_000_000);
    const set = createSet(clock.nowMs);
    const messages = await listen(set);
    const v0 = (await set.add(spec('a'))).version;
    clock.advance(10);
    expect(await set.add(spec('b', { models: ['m'] }))).toEqual({ version: v0 + 1, changed: 1, existed: false });
    expect(await set.add(spec('b', { url: 'http://other:1' }))).toEqual({ version: v0 + 1, changed: 0, existed: true });
    clock.advance(10);
    expect(await set.setDrained('b', true)).toEqual({ version: v0 + 2, changed: 1, existed: true });
    expect(await set.setDrained('b', true)).toEqual({ version: v0 + 2, changed: 0, existed: true });
    expect(await set.setDrained('nope', true)).toEqual({ version: v0 + 2, changed: 0, existed: false });
    const drained = (await set.list()).backends.find((entry) => entry.id === 'b');
    // The script rewrote the JSON: every field survives, the models list stays a list.
    expect(drained).toEqual({
      id: 'b',
      url: 'http://10.0.0.1:8000',
      models: ['m'],
      weight: 1,
      drained: true,
      updatedAtMs: 1_760_000_000_020,
    });
    expect(await set.setDrained('b', false)).toEqual({ version: v0 + 3, changed: 1, existed: true });
    expect(await set.remove('a')).toEqual({ version: v0 + 4, changed: 1, existed: true });
    expect(await set.remove('a')).toEqual({ version: v0 + 4, changed: 0, existed: false });
    expect((await set.list()).backends.map((entry) => [entry.id, entry.drained])).toEqual([['b', false]]);
    await settle();
    expect(messages).toEqual([0, 1, 2, 3, 4].map((step) => String(v0 + step)));
  });

  it('keeps a removed backend out of later seeds until it is added again', async () => {
    const set = createSet();
    await set.seed([spec('a'), spec('b')]);
    await set.remove('b');
    expect((await set.seed([spec('a'), spec('b')])).changed).toBe(0);
    expect((await set.list()).backends.map((entry) => entry.id)).toEqual(['a']);
    await set.add(spec('b'));
    await set.remove('a');
    await set.add(spec('a'));
    expect((await set.list()).backends.map((entry) => entry.id)).toEqual(['a', 'b']);
  });

  it('creates exactly the keys fleetKeys names, all in the {fleet} slot', async () => {
    const set = createSet();
    await set.seed([spec('a'), spec('b')]);
    await set.remove('b');
    const keys = fleetKeys(ctx.namespace);
    expect(await ctx.keysOfTest()).toEqual([keys.backends, keys.removed, keys.version].sort());
    for (const key of [keys.backends, keys.removed, keys.version, keys.changes])
      expect(key.startsWith(`${ctx.namespace}:{fleet}:`)).toBe(true);
    expect(await ctx.redis.type(keys.backends)).toBe('hash');
    expect(await ctx.redis.type(keys.version)).toBe('string');
    expect(await ctx.redis.type(keys.removed)).toBe('hash');
  });

  it('leaves out and reports an entry it cannot read', async () => {
    const set = createSet();
    await set.seed([spec('a')]);
    await ctx.redis.hset(
      set.keys.backends,
      'broken',
      '{"id":"broken","url":1}',
      'mislabelled',
      JSON.stringify({ id: 'other', url: 'http://x:1', weight: 1, drained: false, updatedAtMs: 1 }),
    );
    const list = await set.list();
    expect(list.backends.map((entry) => entry.id)).toEqual(['a']);
    expect([...list.unreadable].sort()).toEqual(['broken', 'mislabelled']);
  });

  it('rejects a spec no replica could route by', async () => {
    const set = createSet();
    await expect(set.add(spec('a', { url: 'ftp://x' }))).rejects.toThrow(RangeError);
    await expect(set.add(spec('a', { weight: 0 }))).rejects.toThrow(RangeError);
    await expect(set.add(spec('a', { models: [] }))).rejects.toThrow(RangeError);
    await expect(set.add({ ...spec('a'), dataParallel: { size: 0, startRank: 0, hybridLb: false } })).rejects.toThrow(
      RangeError,
    );
    await expect(set.add({ ...spec('a'), kvEvents: { endpoint: 'http://x:1' } })).rejects.toThrow(RangeError);
    await expect(set.remove('')).rejects.toThrow(RangeError);
    expect(await set.version()).toBe(0);
  });

  it("carries a backend's data-parallel ranks and KV-event endpoints to every replica and poller", async () => {
    const set = createSet();
    const dataParallel = { size: 4, startRank: 0, hybridLb: false };
    const kvEvents = { endpoint: 'tcp://10.0.0.5:5557', replayEndpoint: 'tcp://10.0.0.5:5561', model: 'm' };
    await set.add({ ...spec('dp'), dataParallel, kvEvents });
    const [entry] = (await set.list()).backends;
    expect(entry).toMatchObject({ id: 'dp', dataParallel, kvEvents });
  });
});

describe('RedisBackendSet.watch', () => {
  it('seeds on first contact and hands over the set; a change arrives through pub/sub within milliseconds', async () => {
    const set = createSet();
    // A poll far too slow to matter: only pub/sub can deliver the change in time.
    const { watch, lists } = await watchSet(set, { pollIntervalMs: 60_000, seed: [spec('a'), spec('b')] });
    expect(await watch.refresh()).toBe(true);
    expect(lists.map((list) => list.backends.map((entry) => entry.id))).toEqual([['a', 'b']]);
    expect(watch.version).toBe(lists[0]?.version);
    const other = createSet();
    const started = performance.now();
    await other.setDrained('a', true);
    const elapsed = await until(() => lists.length === 2);
    console.info(`backend set change seen through pub/sub after ${(performance.now() - started).toFixed(1)} ms`);
    expect(elapsed).toBeLessThan(200);
    expect(lists[1]?.backends.find((entry) => entry.id === 'a')?.drained).toBe(true);
  });

  it('picks up a change by polling when no message arrives', async () => {
    const set = createSet();
    const { watch, lists } = await watchSet(set, { pollIntervalMs: 100, seed: [spec('a')] });
    await watch.refresh();
    expect(lists).toHaveLength(1);
    // A change whose message was lost: written without PUBLISH.
    await ctx.redis
      .multi()
      .hset(
        set.keys.backends,
        'z',
        JSON.stringify({ id: 'z', url: 'http://10.0.0.9:8000', weight: 1, drained: false, updatedAtMs: 1 }),
      )
      .incr(set.keys.version)
      .exec();
    const elapsed = await until(() => lists.length === 2, 1000);
    expect(elapsed).toBeLessThan(400);
    expect(lists[1]?.backends.map((entry) => entry.id)).toEqual(['a', 'z']);
    // Nothing changed since: polls keep quiet.
    await new Promise((resolve) => setTimeout(resolve, 250));
    expect(lists).toHaveLength(2);
  });

  it('reads again after a change made while a read was under way', async () => {
    const set = createSet();
    const { watch, lists } = await watchSet(set, { pollIntervalMs: 60_000, seed: [spec('a')] });
    const first = watch.refresh();
    await set.add(spec('b'));
    await watch.refresh();
    await first;
    expect(lists.at(-1)?.backends.map((entry) => entry.id)).toEqual(['a', 'b']);
  });

  it('keeps the last set while Redis is down, and seeds it again when Redis comes back without its data', async () => {
    const set = createSet();
    const { watch, lists, errors } = await watchSet(set, { pollIntervalMs: 50, seed: [spec('a'), spec('b')] });
    await watch.refresh();
    await set.add(spec('c'));
    await set.setDrained('a', true);
    await until(() => lists.at(-1)?.backends.length === 3 && lists.at(-1)?.backends[0]?.drained === true);
    const before = lists.length;
    await ctx.server.kill();
    await until(() => errors.length >= 2, 2000);
    expect(lists).toHaveLength(before);
    await ctx.server.restart(); // no persistence: the set is gone
    await waitUntilReady(ctx.redis, 10_000);
    await until(() => lists.length === before + 1, 5000);
    // Re-seeded from what the watcher last applied: the run-time addition and the drain survive.
    expect(lists.at(-1)?.backends.map((entry) => [entry.id, entry.drained])).toEqual([
      ['a', true],
      ['b', false],
      ['c', false],
    ]);
    expect(lists.at(-1)?.version).not.toBe(lists.at(-2)?.version);
  }, 20_000);
});
