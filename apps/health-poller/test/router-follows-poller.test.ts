import { monitorEventLoopDelay } from 'node:perf_hooks';
import OpenAI from 'openai';
import type { BackendState } from '@kvroute/protocols';
import { createRedis, DEFAULT_KEY_NAMESPACE, waitUntilReady } from '@kvroute/redis-store';
import { createRouterServer, type RouterServer } from '@kvroute/router';
import { RouterConfig } from '@kvroute/router/config';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { ScrapeJobResult } from '../src/scrape-job';
import {
  killSim as kill,
  openTestEnv,
  startSim,
  stateOf,
  waitForValue,
  type TestEnv,
  type TestSim,
} from './poller-test-kit';

/**
 * Issue 5, acceptance 3, end to end on loopback: a fresh Redis, 3 vllm-sim backends, one health poller
 * and one router following the poller's published states, under steady load from the official openai
 * client (no client retries). A backend killed under load stops getting new requests within N intervals
 * (the poller marks it unhealthy, the router stops choosing it) and no client request fails meanwhile
 * (the router's retries cover the gap); restarted on the same port, it gets traffic again within M
 * intervals. The router's circuit breaker is set so that it would never open here: the poller is what
 * takes the backend out and puts it back.
 */
const INTERVAL_MS = 300;
const FAILURES_TO_UNHEALTHY = 2; // N
const SUCCESSES_TO_HEALTHY = 2; // M
/**
 * Allowed beyond N (or M) intervals: BullMQ starts each delayed job 0–100 ms after its planned time
 * (Redis checks timers `hz` = 10 times a second), then come one scrape, one script with its PUBLISH,
 * the router's subscriber, and the next request the clients send; plus room for a busy event loop:
 * clients, router, backends and poller all run in this one process, on a machine that may be busy too.
 */
const SLACK_MS = 100 + 200;
const POLLER = {
  intervalMs: INTERVAL_MS,
  scrapeTimeoutMs: 250,
  failuresToUnhealthy: FAILURES_TO_UNHEALTHY,
  successesToHealthy: SUCCESSES_TO_HEALTHY,
  jobLockMs: 2000,
  stalledCheckMs: 2000,
  reconcileMs: 1000,
  backendSetPollMs: 200,
};
/**
 * A100/7B timing at 0.2× speed: a request of 4–12 output tokens takes ~0.5 s, quick but not instant, and
 * 20 clients send ~40 requests a second. Clients, router and backends cost ~6 ms of CPU a request, all
 * on the event loop the poller's timers share: at ~70 requests a second on a busy 2-core machine (load
 * average 6), scrape jobs often started more than an interval late and skipped themselves; at ~40 they
 * rarely do. Slower (~20 a second) is no better: the wait for the next request after a restart grows.
 */
const SIM = { profile: 'a100-7b', timeScale: 0.2 } as const;
const CLIENTS = 20;
/** Far above the failed tries a killed backend gets here: the breaker alone would never take it out. */
const BREAKER_FAILURE_THRESHOLD = 100_000;

interface Sample {
  readonly client: number;
  readonly startMs: number;
  readonly endMs: number;
  readonly status: number;
  readonly backend: string | null;
}

interface FailedTry {
  readonly backend: string;
  readonly cause: string;
  readonly atMs: number;
}

let env: TestEnv;
const sims: TestSim[] = [];
let router: RouterServer | undefined;

beforeAll(async () => {
  env = await openTestEnv();
  // Routers read the poller's states in the default namespace (they take no other): the poller writes there.
  // This file's Redis is its own, so nothing else shares it.
  env.beginTest('router-follows-poller', DEFAULT_KEY_NAMESPACE);
});
afterAll(async () => {
  // Its clients have stopped: nothing in flight, so no grace (a graceful close waits a second for quiet connections).
  await router?.close({ graceMs: 0 });
  await env.closePollers();
  await Promise.all(sims.map((sim) => sim.sim.close()));
  await env.close();
});

/** Times at which the sim received a chat completion (a request the router sent it). */
function recordArrivals(sim: TestSim): number[] {
  const arrivals: number[] = [];
  sim.sim.app.server.on('request', (request: { url?: string }) => {
    if (request.url === '/v1/chat/completions') arrivals.push(Date.now());
  });
  return arrivals;
}

