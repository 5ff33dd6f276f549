import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { createRedis, fleetKeys, waitUntilReady } from '@kvroute/redis-store';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { waitFor } from './start-test-cluster';
import { adminRequest } from './admin-requests';
import { chat as chatOnce, longStream as streamLong } from './chat-requests';

/**
 * The backend set shared through Redis: two router replicas (in this process) on one Redis and three
 * configured simulated backends, plus a fourth added at run time. A change made through replica A's
 * admin API reaches replica B within a second (pub/sub, with a 500 ms poll behind it); drained and
 * removed backends get no new request from either replica while their requests in flight finish.
 */
const TOKEN = 'test-admin-token-0123456789';
const MODEL = 'test-model';

interface Sim {
  readonly sim: SimServer;
  readonly url: string;
  readonly id: string;
}

async function startSim(): Promise<Sim> {
  // Real-time A100 timing: a STREAM_TOKENS stream runs ~2 s, a 2-token request ~30 ms.
  const sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'a100-7b', model: MODEL, logLevel: 'silent' }));
  const url = await sim.listen();
  return { sim, url, id: new URL(url).host };
}

/** Requests a backend has received (admitted by its engine). */
const received = (sim: Sim): number => sim.sim.engine.stats.requestParamsMaxTokens.count;

/** A replica's public URL → its admin listener's URL (a port of its own; the public port answers /admin 404). */
const adminUrlOf = new Map<string, string>();

/** Calls the admin API of the replica whose public URL is `publicUrl` (its admin listener; the public port itself when it has none). */
function admin(
  publicUrl: string,
  method: string,
  path: string,
  options: { body?: unknown; token?: string | null; rawBody?: string } = {},
): ReturnType<typeof adminRequest> {
  return adminRequest(adminUrlOf.get(publicUrl) ?? publicUrl, method, path, {
    ...options,
    token: options.token === undefined ? TOKEN : options.token,
  });
}

/**
 * Output tokens of the streams running through a drain or a removal: ~2 s, twice the second the change has to reach
 * both replicas in, so a stream is still running when it has (each test checks that it was), and no longer: the tests
 * wait for the stream's end.
 */
const STREAM_TOKENS = 200;

const chat = (baseUrl: string) => chatOnce(baseUrl, MODEL);
const longStream = (baseUrl: string) => streamLong(baseUrl, MODEL, STREAM_TOKENS);

