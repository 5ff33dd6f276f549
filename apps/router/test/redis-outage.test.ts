import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { waitFor } from './start-test-cluster';

/**
 * Redis outage under steady load: the router keeps serving on its local state (no failed client
 * request), the degraded gauge goes to 1 and back to 0, and shared routing resumes.
 */
describe('Redis outage', () => {
  let redis: TestRedis;
  let sims: SimServer[];
  let router: RouterServer;
  let routerUrl: string;

  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
    sims = await Promise.all(
      Array.from({ length: 2 }, () =>
        createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model' })),
      ),
    );
    const urls = await Promise.all(sims.map((sim) => sim.listen()));
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: urls,
        redisUrl: redis.url,
        redisRetryAfterMs: 200,
      }),
    );
    routerUrl = await router.listen();
  });
  afterAll(async () => {
    await router.close();
    await Promise.all(sims.map((sim) => sim.close()));
    await redis.stop();
  });

  async function degradedGauge(): Promise<number> {
    const text = await router.metrics.registry.getSingleMetricAsString('kvroute_router_state_degraded');
    return Number(/^kvroute_router_state_degraded (\d)$/m.exec(text)?.[1]);
  }

  it('serves every request while Redis is down, flips the degraded gauge, and resumes shared state', async () => {
    let stop = false;
    const statuses: number[] = [];
    const load = (async () => {
      for (let index = 0; !stop; index++) {
        const response = await fetch(`${routerUrl}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'test-model',
            messages: [{ role: 'user', content: `steady ${index % 7} ${'context '.repeat(80)}` }],
            max_tokens: 2,
          }),
        }).catch(() => null);
        statuses.push(response?.status ?? 0);
        await response?.text();
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await degradedGauge()).toBe(0);
    await redis.kill();
    await waitFor(async () => (await degradedGauge()) === 1, 5_000);
    // Redis stays down 5 s under load.
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    await redis.restart();
    await waitFor(async () => (await degradedGauge()) === 0, 10_000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    stop = true;
    await load;
    expect(statuses.length).toBeGreaterThan(50);
    expect(statuses.filter((status) => status !== 200)).toEqual([]);
    const metrics = await router.metrics.registry.metrics();
    expect(metrics).toMatch(/kvroute_router_state_degraded_transitions_total\{to="degraded"\} [1-9]/);
    expect(metrics).toMatch(/kvroute_router_state_degraded_transitions_total\{to="shared"\} [1-9]/);
  }, 30_000);
});
