import OpenAI from 'openai';
import type { BackendState } from '@kvroute/protocols';
import { createRedis, DEFAULT_KEY_NAMESPACE, waitUntilReady } from '@kvroute/redis-store';
import { createRouterServer, type RouterServer } from '@kvroute/router';
import { RouterConfig } from '@kvroute/router/config';
import type { PredictionCheck } from '@kvroute/routing';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { ScrapeJobResult } from '../src/scrape-job';
import { killSim, openTestEnv, startSim, stateOf, waitForValue, type TestEnv, type TestSim } from './poller-test-kit';

/** The router's admin token here (at least 16 characters; a test value, never a real one). */
const ADMIN_TOKEN = 'engine-restart-test-admin-token';

/**
 * Issue 13, engine restarts, end to end on loopback: a fresh Redis, 3 vllm-sim backends (vLLM V1
 * dialect: they print process_start_time_seconds), one health poller and one router (cacheaware, shared
 * state in Redis) under steady load from the official openai client: 6 clients, each request one of 6
 * long system prompts plus a short question of its own. Every backend's engine reports cached tokens,
 * so the router checks each prediction (`kvroute_router_prefix_predictions_total`).
 *
 * One backend holding at least two of the prompts is restarted on the same port (a new sim: empty
 * cache, a new start time, counters at zero) while the load goes on. One of its prompts (the probe)
 * gets no more traffic from then on, so the index's belief about it changes only by the restart: the
 * router must stop predicting a match for it on the restarted backend within 2 poll intervals (asked
 * of `/debug/route`), and the predictions it makes there afterwards must be right again (a prompt
 * never sent before takes the probe's place then, so that some traffic goes back to that backend).
 *
 * Two things that could also hide the probe's old entries are kept out, so that only the restart
 * handling can pass the test: learning from responses (an overprediction after the restart would teach
 * the router a short retention for that backend) and degraded mode (local state, which lacks what the
 * shared index holds: Redis calls get 1 s before they count as failed, on a busy machine; checked).
 */
const INTERVAL_MS = 300;
/**
 * Beyond 2 intervals: BullMQ's 0–10 ms timer jitter at hz 100, one scrape, its script and PUBLISH, the router's
 * subscriber and forget, a poll of /debug/route; and room for a busy event loop (everything runs in this process).
 */
const SLACK_MS = 300;
const BOUND_MS = 2 * INTERVAL_MS + SLACK_MS;
const POLLER = {
  intervalMs: INTERVAL_MS,
  scrapeTimeoutMs: 250,
  failuresToUnhealthy: 2,
  successesToHealthy: 2,
  jobLockMs: 2000,
  stalledCheckMs: 2000,
  reconcileMs: 1000,
  backendSetPollMs: 200,
};
/** A100/7B timing at half speed: a request (~700 prompt tokens, 4–8 output tokens) takes ~0.1–0.3 s. */
const SIM = { profile: 'a100-7b', timeScale: 0.5, metricsDialect: 'vllm' } as const;
const CLIENTS = 6;
const PROMPTS = 6;

/** ~2.9 kB of system prompt (11 routing blocks of 256 B), distinct per prompt from its first block on. */
function systemPrompt(prompt: number): string {
  const rules = Array.from({ length: 64 }, (_, rule) => `Rule ${rule} of desk ${prompt}: answer briefly.`);
  return `You are the help desk number ${prompt}. ${rules.join(' ')}`;
}

function messagesOf(prompt: number, question: string): OpenAI.Chat.ChatCompletionMessageParam[] {
  return [
    { role: 'system', content: systemPrompt(prompt) },
    { role: 'user', content: question },
  ];
}

interface Sample {
  readonly prompt: number;
  readonly startMs: number;
  readonly endMs: number;
  readonly backend: string | null;
}

interface Checked {
  readonly backend: string;
  readonly check: PredictionCheck;
  readonly atMs: number;
}

