import { startRedis, type TestRedis } from '@kvroute/testing';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';

/**
 * Issue 30, guards: the backend address guard compares canonical addresses (IPv6 loopback, IPv4-mapped
 * IPv6, the router's own listeners), and whatever admin add accepts, admin delete removes. No allowlist
 * (the single-operator default): loopback backends are accepted, the router's Redis and itself are not.
 */
const TOKEN = 'backend-guards-test-token-0123';

describe('backend address guard: canonical addresses', () => {
  let redis: TestRedis;
  let sim: SimServer;
  let sixSim: SimServer;
  let sixSimPort: string;
  let router: RouterServer;
  let publicUrl: string;
  let adminUrl: string;

  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
    sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model' }));
    const simUrl = await sim.listen();
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        adminPort: 0,
        backends: [simUrl],
        redisUrl: redis.url,
        adminToken: TOKEN,
      }),
      { logger: false },
    );
    publicUrl = await router.listen();
    adminUrl = router.adminUrl as string;
    // A backend on IPv6 loopback: admin add accepts it, so admin delete must remove it. On a port no listener of
    // the router or its Redis has on IPv4 loopback: the guard takes both loopbacks for one host, and port 0 on ::1 is
    // chosen apart from 127.0.0.1's, so a collision is refused (403) as a loop or as the router's Redis (one
    // fresh-clone run got a 403 here, its reason not kept; this is the one cause the test itself can make).
    const taken = new Set([redis.url, publicUrl, adminUrl, router.opsUrl].map((url) => url && new URL(url).port));
    for (;;) {
      sixSim = await createSimServer(SimConfig.parse({ host: '::1', port: 0, profile: 'fast', model: 'test-model' }));
      sixSimPort = new URL(await sixSim.listen()).port;
      if (!taken.has(sixSimPort)) break;
      await sixSim.close();
    }
  });
  afterAll(async () => {
    await router?.close();
    await sim?.close();
    await sixSim?.close();
    await redis?.stop();
  });

  const admin = (method: string, path: string, body?: unknown) =>
    fetch(`${adminUrl}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${TOKEN}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });

  it("refuses the router's Redis by IPv6 loopback and IPv4-mapped spellings, and the router's own ports (a loop)", async () => {
    const redisPort = new URL(redis.url).port || '6379';
    const publicPort = new URL(publicUrl).port;
    const adminPort = new URL(adminUrl).port;
    const candidates = [
      `http://[::1]:${redisPort}`,
      `http://[::ffff:127.0.0.1]:${redisPort}`,
      `http://127.0.0.2:${redisPort}`,
      `http://127.0.0.1:${publicPort}`,
      `http://[::1]:${publicPort}`,
      `http://localhost:${publicPort}`,
      `http://127.0.0.1:${adminPort}`,
      `http://[::ffff:127.0.0.1]:${adminPort}`,
    ];
    for (const url of candidates) {
      const response = await admin('POST', '/admin/backends', { url, models: ['test-model'] });
      expect(response.status, url).toBe(403);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe(
        'ROUTER_ERR_BACKEND_NOT_ALLOWED',
      );
    }
    const listed = (await (await admin('GET', '/admin/backends')).json()) as { data: { url: string }[] };
    expect(listed.data).toHaveLength(1);
  });

  it('removes an IPv6 backend added by URL through its default id, URL-encoded or not', async () => {
    const added = await admin('POST', '/admin/backends', {
      url: `http://[::1]:${sixSimPort}`,
      models: ['test-model'],
    });
    expect(added.status).toBe(201);
    const { id } = (await added.json()) as { id: string };
    expect(id).toBe(`[::1]:${sixSimPort}`);
    const removed = await admin('DELETE', `/admin/backends/${encodeURIComponent(id)}`);
    expect(removed.status).toBe(200);
    expect(await removed.json()).toEqual({ id, removed: true });
    // Added again and removed by the raw spelling curl sends with --globoff.
    expect((await admin('POST', '/admin/backends', { url: `http://[::1]:${sixSimPort}` })).status).toBe(201);
    expect((await admin('DELETE', `/admin/backends/%5B::1%5D:${sixSimPort}`)).status).toBe(200);
    const listed = (await (await admin('GET', '/admin/backends')).json()) as { data: { id: string }[] };
    expect(listed.data.map((backend) => backend.id)).not.toContain(id);
  });
});
