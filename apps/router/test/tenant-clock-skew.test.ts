import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';

/**
 * Issue 30, guards: tenant limits count by Redis's clock, not each replica's. Two replicas share one
 * Redis; replica B's clock runs 5 minutes ahead of A's. By B's own clock every bucket A filled would be
 * full again, and a tenant's 10 requests a minute would pass twice over.
 */
const ADMIN_TOKEN = 'tenant-skew-admin-token-0123456';
const SKEW_MS = 5 * 60_000;

describe('tenant limits across replicas whose clocks disagree', () => {
  let redis: TestRedis;
  let sim: SimServer;
  let routers: RouterServer[];
  let urls: string[];

  beforeAll(async () => {
    redis = await startRedis({ fresh: true, logger: () => undefined });
    sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model' }));
    const simUrl = await sim.listen();
    routers = await Promise.all(
      [0, SKEW_MS].map((skewMs) =>
        createRouterServer(
          RouterConfig.parse({
            host: '127.0.0.1',
            port: 0,
            opsPort: 0,
            adminPort: 0,
            adminToken: ADMIN_TOKEN,
            backends: [simUrl],
            redisUrl: redis.url,
            auth: 'api-keys',
            cacheSaltSecret: 'replicas-share-this-secret-0123',
          }),
          { nowMs: () => Date.now() + skewMs, logger: false },
        ),
      ),
    );
    urls = await Promise.all(routers.map((router) => router.listen()));
  });
  afterAll(async () => {
    await Promise.all((routers ?? []).map((router) => router.close()));
    await sim?.close();
    await redis?.stop();
  });

  it("holds a tenant's 10 requests a minute at 10 over both replicas", async () => {
    const added = await fetch(`${routers[0]?.adminUrl}/admin/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'skew-key', tenant: 'skew', requestsPerMinute: 10 }),
    });
    expect(added.status).toBe(201);
    const { key } = (await added.json()) as { key: string };
    const statuses: number[] = [];
    for (const url of [urls[0], urls[1]]) {
      for (let index = 0; index < 10; index++) {
        const response = await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
          body: JSON.stringify({
            model: 'test-model',
            messages: [{ role: 'user', content: `n ${index}` }],
            max_tokens: 2,
          }),
        });
        await response.arrayBuffer();
        statuses.push(response.status);
      }
    }
    expect(statuses.slice(0, 10)).toEqual(Array(10).fill(200));
    // Replica B, 5 minutes ahead, sees the bucket A filled as Redis does: still full.
    expect(statuses.slice(10)).toEqual(Array(10).fill(429));
  });
});
