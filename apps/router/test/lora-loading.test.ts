import type { ServerResponse } from 'node:http';
import { createRedis, poolKeys } from '@kvroute/redis-store';
import { startRedis, type TestRedis } from '@kvroute/testing';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { FakeEngine, json, type EngineRequest, type FakeModel } from './fake-engine';
import { waitFor } from './start-test-cluster';

/**
 * Loading LoRA adapters on demand (issue 33) against fake vLLM engines with the runtime endpoints
 * (`/v1/load_lora_adapter`, `/v1/unload_lora_adapter`) that serve an adapter only once it is loaded (404 before, as
 * vLLM does), three router replicas over one real Redis: one load however many replicas route the adapter at once,
 * a failed load kept off its backend, the coldest adapter unloaded when a backend is full.
 */
const BASE = 'lora-ondemand-base';
const LOADABLE = ['tenant-x', 'tenant-y', 'tenant-z'].map((name) => ({ name, path: `/adapters/${name}`, base: BASE }));

/** An engine with vLLM's runtime LoRA endpoints: loads take `loadMs`; `fails` answers 500 for those adapters. */
class LoraEngine {
  readonly loads: string[] = [];
  readonly unloads: string[] = [];
  readonly fails = new Set<string>();
  constructor(
    readonly engine: FakeEngine,
    /** The engine's model list (what GET /v1/models answers): loads and unloads change it. */
    readonly models: FakeModel[],
  ) {}

  static async start(loadMs = 100): Promise<LoraEngine> {
    const models: FakeModel[] = [{ id: BASE }];
    const engine = await new FakeEngine(models).start();
    const lora = new LoraEngine(engine, models);
    engine.routes.push((request, response) => lora.answer(request, response, loadMs));
    return lora;
  }

  private answer(request: EngineRequest, response: ServerResponse, loadMs: number): boolean {
    const body = request.body === '' ? {} : (JSON.parse(request.body) as Record<string, string>);
    if (request.url === '/v1/load_lora_adapter') {
      const name = body['lora_name'] as string;
      this.loads.push(name);
      setTimeout(() => {
        if (this.fails.has(name)) return json(response, 500, { error: { message: 'load failed' } });
        this.models.push({ id: name, parent: BASE });
        response.end(`Success: LoRA adapter '${name}' added successfully.`);
      }, loadMs);
      return true;
    }
    if (request.url === '/v1/unload_lora_adapter') {
      const name = body['lora_name'] as string;
      this.unloads.push(name);
      const index = this.models.findIndex((model) => model.id === name);
      if (index === -1) return json(response, 404, { error: { message: 'not found' } });
      this.models.splice(index, 1);
      response.end(`Success: LoRA adapter '${name}' removed successfully.`);
      return true;
    }
    // vLLM answers a model it does not serve (an adapter not loaded) with 404.
    if (!this.models.some((model) => model.id === body['model']))
      return json(response, 404, { error: { message: `The model \`${body['model']}\` does not exist.` } });
    return false;
  }
}

