import type { BackendState } from '@kvroute/protocols';
import { createRedis, RedisBackendSet, waitUntilReady } from '@kvroute/redis-store';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { openTestEnv, startSim, stateOf, waitForValue, type TestEnv, type TestSim } from './poller-test-kit';

/**
 * One poller replica against simulated vLLM backends (default `vllm` dialect) on one Redis of this
 * file's own: what it publishes is what the backend's own `/sim/state` says, health follows the
 * hysteresis, and the shared backend set is followed.
 */
const INTERVAL_MS = 300;
const TIMEOUT_MS = 200;
const POLLER = { intervalMs: INTERVAL_MS, scrapeTimeoutMs: TIMEOUT_MS, jobLockMs: 2000, stalledCheckMs: 2000, reconcileMs: 1000, backendSetPollMs: 200 };

let env: TestEnv;
beforeAll(async () => {
  env = await openTestEnv();
});
beforeEach((context) => env.beginTest(context.task.name.slice(0, 20)));
afterEach(() => env.closePollers());
afterAll(() => env.close());

interface SimTruth {
  readonly running: number;
  readonly waiting: number;
  readonly kv_cache_usage: number;
}

async function simState(sim: TestSim): Promise<SimTruth> {
  return (await (await fetch(`${sim.url}/sim/state`)).json()) as SimTruth;
}

