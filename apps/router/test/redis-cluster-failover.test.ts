import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  createRedis,
  DEFAULT_KEY_NAMESPACE,
  poolHashTag,
  quitRedis,
  RedisBackendStateStore,
  waitUntilReady,
  type RedisClient,
} from '@kvroute/redis-store';
import { findFreePort, startRedisCluster, type TestRedisCluster } from '@kvroute/testing';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { waitFor } from './start-test-cluster';

/**
 * Issue 15, acceptance "a master killed mid-run: 0 failed requests, degraded ≤ 10 s, and scheduling
 * in the poller continues", with 2 models whose pools sit on different shards. A private Redis Cluster
 * (3 masters + 3 replicas of local redis-server), 4 vllm-sim backends in this process, 3 router
 * replicas in this process and 2 health pollers sharing the scrape schedule, each its own process
 * (`src/main.ts` of the poller: a router test may not import the poller app, whose tests import the
 * router), all on loopback. Under a
 * steady load from the official openai client (no client retries), alternating replicas and models,
 * the master holding the first model's pool is SIGKILLed; its replica takes over.
 *
 * The first model is chosen on the master that also holds `{poller}` (the poller's BullMQ queue) and
 * `{fleet}` (published backend states, backend set): with redis-cli's even split of the slots, those
 * tags share one third of them, so the one kill hits the routing state of a pool, the states routers
 * read and the poller's scheduling at once. The second model's pool is on another master, untouched.
 *
 * A sim serves one model name (apps/vllm-sim/src/config.ts: `model`), so two sims serve the first
 * model (its affinity is a real choice between two backends) and the third serves the second.
 */
/** Steady load before the kill: ~7 poll intervals and ~150 requests, the prefixes of both pools recorded. */
const KILL_AFTER_MS = 2_000;
/**
 * Load kept up once the pollers scrape again and every replica is back on the shared state: the requests routed
 * through the promoted master, all of which must succeed too.
 */
const LOAD_AFTER_RECOVERY_MS = 1_000;
const CLIENTS = 6;
/** A client's pause between requests: the `fast` sim answers at once, and the 2-core host must keep time for Redis and the poller. */
const THINK_MS = 20;
const DEGRADED_SAMPLE_MS = 100;
const MAX_DEGRADED_MS = 10_000;
const POLL_INTERVAL_MS = 300;
/** Candidate model names; their pools' slots are fixed (CRC16 of the name), the masters are read from the cluster. */
const CANDIDATE_MODELS = ['model-a', 'model-b', 'model-c', 'model-d', 'chat-a', 'chat-b'];
/** Enough text for several 16-token blocks: repeats of one prompt share a chain, which prefix affinity follows. */
const CONTEXT = 'a shared context long enough to span several kv blocks of the engine '.repeat(12);

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

interface Sample {
  readonly client: number;
  readonly replica: number;
  readonly model: string;
  readonly startMs: number;
  readonly endMs: number;
  readonly status: number;
  readonly backend: string | null;
  readonly reason: string | null;
}

interface TestSim {
  readonly sim: SimServer;
  readonly url: string;
  readonly id: string;
  readonly model: string;
  /** When the sim got `GET /metrics`: the poller's scrapes (routers never read it). */
  readonly scrapes: number[];
}