describe('LoRA adapters loaded on demand (fake vLLM engines, three replicas, real Redis)', () => {
  let redis: TestRedis;
  const engines: LoraEngine[] = [];
  const routers: RouterServer[] = [];
  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
  });
  afterEach(async () => {
    // No lease left in the fleet's state (a replica's own count is what it last saw of everyone's).
    const reader = createRedis(redis.url, 'worker');
    const fleetInflight = async () =>
      Object.values(await reader.hgetall(poolKeys(BASE).inflight)).reduce((sum, count) => sum + Number(count), 0);
    await waitFor(async () => (await fleetInflight()) === 0, 3_000).catch(() => undefined);
    expect(await fleetInflight()).toBe(0);
    for (const router of routers.splice(0)) await router.close();
    await Promise.all(engines.splice(0).map((engine) => engine.engine.close()));
    await reader.flushall(); // this file's own Redis (fresh)
    reader.disconnect();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  async function start(engineCount: number, overrides: Record<string, unknown> = {}, replicas = 3) {
    for (let index = 0; index < engineCount; index++) engines.push(await LoraEngine.start());
    const urls: string[] = [];
    for (let index = 0; index < replicas; index++) {
      const router = await createRouterServer(
        RouterConfig.parse({
          host: '127.0.0.1',
          port: 0,
          opsPort: 0,
          logLevel: 'silent',
          redisUrl: redis.url,
          backends: engines.map((engine) => ({ url: engine.engine.url })),
          loraAdapters: LOADABLE,
          loraLoadSpacingMs: 0,
          ...overrides,
        }),
      );
      routers.push(router);
      urls.push(await router.listen());
    }
    return urls.map((url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 }));
  }

  const loadsOf = (adapter: string) =>
    engines.reduce((sum, engine) => sum + engine.loads.filter((name) => name === adapter).length, 0);

  it('loads an adapter no engine has once, whichever replicas route it at once; every request is served under it', async () => {
    const clients = await start(4);
    const ask = (client: OpenAI, content: string) =>
      client.chat.completions.create({ model: 'tenant-x', messages: [{ role: 'user', content }] });
    const answers = await Promise.all(
      Array.from({ length: 9 }, (_, index) => ask(clients[index % 3] as OpenAI, 'the same first question')),
    );
    expect(answers.every((answer) => answer.model === 'tenant-x')).toBe(true);
    expect(loadsOf('tenant-x')).toBe(1);
    // A new conversation goes where the adapter is now (a load elsewhere costs more): no second load.
    await ask(clients[1] as OpenAI, 'another conversation entirely');
    expect(loadsOf('tenant-x')).toBe(1);
    // Listed with its base model, though no engine listed it before.
    const listed = await (clients[0] as OpenAI).models.list();
    expect(listed.data.find((card) => card.id === 'tenant-y')).toMatchObject({ parent: BASE });
  });

  it('a load that fails keeps the adapter off that engine: the request is served elsewhere, or gets 503 with Retry-After', async () => {
    const clients = await start(4, { maxAttempts: 4 });
    for (const engine of engines.slice(0, 3)) engine.fails.add('tenant-y');
    for (const engine of engines) engine.fails.add('tenant-z');
    const served = await (clients[0] as OpenAI).chat.completions.create({
      model: 'tenant-y',
      messages: [{ role: 'user', content: 'first' }],
    });
    expect(served.model).toBe('tenant-y');
    expect(engines[3]?.loads).toEqual(['tenant-y']);
    const refused = await (clients[1] as OpenAI).chat.completions
      .create({ model: 'tenant-z', messages: [{ role: 'user', content: 'first' }] })
      .withResponse()
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.APIError);
    expect((refused as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    expect((refused as InstanceType<typeof OpenAI.APIError>).headers?.get('retry-after')).toBeTruthy();
    const attempts = loadsOf('tenant-z');
    expect(attempts).toBeGreaterThan(0);
    expect(attempts).toBeLessThanOrEqual(4);
    // Kept off: the next request, on another replica, makes no load call before the error.
    await (clients[2] as OpenAI).chat.completions
      .create({ model: 'tenant-z', messages: [{ role: 'user', content: 'again' }] })
      .catch(() => undefined);
    expect(loadsOf('tenant-z')).toBe(attempts);
  });

  it('an engine that lost an adapter the router loaded there (it restarted) answers 404: forgotten, served elsewhere', async () => {
    const [client] = await start(2, {}, 1);
    const ask = () =>
      (client as OpenAI).chat.completions.create({ model: 'tenant-x', messages: [{ role: 'user', content: 'same' }] });
    expect((await ask()).model).toBe('tenant-x');
    const holder = engines.find((engine) => engine.loads.includes('tenant-x')) as LoraEngine;
    const other = engines.find((engine) => engine !== holder) as LoraEngine;
    // The holder restarts: its adapters are gone, the router is not told.
    holder.models.splice(1);
    expect((await ask()).model).toBe('tenant-x');
    expect(other.loads).toEqual(['tenant-x']);
    // Forgotten on the holder: the next request goes where the adapter is now, without another 404.
    const before = holder.engine.requests('POST', '/v1/chat/completions').length;
    expect((await ask()).model).toBe('tenant-x');
    expect(holder.engine.requests('POST', '/v1/chat/completions').length).toBe(before);
  });

  it('one engine: its 404 reaches the client once, the next request loads the adapter again; a 404 about something else unloads nothing', async () => {
    const [client] = await start(1, {}, 1);
    const ask = (content: string) =>
      (client as OpenAI).chat.completions
        .create({ model: 'tenant-x', messages: [{ role: 'user', content }] })
        .then((answer) => answer.model)
        .catch((error: unknown) => (error as InstanceType<typeof OpenAI.APIError>).status);
    const engine = engines[0] as LoraEngine;
    expect(await ask('first')).toBe('tenant-x');
    engine.models.splice(1);
    // No other backend to try: the engine's 404 is relayed, and the adapter forgotten there.
    expect(await ask('second')).toBe(404);
    expect(await ask('third')).toBe('tenant-x');
    expect(engine.loads).toEqual(['tenant-x', 'tenant-x']);
    // A 404 the engine gives for another reason (the adapter still listed) keeps it loaded.
    engine.engine.routes.unshift((request, response) =>
      request.body.includes('missing-thing') ? json(response, 404, { error: { message: 'no such thing' } }) : false,
    );
    expect(await ask('missing-thing')).toBe(404);
    expect(await ask('fourth')).toBe('tenant-x');
    expect(engine.loads).toEqual(['tenant-x', 'tenant-x']);
  });

  it('a full engine unloads its coldest adapter before loading another; tenants cannot call the load endpoints', async () => {
    const [client] = await start(1, { loraMaxAdaptersPerBackend: 1 }, 1);
    await (client as OpenAI).chat.completions.create({ model: 'tenant-x', messages: [{ role: 'user', content: 'x' }] });
    await (client as OpenAI).chat.completions.create({ model: 'tenant-y', messages: [{ role: 'user', content: 'y' }] });
    expect(engines[0]?.loads).toEqual(['tenant-x', 'tenant-y']);
    expect(engines[0]?.unloads).toEqual(['tenant-x']);
    const direct = await fetch(`${(client as OpenAI).baseURL}/load_lora_adapter`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ lora_name: 'evil', lora_path: '/etc' }),
    });
    expect(direct.status).toBeGreaterThanOrEqual(400);
    expect(direct.status).toBeLessThan(500);
    expect(engines[0]?.loads).not.toContain('evil');
  });
});