describe('health poller: published state', () => {
  it("publishes a vLLM backend's running, waiting and KV usage as its /sim/state has them, within one interval", async () => {
    // Slow simulated time (50× slower than wall time) and a small KV cache: 3 requests run, 3 wait for
    // blocks, and the figures hold still for seconds, so a scrape and /sim/state read around it agree.
    const sim = await startSim({ profile: 'a100-7b', timeScale: 0.02, numGpuBlocks: 64 });
    await env.startPoller({ ...POLLER, backends: [sim.url] });
    const idle = await waitForValue(stateOf(env, sim.id), (state) => state !== null);
    expect(idle.value).toMatchObject({ backendId: sim.id, engine: 'vllm', healthy: true, failure: null, running: 0, waiting: 0, kvUsage: 0, kvCapacityTokens: 64 * 16 });

    const load = new AbortController();
    for (let i = 0; i < 6; i += 1) {
      const prompt = `request ${i}: ${'lorem ipsum dolor sit amet '.repeat(50)}`;
      void fetch(`${sim.url}/v1/completions`, {
        method: 'POST',
        signal: load.signal,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'test-model', prompt, max_tokens: 200, stream: true }),
      })
        .then((response) => response.text())
        .catch(() => undefined);
    }
    try {
      // When the sim first shows the load, the published state follows within one interval (plus a scrape).
      const loaded = await waitForValue(() => simState(sim), (truth) => truth.running === 3 && truth.waiting === 3);
      const seen = await waitForValue(stateOf(env, sim.id), (state) => state?.running === 3 && state.waiting === 3);
      expect(seen.atMs - loaded.atMs).toBeLessThanOrEqual(INTERVAL_MS + TIMEOUT_MS);

      // Exact agreement: a scrape that started after /sim/state was read (t0) and ended before it was
      // read again (t1), while the sim's figures did not move, must have read those figures.
      let compared = 0;
      for (let attempt = 0; attempt < 8 && compared === 0; attempt += 1) {
        const t0 = Date.now();
        const before = await simState(sim);
        const published = await waitForValue(stateOf(env, sim.id), (state) => state !== null && state.scrapedAtMs - TIMEOUT_MS > t0, 2 * INTERVAL_MS + TIMEOUT_MS);
        const after = await simState(sim);
        if (before.running !== after.running || before.waiting !== after.waiting || before.kv_cache_usage !== after.kv_cache_usage) continue;
        expect(published.value).toMatchObject({ healthy: true, failure: null, running: after.running, waiting: after.waiting });
        expect(published.value?.kvUsage).toBeCloseTo(after.kv_cache_usage, 10);
        compared += 1;
      }
      expect(compared).toBe(1);
    } finally {
      load.abort();
      await sim.sim.close();
    }
  });

  it('marks a dead backend unhealthy after N failed intervals and healthy again within M intervals of its restart', async () => {
    const failuresToUnhealthy = 2;
    const successesToHealthy = 2;
    let sim = await startSim();
    await env.startPoller({ ...POLLER, backends: [sim.url], failuresToUnhealthy, successesToHealthy });
    await waitForValue(stateOf(env, sim.id), (state) => state?.healthy === true && state.consecutiveSuccesses >= 2);

    const subscriber = createRedis(env.redis.url, 'worker');
    await waitUntilReady(subscriber);
    const published: Array<{ state: BackendState; atMs: number }> = [];
    const subscription = env.store.subscribe({ subscriber, onState: (state) => published.push({ state, atMs: Date.now() }) });
    expect(await subscription.ready).toBe(true);
    try {
      const killedAtMs = Date.now();
      await sim.sim.close();
      const down = await waitForValue(stateOf(env, sim.id), (state) => state?.healthy === false, 5000);
      const downAfterMs = down.atMs - killedAtMs;
      // Not at the first failure (hysteresis), and by the N-th interval after the kill (+ slack for a scrape).
      expect(down.value).toMatchObject({ consecutiveFailures: failuresToUnhealthy, failure: 'connect', running: null, kvUsage: null });
      expect(downAfterMs).toBeGreaterThan((failuresToUnhealthy - 1) * INTERVAL_MS);
      expect(downAfterMs).toBeLessThanOrEqual(failuresToUnhealthy * INTERVAL_MS + TIMEOUT_MS);
      const firstFailure = published.find((entry) => entry.state.failure !== null);
      expect(firstFailure?.state).toMatchObject({ healthy: true, consecutiveFailures: 1 });

      const restartedAtMs = Date.now();
      sim = await startSim({}, sim.port);
      const up = await waitForValue(stateOf(env, sim.id), (state) => state?.healthy === true, 5000);
      const upAfterMs = up.atMs - restartedAtMs;
      expect(up.value).toMatchObject({ consecutiveSuccesses: successesToHealthy, failure: null, running: 0 });
      expect(upAfterMs).toBeLessThanOrEqual(successesToHealthy * INTERVAL_MS + TIMEOUT_MS);
      // Every health change was announced on the changes channel, in order.
      expect(published.map((entry) => entry.state.healthy).filter((healthy, i, all) => i === 0 || healthy !== all[i - 1])).toEqual([true, false, true]);
      console.info(`[health-poller] unhealthy ${downAfterMs} ms after the kill, healthy ${upAfterMs} ms after the restart (interval ${INTERVAL_MS} ms, N=${failuresToUnhealthy}, M=${successesToHealthy})`);
    } finally {
      await subscription.stop();
      subscriber.disconnect();
      await sim.sim.close();
    }
  });

  it("scrapes the fleet's shared backend set too, following additions and removals", async () => {
    const configured = await startSim();
    const added = await startSim();
    const poller = await env.startPoller({ ...POLLER, backends: [configured.url] });
    const set = new RedisBackendSet({ redis: env.client, nowMs: Date.now, keyNamespace: env.namespace });
    try {
      await set.add({ id: added.id, url: added.url, weight: 1 });
      await waitForValue(stateOf(env, added.id), (state) => state?.healthy === true, 3000);
      expect(poller.backends.map((backend) => backend.id).sort()).toEqual([configured.id, added.id].sort());

      await set.remove(added.id);
      await waitForValue(async () => poller.backends.map((backend) => backend.id), (ids) => !ids.includes(added.id), 3000);
      // Give a job already taken time to end, then no more scrapes of the removed backend.
      await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS));
      const scrapesAtRemoval = added.metricsScrapes.length;
      await new Promise((resolve) => setTimeout(resolve, 3 * INTERVAL_MS));
      expect(added.metricsScrapes.length).toBe(scrapesAtRemoval);
      expect(configured.metricsScrapes.length).toBeGreaterThan(0);
    } finally {
      await configured.sim.close();
      await added.sim.close();
    }
  });

  it('serves its own /healthz and /metrics', async () => {
    const sim = await startSim();
    const poller = await env.startPoller({ ...POLLER, backends: [sim.url] });
    try {
      await waitForValue(stateOf(env, sim.id), (state) => state !== null);
      const health = await poller.app.inject({ method: 'GET', url: '/healthz' });
      expect(health.statusCode).toBe(200);
      const text = (await poller.app.inject({ method: 'GET', url: '/metrics' })).body;
      expect(text).toMatch(new RegExp(`kvroute_poller_scrapes_total\\{backend="${sim.id.replace(/\./g, '\\.')}"\\} [1-9]`));
      expect(text).toContain('kvroute_poller_scrape_duration_seconds_count');
      expect(text).toContain('kvroute_poller_job_lag_seconds_count');
      expect(text).toMatch(/kvroute_poller_backends [1-9]/);
      const result = await poller.close();
      expect(result.ok).toBe(true);
      expect(result.closed).toEqual(['reconcile', 'backend-set-watch', 'worker', 'queue', 'http-server', 'http-client', 'bullmq-redis', 'redis-subscriber', 'redis']);
    } finally {
      await sim.sim.close();
    }
  });
});
