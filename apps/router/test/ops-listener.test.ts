import { startRedis, type TestRedis } from '@kvroute/testing';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { waitFor } from './start-test-cluster';

const TOKEN = 'ops-listener-test-token-0123456';

interface OpsReadiness {
  readonly status: string;
  readonly degraded: boolean;
  readonly reasons: readonly string[];
  readonly usableBackends: readonly string[];
}

/**
 * Issue 31: metrics and the detailed readiness on an ops listener of their own, apart from the public
 * port, which keeps only what an L4 balancer needs (/healthz, a /readyz with a status); and /readyz says
 * when the replica routes on its local state because Redis is gone (a Redis of this test's own,
 * stopped and started again).
 */
describe('the ops listener', () => {
  let redis: TestRedis;
  let sim: SimServer;
  let simUrl: string;
  let router: RouterServer;
  let publicUrl: string;
  let opsUrl: string;

  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
    sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model' }));
    simUrl = await sim.listen();
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        adminPort: 0,
        adminToken: TOKEN,
        backends: [simUrl],
        redisUrl: redis.url,
        redisTimeoutMs: 200,
        redisRetryAfterMs: 100,
        retryBackoffMs: 1,
      }),
      { logger: false },
    );
    publicUrl = await router.listen();
    opsUrl = router.opsUrl as string;
  });
  afterAll(async () => {
    await router?.close();
    await sim?.close();
    await redis?.stop();
  });

  const chat = (content: string) =>
    fetch(`${publicUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content }], max_tokens: 2 }),
    });
  const opsReadiness = async (): Promise<OpsReadiness> =>
    (await (await fetch(`${opsUrl}/readyz`)).json()) as OpsReadiness;

  it('listens on a port of its own, on the public host by default', () => {
    expect(typeof opsUrl).toBe('string');
    expect(new URL(opsUrl).hostname).toBe('127.0.0.1');
    expect(new URL(opsUrl).port).not.toBe(new URL(publicUrl).port);
    expect(new URL(opsUrl).port).not.toBe(new URL(router.adminUrl as string).port);
  });

  it('the public port answers /metrics 404 and a /readyz with its status only; /healthz stays', async () => {
    const metrics = await fetch(`${publicUrl}/metrics`);
    expect(metrics.status).toBe(404);
    expect(await metrics.text()).not.toContain('kvroute_');
    const readyz = await fetch(`${publicUrl}/readyz`);
    expect(readyz.status).toBe(200);
    const text = await readyz.text();
    expect(JSON.parse(text)).toEqual({ status: 'ready', degraded: false });
    expect(text).not.toContain(new URL(simUrl).host);
    expect((await fetch(`${publicUrl}/healthz`)).status).toBe(200);
  });

  it('the ops port answers /metrics, the full /readyz (backend addresses, cache views) and /healthz', async () => {
    const metrics = await fetch(`${opsUrl}/metrics`);
    expect(metrics.status).toBe(200);
    expect(metrics.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(await metrics.text()).toMatch(/^kvroute_router_state_degraded 0$/m);
    const readyz = await fetch(`${opsUrl}/readyz`);
    expect(readyz.status).toBe(200);
    const body = (await readyz.json()) as OpsReadiness & { cacheView: Record<string, string> };
    expect(body).toMatchObject({ status: 'ready', degraded: false, reasons: [] });
    expect(body.usableBackends).toEqual([new URL(simUrl).host]);
    expect(Object.keys(body.cacheView)).toEqual([new URL(simUrl).host]);
    expect(await (await fetch(`${opsUrl}/healthz`)).json()).toEqual({ status: 'ok' });
    // Nothing of the public API is there.
    expect((await fetch(`${opsUrl}/v1/models`)).status).toBe(404);
  });

  it("is one of the router's own listeners: a backend there is refused (a loop)", async () => {
    const response = await fetch(`${router.adminUrl}/admin/backends`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: `http://127.0.0.1:${new URL(opsUrl).port}`, models: ['test-model'] }),
    });
    expect(response.status).toBe(403);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_BACKEND_NOT_ALLOWED');
  });

  it('/readyz stays 200 but says degraded, and why, while Redis is down; not once it is back', async () => {
    expect((await chat('before the outage')).status).toBe(200);
    await redis.kill();
    try {
      // A request meets the dead Redis (the failover switches to local state) and is still served.
      expect((await chat('during the outage')).status).toBe(200);
      await waitFor(async () => (await opsReadiness()).degraded, 5_000);
      const ops = await fetch(`${opsUrl}/readyz`);
      expect(ops.status).toBe(200);
      const body = (await ops.json()) as OpsReadiness;
      expect(body.status).toBe('ready');
      expect(body.reasons.length).toBeGreaterThan(0);
      expect(body.reasons.join(' ')).toMatch(/local state/);
      const onPublic = await fetch(`${publicUrl}/readyz`);
      expect(onPublic.status).toBe(200);
      expect(await onPublic.json()).toEqual({ status: 'ready', degraded: true });
    } finally {
      await redis.restart();
    }
    // The first request after the backoff finds Redis again and switches back to shared state.
    await waitFor(async () => {
      await (await chat('after the outage')).text();
      return !(await opsReadiness()).degraded;
    }, 15_000);
    expect(await opsReadiness()).toMatchObject({ status: 'ready', degraded: false, reasons: [] });
    expect(await (await fetch(`${publicUrl}/readyz`)).json()).toEqual({ status: 'ready', degraded: false });
  }, 30_000);
});
