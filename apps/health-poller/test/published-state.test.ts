import type { BackendState } from '@kvroute/protocols';
import { createRedis, RedisBackendSet, waitUntilReady } from '@kvroute/redis-store';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { SimConfig } from '@kvroute/vllm-sim/config';
import { openTestEnv, startSim, stateOf, waitForValue, type TestEnv, type TestSim } from './poller-test-kit';

/**
 * One poller replica against simulated backends on one Redis of this file's own: what it publishes is
 * what the backend's own `/sim/state` says, in each of vllm-sim's metrics dialects (vLLM V1, vLLM V0,
 * SGLang, llama.cpp), health follows the hysteresis, and the shared backend set is followed.
 */
const INTERVAL_MS = 300;
const TIMEOUT_MS = 200;
/** "Within one interval": a new figure at the backend is published by the next scrape, which may take up to its timeout. */
const WITHIN_ONE_INTERVAL_MS = INTERVAL_MS + TIMEOUT_MS;
const POLLER = {
  intervalMs: INTERVAL_MS,
  scrapeTimeoutMs: TIMEOUT_MS,
  jobLockMs: 2000,
  stalledCheckMs: 2000,
  reconcileMs: 1000,
  backendSetPollMs: 200,
};

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
  readonly preemptions: number;
}

async function simState(sim: TestSim): Promise<SimTruth> {
  return (await (await fetch(`${sim.url}/sim/state`)).json()) as SimTruth;
}

/** The load figures a poller must publish for a given truth of the sim. */
interface ExpectedLoad {
  readonly running: number;
  readonly waiting: number;
  /** null: the dialect does not expose it, so the poller must say "unknown", never 0. */
  readonly kvUsage: number | null;
  readonly preemptionsTotal: number | null;
}

interface DialectCase {
  readonly dialect: SimConfig['metricsDialect'];
  /** What the poller must detect from `/metrics` alone (no engine configured). */
  readonly engine: BackendState['engine'];
  readonly sim: Partial<SimConfig>;
  /** KV capacity in tokens as the sim's config implies it through what this dialect exposes. */
  readonly kvCapacityTokens: number;
  readonly expected: (truth: SimTruth) => ExpectedLoad;
  /** Prefix-cache hit rate published while idle (no request seen yet). */
  readonly idleHitRate: number | null;
  /** Whether the poller must read `GET /slots` at every scrape. */
  readonly readsSlots: boolean;
}

// Slow simulated time (50× slower than wall time) and a small KV cache: of 6 requests at most 3 run, the
// others wait for blocks, and each figure holds still for about a second (one engine step), so a scrape
// and /sim/state read around it agree.
const NUM_GPU_BLOCKS = 64;
const MAX_MODEL_LEN = 4096;
const SIM_LOAD: Partial<SimConfig> = {
  profile: 'a100-7b',
  timeScale: 0.02,
  numGpuBlocks: NUM_GPU_BLOCKS,
  maxModelLen: MAX_MODEL_LEN,
};
const BLOCK_SIZE = 16;
/** Requests sent, and how many of them fit in the 63 usable blocks at once (~300 prompt tokens each). */
const LOAD_REQUESTS = 6;
const KV_ADMITS = 3;
/** llama.cpp `--parallel`: fewer slots than the 3 sequences the KV cache admits, so slot semantics show. */
const LLAMACPP_SLOTS = 2;

const sameAsTruth = (truth: SimTruth): ExpectedLoad => ({
  running: truth.running,
  waiting: truth.waiting,
  kvUsage: truth.kv_cache_usage,
  preemptionsTotal: truth.preemptions,
});