describe('router replicas and health pollers through a Redis Cluster master failover', () => {
  let cluster: TestRedisCluster;
  let models: [string, string];
  let sims: TestSim[] = [];
  let pollers: Array<{ child: ChildProcess; url: string; exited: Promise<unknown>; stderr: string[] }> = [];
  let routers: RouterServer[] = [];
  let urls: string[] = [];
  let client: RedisClient | undefined;

  beforeAll(async () => {
    cluster = await startRedisCluster({ logger: () => undefined });
    const queueMaster = cluster.masterOf(`${DEFAULT_KEY_NAMESPACE}:{poller}:scrapes`).port;
    const masterOfModel = (model: string): number => cluster.masterOf(`{${poolHashTag(model)}}`).port;
    const first = CANDIDATE_MODELS.find((model) => masterOfModel(model) === queueMaster);
    const second = CANDIDATE_MODELS.find((model) => masterOfModel(model) !== queueMaster);
    if (first === undefined || second === undefined)
      throw new Error(
        `no candidate model on the {poller} master and one off it: ${CANDIDATE_MODELS.map((m) => `${m}@${masterOfModel(m)}`).join(', ')}`,
      );
    models = [first, second];

    sims = await Promise.all(
      [first, first, second, second].map(async (model, index) => {
        const sim = await createSimServer(
          SimConfig.parse({ port: 0, profile: 'fast', model, seed: index, logLevel: 'silent' }),
        );
        const url = await sim.listen();
        const scrapes: number[] = [];
        // A second 'request' listener only watches; Fastify's own handler answers.
        sim.app.server.on('request', (request: { url?: string }) => {
          if (request.url === '/metrics') scrapes.push(Date.now());
        });
        return { sim, url, id: new URL(url).host, model, scrapes };
      }),
    );
    const backendUrls = sims.map((sim) => sim.url);

    // Two pollers, each in its own process, on the cluster URL, sharing one scrape schedule (states in the default namespace, which routers read).
    pollers = await Promise.all(
      [0, 1].map(async () => {
        const pollerPort = await findFreePort();
        const stderr: string[] = [];
        const child = spawn(
          process.execPath,
          [
            '--import',
            'tsx',
            join(import.meta.dirname, '../../health-poller/src/main.ts'),
            '--host',
            '127.0.0.1',
            '--port',
            String(pollerPort),
            '--redis-url',
            cluster.url,
            '--backends',
            backendUrls.join(','),
            '--interval-ms',
            String(POLL_INTERVAL_MS),
            '--scrape-timeout-ms',
            '250',
            '--job-lock-ms',
            '2000',
            '--stalled-check-ms',
            '2000',
            '--reconcile-ms',
            '1000',
            '--backend-set-poll-ms',
            '200',
            '--log-level',
            'warn',
          ],
          { stdio: ['ignore', 'ignore', 'pipe'], cwd: join(import.meta.dirname, '../../..') },
        );
        child.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
        return {
          child,
          url: `http://127.0.0.1:${pollerPort}`,
          exited: new Promise((resolve) => child.once('exit', resolve)),
          stderr,
        };
      }),
    );

    routers = await Promise.all(
      [0, 1, 2].map(() =>
        createRouterServer(
          // redisTimeoutMs as the other shared-state tests: a loaded test host must not flip a replica to local state.
          RouterConfig.parse({
            host: '127.0.0.1',
            port: 0,
            opsPort: 0,
            backends: backendUrls,
            redisUrl: cluster.url,
            redisTimeoutMs: 200,
            routingHeaders: 'all',
            retryBackoffMs: 1,
            logLevel: 'silent',
          }),
          { logger: false },
        ),
      ),
    );
    urls = await Promise.all(routers.map((router) => router.listen()));

    client = createRedis(cluster.url, 'worker');
    await waitUntilReady(client, 10_000);
    for (const poller of pollers) {
      await waitFor(async () => (await fetch(`${poller.url}/healthz`).catch(() => null))?.status === 200, 25_000).catch(
        () => {
          throw new Error(`a poller process did not become healthy: ${poller.stderr.join('').slice(-2_000)}`);
        },
      );
    }
    const store = new RedisBackendStateStore({ redis: client });
    await waitFor(
      async () => (await Promise.all(sims.map((sim) => store.read(sim.id)))).every((state) => state?.healthy === true),
      5_000,
    );
  }, 40_000);

  afterAll(async () => {
    // The load has stopped: nothing in flight, so no grace (a graceful close waits a second for quiet connections).
    await Promise.all(routers.map((router) => router.close({ graceMs: 0 })));
    await Promise.all(
      pollers.map(async (poller) => {
        poller.child.kill('SIGTERM');
        const exited = await Promise.race([poller.exited.then(() => true), sleep(5_000).then(() => false)]);
        if (!exited) {
          poller.child.kill('SIGKILL');
          await poller.exited;
        }
      }),
    );
    if (client) await quitRedis(client);
    await Promise.all(sims.map((sim) => sim.sim.close()));
    await cluster?.stop();
  }, 20_000);

  const degradedOf = async (router: RouterServer): Promise<number> => {
    const text = await router.metrics.registry.getSingleMetricAsString('kvroute_router_state_degraded');
    return Number(/^kvroute_router_state_degraded (\d)$/m.exec(text)?.[1]);
  };
  /** Whether every replica routes on the shared state (none degraded). */
  const allShared = async (): Promise<boolean> =>
    (await Promise.all(routers.map(degradedOf))).every((value) => value === 0);

  /** `kvroute_poller_scrapes_total` per backend, summed over the poller processes' /metrics (each scrape is one poller's job). */
  const pollerScrapes = async (): Promise<Map<string, number>> => {
    const counts = new Map<string, number>();
    for (const poller of pollers) {
      const text = await (await fetch(`${poller.url}/metrics`)).text();
      for (const match of text.matchAll(/^kvroute_poller_scrapes_total\{backend="([^"]+)"\} (\d+)$/gm))
        counts.set(match[1] as string, (counts.get(match[1] as string) ?? 0) + Number(match[2]));
    }
    return counts;
  };

  it('kills the master of the first pool under load: every request 200, degraded ≤ 10 s, the pollers keep scraping, affinity recovers', async () => {
    const [firstModel, secondModel] = models;
    const victim = cluster.masterOf(`{${poolHashTag(firstModel)}}`).port;
    const secondMaster = cluster.masterOf(`{${poolHashTag(secondModel)}}`).port;
    expect(secondMaster).not.toBe(victim);
    const openai = urls.map(
      (url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 10_000 }),
    );
    const chat = async (
      replica: number,
      model: string,
      content: string,
    ): Promise<{ status: number; backend: string | null; reason: string | null }> => {
      const { data, response } = await (openai[replica] as OpenAI).chat.completions
        .create({ model, messages: [{ role: 'user', content }], max_tokens: 2 })
        .withResponse();
      if (!data.choices[0]?.message.content) throw new Error('a completion without content');
      return {
        status: response.status,
        backend: response.headers.get('x-router-backend'),
        reason: response.headers.get('x-router-reason'),
      };
    };

    // The degraded gauge of both replicas (the value /metrics shows), every ~100 ms.
    const degradedSamples: Array<{ atMs: number; values: number[] }> = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        degradedSamples.push({ atMs: Date.now(), values: await Promise.all(routers.map(degradedOf)) });
        await sleep(DEGRADED_SAMPLE_MS);
      }
    })();

    // Steady load: each client sends one prompt through replicas A, B and C in turn (B and C then find what A
    // recorded), and moves through 6 prompts of its own, half on each model, round and round.
    const samples: Sample[] = [];
    const failures: Array<{ client: number; replica: number; model: string; atMs: number; error: string }> = [];
    const loadStartMs = Date.now();
    let loadRunning = true;
    const clients = Array.from({ length: CLIENTS }, async (_, clientIndex) => {
      for (let n = 0; loadRunning; n++) {
        const replica = n % 3;
        const prompt = Math.floor(n / 3) % 6;
        const model = prompt % 2 === clientIndex % 2 ? firstModel : secondModel;
        const startMs = Date.now();
        try {
          const result = await chat(replica, model, `client ${clientIndex} prompt ${prompt}: ${CONTEXT}`);
          samples.push({ client: clientIndex, replica, model, startMs, endMs: Date.now(), ...result });
        } catch (error) {
          failures.push({ client: clientIndex, replica, model, atMs: startMs, error: String(error) });
        }
        await sleep(THINK_MS);
      }
    });

    let killedAtMs = 0;
    let clusterOkAtMs = 0;
    let passed = false;
    try {
      await sleep(KILL_AFTER_MS);
      expect(degradedSamples.at(-1)?.values).toEqual([0, 0, 0]);
      killedAtMs = Date.now();
      await cluster.killNode(victim);
      await cluster.waitForClusterOk(20_000);
      clusterOkAtMs = Date.now();
      const promoted = cluster.masterOf(`{${poolHashTag(firstModel)}}`).port;
      expect(promoted).not.toBe(victim);
      expect(cluster.masterOf(`{${poolHashTag(secondModel)}}`).port).toBe(secondMaster);

      // Scheduling in the poller continues: every backend is scraped again, its state published anew, and the
      // poller's own scrape counter grows, after the failover.
      const countsAtOk = await pollerScrapes();
      const store = new RedisBackendStateStore({ redis: client as RedisClient });
      const pollerView = async (): Promise<string> => {
        const states = await Promise.all(
          sims.map((sim) => store.read(sim.id).catch((error: unknown) => String(error))),
        );
        const counts = await pollerScrapes().catch((error: unknown) => String(error));
        const scrapes = sims.map((sim) =>
          sim.scrapes
            .filter((atMs) => atMs > killedAtMs - 1_000)
            .map((atMs) => atMs - killedAtMs)
            .join(','),
        );
        return (
          `states ${JSON.stringify(states)}; scrape counters ${JSON.stringify([...(typeof counts === 'string' ? [] : counts)])} ` +
          `(at cluster ok ${JSON.stringify([...countsAtOk])}); /metrics scrapes (ms after the kill) ${scrapes.join(' | ')}`
        );
      };
      await waitFor(async () => {
        const states = await Promise.all(sims.map((sim) => store.read(sim.id)));
        return states.every((state) => state !== null && state.healthy && state.scrapedAtMs > clusterOkAtMs);
      }, 6_000).catch(async () => {
        throw new Error(
          `no fresh published state for every backend within 6 s of cluster ok (${clusterOkAtMs - killedAtMs} ms after the kill): ${await pollerView()}`,
        );
      });
      await waitFor(async () => {
        const counts = await pollerScrapes();
        return sims.every((sim) => (counts.get(sim.id) ?? 0) >= (countsAtOk.get(sim.id) ?? 0) + 3);
      }, 6_000).catch(async () => {
        throw new Error(
          `the poller's scrape counters did not grow by 3 within 6 s of cluster ok: ${await pollerView()}`,
        );
      });
      const pollerBackAtMs = Date.now();

      // Neither replica stays on local state: both are back on the shared one, under the same load (a replica
      // only tries Redis again when a request needs it, so an idle one would stay degraded).
      await waitFor(allShared, 12_000);
      const recoveredAtMs = Date.now();
      await sleep(LOAD_AFTER_RECOVERY_MS);
      loadRunning = false;
      await Promise.all(clients);
      const loadEndMs = Date.now();
      sampling = false;
      await sampler;

      // Affinity through the promoted master: a prompt never seen before, served through A, goes to the same backend
      // through B and C. Checked while every replica is on the shared state: on a busy machine a replica may still
      // slip to local state for a retry delay after the failover (one run, 2026-12-07); a prompt during which one
      // did is tried again with another (at most 3 times), and one with every replica shared throughout must hold.
      const degradedTransitions = async (): Promise<string> =>
        (
          await Promise.all(
            routers.map((router) =>
              router.metrics.registry.getSingleMetricAsString('kvroute_router_state_degraded_transitions_total'),
            ),
          )
        ).join('|');
      const affinity: string[] = [];
      for (let prompt = 0; prompt < 4; prompt++) {
        for (let attempt = 0; ; attempt++) {
          await waitFor(allShared, 12_000);
          const before = await degradedTransitions();
          const content = `after the failover ${prompt}.${attempt}: ${CONTEXT}`;
          const viaA = await chat(0, firstModel, content);
          const viaB = await chat(1, firstModel, content);
          const viaC = await chat(2, firstModel, content);
          if ((await degradedTransitions()) !== before && attempt < 2) continue;
          expect(viaA.status).toBe(200);
          expect(viaB).toEqual({ status: 200, backend: viaA.backend, reason: 'prefix-affinity' });
          expect(viaC).toEqual({ status: 200, backend: viaA.backend, reason: 'prefix-affinity' });
          affinity.push(viaA.backend ?? '-');
          break;
        }
      }
      const other = await chat(1, secondModel, `after the failover, the other pool: ${CONTEXT}`);
      expect(other.status).toBe(200);
      expect([sims[2]?.id, sims[3]?.id]).toContain(other.backend);

      // 0 failed requests, on both models and both replicas, before, during and after the failover.
      expect(failures).toEqual([]);
      expect(samples.filter((sample) => sample.status !== 200)).toEqual([]);
      const during = samples.filter((sample) => sample.startMs >= killedAtMs && sample.startMs < clusterOkAtMs);
      expect(during.filter((sample) => sample.model === firstModel).length).toBeGreaterThan(0);
      expect(during.filter((sample) => sample.model === secondModel).length).toBeGreaterThan(0);
      const afterRecovery = samples.filter((sample) => sample.startMs >= recoveredAtMs);
      expect(afterRecovery.filter((sample) => sample.model === firstModel).length).toBeGreaterThan(0);

      // Degraded at most 10 s in total per replica, and not at the end.
      const degradedMs = routers.map((_, replica) => {
        let total = 0;
        for (let index = 0; index + 1 < degradedSamples.length; index++) {
          const sample = degradedSamples[index] as { atMs: number; values: number[] };
          if (sample.values[replica] === 1)
            total += (degradedSamples[index + 1] as { atMs: number }).atMs - sample.atMs;
        }
        return total;
      });
      for (const total of degradedMs) expect(total).toBeLessThanOrEqual(MAX_DEGRADED_MS);
      // Shared again at the end: a call slowed just after the load (a busy machine; one run, 2026-12-07) may still be
      // in its retry delay, which doubles from 500 ms after each failure: every replica gets 10 s to come back.
      await waitFor(allShared, 10_000).catch(() => undefined);
      const transitions: string[] = [];
      for (const router of routers) {
        const text = await (await fetch(`${router.opsUrl}/metrics`)).text();
        expect(text).toMatch(/^kvroute_router_state_degraded 0$/m);
        const into = /^kvroute_router_state_degraded_transitions_total\{to="degraded"\} (\d+)$/m.exec(text)?.[1] ?? '0';
        const out = /^kvroute_router_state_degraded_transitions_total\{to="shared"\} (\d+)$/m.exec(text)?.[1] ?? '0';
        expect(out).toBe(into);
        transitions.push(`${into}/${out}`);
      }

      // The poller: the longest gap between two scrapes of a backend, and scrapes since the cluster was ok again.
      const gaps = sims.map((sim) => {
        const inRun = sim.scrapes.filter((atMs) => atMs >= loadStartMs - 1_000 && atMs <= loadEndMs);
        let longest = 0;
        for (let index = 1; index < inRun.length; index++)
          longest = Math.max(longest, (inRun[index] as number) - (inRun[index - 1] as number));
        return longest;
      });
      const scrapedAfterOk = sims.map((sim) => sim.scrapes.filter((atMs) => atMs > clusterOkAtMs).length);
      expect(scrapedAfterOk.every((count) => count >= 3)).toBe(true);

      const reasons = new Map<string, number>();
      for (const sample of samples) reasons.set(sample.reason ?? '-', (reasons.get(sample.reason ?? '-') ?? 0) + 1);
      const slowest = (list: readonly Sample[]): number =>
        Math.max(0, ...list.map((sample) => sample.endMs - sample.startMs));
      console.info(
        `[redis-cluster-failover] ${samples.length + failures.length} requests in ${loadEndMs - loadStartMs} ` +
          `ms (${CLIENTS} clients; ${during.length} between the kill and cluster ok), ${failures.length} ` +
          `failed, ` +
          `slowest ${slowest(samples)} ms (${slowest(during)} ms during the failover); ` +
          `pools ${firstModel} (killed master ${victim} → ${promoted}) and ${secondModel} (master ${secondMaster}); ` +
          `failover ${clusterOkAtMs - killedAtMs} ms (kill → cluster ok); ` +
          `degraded ${degradedMs.map((ms, replica) => `replica ${replica} ${ms} ms`).join(', ')} (transitions ` +
          `into/out of degraded ${transitions.join(', ')}); ` +
          `poller: longest scrape gap ${gaps.join('/')} ms, scraping again ${pollerBackAtMs - clusterOkAtMs} ms after cluster ok; ` +
          `affinity after the failover ${affinity.join(', ')}; reasons ${[...reasons].map(([reason, count]) => `${reason} ${count}`).join(', ')}`,
      );
      passed = true;
    } finally {
      loadRunning = false;
      sampling = false;
      await Promise.all(clients);
      await sampler;
      if (!passed) {
        // For a failure's diagnosis: when each replica's gauge changed, the failed requests, what the poller said.
        const changes: string[] = [];
        degradedSamples.forEach((sample, index) => {
          const before = degradedSamples[index - 1]?.values.join('') ?? '000';
          if (sample.values.join('') !== before) changes.push(`${sample.atMs - killedAtMs}:${sample.values.join('')}`);
        });
        console.info(
          `[redis-cluster-failover] degraded gauges of replicas A, B and C (ms after the kill: values): ` +
            `${changes.join(' ')}; cluster ok at ${clusterOkAtMs - killedAtMs}`,
        );
        if (failures.length > 0)
          console.info(
            `[redis-cluster-failover] failures (ms after the kill): ${failures
              .slice(0, 10)
              .map((f) => `${f.atMs - killedAtMs} replica ${f.replica} ${f.model}: ${f.error}`)
              .join('; ')}`,
          );
        const pollerLog = pollers
          .map((poller) => poller.stderr.join('').trim())
          .join('\n---\n')
          .trim();
        if (pollerLog) console.info(`[redis-cluster-failover] poller stderr: ${pollerLog.slice(-2_000)}`);
      }
    }
  }, 40_000);
});
