import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { hitRate, runConversations, unexplainedMoves } from './conversation-workload';

/**
 * Replicas that share state in Redis route as one: 3 router replicas (in this process) over the same
 * 4 backends, a client that sends each request to the next replica in turn, 12 concurrent 6-turn
 * conversations with a shared system prompt (conversation-workload.ts). With Redis every turn stays on its conversation's first
 * backend whichever replica routes it, and the cache hit rate matches a single replica's; with
 * per-replica state it falls.
 */
interface Cluster {
  sims: Array<{ url: string; sim: SimServer }>;
  routers: RouterServer[];
  urls: string[];
}

async function startCluster(
  replicas: number,
  redisUrl: string | undefined,
  policy: 'cacheaware' | 'prefixaware' = 'cacheaware',
): Promise<Cluster> {
  const sims = await Promise.all(
    Array.from({ length: 4 }, async () => {
      const sim = await createSimServer(
        SimConfig.parse({ port: 0, profile: 'a100-7b', timeScale: 50, model: 'test-model' }),
      );
      return { url: await sim.listen(), sim };
    }),
  );
  const routers: RouterServer[] = [];
  const urls: string[] = [];
  for (let index = 0; index < replicas; index++) {
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: sims.map((sim) => sim.url),
        policy,
        ...(redisUrl ? { redisUrl, redisTimeoutMs: 200 } : {}),
      }),
    );
    routers.push(router);
    urls.push(await router.listen());
  }
  return { sims, routers, urls };
}

async function stopCluster(cluster: Cluster): Promise<void> {
  if (process.env.DEBUG_MOVES) {
    for (const router of cluster.routers) {
      const text = await router.metrics.registry.metrics();
      console.info(
        'degraded transitions:',
        text
          .split('\n')
          .filter((line) => line.startsWith('kvroute_router_state_degraded_transitions_total'))
          .join(' | ') || 'none',
      );
    }
  }
  // Every turn has its answer: nothing is in flight, so no grace (a graceful close waits a second for the client's
  // keep-alive connections to fall quiet), and the routers at once. Lease releases under way are still awaited.
  await Promise.all(cluster.routers.map((router) => router.close({ graceMs: 0 })));
  await Promise.all(cluster.sims.map((sim) => sim.sim.close()));
}

describe('router replicas sharing state in Redis', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
  });
  afterAll(() => redis.stop());

  it('route with shared state: three replicas over one Redis keep the hit rate of a single replica, never degraded', async () => {
    // One run of this workload varies by ±3 points by itself (timing decides how the first turns'
    // burst spreads, and spills), so each side runs twice on fresh backends and the means are compared.
    const singleRates: number[] = [];
    const sharedRates: number[] = [];
    for (let round = 0; round < 2; round++) {
      const single = await startCluster(1, undefined);
      const singleTurns = await runConversations(single.urls).finally(() => stopCluster(single));
      const shared = await startCluster(3, redis.url);
      const degradedBefore = await Promise.all(
        shared.routers.map((router) =>
          router.metrics.registry.getSingleMetricAsString('kvroute_router_state_degraded'),
        ),
      );
      const sharedTurns = await runConversations(shared.urls).finally(() => stopCluster(shared));
      console.info(
        `cacheaware hit rate: 1 replica ${hitRate(singleTurns).toFixed(3)}, 3 replicas sharing Redis ` +
          `${hitRate(sharedTurns).toFixed(3)}; moves ${unexplainedMoves(sharedTurns)}`,
      );
      expect(degradedBefore.every((text) => /^kvroute_router_state_degraded 0$/m.test(text))).toBe(true);
      expect(sharedTurns).toHaveLength(72);
      // At most one: a follow-up sent the moment its answer ends races the release that records its prefix
      // (another replica, another Redis connection; the release is not awaited before the answer ends, which
      // keeps a Redis round trip off every response). With the machine's cores busy the follow-up won about once
      // in 10 runs; shared state that did not work would move most of the 12 conversations.
      expect(unexplainedMoves(sharedTurns)).toBeLessThanOrEqual(1);
      singleRates.push(hitRate(singleTurns));
      sharedRates.push(hitRate(sharedTurns));
    }
    // The 2-point acceptance figure is for the averaged multi-process e2e benchmark. Here: no real loss.
    const mean = (values: readonly number[]): number => values.reduce((sum, value) => sum + value, 0) / values.length;
    expect(mean(sharedRates)).toBeGreaterThanOrEqual(mean(singleRates) - 0.05);
  });
});