const DIALECTS: readonly DialectCase[] = [
  {
    dialect: 'vllm',
    engine: 'vllm',
    sim: { metricsDialect: 'vllm' },
    // cache_config_info{engine="0"}: num_gpu_blocks × block_size. vLLM's num_gpu_blocks counts its
    // reserved null block, so this is one block more than kv_cache_usage_perc is a share of (63 blocks).
    kvCapacityTokens: NUM_GPU_BLOCKS * BLOCK_SIZE,
    expected: sameAsTruth,
    // V1 has counters only: no query in the interval → no rate.
    idleHitRate: null,
    readsSlots: false,
  },
  {
    dialect: 'vllm-v0',
    engine: 'vllm-v0',
    sim: { metricsDialect: 'vllm-v0' }, // and the V0 scheduler (the dialect's default engine version)
    kvCapacityTokens: NUM_GPU_BLOCKS * BLOCK_SIZE, // the single cache_config_info series (no engine label)
    // waiting = num_requests_waiting + num_requests_swapped; the sim never swaps (swapped stays 0).
    expected: sameAsTruth,
    // V0's own gauge (cumulative block hit rate), which V0 prints as 0 before any lookup.
    idleHitRate: 0,
    readsSlots: false,
  },
  {
    dialect: 'sglang',
    engine: 'sglang',
    sim: { metricsDialect: 'sglang' },
    // max_total_num_tokens: SGLang's pool has no null block, so the sim prints its 63 usable blocks.
    kvCapacityTokens: (NUM_GPU_BLOCKS - 1) * BLOCK_SIZE,
    // num_queue_reqs is SGLang's waiting queue (requests not scheduled yet, retracted ones put back), the
    // same set the sim counts as waiting; usage = num_used_tokens / max_total_num_tokens, evictable cached
    // tokens counted as free on both sides (not the 2-decimal token_usage gauge). This SGLang prints no
    // retraction histogram (older SGLang has no preemption counter at all): preemptions unknown.
    expected: (truth) => ({ ...sameAsTruth(truth), preemptionsTotal: null }),
    // The prompt/cached token counters move when a request finishes: none has, so no rate.
    idleHitRate: null,
    readsSlots: false,
  },
  {
    dialect: 'llamacpp',
    engine: 'llamacpp',
    sim: { metricsDialect: 'llamacpp', slots: LLAMACPP_SLOTS },
    // Σ n_ctx of GET /slots; the sim gives every slot max_model_len. (That is the context llama.cpp
    // would offer, not the sim's shared 64-block pool, which this dialect cannot show.)
    kvCapacityTokens: LLAMACPP_SLOTS * MAX_MODEL_LEN,
    // llama.cpp counts slots, not sequences: requests_processing = busy slots = min(running, slots); a
    // sequence the sim's engine runs beyond the slots is deferred in llama.cpp (requests_deferred =
    // waiting + that overflow). So with 3 sequences running, llama.cpp says 2 processing, 1 more deferred.
    // A build after ggml-org/llama.cpp#13660 has no KV gauges and /slots no token counts, so KV usage is
    // unknown; llama.cpp has no preemption counter either.
    expected: (truth) => {
      const processing = Math.min(truth.running, LLAMACPP_SLOTS);
      return {
        running: processing,
        waiting: truth.waiting + truth.running - processing,
        kvUsage: null,
        preemptionsTotal: null,
      };
    },
    idleHitRate: null,
    readsSlots: true,
  },
];

/** The published state shows exactly the expected load figures. */
function shows(state: BackendState | null, expected: ExpectedLoad): boolean {
  if (state === null || state.running !== expected.running || state.waiting !== expected.waiting) return false;
  if (expected.kvUsage === null) return state.kvUsage === null;
  return state.kvUsage !== null && Math.abs(state.kvUsage - expected.kvUsage) < 1e-9;
}

function sendLoad(sim: TestSim, signal: AbortSignal): void {
  for (let i = 0; i < LOAD_REQUESTS; i += 1) {
    const prompt = `request ${i}: ${'lorem ipsum dolor sit amet '.repeat(50)}`;
    void fetch(`${sim.url}/v1/completions`, {
      method: 'POST',
      signal,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test-model', prompt, max_tokens: 200, stream: true }),
    })
      .then((response) => response.text())
      .catch(() => undefined);
  }
}

interface Sample {
  readonly atMs: number;
  readonly truth: SimTruth;
  readonly state: BackendState | null;
}

/** One stretch of samples over which the sim's running, waiting and KV usage did not move. */
interface Segment {
  readonly truth: SimTruth;
  readonly fromMs: number;
  readonly untilMs: number;
  /** ms from the first sample showing this truth to the first sample whose published state shows it; null = never within the stretch. */
  readonly publishedAfterMs: number | null;
}

function segmentsOf(samples: readonly Sample[], expected: DialectCase['expected']): Segment[] {
  const segments: Segment[] = [];
  const key = (truth: SimTruth) => `${truth.running}/${truth.waiting}/${truth.kv_cache_usage}`;
  for (let start = 0; start < samples.length; ) {
    const first = samples[start] as Sample;
    let end = start;
    while (end + 1 < samples.length && key((samples[end + 1] as Sample).truth) === key(first.truth)) end += 1;
    const want = expected(first.truth);
    const match = samples.slice(start, end + 1).find((sample) => shows(sample.state, want));
    const next = samples[end + 1];
    segments.push({
      truth: first.truth,
      fromMs: first.atMs,
      untilMs: next?.atMs ?? (samples[end] as Sample).atMs,
      publishedAfterMs: match === undefined ? null : match.atMs - first.atMs,
    });
    start = end + 1;
  }
  return segments;
}

