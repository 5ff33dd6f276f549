import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';

/**
 * Tenant limits across replicas (issue 14, acceptance 2, in-process part; the timed run behind HAProxy
 * is `npm run bench:limits`): three router replicas share one private Redis. A key added through one
 * replica's admin API works on all, its limit holds exactly across them (one admission script per
 * request), a revocation reaches every replica within `apiKeyCacheMs`, and with Redis gone each replica
 * enforces its share while no request fails for any other reason.
 */
const ADMIN_TOKEN = 'tenant-admin-token-0123456789';

/** Whole requests a `requestsPerMinute` bucket refills in `elapsedMs` (its refill is continuous). */
const refilledDuring = (elapsedMs: number, requestsPerMinute: number) =>
  Math.floor((elapsedMs * requestsPerMinute) / 60_000);

describe('tenant limits shared by three replicas through Redis', () => {
  let redis: TestRedis;
  let sims: SimServer[];
  let routers: RouterServer[];
  let urls: string[];

  beforeAll(async () => {
    redis = await startRedis({ fresh: true, logger: () => undefined });
    sims = await Promise.all(
      [0, 1].map(() => createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model' }))),
    );
    const simUrls = await Promise.all(sims.map((sim) => sim.listen()));
    routers = await Promise.all(
      [0, 1, 2].map(() =>
        createRouterServer(
          RouterConfig.parse({
            host: '127.0.0.1',
            port: 0,
            opsPort: 0,
            adminHost: '127.0.0.1',
            adminPort: 0,
            adminToken: ADMIN_TOKEN,
            backends: simUrls,
            redisUrl: redis.url,
            auth: 'api-keys',
            apiKeyCacheMs: 200,
            cacheSaltSecret: 'replicas-share-this-secret-0123',
            redisRetryAfterMs: 200,
            // A busy suite can hold a Redis reply past the fail-fast 50 ms: that replica would then admit
            // on its local share, which is the outage case below, not this one. A stopped Redis still
            // fails at once (no offline queue), so the outage case does not wait on this.
            redisTimeoutMs: 1_000,
            retryBackoffMs: 1,
          }),
        ),
      ),
    );
    urls = await Promise.all(routers.map((router) => router.listen()));
  });

  afterAll(async () => {
    await Promise.all((routers ?? []).map((router) => router.close()));
    await Promise.all((sims ?? []).map((sim) => sim.close()));
    await redis?.stop();
  });

  const admin = (index: number, method: string, path: string, body?: object) =>
    fetch(`${routers[index]?.adminUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
  const generate = (index: number, key: string, content: string) =>
    fetch(`${urls[index % urls.length]}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content }], max_tokens: 2 }),
    });

  it('a key added on one replica works on every one, its limit holds exactly across them, and a revocation reaches all', async () => {
    const added = await admin(0, 'POST', '/admin/keys', { id: 'shared-key', tenant: 'acme', requestsPerMinute: 30 });
    expect(added.status).toBe(201);
    const { key } = (await added.json()) as { key: string };
    expect(key.startsWith('kvr_')).toBe(true);
    const listed = (await (await admin(1, 'GET', '/admin/keys')).json()) as { data: { id: string; key?: string }[] };
    expect(listed.data.map((entry) => entry.id)).toEqual(['shared-key']);
    expect(listed.data[0]?.key).toBeUndefined();

    // 60 requests at once over the three replicas: the burst of the limit passes, and no more than the
    // bucket refilled while they arrived (30 a minute: one per 2 s of a slow burst on a busy machine).
    const burstStarted = performance.now();
    const statuses = await Promise.all(
      Array.from({ length: 60 }, (_, index) =>
        generate(index, key, `burst ${index}`).then(
          async (response) => (await response.arrayBuffer(), response.status),
        ),
      ),
    );
    const refilled = refilledDuring(performance.now() - burstStarted, 30);
    const served = statuses.filter((status) => status === 200).length;
    expect(statuses.filter((status) => status !== 200 && status !== 429)).toEqual([]);
    expect(served).toBeGreaterThanOrEqual(30);
    expect(served).toBeLessThanOrEqual(30 + refilled);

    expect((await admin(2, 'DELETE', '/admin/keys/shared-key')).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 300));
    for (let index = 0; index < 3; index++) expect((await generate(index, key, 'after revocation')).status).toBe(401);
  });

  it('with Redis stopped, every replica enforces its share and nothing fails for another reason', async () => {
    const added = await admin(0, 'POST', '/admin/keys', { id: 'outage-key', tenant: 'outage', requestsPerMinute: 90 });
    const { key } = (await added.json()) as { key: string };
    // Each replica looks the key up once while Redis is there (an unknown key cannot be checked during the outage).
    for (let index = 0; index < 3; index++) expect((await generate(index, key, `warm ${index}`)).status).toBe(200);
    // One heartbeat round (2 s) so that every replica has counted all three (the first started counted itself alone).
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    await redis.stop();
    // Let every replica's key cache expire: a key seen before stays valid while Redis cannot be asked.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const outageStarted = performance.now();
    const statuses = await Promise.all(
      Array.from({ length: 150 }, (_, index) =>
        generate(index, key, `outage ${index}`).then(
          async (response) => (await response.arrayBuffer(), response.status),
        ),
      ),
    );
    const served = statuses.filter((status) => status === 200).length;
    expect(statuses.filter((status) => status !== 200 && status !== 429)).toEqual([]);
    // Three shares of 90 ÷ 3 = 30 each, fresh in memory (the shared bucket's 3 warm-ups are not known
    // locally), plus what the three shares refilled while the requests arrived.
    expect(served).toBeGreaterThanOrEqual(90);
    expect(served).toBeLessThanOrEqual(90 + refilledDuring(performance.now() - outageStarted, 90));
    await redis.restart();
  });
});
