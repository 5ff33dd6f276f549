import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';

/**
 * The saturation valve holds across replicas: prefixaware with saturationInflight 2, three replicas,
 * three backends, a burst of 6 concurrent requests (the fleet's capacity under the valve) sharing a
 * prefix one backend holds. The reservation is conditional in Redis, so the warm backend never has
 * more than 2 in flight, whichever replica routes; with per-replica state each replica fills it to 2
 * on its own count. (Beyond the fleet's valve capacity the seed's semantics fall back to least-loaded
 * without a cap, by design.)
 */
async function burst(redisUrl: string | undefined): Promise<{ peakOnWarm: number; reasons: string[] }> {
  const sims: SimServer[] = await Promise.all(
    Array.from({ length: 3 }, () =>
      createSimServer(SimConfig.parse({ port: 0, profile: 'a100-7b', timeScale: 2, model: 'test-model' })),
    ),
  );
  const backendUrls = await Promise.all(sims.map((sim) => sim.listen()));
  const routers: RouterServer[] = [];
  const urls: string[] = [];
  for (let index = 0; index < 3; index++) {
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: backendUrls,
        policy: 'prefixaware',
        saturationInflight: 2,
        ...(redisUrl ? { redisUrl, redisTimeoutMs: 500 } : {}),
      }),
    );
    routers.push(router);
    urls.push(await router.listen());
  }
  const shared = `Shared context for the burst. ${'A long runbook paragraph. '.repeat(120)}`;
  const body = (index: number) =>
    JSON.stringify({
      model: 'test-model',
      messages: [
        { role: 'system', content: shared },
        { role: 'user', content: `q${index}` },
      ],
      max_tokens: 60,
    });
  try {
    // Warm one backend with the shared prefix (every replica sees it once).
    for (const url of urls)
      await (
        await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: body(-1),
        })
      ).text();
    const warm = sims.reduce((best, sim) =>
      sim.engine.stats.prefixQueryTokens > best.engine.stats.prefixQueryTokens ? sim : best,
    );
    let peakOnWarm = 0;
    const sampler = setInterval(
      () => (peakOnWarm = Math.max(peakOnWarm, warm.engine.runningCount + warm.engine.waitingCount)),
      1,
    );
    const reasons = await Promise.all(
      Array.from({ length: 6 }, async (_, index) => {
        const response = await fetch(`${urls[index % 3]}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: body(index),
        });
        await response.text();
        return response.headers.get('x-router-reason') ?? '';
      }),
    );
    clearInterval(sampler);
    return { peakOnWarm, reasons };
  } finally {
    for (const router of routers) await router.close();
    await Promise.all(sims.map((sim) => sim.close()));
  }
}

describe('saturation valve across replicas', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
  });
  afterAll(() => redis.stop());

  it('never lets the warm backend exceed the valve with shared state, and does without it', async () => {
    const shared = await burst(redis.url);
    const isolated = await burst(undefined);
    console.info(`peak in flight on the warm backend: shared ${shared.peakOnWarm}, isolated ${isolated.peakOnWarm}`);
    expect(shared.peakOnWarm).toBeLessThanOrEqual(2);
    expect(shared.reasons.filter((reason) => reason.startsWith('spilled'))).not.toHaveLength(0);
    expect(isolated.peakOnWarm).toBeGreaterThan(2);
  });
});