/**
 * 4–12 output tokens (8 on average), varied per request: requests of one length started together end
 * together, and clients would fall into waves, leaving gaps of a whole request with nothing sent.
 */
const maxTokens = (client: number, request: number): number => 4 + ((client * 7 + request * 5) % 9);

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('router follows the health poller', () => {
  // Timing bounds of a few hundred ms on a shared 2-core machine: a run where the event loop stalls past
  // a scrape timeout (seen at load average 6–8, 2 of 8 runs) is tried again, up to twice. A behaviour
  // that is really wrong fails all three.
  it('stops sending to a backend killed under load within N intervals with no client error, and sends to it again within M intervals of its restart', {
    timeout: 30_000,
    retry: 2,
  }, async () => {
    // A retry starts from nothing: no router, poller or sim of the try before (its sims would be taken for this
    // try's, its victim's restarted sim among them), an empty Redis.
    await router?.close({ graceMs: 0 });
    router = undefined;
    await env.closePollers();
    await Promise.all(sims.splice(0).map((sim) => sim.sim.close()));
    await env.client.flushall();
    for (let i = 0; i < 3; i++) sims.push(await startSim(SIM));
    const [first, victim, third] = sims as [TestSim, TestSim, TestSim];
    // Every scrape job of the poller: when it ended, and whether it scraped or skipped itself as stale.
    const jobs: Array<{ backendId: string; atMs: number; result: ScrapeJobResult }> = [];
    await env.startPoller(
      { ...POLLER, backends: sims.map((sim) => sim.url) },
      { onJob: (backendId, result) => jobs.push({ backendId, atMs: Date.now(), result }) },
    );
    for (const sim of sims) await waitForValue(stateOf(env, sim.id), (state) => state?.healthy === true, 5000);

    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: sims.map((sim) => sim.url),
        redisUrl: env.redis.url,
        breakerFailureThreshold: BREAKER_FAILURE_THRESHOLD,
        breakerCooldownMs: 1000,
        retryBackoffMs: 1,
        logLevel: 'silent',
      }),
      { logger: false },
    );
    const routerUrl = await router.listen();
    const victimBreaker = router.registry.get(victim.id)?.breaker;
    expect(victimBreaker).toBeDefined();

    // Every failed try the router makes (a connect error, a reset, a retryable status), when it happened.
    const failedTries: FailedTry[] = [];
    const recordRetry = router.metrics.recordRetry.bind(router.metrics);
    vi.spyOn(router.metrics, 'recordRetry').mockImplementation((backend, cause) => {
      failedTries.push({ backend, cause, atMs: Date.now() });
      recordRetry(backend, cause);
    });

    // The victim's published states, as the router's subscription gets them.
    const subscriber = createRedis(env.redis.url, 'worker');
    await waitUntilReady(subscriber);
    const published: Array<{ state: BackendState; atMs: number }> = [];
    const subscription = env.store.subscribe({
      subscriber,
      onState: (state) => state.backendId === victim.id && published.push({ state, atMs: Date.now() }),
    });
    expect(await subscription.ready).toBe(true);

    const lag = monitorEventLoopDelay({ resolution: 10 });
    lag.enable();
    const openai = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 10_000 });
    const samples: Sample[] = [];
    const failures: Array<{ client: number; startMs: number; error: string }> = [];
    let loadRunning = true;
    const clients = Array.from({ length: CLIENTS }, async (_, client) => {
      for (let i = 0; loadRunning; i++) {
        const startMs = Date.now();
        try {
          const { data, response } = await openai.chat.completions
            .create({
              model: 'test-model',
              messages: [{ role: 'user', content: `client ${client} request ${i}: name a colour.` }],
              max_tokens: maxTokens(client, i),
            })
            .withResponse();
          if (!data.choices[0]?.message.content) throw new Error('a completion without content');
          samples.push({
            client,
            startMs,
            endMs: Date.now(),
            status: response.status,
            backend: response.headers.get('x-router-backend'),
          });
        } catch (error) {
          failures.push({ client, startMs, error: String(error) });
        }
      }
    });

    let passed = false;
    const marks: { kill?: number; restart?: number } = {};
    try {
      // Steady state: every backend serves.
      await waitForValue(
        async () => new Set(samples.map((sample) => sample.backend)),
        (seen) => sims.every((sim) => seen.has(sim.id)),
        5000,
      );
      await sleep(1000);

      // Kill the victim under load.
      const killedAtMs = Date.now();
      marks.kill = killedAtMs;
      await kill(victim);
      sims.splice(sims.indexOf(victim), 1);
      const down = await waitForValue(
        async () => published.find((entry) => entry.atMs >= killedAtMs && !entry.state.healthy) ?? null,
        (entry) => entry !== null,
        5000,
      );
      const unhealthyAfterMs = (down.value?.atMs ?? Infinity) - killedAtMs;
      // The router keeps routing around it; 5 more intervals show that nothing goes there any more.
      await sleep(5 * INTERVAL_MS);
      const victimBreakerState = victimBreaker?.state;
      const downWindowEndMs = Date.now();

      // Restart it on the same port (same backend id).
      const restartedAtMs = Date.now();
      marks.restart = restartedAtMs;
      const restarted = await startSim(SIM, victim.port);
      sims.push(restarted);
      const arrivals = recordArrivals(restarted);
      const back = await waitForValue(
        async () => arrivals[0] ?? null,
        (atMs) => atMs !== null,
        5000,
      );
      const trafficBackAfterMs = (back.value ?? Infinity) - restartedAtMs;
      const up = await waitForValue(
        async () => published.find((entry) => entry.atMs >= restartedAtMs && entry.state.healthy) ?? null,
        (entry) => entry !== null,
        5000,
      );
      const healthyAfterMs = (up.value?.atMs ?? Infinity) - restartedAtMs;
      // Until a request sent there after the restart has been served (arrived is not answered yet).
      const servedAfterRestart = (
        await waitForValue(
          async () =>
            samples.filter((sample) => sample.backend === victim.id && sample.startMs >= restartedAtMs).length,
          (served) => served > 0,
          5000,
        )
      ).value;
      const backWindowMs = Date.now() - (back.value ?? 0);

      loadRunning = false;
      await Promise.all(clients);
      lag.disable();

      // (a) Every client request succeeded, throughout.
      expect(failures).toEqual([]);
      expect(samples.every((sample) => sample.status === 200)).toBe(true);

      // (b) The poller marked the victim unhealthy within N intervals of the kill; the router's last try
      // there came within the same bound, and its breaker never opened. The hysteresis itself (after N
      // failures, not 1) is published-state.test.ts's: here a busy machine can delay scrape jobs past an
      // interval, they skip themselves, and a state left unscraped for its TTL starts again from its next
      // probe. The failure is a refused connection, or a timeout when a stalled event loop runs the
      // scrape's deadline before the refusal.
      expect(down.value?.state.healthy).toBe(false);
      expect(['connect', 'timeout']).toContain(down.value?.state.failure);
      expect(unhealthyAfterMs).toBeLessThanOrEqual(FAILURES_TO_UNHEALTHY * INTERVAL_MS + SLACK_MS);
      const triesAtVictim = failedTries.filter((entry) => entry.backend === victim.id && entry.atMs >= killedAtMs);
      expect(triesAtVictim.length).toBeGreaterThan(0); // the kill happened under load: retries did cover a gap
      const lastTryAfterMs = Math.max(...triesAtVictim.map((entry) => entry.atMs)) - killedAtMs;
      expect(lastTryAfterMs).toBeLessThanOrEqual(FAILURES_TO_UNHEALTHY * INTERVAL_MS + SLACK_MS);
      // None once the router had the unhealthy state (it gets the same message as this test, give or take an event loop turn).
      expect(triesAtVictim.filter((entry) => entry.atMs > (down.value?.atMs ?? 0) + 100)).toEqual([]);
      // No response from the victim for a request sent after that bound, until its restart.
      const lateFromVictim = samples.filter(
        (sample) =>
          sample.backend === victim.id &&
          sample.startMs > killedAtMs + FAILURES_TO_UNHEALTHY * INTERVAL_MS + SLACK_MS &&
          sample.startMs < restartedAtMs,
      );
      expect(lateFromVictim).toEqual([]);
      // Not the breaker: still closed after every failed try (fewer than its threshold), and no fail-open.
      expect(victimBreakerState).toBe('closed');
      expect(triesAtVictim.length).toBeLessThan(BREAKER_FAILURE_THRESHOLD);
      const failOpens =
        (await router.metrics.registry.getSingleMetric('kvroute_router_health_fail_open_total')?.get())?.values.reduce(
          (sum, value) => sum + value.value,
          0,
        ) ?? 0;
      expect(failOpens).toBe(0);
      // The others took the victim's share meanwhile.
      const duringDown = samples.filter((sample) => sample.startMs >= killedAtMs && sample.endMs <= downWindowEndMs);
      expect(new Set(duringDown.map((sample) => sample.backend))).toEqual(new Set([first.id, third.id]));

      // (c) Back within M intervals of the restart, and not before the poller said healthy (its breaker is closed: only the poller kept it out).
      expect(up.value?.state).toMatchObject({ healthy: true, failure: null });
      expect(healthyAfterMs).toBeLessThanOrEqual(SUCCESSES_TO_HEALTHY * INTERVAL_MS + SLACK_MS);
      expect(trafficBackAfterMs).toBeLessThanOrEqual(SUCCESSES_TO_HEALTHY * INTERVAL_MS + SLACK_MS);
      expect(back.value ?? 0).toBeGreaterThanOrEqual(up.value?.state.scrapedAtMs ?? Infinity);
      expect(servedAfterRestart).toBeGreaterThan(0);

      const retries = failedTries.length;
      const byCause = new Map<string, number>();
      for (const entry of triesAtVictim) byCause.set(entry.cause, (byCause.get(entry.cause) ?? 0) + 1);
      const causes = [...byCause].map(([cause, count]) => `${cause} ${count}`);
      const maxLagMs = Math.round(lag.max / 1e6);
      const latencies = samples.map((sample) => sample.endMs - sample.startMs).sort((a, b) => a - b);
      const percentile = (q: number): number =>
        latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
      console.info(
        `[router-follows-poller] interval ${INTERVAL_MS} ms, N=${FAILURES_TO_UNHEALTHY}, M=${SUCCESSES_TO_HEALTHY}, ${CLIENTS} clients: ` +
          `unhealthy published ${unhealthyAfterMs} ms after the kill (${down.value?.state.consecutiveFailures} ` +
          `failures, ${down.value?.state.failure}), last try at the killed backend ${lastTryAfterMs} ` +
          `ms after it ` +
          `(${triesAtVictim.length} failed tries there: ${causes.join(', ')}; breaker ${victimBreakerState}); ` +
          `healthy published ${healthyAfterMs} ms after the restart (${up.value?.state.consecutiveSuccesses} ` +
          `successes), traffic back ${trafficBackAfterMs} ms after it ` +
          `(${servedAfterRestart} requests served there in the next ${backWindowMs} ms); ` +
          `${samples.length} requests, all 200, ${failures.length} failed, ${retries} retries, latency ` +
          `p50 ${percentile(0.5)} ms p99 ${percentile(0.99)} ms; event loop lag p99 ${Math.round(lag.percentile(99) / 1e6)} ` +
          `ms, max ${maxLagMs} ms; ` +
          `${jobs.filter((job) => job.result.kind === 'stale').length} of ${jobs.length} scrape jobs skipped as stale`,
      );
      passed = true;
    } finally {
      if (!passed) {
        // What the poller did about the victim, for a failure's diagnosis (a busy machine delays jobs; one more than an interval late skips itself).
        const t0 = jobs[0]?.atMs ?? 0;
        const timeline = jobs
          .filter((job) => job.backendId === victim.id)
          .map((job) =>
            job.result.kind === 'stale'
              ? `${job.atMs - t0} stale (${job.result.lagMs} ms late)`
              : `${job.atMs - t0} ${job.result.state.healthy ? 'healthy' : 'unhealthy'} f${job.result.state.consecutiveFailures} ` +
                `s${job.result.state.consecutiveSuccesses}`,
          );
        const at = (ms: number | undefined): string => (ms === undefined ? '-' : String(ms - t0));
        console.info(
          `[router-follows-poller] scrape jobs of ${victim.id} (ms from the first job; killed at ${at(marks.kill)}, ` +
            `restarted at ${at(marks.restart)}): ${timeline.join('; ')}; event loop lag max ${Math.round(lag.max / 1e6)} ` +
            `ms`,
        );
      }
      loadRunning = false;
      await Promise.all(clients);
      lag.disable();
      await subscription.stop();
      subscriber.disconnect();
    }
  });
});