/** Polls `check` every 2 ms; the ms it took. */
async function msUntil(check: () => boolean, timeoutMs = 3000): Promise<number> {
  const started = performance.now();
  while (!check()) {
    if (performance.now() - started > timeoutMs) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  return performance.now() - started;
}

const poolIds = (router: RouterServer): string[] => router.registry.poolFor(MODEL).map((backend) => backend.id);

function expectCompletedStream(result: { status: number; text: string }): void {
  expect(result.status).toBe(200);
  expect(result.text).toContain('"finish_reason":"length"');
  expect(result.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
  expect(result.text).not.toContain('ROUTER_ERR_UPSTREAM_STREAM');
}

describe('backend set shared through Redis', () => {
  let redis: TestRedis;
  let sims: Sim[];
  let routers: RouterServer[];
  let urls: string[];

  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
    sims = await Promise.all(Array.from({ length: 4 }, () => startSim()));
    routers = [];
    urls = [];
    for (let index = 0; index < 2; index++) {
      const router = await createRouterServer(
        RouterConfig.parse({
          host: '127.0.0.1',
          port: 0,
          opsPort: 0,
          backends: sims.slice(0, 3).map((sim) => sim.url),
          policy: 'roundrobin',
          redisUrl: redis.url,
          redisTimeoutMs: 200,
          retryBackoffMs: 1,
          adminToken: TOKEN,
          adminPort: 0,
          // The 401 cases below send a dozen wrong tokens from this one peer.
          adminMaxAuthFailures: 1_000,
        }),
      );
      routers.push(router);
      const url = await router.listen();
      urls.push(url);
      adminUrlOf.set(url, router.adminUrl as string);
    }
  });
  afterAll(async () => {
    // Every request has its answer: nothing in flight, so no grace (a graceful close waits a second for the test's
    // keep-alive connections to fall quiet), and both at once.
    await Promise.all(routers.map((router) => router.close({ graceMs: 0 })));
    await Promise.all(sims.map((sim) => sim.sim.close()));
    await redis.stop();
  });

  it('seeds the configured backends and lists them on every replica', async () => {
    for (const url of urls) {
      const { status, body } = await admin(url, 'GET', '/admin/backends');
      expect(status).toBe(200);
      expect(body.source).toBe('shared');
      expect(body.version).toBeGreaterThan(0);
      expect(
        body.data.map((backend: any) => [backend.id, backend.drained, backend.models, typeof backend.inflight]),
      ).toEqual(sims.slice(0, 3).map((sim) => [sim.id, false, [MODEL], 'number']));
    }
  });

  it('a backend added through replica A gets requests from replica B within a second', async () => {
    const [a, b] = urls as [string, string];
    const fourth = sims[3] as Sim;
    const started = performance.now();
    const added = await admin(a, 'POST', '/admin/backends', { body: { url: fourth.url } });
    expect(added.status).toBe(201);
    expect(added.body).toMatchObject({ id: fourth.id, url: fourth.url, drained: false });
    // B has it in its pool once the notice arrived and it read the backend's models.
    await msUntil(() => poolIds(routers[1] as RouterServer).includes(fourth.id));
    const inPoolMs = performance.now() - started;
    let servedAfterMs = -1;
    while (servedAfterMs < 0 && performance.now() - started < 3000) {
      const result = await chat(b);
      expect(result.status).toBe(200);
      if (result.backend === fourth.id) servedAfterMs = performance.now() - started;
    }
    console.info(
      `add through A: in B's pool after ${inPoolMs.toFixed(1)} ms, first request of B served by it ${servedAfterMs.toFixed(1)} ms after the admin call`,
    );
    expect(servedAfterMs).toBeGreaterThan(0);
    expect(servedAfterMs).toBeLessThan(1000);
    expect(received(fourth)).toBeGreaterThan(0);
    expect(poolIds(routers[0] as RouterServer)).toContain(fourth.id);
  });

  it('drain through A: within a second neither replica sends it anything new, while its running stream completes; undrain brings traffic back', async () => {
    const stream = await longStream(urls[0] as string);
    const target = sims.find((sim) => sim.id === stream.backend) as Sim;
    expect(target).toBeDefined();

    const started = performance.now();
    const drained = await admin(urls[0] as string, 'POST', `/admin/backends/${target.id}/drain`);
    expect(drained.status).toBe(200);
    expect(drained.body).toEqual({ id: target.id, drained: true });
    const propagatedMs = await msUntil(() => routers.every((router) => !poolIds(router).includes(target.id)));
    const drainedAtMs = performance.now();
    console.info(
      `drain through A: out of both replicas' pools after ${(drainedAtMs - started).toFixed(1)} ms ` +
        `(B: ${propagatedMs.toFixed(1)} ms after the admin call returned)`,
    );
    expect(drainedAtMs - started).toBeLessThan(1000);

    const before = received(target);
    for (let index = 0; index < 24; index++) {
      const result = await chat(urls[index % 2] as string);
      expect(result.status).toBe(200);
      expect(result.backend).not.toBe(target.id);
    }
    expect(received(target)).toBe(before);
    for (const url of urls) {
      const listed = (await admin(url, 'GET', '/admin/backends')).body.data.find(
        (backend: any) => backend.id === target.id,
      );
      expect(listed.drained).toBe(true);
    }

    const streamed = await stream.done;
    expectCompletedStream(streamed);
    // It was still running when the drain had reached both replicas.
    expect(streamed.endedAtMs).toBeGreaterThan(drainedAtMs);

    const undrainStarted = performance.now();
    expect((await admin(urls[1] as string, 'POST', `/admin/backends/${target.id}/undrain`)).status).toBe(200);
    await msUntil(() => routers.every((router) => poolIds(router).includes(target.id)), 1000);
    console.info(
      `undrain through B: back in both replicas' pools after ${(performance.now() - undrainStarted).toFixed(1)} ms`,
    );
    const backends = new Set<string | null>();
    for (let index = 0; index < 16; index++) backends.add((await chat(urls[index % 2] as string)).backend);
    expect(backends).toContain(target.id);
    expect(received(target)).toBeGreaterThan(before);
  });

  it('remove through B: no new requests from either replica, its running stream completes, and a restart does not bring it back', async () => {
    const stream = await longStream(urls[0] as string);
    const target = sims.find((sim) => sim.id === stream.backend) as Sim;
    const started = performance.now();
    const removed = await admin(urls[1] as string, 'DELETE', `/admin/backends/${target.id}`);
    expect(removed.status).toBe(200);
    await msUntil(() => routers.every((router) => router.registry.get(target.id) === undefined), 1000);
    const goneAtMs = performance.now();
    console.info(`remove through B: gone from both replicas after ${(goneAtMs - started).toFixed(1)} ms`);
    const before = received(target);
    for (let index = 0; index < 12; index++)
      expect((await chat(urls[index % 2] as string)).backend).not.toBe(target.id);
    expect(received(target)).toBe(before);
    const streamed = await stream.done;
    expectCompletedStream(streamed);
    // It was still running when the removal had reached both replicas.
    expect(streamed.endedAtMs).toBeGreaterThan(goneAtMs);

    // A third replica starting with the old config seeds it, but the removal sticks.
    const latecomer = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: sims.slice(0, 3).map((sim) => sim.url),
        redisUrl: redis.url,
        redisTimeoutMs: 200,
      }),
    );
    try {
      await latecomer.listen();
      expect(latecomer.registry.get(target.id)).toBeUndefined();
      expect(latecomer.registry.get((sims[3] as Sim).id)).toBeDefined();
    } finally {
      await latecomer.close();
    }
    // Added back, it serves again.
    expect((await admin(urls[0] as string, 'POST', '/admin/backends', { body: { url: target.url } })).status).toBe(201);
    await waitFor(() => routers.every((router) => poolIds(router).includes(target.id)), 1000);
  });

  it('answers 401 without the bearer token or with a wrong one, in the OpenAI error shape', async () => {
    for (const token of [null, 'wrong-token-wrong-token', `${TOKEN}x`]) {
      for (const [method, path] of [
        ['GET', '/admin/backends'],
        ['POST', '/admin/backends'],
        ['POST', `/admin/backends/${(sims[0] as Sim).id}/drain`],
        ['DELETE', `/admin/backends/${(sims[0] as Sim).id}`],
      ] as const) {
        const response = await admin(urls[0] as string, method, path, {
          token,
          ...(method === 'POST' && path === '/admin/backends' ? { body: { url: 'http://127.0.0.1:1' } } : {}),
        });
        expect(response.status, `${method} ${path} with ${token}`).toBe(401);
        expect(response.body).toEqual({
          error: {
            message: expect.any(String),
            type: 'invalid_request_error',
            param: null,
            code: 'ROUTER_ERR_UNAUTHORIZED',
          },
        });
        expect(response.headers.get('www-authenticate')).toMatch(/^Bearer/);
      }
    }
    const basic = await fetch(`${adminUrlOf.get(urls[0] as string)}/admin/backends`, {
      headers: { authorization: `Basic ${Buffer.from(`admin:${TOKEN}`).toString('base64')}` },
    });
    expect(basic.status).toBe(401);
    // Nothing changed.
    expect(
      routers.every(
        (router) =>
          router.registry.get((sims[0] as Sim).id) !== undefined && !router.registry.isDrained((sims[0] as Sim).id),
      ),
    ).toBe(true);
  });

  it('answers 400 to bad input, 404 to an unknown backend and 409 to a taken id or URL', async () => {
    const url = urls[0] as string;
    const bad: Array<[string, string, { body?: unknown; rawBody?: string }]> = [
      ['not a URL', '/admin/backends', { body: { url: 'not a url' } }],
      ['not http', '/admin/backends', { body: { url: 'ftp://127.0.0.1:1' } }],
      ['no url', '/admin/backends', { body: { id: 'x' } }],
      ['negative weight', '/admin/backends', { body: { url: 'http://127.0.0.1:1', weight: -1 } }],
      ['empty models', '/admin/backends', { body: { url: 'http://127.0.0.1:1', models: [] } }],
      ['an unknown field', '/admin/backends', { body: { url: 'http://127.0.0.1:1', color: 'red' } }],
      ['an id with spaces', '/admin/backends', { body: { url: 'http://127.0.0.1:1', id: 'gpu 1' } }],
      ['a JSON array', '/admin/backends', { body: [] }],
      ['invalid JSON', '/admin/backends', { rawBody: '{"url":' }],
    ];
    for (const [name, path, options] of bad) {
      const response = await admin(url, 'POST', path, options);
      expect(response.status, name).toBe(400);
      expect(response.body.error.code, name).toMatch(/^ROUTER_ERR_INVALID_(REQUEST|JSON)$/);
      expect(response.body.error.type, name).toBe('invalid_request_error');
    }
    const badId = await admin(url, 'POST', `/admin/backends/${encodeURIComponent('a b')}/drain`);
    expect(badId.status).toBe(400);
    const emptyBody = await admin(url, 'POST', '/admin/backends', { rawBody: '' });
    expect(emptyBody.status).toBe(400);
    expect(emptyBody.body.error.code).toBe('ROUTER_ERR_INVALID_REQUEST');
    // Drain takes no body; an empty one sent as JSON is fine.
    expect((await admin(url, 'POST', `/admin/backends/${(sims[2] as Sim).id}/undrain`, { rawBody: '' })).status).toBe(
      200,
    );
    const unknown = await admin(url, 'POST', '/admin/backends/no-such-backend/drain');
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('ROUTER_ERR_BACKEND_NOT_FOUND');
    expect((await admin(url, 'DELETE', '/admin/backends/no-such-backend')).body.error.code).toBe(
      'ROUTER_ERR_BACKEND_NOT_FOUND',
    );
    const sameId = await admin(url, 'POST', '/admin/backends', {
      body: { url: 'http://127.0.0.1:1', id: (sims[0] as Sim).id },
    });
    expect(sameId.status).toBe(409);
    expect(sameId.body.error.code).toBe('ROUTER_ERR_BACKEND_EXISTS');
    const sameUrl = await admin(url, 'POST', '/admin/backends', {
      body: { url: `${(sims[0] as Sim).url}/v1`, id: 'another-name' },
    });
    expect(sameUrl.status).toBe(409);
    expect(routers.every((router) => router.registry.get('another-name') === undefined)).toBe(true);
  });

  it('a change whose notice was lost reaches every replica through the poll within a second', async () => {
    const connection = createRedis(redis.url, 'request-path', { commandTimeoutMs: 5_000 });
    try {
      await waitUntilReady(connection);
      const keys = fleetKeys();
      const target = sims[1] as Sim;
      // Drained in Redis without PUBLISH, as if the message had been lost.
      const entry = JSON.parse((await connection.hget(keys.backends, target.id)) as string);
      const started = performance.now();
      await connection
        .multi()
        .hset(keys.backends, target.id, JSON.stringify({ ...entry, drained: true }))
        .incr(keys.version)
        .exec();
      await msUntil(() => routers.every((router) => !poolIds(router).includes(target.id)), 1000);
      const elapsed = performance.now() - started;
      console.info(
        `drain without a notice: out of both replicas' pools after ${elapsed.toFixed(1)} ms (poll every 500 ms)`,
      );
      expect(elapsed).toBeLessThan(1000);
      expect((await admin(urls[0] as string, 'POST', `/admin/backends/${target.id}/undrain`)).status).toBe(200);
      await waitFor(() => routers.every((router) => poolIds(router).includes(target.id)), 1000);
    } finally {
      connection.disconnect();
    }
  });

  it(
    "does not route to a backend in the shared set that this replica's address policy refuses (written " +
      'by a looser replica or straight into Redis)',
    async () => {
      const connection = createRedis(redis.url, 'request-path', { commandTimeoutMs: 5_000 });
      try {
        await waitUntilReady(connection);
        const keys = fleetKeys();
        const template = JSON.parse((await connection.hget(keys.backends, (sims[0] as Sim).id)) as string);
        const metadata = { ...template, id: 'metadata', url: 'http://169.254.169.254:80', drained: false };
        const [, [, version]] = (await connection
          .multi()
          .hset(keys.backends, 'metadata', JSON.stringify(metadata))
          .incr(keys.version)
          .exec()) as [unknown, [unknown, number]];
        // Both replicas read that version (the poll, 500 ms), and left the entry out of what they route by.
        await waitFor(async () => {
          for (const url of urls) if ((await admin(url, 'GET', '/admin/backends')).body.version < version) return false;
          return true;
        }, 3000);
        for (const url of urls) {
          const listed = (await admin(url, 'GET', '/admin/backends')).body.data.map((backend: any) => backend.id);
          expect(listed).not.toContain('metadata');
          expect(listed).toContain((sims[0] as Sim).id);
        }
        for (const router of routers) expect(poolIds(router)).not.toContain('metadata');
      } finally {
        await connection.multi().hdel(fleetKeys().backends, 'metadata').incr(fleetKeys().version).exec();
        connection.disconnect();
      }
    },
  );

  it('keeps routing on the last set while Redis is down, refuses admin changes, and recovers', async () => {
    const ids = routers.map((router) => router.registry.backends.map((backend) => backend.id));
    await redis.kill();
    try {
      await new Promise((resolve) => setTimeout(resolve, 700)); // more than one poll interval
      for (let index = 0; index < 8; index++) expect((await chat(urls[index % 2] as string)).status).toBe(200);
      expect(routers.map((router) => router.registry.backends.map((backend) => backend.id))).toEqual(ids);
      const refused = await admin(urls[0] as string, 'POST', `/admin/backends/${(sims[0] as Sim).id}/drain`);
      expect(refused.status).toBe(503);
      expect(refused.body.error.code).toBe('ROUTER_ERR_BACKEND_SET_UNAVAILABLE');
      expect(routers.every((router) => !router.registry.isDrained((sims[0] as Sim).id))).toBe(true);
    } finally {
      await redis.restart(); // without its data: the replicas seed again what they route by
    }
    await waitFor(
      async () =>
        (await admin(urls[0] as string, 'POST', `/admin/backends/${(sims[0] as Sim).id}/drain`)).status === 200,
      10_000,
    );
    await waitFor(() => routers.every((router) => router.registry.isDrained((sims[0] as Sim).id)), 1000);
    expect(routers.map((router) => router.registry.backends.map((backend) => backend.id).sort())).toEqual(
      ids.map((list) => [...list].sort()),
    );
  }, 30_000);
});
