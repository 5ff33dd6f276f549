import type { BackendObservation, BackendState } from '@kvroute/protocols';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RedisBackendStateStore, type RecordScrapeOptions } from '../../src/backend-state-store';
import { createRedis, waitUntilReady } from '../../src/connection';
import type { RedisClient } from '../../src/scripts';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
const subscribers: RedisClient[] = [];
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-backend-state' });
});
beforeEach(() => ctx.beginTest('backend-state'));
afterEach(async () => {
  for (const subscriber of subscribers.splice(0)) subscriber.disconnect();
  await ctx.cleanup();
});
afterAll(() => ctx.close());

const OPTIONS: RecordScrapeOptions = { failuresToUnhealthy: 2, successesToHealthy: 3, ttlMs: 60_000 };

const loaded = (extra: Partial<BackendObservation> = {}): BackendObservation => ({
  engine: 'vllm',
  failure: null,
  kvUsage: 0.25,
  kvCapacityTokens: 1024,
  running: 3,
  waiting: 1,
  prefixCacheHitRate: 0.5,
  preemptionsTotal: 0,
  engineStartedAtMs: 1_796_165_945_615,
  loraAdapters: null,
  ...extra,
});
const refused: BackendObservation = {
  ...loaded(),
  failure: 'connect',
  kvUsage: null,
  kvCapacityTokens: null,
  running: null,
  waiting: null,
  prefixCacheHitRate: null,
  preemptionsTotal: null,
  engineStartedAtMs: null,
};

function createStore(): RedisBackendStateStore {
  return new RedisBackendStateStore({ redis: ctx.redis, keyNamespace: ctx.namespace });
}

let clock = 0;
/** Records one scrape, stamped with the wall clock (strictly increasing): the index trims by the writers' clock. */
async function scrape(
  store: RedisBackendStateStore,
  id: string,
  passed: boolean,
  options: Partial<RecordScrapeOptions> & {
    carry?: string | null;
    observation?: BackendObservation;
    restartedAtMs?: number | null;
  } = {},
) {
  clock = Math.max(clock + 1, Date.now());
  return store.record(
    {
      backendId: id,
      healthPassed: passed,
      observation: options.observation ?? (passed ? loaded() : refused),
      scrapedAtMs: clock,
      carry: options.carry ?? null,
      restartedAtMs: options.restartedAtMs === -1 ? clock : options.restartedAtMs,
    },
    { ...OPTIONS, ...options },
  );
}

async function listen(store: RedisBackendStateStore): Promise<BackendState[]> {
  const subscriber = createRedis(ctx.server.url, 'worker');
  subscribers.push(subscriber);
  await waitUntilReady(subscriber);
  const states: BackendState[] = [];
  const subscription = store.subscribe({ subscriber, onState: (state) => states.push(state) });
  expect(await subscription.ready).toBe(true);
  return states;
}