describe('health poller: published state', () => {
  describe.each(DIALECTS)('against vllm-sim --metrics-dialect $dialect', (dialectCase) => {
    it('publishes the engine, KV capacity, and running, waiting and KV usage as /sim/state has them, within one interval', async () => {
      const sim = await startSim({ ...SIM_LOAD, ...dialectCase.sim });
      const slotsReads: number[] = [];
      sim.sim.app.server.on('request', (request: { url?: string }) => {
        if (request.url === '/slots') slotsReads.push(Date.now());
      });
      const load = new AbortController();
      try {
        // No engine configured: the poller tells it from /metrics (and for llama.cpp reads /slots at once).
        await env.startPoller({ ...POLLER, backends: [sim.url] });
        const idle = await waitForValue(stateOf(env, sim.id), (state) => state !== null);
        const idleTruth = await simState(sim);
        const idleLoad = dialectCase.expected(idleTruth);
        expect(idle.value).toMatchObject({
          backendId: sim.id,
          engine: dialectCase.engine,
          healthy: true,
          failure: null,
          running: 0,
          waiting: 0,
          kvUsage: idleLoad.kvUsage === null ? null : 0,
          kvCapacityTokens: dialectCase.kvCapacityTokens,
          preemptionsTotal: idleLoad.preemptionsTotal,
          prefixCacheHitRate: dialectCase.idleHitRate,
        });

        // Sample the truth and the published state together while the load arrives (the engine admits the
        // requests over one or two steps, so running, waiting and KV usage move more than once), until the
        // KV cache is the limit (3 running, 3 waiting) and the published state shows that too.
        sendLoad(sim, load.signal);
        const samples: Sample[] = [];
        const deadline = Date.now() + 8000;
        for (;;) {
          const truth = await simState(sim);
          const state = await env.store.read(sim.id);
          samples.push({ atMs: Date.now(), truth, state });
          const loaded = truth.running === KV_ADMITS && truth.waiting === LOAD_REQUESTS - KV_ADMITS;
          if (loaded && shows(state, dialectCase.expected(truth))) break;
          if (Date.now() > deadline)
            throw new Error(
              `the published state never showed the loaded sim (last sample ${JSON.stringify(samples.at(-1))})`,
            );
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        // Every figure the sim held for at least one interval (plus a scrape) was published within that
        // time of its first appearance at /sim/state; shorter ones may legitimately fall between scrapes.
        const segments = segmentsOf(samples, dialectCase.expected);
        const checked = segments.filter(
          (segment) => segment.publishedAfterMs !== null || segment.untilMs - segment.fromMs >= WITHIN_ONE_INTERVAL_MS,
        );
        for (const segment of checked) {
          expect(
            segment.publishedAfterMs,
            `sim ${JSON.stringify(segment.truth)} held ${segment.untilMs - segment.fromMs} ms`,
          ).not.toBeNull();
          expect(segment.publishedAfterMs).toBeLessThanOrEqual(WITHIN_ONE_INTERVAL_MS);
        }
        // The load changed the figures: the idle ones and at least one loaded set were both checked.
        expect(checked.some((segment) => segment.truth.running === 0 && segment.truth.waiting === 0)).toBe(true);
        expect(checked.some((segment) => segment.truth.running > 0 && segment.truth.waiting > 0)).toBe(true);

        // Exact agreement: a scrape that started after /sim/state was read (t0) and ended before it was
        // read again (t1), while the sim's figures did not move, must have read those figures.
        let compared = 0;
        for (let attempt = 0; attempt < 8 && compared === 0; attempt += 1) {
          const t0 = Date.now();
          const before = await simState(sim);
          const published = await waitForValue(
            stateOf(env, sim.id),
            (state) => state !== null && state.scrapedAtMs - TIMEOUT_MS > t0,
            2 * INTERVAL_MS + TIMEOUT_MS,
          );
          const after = await simState(sim);
          if (
            before.running !== after.running ||
            before.waiting !== after.waiting ||
            before.kv_cache_usage !== after.kv_cache_usage ||
            before.preemptions !== after.preemptions
          )
            continue;
          const want = dialectCase.expected(after);
          expect(published.value).toMatchObject({
            engine: dialectCase.engine,
            healthy: true,
            failure: null,
            running: want.running,
            waiting: want.waiting,
            kvCapacityTokens: dialectCase.kvCapacityTokens,
            preemptionsTotal: want.preemptionsTotal,
          });
          if (want.kvUsage === null) expect(published.value?.kvUsage).toBeNull();
          else expect(published.value?.kvUsage).toBeCloseTo(want.kvUsage, 10);
          compared += 1;
        }
        expect(compared).toBe(1);

        // llama.cpp: /slots read along with /metrics at every scrape (the one in flight may not have
        // reached it yet); the other engines are never asked for it.
        if (dialectCase.readsSlots) {
          expect(slotsReads.length).toBeGreaterThan(0);
          expect(Math.abs(slotsReads.length - sim.metricsScrapes.length)).toBeLessThanOrEqual(1);
        } else expect(slotsReads).toEqual([]);

        const shown = checked.map(({ truth, publishedAfterMs }) => {
          const want = dialectCase.expected(truth);
          return (
            `${truth.running}/${truth.waiting} kv ${truth.kv_cache_usage.toFixed(3)} → ${want.running}/${want.waiting} ` +
            `kv ${want.kvUsage?.toFixed(3) ?? 'null'} after ${publishedAfterMs} ms`
          );
        });
        console.info(
          `[health-poller] ${dialectCase.dialect}: engine ${idle.value?.engine}, capacity ${idle.value?.kvCapacityTokens} ` +
            `tokens; sim running/waiting → published: ${shown.join('; ')}`,
        );
      } finally {
        load.abort();
        await sim.sim.close();
      }
    });
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
    const subscription = env.store.subscribe({
      subscriber,
      onState: (state) => published.push({ state, atMs: Date.now() }),
    });
    expect(await subscription.ready).toBe(true);
    try {
      const killedAtMs = Date.now();
      await sim.sim.close();
      const down = await waitForValue(stateOf(env, sim.id), (state) => state?.healthy === false, 5000);
      const downAfterMs = down.atMs - killedAtMs;
      // Not at the first failure (hysteresis), and by the N-th interval after the kill (+ slack for a scrape).
      expect(down.value).toMatchObject({
        consecutiveFailures: failuresToUnhealthy,
        failure: 'connect',
        running: null,
        kvUsage: null,
      });
      expect(downAfterMs).toBeGreaterThan((failuresToUnhealthy - 1) * INTERVAL_MS);
      expect(downAfterMs).toBeLessThanOrEqual(failuresToUnhealthy * INTERVAL_MS + TIMEOUT_MS);
      const firstFailure = published.find((entry) => entry.state.failure !== null);
      expect(firstFailure?.state).toMatchObject({ healthy: true, consecutiveFailures: 1 });

      const restartedAtMs = Date.now();
      sim = await startSim({}, sim.port);
      const up = await waitForValue(stateOf(env, sim.id), (state) => state?.healthy === true, 5000);
      const upAfterMs = up.atMs - restartedAtMs;
      // Polled: a loaded host can pause this process past one interval, so the first healthy state read may
      // already count one more success. The exact hysteresis is checked on the published sequence below.
      expect(up.value).toMatchObject({ failure: null, running: 0 });
      expect(up.value?.consecutiveSuccesses).toBeGreaterThanOrEqual(successesToHealthy);
      expect(upAfterMs).toBeLessThanOrEqual(successesToHealthy * INTERVAL_MS + TIMEOUT_MS);
      // Every health change was announced on the changes channel, in order. The message comes on the
      // subscriber's own connection, so it can arrive just after the read above saw the state.
      await waitForValue(
        async () => published.at(-1)?.state.healthy,
        (healthy) => healthy === true,
        1000,
      );
      expect(
        published.map((entry) => entry.state.healthy).filter((healthy, i, all) => i === 0 || healthy !== all[i - 1]),
      ).toEqual([true, false, true]);
      const lastDown = published.findLastIndex((entry) => !entry.state.healthy);
      expect(published[lastDown + 1]?.state).toMatchObject({ healthy: true, consecutiveSuccesses: successesToHealthy });
      console.info(
        `[health-poller] unhealthy ${downAfterMs} ms after the kill, healthy ${upAfterMs} ms after ` +
          `the restart (interval ${INTERVAL_MS} ms, N=${failuresToUnhealthy}, M=${successesToHealthy})`,
      );
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
      await waitForValue(
        async () => poller.backends.map((backend) => backend.id),
        (ids) => !ids.includes(added.id),
        3000,
      );
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
      expect(text).toMatch(
        new RegExp(`kvroute_poller_scrapes_total\\{backend="${sim.id.replace(/\./g, '\\.')}"\\} [1-9]`),
      );
      expect(text).toContain('kvroute_poller_scrape_duration_seconds_count');
      expect(text).toContain('kvroute_poller_job_lag_seconds_count');
      expect(text).toMatch(/kvroute_poller_backends [1-9]/);
      const result = await poller.close();
      expect(result.ok).toBe(true);
      expect(result.closed).toEqual([
        'kv-events',
        'reconcile',
        'backend-set-watch',
        'worker',
        'queue',
        'http-server',
        'http-client',
        'kv-events-redis',
        'bullmq-redis',
        'redis-subscriber',
        'redis',
      ]);
    } finally {
      await sim.sim.close();
    }
  });
});