interface Explained {
  readonly decision: {
    readonly kind: string;
    readonly scores?: ReadonlyArray<{ readonly backendId: string; readonly matchBlocks: number }>;
  };
}

let env: TestEnv;
const sims: TestSim[] = [];
let router: RouterServer | undefined;

beforeAll(async () => {
  env = await openTestEnv();
  // Routers read the poller's states in the default namespace; this file's Redis is its own.
  env.beginTest('engine-restart', DEFAULT_KEY_NAMESPACE);
});
afterAll(async () => {
  // Its clients have stopped: nothing in flight, so no grace (a graceful close waits a second for quiet connections).
  await router?.close({ graceMs: 0 });
  await env.closePollers();
  await Promise.all(sims.map((sim) => sim.sim.close()));
  await env.close();
});

/** Token-weighted precision of a set of checked predictions (confirmed ÷ predicted tokens); null with nothing predicted. */
function precisionOf(checked: readonly Checked[]): number | null {
  const predicted = checked.reduce((total, entry) => total + entry.check.predictedTokens, 0);
  return predicted === 0 ? null : checked.reduce((total, entry) => total + entry.check.confirmedTokens, 0) / predicted;
}

/** Checked predictions of a hit (the router believed the backend held part of the prompt). */
const hits = (checked: readonly Checked[]): Checked[] => checked.filter((entry) => entry.check.predictedTokens > 0);

