import { findFreePorts, startRedis, type TestRedis } from '@kvroute/testing';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import OpenAI from 'openai';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { waitFor } from './start-test-cluster';

/**
 * Start-up as `docker compose up` or a rollout does it: the router comes up before its backends listen.
 * Its first GET /v1/models finds them not listening; it asks again on a short backoff, so the first
 * request is served within a second of the backends listening (the 30 s models refresh used to make
 * that ~30 s of 404s), and meanwhile a client only ever gets 503 + Retry-After, never a 404.
 */
interface Observed {
  readonly status: number;
  readonly code: string | null;
  readonly retryAfter: string | null;
  /** performance.now() when the answer came. */
  readonly atMs: number;
}

const chatBody = (model: string) =>
  JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 });
const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('start-up with backends not listening yet', () => {
  let redis: TestRedis;
  let router: RouterServer | null = null;
  let sims: SimServer[] = [];

  // A Redis per test: the fleet's backend set lives there, and each test has its own fleet.
  beforeEach(async () => {
    redis = await startRedis({ fresh: true, logger: () => undefined });
  });
  afterEach(async () => {
    await router?.close();
    await Promise.all(sims.map((sim) => sim.close()));
    await redis?.stop();
    router = null;
    sims = [];
  });

  /** Sims built on ports fixed in advance (the router is configured with them), not listening yet. */
  async function prepare(count: number, extra: Record<string, unknown> = {}): Promise<{ urls: string[] }> {
    const ports = await findFreePorts(count);
    sims = await Promise.all(
      ports.map((port) =>
        createSimServer(SimConfig.parse({ host: '127.0.0.1', port, profile: 'fast', model: 'test-model' })),
      ),
    );
    const urls = ports.map((port) => `http://127.0.0.1:${port}`);
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: urls,
        redisUrl: redis.url,
        redisTimeoutMs: 500,
        retryBackoffMs: 1,
        ...extra,
      }),
    );
    return { urls };
  }

  async function post(routerUrl: string, model: string): Promise<Observed> {
    const response = await fetch(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody(model),
    });
    const text = await response.text();
    let code: string | null = null;
    try {
      code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? null;
    } catch {
      code = null;
    }
    return { status: response.status, code, retryAfter: response.headers.get('retry-after'), atMs: performance.now() };
  }

  it('serves the first request within 1 s of the backends listening, with only 503 + Retry-After before', async () => {
    await prepare(2);
    const routerUrl = await (router as RouterServer).listen();

    // A client polling from before the backends listen, raw (every answer seen), until it has had 200s for a while.
    const observed: Observed[] = [];
    const readyz: Array<{ status: number; atMs: number }> = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        observed.push(await post(routerUrl, 'test-model'));
        readyz.push({ status: (await fetch(`${routerUrl}/readyz`)).status, atMs: performance.now() });
        await delay(20);
      }
    })();
    // And the official client, sent before the backends listen: its own retries follow Retry-After.
    const client = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: 'unused', maxRetries: 5 });
    const clientAnswer = client.chat.completions.create({
      model: 'test-model',
      messages: [{ role: 'user', content: 'before the backends' }],
      max_tokens: 4,
    });

    // The backends come up a moment after the router (as containers started together do).
    await delay(200);
    const listenedAt = await Promise.all(sims.map(async (sim) => (await sim.listen(), performance.now())));
    const backendsListeningAtMs = Math.max(...listenedAt);

    await waitFor(() => observed.filter((answer) => answer.status === 200).length >= 5, 10_000);
    polling = false;
    await poller;

    const firstOk = observed.findIndex((answer) => answer.status === 200);
    const before = observed.slice(0, firstOk);
    const after = observed.slice(firstOk);
    // The window was seen (the client polled before the backends listened)…
    expect(before.length).toBeGreaterThan(0);
    // …and in it only 503s with Retry-After, saying models are pending: never a 404.
    expect(observed.filter((answer) => answer.status === 404)).toEqual([]);
    for (const answer of before)
      expect(answer).toMatchObject({ status: 503, code: 'ROUTER_ERR_MODELS_PENDING', retryAfter: '1' });
    expect(after.every((answer) => answer.status === 200)).toBe(true);
    // Within a second of the backends listening (the models refresh alone took up to 30 s).
    const firstOkAtMs = (observed[firstOk] as Observed).atMs;
    expect(firstOkAtMs - backendsListeningAtMs).toBeLessThan(1_000);

    // /readyz: 503 until then, 200 from the first success on.
    expect(readyz.filter((probe) => probe.atMs < backendsListeningAtMs).every((probe) => probe.status === 503)).toBe(
      true,
    );
    expect(readyz.some((probe) => probe.atMs < backendsListeningAtMs)).toBe(true);
    expect(readyz.at(-1)?.status).toBe(200);

    const completion = await clientAnswer;
    expect(completion.choices[0]?.message.content).toEqual(expect.any(String));

    // Every backend has told its models: an unknown model is a 404 again.
    await waitFor(() => !(router as RouterServer).registry.modelsPending(), 5_000);
    expect(await post(routerUrl, 'no-such-model')).toMatchObject({ status: 404, code: 'ROUTER_ERR_MODEL_NOT_FOUND' });
  });

  it('serves what the listening backends serve while another is still down, and 404s unknown models once it answers', async () => {
    const { urls } = await prepare(2);
    const [up, late] = sims as [SimServer, SimServer];
    await up.listen();
    const routerUrl = await (router as RouterServer).listen();
    const lateId = new URL(urls[1] as string).host;

    await waitFor(async () => (await post(routerUrl, 'test-model')).status === 200, 5_000);
    // Ready (a backend that never comes up must not keep the replica out of the balancer), naming the missing one.
    const probe = await fetch(`${(router as RouterServer).opsUrl}/readyz`);
    expect(probe.status).toBe(200);
    expect(((await probe.json()) as { modelsPendingBackends: string[] }).modelsPendingBackends).toEqual([lateId]);
    // A model nobody reported may be the late backend's: 503 + Retry-After, not 404 (models.retrieve too).
    expect(await post(routerUrl, 'other-model')).toMatchObject({
      status: 503,
      code: 'ROUTER_ERR_MODELS_PENDING',
      retryAfter: '1',
    });
    const retrieved = await fetch(`${routerUrl}/v1/models/other-model`);
    expect([retrieved.status, retrieved.headers.get('retry-after')]).toEqual([503, '1']);

    await late.listen();
    await waitFor(() => !(router as RouterServer).registry.modelsPending(), 5_000);
    expect(await post(routerUrl, 'other-model')).toMatchObject({ status: 404, code: 'ROUTER_ERR_MODEL_NOT_FOUND' });
    expect((await fetch(`${routerUrl}/v1/models/other-model`)).status).toBe(404);
    expect(router?.registry.poolFor('test-model')).toHaveLength(2);
  });

  it('404s unknown models once modelsPendingMaxMs has passed for a backend that never listens, and still asks it', async () => {
    const windowMs = 1_500;
    const { urls } = await prepare(2, { modelsPendingMaxMs: windowMs });
    const [up, never] = sims as [SimServer, SimServer];
    await up.listen();
    const routerUrl = await (router as RouterServer).listen();
    const neverId = new URL(urls[1] as string).host;
    type Pending = { backend: string; ageMs: number; holdsUnknownModels: boolean };
    const readyz = async () =>
      (await (await fetch(`${(router as RouterServer).opsUrl}/readyz`)).json()) as {
        modelsPendingBackends: string[];
        modelsPending: Pending[];
      };

    await waitFor(async () => (await post(routerUrl, 'test-model')).status === 200, 5_000);
    // Within the window: unknown models may be the missing backend's (503), as /readyz says.
    const early = await readyz();
    const unknownEarly = await post(routerUrl, 'other-model');
    if ((early.modelsPending[0] as Pending).ageMs < windowMs - 200)
      expect(unknownEarly).toMatchObject({ status: 503, code: 'ROUTER_ERR_MODELS_PENDING' });
    expect(early.modelsPending).toEqual([
      { backend: neverId, ageMs: expect.any(Number), holdsUnknownModels: expect.any(Boolean) },
    ]);

    // After it: 404 (request and models.retrieve), while /readyz still names the backend, older than the window.
    await waitFor(async () => (await post(routerUrl, 'other-model')).status === 404, 10_000);
    expect(await post(routerUrl, 'other-model')).toMatchObject({ status: 404, code: 'ROUTER_ERR_MODEL_NOT_FOUND' });
    expect((await fetch(`${routerUrl}/v1/models/other-model`)).status).toBe(404);
    const late = await readyz();
    expect(late.modelsPendingBackends).toEqual([neverId]);
    expect(late.modelsPending).toEqual([{ backend: neverId, ageMs: expect.any(Number), holdsUnknownModels: false }]);
    expect((late.modelsPending[0] as Pending).ageMs).toBeGreaterThanOrEqual(windowMs);

    // It is still asked on its backoff: once it listens its models count.
    await never.listen();
    await waitFor(() => (router as RouterServer).registry.poolFor('test-model').length === 2, 10_000);
    expect((await readyz()).modelsPending).toEqual([]);
  });
});