async function until(check: () => boolean, timeoutMs = 2000): Promise<void> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > timeoutMs) throw new Error('condition not met');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('RedisBackendStateStore', () => {
  it('gives a backend without history the outcome of its first probe', async () => {
    const store = createStore();
    const up = await scrape(store, 'up', true);
    const down = await scrape(store, 'down', false);
    expect(up.state).toMatchObject({
      backendId: 'up',
      healthy: true,
      consecutiveSuccesses: 1,
      consecutiveFailures: 0,
      running: 3,
      kvUsage: 0.25,
      engine: 'vllm',
    });
    expect(up.state.healthyChangedAtMs).toBe(up.state.scrapedAtMs);
    expect(down.state).toMatchObject({
      backendId: 'down',
      healthy: false,
      consecutiveSuccesses: 0,
      consecutiveFailures: 1,
      failure: 'connect',
      running: null,
    });
    expect(up.published && down.published).toBe(true);
  });

  it('turns unhealthy only after N consecutive failures and healthy again only after M consecutive successes', async () => {
    const store = createStore();
    const healthyTrail: boolean[] = [];
    const first = await scrape(store, 'b', true);
    healthyTrail.push(first.state.healthy);
    // Interrupted failure streaks do not count: F S F stays healthy.
    for (const passed of [false, true, false, false, true, true, false, true, true, true])
      healthyTrail.push((await scrape(store, 'b', passed)).state.healthy);
    expect(healthyTrail).toEqual([true, true, true, true, false, false, false, false, false, false, true]);
    const state = await store.read('b');
    expect(state).toMatchObject({ healthy: true, consecutiveSuccesses: 3, consecutiveFailures: 0 });
    // Changed when the third success came in, the last scrape.
    expect(state?.healthyChangedAtMs).toBe(state?.scrapedAtMs);
  });

  it('publishes a state only when its health or its observation changed', async () => {
    const store = createStore();
    const received = await listen(store);
    const outcomes = [
      await scrape(store, 'b', true),
      await scrape(store, 'b', true),
      await scrape(store, 'b', true, { observation: loaded({ running: 4 }) }),
      await scrape(store, 'b', false),
      await scrape(store, 'b', false),
      await scrape(store, 'b', false),
    ];
    // Same observation as before: not published. First failure: the observation changed (published),
    // second: unhealthy now (published), third: nothing new.
    expect(outcomes.map((outcome) => outcome.published)).toEqual([true, false, true, true, true, false]);
    await until(() => received.length === 4);
    expect(received.map((state) => [state.running, state.healthy])).toEqual([
      [3, true],
      [4, true],
      [null, true],
      [null, false],
    ]);
  });

  it('hands the carry-over to the next scrape and keeps it through scrapes that bring none', async () => {
    const store = createStore();
    expect(await store.readCarry('b')).toBeNull();
    await scrape(store, 'b', true, { carry: '{"queries":10}' });
    await scrape(store, 'b', false, { carry: null });
    expect(await store.readCarry('b')).toBe('{"queries":10}');
    await scrape(store, 'b', true, { carry: '{"queries":20}' });
    expect(await store.readCarry('b')).toBe('{"queries":20}');
  });

  it('records an engine restart in every state after it, publishes it, and never moves it back', async () => {
    const store = createStore();
    const received = await listen(store);
    const before = await scrape(store, 'b', true);
    expect(before.state).toMatchObject({ restartedAtMs: null, engineStartedAtMs: 1_796_165_945_615 });
    // A restart seen by this scrape (`-1`: at the scrape's own time). The observation is the same text
    // (an engine without a start time, whose counters went down): published for the restart alone.
    const restart = await scrape(store, 'b', true, { restartedAtMs: -1 });
    expect(restart.published).toBe(true);
    expect(restart.state.restartedAtMs).toBe(restart.state.scrapedAtMs);
    // Later scrapes carry it, failed ones too, and are not published for it again.
    const after = [await scrape(store, 'b', true), await scrape(store, 'b', false), await scrape(store, 'b', false)];
    expect(after.map((outcome) => outcome.state.restartedAtMs)).toEqual([
      restart.state.scrapedAtMs,
      restart.state.scrapedAtMs,
      restart.state.scrapedAtMs,
    ]);
    expect(after[0]?.published).toBe(false);
    // An older restart (a late scrape of another replica) does not move it back, nor is it news.
    const late = await scrape(store, 'b', false, { restartedAtMs: restart.state.scrapedAtMs - 5 });
    expect(late).toMatchObject({ published: false, state: { restartedAtMs: restart.state.scrapedAtMs } });
    const next = await scrape(store, 'b', false, { restartedAtMs: -1 });
    expect(next.state.restartedAtMs).toBe(next.state.scrapedAtMs);
    expect(next.published).toBe(true);
    expect(await store.read('b')).toMatchObject({ restartedAtMs: next.state.scrapedAtMs });
    await until(() => received.length === 5);
    expect(received.map((state) => state.restartedAtMs)).toEqual([
      null,
      restart.state.scrapedAtMs,
      restart.state.scrapedAtMs,
      restart.state.scrapedAtMs,
      next.state.scrapedAtMs,
    ]);
  });

  it('refuses a restart time that is not a whole non-negative ms count', async () => {
    const store = createStore();
    await expect(scrape(store, 'b', true, { restartedAtMs: 1.5 })).rejects.toThrow(RangeError);
  });

  it('lets a state expire by itself and drops it from readAll', async () => {
    const store = createStore();
    await scrape(store, 'short', true, { ttlMs: 150 });
    await scrape(store, 'long', true);
    expect((await store.readAll()).map((state) => state.backendId)).toEqual(['long', 'short']);
    expect(await ctx.redis.pttl(store.keys.state('short'))).toBeLessThanOrEqual(150);
    await new Promise((resolve) => setTimeout(resolve, 250));
    expect(await store.read('short')).toBeNull();
    expect((await store.readAll()).map((state) => state.backendId)).toEqual(['long']);
    // Expired history is no history: the next scrape decides alone.
    expect((await scrape(store, 'short', false, { ttlMs: 150 })).state).toMatchObject({
      healthy: false,
      consecutiveFailures: 1,
    });
  });

  it('keeps its keys under the {fleet} hash tag, one hash per backend plus the index', async () => {
    const store = createStore();
    await scrape(store, 'b1', true);
    await scrape(store, '10.0.0.2:8000', true);
    expect(await ctx.keysOfTest()).toEqual([
      `${ctx.namespace}:{fleet}:backend-state:10.0.0.2:8000`,
      `${ctx.namespace}:{fleet}:backend-state:b1`,
      `${ctx.namespace}:{fleet}:backend-states`,
    ]);
    expect(await ctx.redis.pttl(store.keys.index)).toBeGreaterThan(59_000);
  });

  it('shares the counters between writers: two poller replicas taking turns count one streak', async () => {
    const a = createStore();
    const b = new RedisBackendStateStore({ redis: await ctx.connect(), keyNamespace: ctx.namespace });
    await scrape(a, 'x', true);
    expect((await scrape(b, 'x', false)).state.healthy).toBe(true);
    expect((await scrape(a, 'x', false)).state).toMatchObject({ healthy: false, consecutiveFailures: 2 });
  });
});
