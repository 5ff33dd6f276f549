import type { ServerResponse } from 'node:http';
import type { BackendObservation } from '@kvroute/protocols';
import { createRedis, RedisBackendStateStore } from '@kvroute/redis-store';
import { startRedis, type TestRedis } from '@kvroute/testing';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { FakeEngine, json, type EngineRequest } from './fake-engine';
import { totalInflight, waitFor } from './start-test-cluster';

/**
 * LoRA adapters through the router (issue 33) against fake vLLM engines that list adapters with their base model
 * (`parent`), the engines' residency published where the health poller publishes it (real Redis): discovery, the
 * routing order, no predicted hit across adapters, and an adapter conversation's turns on one backend whichever
 * replica routes them.
 */
const BASE = 'lora-base';
const ADAPTERS = ['tenant-a', 'tenant-b', 'tenant-c'];
const ADMIN_TOKEN = 'lora-admin-token-0123456789abcdef';
const DOCUMENT = 'Adapter-specific context: the claims policy covers water damage and theft. '.repeat(30);

/** A chat answer naming the engine, so a test sees where a request went without routing headers. */
function answerChat(name: string) {
  return (request: EngineRequest, response: ServerResponse): boolean => {
    if (request.url !== '/v1/chat/completions') return false;
    return json(response, 200, {
      id: `chatcmpl-${name}`,
      object: 'chat.completion',
      model: (JSON.parse(request.body) as { model: string }).model,
      choices: [{ index: 0, message: { role: 'assistant', content: name }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 500, completion_tokens: 1, total_tokens: 501 },
    });
  };
}

const OBSERVATION: BackendObservation = {
  engine: 'vllm',
  failure: null,
  kvUsage: 0.1,
  kvCapacityTokens: 100_000,
  running: 0,
  waiting: 0,
  prefixCacheHitRate: null,
  preemptionsTotal: 0,
  engineStartedAtMs: null,
  loraAdapters: null,
};

describe('LoRA adapters through the router (fake vLLM engines, real Redis)', () => {
  let redis: TestRedis;
  let states: RedisBackendStateStore;
  let publisher: ReturnType<typeof createRedis>;
  const engines: FakeEngine[] = [];
  const routers: RouterServer[] = [];
  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
    publisher = createRedis(redis.url, 'worker');
    states = new RedisBackendStateStore({ redis: publisher });
    for (let index = 0; index < 4; index++) {
      const engine = await new FakeEngine([
        { id: BASE },
        ...ADAPTERS.map((adapter) => ({ id: adapter, parent: BASE })),
      ]).start();
      engine.routes.push(answerChat(`engine-${index}`));
      engines.push(engine);
    }
  });
  afterEach(async () => {
    for (const router of routers.splice(0)) {
      await waitFor(() => totalInflight(router) === 0, 3_000).catch(() => undefined);
      expect(totalInflight(router)).toBe(0);
      await router.close();
    }
    await publisher.flushall(); // this file's own Redis (fresh)
  });
  afterAll(async () => {
    await Promise.all(engines.map((engine) => engine.close()));
    publisher.disconnect();
    await redis?.stop();
  });

  async function router(overrides: Record<string, unknown> = {}): Promise<{ router: RouterServer; url: string }> {
    const started = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        logLevel: 'silent',
        redisUrl: redis.url,
        backends: engines.map((engine) => ({ url: engine.url })),
        adminToken: ADMIN_TOKEN,
        adminPort: 0,
        debugRoutes: true,
        ...overrides,
      }),
    );
    routers.push(started);
    const url = await started.listen();
    // Every engine's models read (adapters and their base known) before the first request.
    await waitFor(() => started.registry.baseModelOf('tenant-c') === BASE, 5_000);
    return { router: started, url };
  }

  /** Publishes engine `index`'s adapter residency as the health poller does. */
  async function publishResidency(index: number, loraAdapters: BackendObservation['loraAdapters']): Promise<void> {
    const engine = engines[index] as FakeEngine;
    await states.record(
      {
        backendId: new URL(engine.url).host,
        healthPassed: true,
        observation: { ...OBSERVATION, loraAdapters },
        scrapedAtMs: Date.now(),
        carry: null,
      },
      { failuresToUnhealthy: 2, successesToHealthy: 1, ttlMs: 60_000 },
    );
  }

  const hostOf = (index: number) => new URL((engines[index] as FakeEngine).url).host;

  it('lists adapters with their base model; an unknown adapter is 404 in the OpenAI shape', async () => {
    const { url } = await router();
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const models = await client.models.list();
    const cards = new Map(models.data.map((card) => [card.id, card as OpenAI.Model & { parent?: string }]));
    expect(cards.get(BASE)?.parent).toBeUndefined();
    for (const adapter of ADAPTERS) expect(cards.get(adapter)?.parent).toBe(BASE);
    const unknown = await client.chat.completions
      .create({ model: 'tenant-unknown', messages: [{ role: 'user', content: 'hi' }] })
      .catch((error: unknown) => error);
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    expect((unknown as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({ param: 'model' });
  });

  it('routes an adapter where it runs, then to a free slot, then where it waits, before an engine whose slots are full', async () => {
    const full = { running: ['tenant-b', 'tenant-c'], waiting: [], maxLoras: 2 };
    await publishResidency(0, full);
    await publishResidency(1, { running: ['tenant-c'], waiting: [], maxLoras: 2 });
    await publishResidency(2, { running: ['tenant-b', 'tenant-c'], waiting: ['tenant-a'], maxLoras: 2 });
    await publishResidency(3, { running: ['tenant-a', 'tenant-b'], waiting: [], maxLoras: 2 });
    const { router: started } = await router({ loraRecentMs: 0 });
    const explain = async () => {
      const response = await fetch(`${started.adminUrl}/debug/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` },
        body: JSON.stringify({ model: 'tenant-a', messages: [{ role: 'user', content: 'a new question' }] }),
      });
      expect(response.status).toBe(200);
      const body = (await response.json()) as {
        decision: { backendId: string; scores: { backendId: string; parts: { adapterMs: number } }[] };
      };
      const adapterMs = Object.fromEntries(
        body.decision.scores.map((score) => [score.backendId, score.parts.adapterMs]),
      );
      return { chosen: body.decision.backendId, adapterMs };
    };
    await waitFor(async () => (await explain()).adapterMs[hostOf(3)] === 0, 5_000);
    // Running 0, a free slot a load, waiting a slot's wait, full both.
    expect(await explain()).toEqual({
      chosen: hostOf(3),
      adapterMs: { [hostOf(0)]: 600, [hostOf(1)]: 200, [hostOf(2)]: 400, [hostOf(3)]: 0 },
    });
    // Engine 3 swaps tenant-a out: the free slot is next; then engine 1 fills up: where tenant-a waits.
    await publishResidency(3, full);
    await waitFor(async () => (await explain()).chosen === hostOf(1), 5_000);
    await publishResidency(1, full);
    await waitFor(async () => (await explain()).chosen === hostOf(2), 5_000);
  });

  it("sends an adapter's request under the adapter's name, in its base model's pool", async () => {
    await publishResidency(2, { running: ['tenant-a'], waiting: [], maxLoras: 2 });
    const { url } = await router({ loraRecentMs: 0 });
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    await waitFor(async () => {
      const { data } = await client.chat.completions
        .create({ model: 'tenant-a', messages: [{ role: 'user', content: `question ${Math.random()}` }] })
        .withResponse();
      return data.choices[0]?.message.content === 'engine-2';
    }, 5_000);
    const sent = (engines[2] as FakeEngine).requests('POST', '/v1/chat/completions').at(-1);
    expect((JSON.parse(sent?.body ?? '{}') as { model: string }).model).toBe('tenant-a');
    // The base model's pool: its in-flight leases (one Redis hash per pool) carry the adapter's requests.
    const keys = await publisher.keys(`*{${BASE}}*`);
    expect(keys.length).toBeGreaterThan(0);
    expect(await publisher.keys('*{tenant-a}*')).toEqual([]);
  });

  it('never predicts a hit across adapters: the same prompt under another adapter matches nothing', async () => {
    const { url } = await router();
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const ask = (model: string) =>
      client.chat.completions
        .create({ model, messages: [{ role: 'user', content: DOCUMENT }] })
        .withResponse()
        .then(({ response }) => response.headers.get('x-router-reason'));
    expect(await ask('tenant-a')).not.toBe('prefix-affinity');
    await waitFor(async () => (await ask('tenant-a')) === 'prefix-affinity', 3_000);
    expect(await ask('tenant-b')).not.toBe('prefix-affinity');
  });

  it("two replicas: every turn of an adapter's conversation lands on one backend, whichever replica routes it", async () => {
    const first = await router();
    const second = await router();
    const clients = [first, second].map(
      ({ url }) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 }),
    );
    for (const adapter of ADAPTERS) {
      const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: `${adapter}: ${DOCUMENT}` }];
      const backends = new Set<string>();
      for (let turn = 0; turn < 6; turn++) {
        const { data, response } = await (clients[turn % 2] as OpenAI).chat.completions
          .create({ model: adapter, messages })
          .withResponse();
        backends.add(response.headers.get('x-router-backend') ?? '');
        messages.push(
          { role: 'assistant', content: data.choices[0]?.message.content ?? '' },
          { role: 'user', content: `Turn ${turn}: and what about flood damage in the basement?` },
        );
      }
      expect([...backends]).toHaveLength(1);
    }
  });
});