describe('engine restart', () => {
  // Timing bounds of a few hundred ms on a shared 2-core machine: a run where the event loop stalls past
  // a scrape timeout is tried again, once. A behaviour that is really wrong fails both.
  it('stops predicting hits on a restarted backend within 2 poll intervals under load, and its predictions are confirmed again after', {
    timeout: 60_000,
    retry: 1,
  }, async () => {
    // A retry starts from nothing: no router, poller or sim of the try before, an empty Redis.
    await router?.close({ graceMs: 0 });
    router = undefined;
    await env.closePollers();
    await Promise.all(sims.splice(0).map((sim) => sim.sim.close()));
    await env.client.flushall();
    for (let i = 0; i < 3; i++) sims.push(await startSim(SIM));
    // Every scrape job of the poller, for a failure's diagnosis (a busy machine delays jobs; one more than an interval late skips itself).
    const jobs: Array<{ backendId: string; atMs: number; result: ScrapeJobResult }> = [];
    await env.startPoller(
      { ...POLLER, backends: sims.map((sim) => sim.url) },
      { onJob: (backendId, result) => jobs.push({ backendId, atMs: Date.now(), result }) },
    );
    for (const sim of sims)
      await waitForValue(
        stateOf(env, sim.id),
        (state) => state?.healthy === true && state.engineStartedAtMs !== null,
        5000,
      );

    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: sims.map((sim) => sim.url),
        redisUrl: env.redis.url,
        // /debug/route lives on the admin listener, behind its token.
        debugRoutes: true,
        adminToken: ADMIN_TOKEN,
        adminHost: '127.0.0.1',
        adminPort: 0,
        learnFromResponses: false,
        redisTimeoutMs: 1_000,
        // The restart reaches the router by pub/sub, or by its periodic read of every state: at the poll interval
        // here (1 s by default), so the bound holds by either path. In one fresh-clone run (2026-12-07, both tries)
        // the router took the restart ~900 ms after its publication, at the default read, not from pub/sub; not
        // seen again in 5 runs of the file and of its set.
        engineStateRefreshMs: INTERVAL_MS,
        breakerFailureThreshold: 100_000,
        retryBackoffMs: 1,
        logLevel: 'silent',
      }),
      { logger: false },
    );
    const routerUrl = await router.listen();
    const adminUrl = router.adminUrl;
    if (adminUrl === null) throw new Error('the router started no admin listener');
    const explain = async (prompt: number): Promise<Explained> => {
      const response = await fetch(`${adminUrl}/debug/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` },
        body: JSON.stringify({
          model: 'test-model',
          messages: messagesOf(prompt, 'a probe: which desk is this?'),
          max_tokens: 4,
        }),
      });
      return (await response.json()) as Explained;
    };
    /** The leading blocks the router believes `backend` holds of `prompt`; null when the backend is not a candidate (unhealthy, say). */
    const matchOn = async (prompt: number, backend: string): Promise<number | null> =>
      (await explain(prompt)).decision.scores?.find((score) => score.backendId === backend)?.matchBlocks ?? null;

    // What the router checked of its predictions, and when it handled a restart.
    const checked: Checked[] = [];
    const recordPrediction = router.metrics.recordPrediction.bind(router.metrics);
    vi.spyOn(router.metrics, 'recordPrediction').mockImplementation((backend, check) => {
      checked.push({ backend, check, atMs: Date.now() });
      recordPrediction(backend, check);
    });
    const handled: Array<{ backend: string; atMs: number }> = [];
    const recordBackendRestart = router.metrics.recordBackendRestart.bind(router.metrics);
    vi.spyOn(router.metrics, 'recordBackendRestart').mockImplementation((backend) => {
      handled.push({ backend, atMs: Date.now() });
      recordBackendRestart(backend);
    });

    // The published states, as the router's subscription gets them.
    const subscriber = createRedis(env.redis.url, 'worker');
    await waitUntilReady(subscriber);
    const published: Array<{ state: BackendState; atMs: number }> = [];
    const subscription = env.store.subscribe({
      subscriber,
      onState: (state) => published.push({ state, atMs: Date.now() }),
    });
    expect(await subscription.ready).toBe(true);

    const openai = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 10_000 });
    const samples: Sample[] = [];
    const failures: string[] = [];
    /** Prompts the clients send; the probe leaves it at the restart. */
    const active = new Set(Array.from({ length: PROMPTS }, (_, prompt) => prompt));
    let loadRunning = true;
    const clients = Array.from({ length: CLIENTS }, async (_, client) => {
      for (let i = 0; loadRunning; i++) {
        const choices = [...active];
        const prompt = choices[(client + i) % choices.length] ?? 0;
        const startMs = Date.now();
        try {
          const { data, response } = await openai.chat.completions
            .create({
              model: 'test-model',
              messages: messagesOf(prompt, `client ${client} question ${i}: name a colour.`),
              max_tokens: 4 + ((client + i) % 5),
            })
            .withResponse();
          if (!data.choices[0]?.message.content) throw new Error('a completion without content');
          samples.push({ prompt, startMs, endMs: Date.now(), backend: response.headers.get('x-router-backend') });
        } catch (error) {
          failures.push(String(error));
        }
      }
    });

    let passed = false;
    let timeline = (): string => '';
    try {
      // Steady state: every prompt answered several times, and the router's hit predictions confirmed.
      await waitForValue(
        async () =>
          Array.from({ length: PROMPTS }, (_, prompt) => samples.filter((sample) => sample.prompt === prompt).length),
        (counts) =>
          counts.every((count) => count >= 4) &&
          hits(checked).filter((entry) => entry.check.outcome === 'confirmed').length >= 10,
        15_000,
      );
      // Where the router believes each prompt lives (its deepest match), and the backend holding the most of them.
      const homeOf = new Map<number, string>();
      for (let prompt = 0; prompt < PROMPTS; prompt++) {
        const scores = (await explain(prompt)).decision.scores ?? [];
        const deepest = [...scores].sort((a, b) => b.matchBlocks - a.matchBlocks)[0];
        if (deepest !== undefined && deepest.matchBlocks > 0) homeOf.set(prompt, deepest.backendId);
      }
      const promptsOn = (backend: string): number[] =>
        [...homeOf].filter(([, home]) => home === backend).map(([prompt]) => prompt);
      const victim = [...sims].sort((a, b) => promptsOn(b.id).length - promptsOn(a.id).length)[0];
      if (victim === undefined) throw new Error('no backend');
      const [probe, ...othersOnVictim] = promptsOn(victim.id);
      if (probe === undefined) throw new Error(`no prompt lives on ${victim.id}: ${JSON.stringify([...homeOf])}`);
      expect(othersOnVictim.length).toBeGreaterThan(0); // 6 prompts on 3 backends: one holds at least 2
      active.delete(probe);
      const matchBefore = await matchOn(probe, victim.id);
      expect(matchBefore).toBeGreaterThan(5);
      const victimHitsBefore = hits(checked).filter((entry) => entry.backend === victim.id);
      const precisionBefore = precisionOf(victimHitsBefore);

      // Restart the victim on the same port under load: a new engine, empty cache, counters at zero.
      const restartAtMs = Date.now();
      timeline = () =>
        jobs
          .filter((job) => job.backendId === victim.id && job.atMs >= restartAtMs - INTERVAL_MS)
          .map((job) => `${job.atMs - restartAtMs}: ${describeJob(job.result, restartAtMs)}`)
          .join('; ');
      await killSim(victim);
      sims.splice(sims.indexOf(victim), 1);
      const restarted = await startSim(SIM, victim.port);
      sims.push(restarted);
      const upAtMs = Date.now();
      const matchRightAfter = await matchOn(probe, victim.id);

      // Within 2 intervals of the new engine's start: the router no longer predicts the probe there.
      const forgotten = await waitForValue(
        () => matchOn(probe, victim.id),
        (match) => match === 0,
        5000,
      );
      const forgottenAfterMs = forgotten.atMs - upAtMs;
      // A prompt no backend has seen, from now on in the probe's place. The victim's other prompts may all live
      // elsewhere by now: a request of theirs in flight at the kill is retried on another backend, which holds the
      // prompt from then on, and no queue of 6 clients costs more than the prefill a held prompt saves, so none
      // of them need come back to the victim, which then makes no prediction to check (the wait below failed so,
      // with 0 and 4 confirmed). A new prompt goes where it starts soonest, the restarted backend that lost its
      // traffic, and stays: there the router must learn the new engine's cache and predict it right. The old
      // prompts go on, and any prediction from what the forget should have hidden still counts against it.
      const fresh = PROMPTS;
      active.add(fresh);
      const handledAt = (
        await waitForValue(
          async () => handled.find((entry) => entry.backend === victim.id),
          (entry) => entry !== undefined,
          5000,
        )
      ).value;
      const restartPublished = published.find(
        (entry) =>
          entry.state.backendId === victim.id &&
          entry.state.restartedAtMs !== null &&
          entry.state.restartedAtMs >= restartAtMs,
      );

      // Afterwards the router learns the new engine's cache from the traffic, and what it predicts
      // there is confirmed again. Requests decided before the forget can still end after it: they are
      // left out (the longest request so far bounds how long they run).
      const longestMs = Math.max(...samples.map((sample) => sample.endMs - sample.startMs));
      const settledAtMs = (handledAt?.atMs ?? forgotten.atMs) + longestMs + 100;
      const afterForget = (): Checked[] =>
        hits(checked).filter((entry) => entry.backend === victim.id && entry.atMs > settledAtMs);
      await waitForValue(
        async () => afterForget().filter((entry) => entry.check.outcome === 'confirmed').length,
        (confirmed) => confirmed >= 5,
        15_000,
      ).catch((error: Error) => {
        const served = samples.filter((sample) => sample.backend === victim.id && sample.startMs > forgotten.atMs);
        throw new Error(
          `${error.message}: since the forget the victim served prompts ${JSON.stringify(served.map((sample) => sample.prompt))}; ` +
            `the new prompt ${fresh} went to ${JSON.stringify(samples.filter((sample) => sample.prompt === fresh).map((sample) => sample.backend))}`,
        );
      });
      loadRunning = false;
      await Promise.all(clients);

      const matchAtEnd = await matchOn(probe, victim.id);
      const victimHitsAfter = afterForget();
      const precisionAfter = precisionOf(victimHitsAfter);
      const staleWindow = hits(checked).filter(
        (entry) => entry.backend === victim.id && entry.atMs >= restartAtMs && entry.atMs <= settledAtMs,
      );
      const metricValues = async (name: string) =>
        (await router?.metrics.registry.getSingleMetric(name)?.get())?.values ?? [];
      const restartsMetric = await metricValues('kvroute_router_backend_restarts_total');
      const degradedTransitions = (await metricValues('kvroute_router_state_degraded_transitions_total')).reduce(
        (total, value) => total + value.value,
        0,
      );
      const count = (entries: readonly Checked[], outcome: string): number =>
        entries.filter((entry) => entry.check.outcome === outcome).length;
      const since = (atMs: number | undefined): number => (atMs ?? Number.NaN) - upAtMs;
      console.info(
        `[engine-restart] interval ${INTERVAL_MS} ms, ${CLIENTS} clients, ${samples.length} requests ` +
          `(${failures.length} failed): victim ${victim.id} held prompts ${[probe, ...othersOnVictim].join(', ')}; ` +
          `restart took ${upAtMs - restartAtMs} ms; probe match ${matchBefore} blocks before, ${matchRightAfter} ` +
          `right after the restart, 0 at ${forgottenAfterMs} ms after the new engine was up ` +
          `(restart published at ${since(restartPublished?.atMs)} ms, handled by the router at ${since(handledAt?.atMs)} ms); ` +
          `victim hit predictions: before ${victimHitsBefore.length} (precision ${precisionBefore?.toFixed(3)}), ` +
          `between the restart and the forget ${staleWindow.length} (${count(staleWindow, 'overpredicted')} overpredicted), ` +
          `after ${victimHitsAfter.length} (${count(victimHitsAfter, 'confirmed')} confirmed, precision ` +
          `${precisionAfter?.toFixed(3)}); probe match at the end ${matchAtEnd}; ` +
          `${degradedTransitions} degraded transitions`,
      );

      expect(failures).toEqual([]);
      expect(degradedTransitions).toBe(0);
      expect(restartPublished?.state).toMatchObject({ healthy: true });
      expect(restartPublished?.state.engineStartedAtMs).toBeGreaterThanOrEqual(restartAtMs);
      expect(since(handledAt?.atMs)).toBeLessThanOrEqual(BOUND_MS);
      expect(forgottenAfterMs).toBeLessThanOrEqual(BOUND_MS);
      // Still forgotten (nothing sent it there since), while the backend's new entries count.
      expect(matchAtEnd).toBe(0);
      expect(precisionAfter).toBeGreaterThanOrEqual(0.9);
      expect(victimHitsAfter.filter((entry) => entry.check.outcome === 'overpredicted')).toEqual([]);
      // Each replica handles a published restart once, however many states carry it.
      expect(handled.filter((entry) => entry.backend === victim.id)).toHaveLength(1);
      expect(restartsMetric.map((value) => [value.labels.backend, value.value])).toEqual([[victim.id, 1]]);
      passed = true;
    } finally {
      if (!passed) console.info(`[engine-restart] scrape jobs of the victim, ms from the restart: ${timeline()}`);
      loadRunning = false;
      await Promise.all(clients);
      await subscription.stop();
      subscriber.disconnect();
    }
  });
});

/** One scrape job of the failure timeline: stale, or its failure (ok) and whether it saw the restart. */
function describeJob(result: ScrapeJobResult, restartAtMs: number): string {
  if (result.kind === 'stale') return `stale (${result.lagMs} ms late)`;
  const restarted = result.state.restartedAtMs !== null && result.state.restartedAtMs >= restartAtMs;
  return `${result.state.failure ?? 'ok'}${restarted ? ' restart' : ''}`;
}
