import { startRedis, type TestRedis } from '@kvroute/testing';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { generateApiKey } from '../src/tenants/api-key';
import { writeTestKeyFile } from './api-key-file';
import { FakeEngine } from './fake-engine';

/**
 * Issue 30, "Tenants' reach": keys and tenants carry the models they may use (`models` on a key-file
 * entry, on a tenant, on an admin API key). An adapter comes with its base model (the engine lists it
 * with `parent`). Any other model is answered exactly as one that does not exist, on every route that
 * names a model; `/v1/models` lists only the allowed ones, and backend ids only to privileged keys.
 */
const ADMIN_TOKEN = 'model-access-admin-token-0123456789';
const MODELS = [{ id: 'base-model' }, { id: 'sql-lora', parent: 'base-model' }, { id: 'other-model' }];

const keys = {
  base: generateApiKey(),
  tenantBound: generateApiKey(),
  narrowed: generateApiKey(),
  bench: generateApiKey(),
  free: generateApiKey(),
};

interface ErrorBody {
  error: { message: string; type: string; code: string; param: string | null };
}

describe('allowed models per key and tenant', () => {
  let engine: FakeEngine;
  let redis: TestRedis;
  let router: RouterServer;
  let url: string;
  let keyFile: ReturnType<typeof writeTestKeyFile>;

  beforeAll(async () => {
    engine = await new FakeEngine(MODELS).start();
    redis = await startRedis({ fresh: true, logger: () => undefined });
    keyFile = writeTestKeyFile([
      { id: 'base', tenant: 'acme', digest: keys.base.digest, extra: '    models: [base-model]\n' },
      { id: 'tenant-bound', tenant: 'globex', digest: keys.tenantBound.digest },
      // The key narrows its tenant's list: both must allow the model.
      { id: 'narrowed', tenant: 'globex', digest: keys.narrowed.digest, extra: '    models: [base-model]\n' },
      { id: 'bench', tenant: 'ops', digest: keys.bench.digest, extra: '    role: bench\n' },
      { id: 'free', tenant: 'free', digest: keys.free.digest },
    ]);
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        adminHost: '127.0.0.1',
        adminPort: 0,
        adminToken: ADMIN_TOKEN,
        backends: [engine.url],
        redisUrl: redis.url,
        auth: 'api-keys',
        apiKeysFile: keyFile.file,
        cacheSaltSecret: 'model-access-cache-salt-secret-0123',
        tenants: [{ id: 'globex', models: ['other-model', 'base-model'] }],
        retryBackoffMs: 1,
      }),
    );
    url = await router.listen();
    await router.registry.refreshModels();
  });

  afterAll(async () => {
    await router?.close();
    await engine?.close();
    await redis?.stop();
    keyFile?.remove();
  });

  const post = async (key: string, path: string, body: object) => {
    const response = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const listed = async (key: string) => {
    const response = await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    return ((await response.json()) as { data: Array<{ id: string; backends?: string[] }> }).data;
  };
  /** An error body with the model's name taken out: what tells two refusals apart, if anything. */
  const anonymous = (body: Record<string, unknown>, model: string): string =>
    JSON.stringify(body).replaceAll(model, '<model>');

  const bodies: Array<[string, (model: string) => object]> = [
    ['/v1/chat/completions', (model) => ({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })],
    ['/v1/completions', (model) => ({ model, prompt: 'hi', max_tokens: 2 })],
    ['/v1/responses', (model) => ({ model, input: 'hi' })],
    ['/v1/messages', (model) => ({ model, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] })],
    ['/v1/embeddings', (model) => ({ model, input: 'hi' })],
    ['/pooling', (model) => ({ model, input: 'hi' })],
    ['/tokenize', (model) => ({ model, prompt: 'hi' })],
  ];

  it('another model is a 404 exactly like a model that does not exist, on every route that names one', async () => {
    for (const [path, body] of bodies) {
      const forbidden = await post(keys.base.secret, path, body('other-model'));
      const missing = await post(keys.base.secret, path, body('no-such-model'));
      expect([path, forbidden.status]).toEqual([path, 404]);
      expect((forbidden.body as unknown as ErrorBody).error.code).toBe('ROUTER_ERR_MODEL_NOT_FOUND');
      expect(anonymous(forbidden.body, 'other-model')).toBe(anonymous(missing.body, 'no-such-model'));
    }
    expect(engine.received.filter((request) => request.body.includes('other-model'))).toEqual([]);
  });

  it('the allowed model and its adapter go through, with the official client', async () => {
    const client = new OpenAI({ apiKey: keys.base.secret, baseURL: `${url}/v1`, maxRetries: 0 });
    for (const model of ['base-model', 'sql-lora']) {
      const answer = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] });
      expect(answer.model).toBe(model);
    }
    await expect(
      client.chat.completions.create({ model: 'other-model', messages: [{ role: 'user', content: 'hi' }] }),
    ).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.models.retrieve('other-model')).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    expect((await client.models.retrieve('sql-lora')).id).toBe('sql-lora');
  });

  it("a tenant's list applies to its keys, and a key's list narrows its tenant's", async () => {
    const chat = (model: string) => ({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect((await post(keys.tenantBound.secret, '/v1/chat/completions', chat('other-model'))).status).toBe(200);
    expect((await post(keys.narrowed.secret, '/v1/chat/completions', chat('other-model'))).status).toBe(404);
    expect((await post(keys.narrowed.secret, '/v1/chat/completions', chat('sql-lora'))).status).toBe(200);
    expect((await post(keys.free.secret, '/v1/chat/completions', chat('other-model'))).status).toBe(200);
  });

  it('/v1/models lists the allowed models only, and backend ids to privileged keys only', async () => {
    const forBase = await listed(keys.base.secret);
    expect(forBase.map((model) => model.id).sort()).toEqual(['base-model', 'sql-lora']);
    expect(forBase.every((model) => model.backends === undefined)).toBe(true);
    const forFree = await listed(keys.free.secret);
    expect(forFree.map((model) => model.id).sort()).toEqual(['base-model', 'other-model', 'sql-lora']);
    expect(forFree.every((model) => model.backends === undefined)).toBe(true);
    const forBench = await listed(keys.bench.secret);
    expect(forBench.map((model) => model.id).sort()).toEqual(['base-model', 'other-model', 'sql-lora']);
    expect(forBench.every((model) => model.backends?.length === 1)).toBe(true);
  });

  it('a key added through the admin API carries its models', async () => {
    const added = await fetch(`${router.adminUrl}/admin/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'admin-added', tenant: 'initech', models: ['other-model'] }),
    });
    expect(added.status).toBe(201);
    const { key, models } = (await added.json()) as { key: string; models: string[] };
    expect(models).toEqual(['other-model']);
    const chat = (model: string) => ({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect((await post(key, '/v1/chat/completions', chat('other-model'))).status).toBe(200);
    expect((await post(key, '/v1/chat/completions', chat('base-model'))).status).toBe(404);
    expect((await listed(key)).map((model) => model.id)).toEqual(['other-model']);
  });
});

describe('/v1/models in open mode', () => {
  let engine: FakeEngine;
  let router: RouterServer;
  let url: string;

  beforeAll(async () => {
    engine = await new FakeEngine(MODELS).start();
    router = await createRouterServer(
      RouterConfig.parse({ host: '127.0.0.1', port: 0, opsPort: 0, backends: [engine.url], retryBackoffMs: 1 }),
    );
    url = await router.listen();
    await router.registry.refreshModels();
  });

  afterAll(async () => {
    await router?.close();
    await engine?.close();
  });

  it('lists every model, with no backend ids', async () => {
    const data = ((await (await fetch(`${url}/v1/models`)).json()) as { data: Array<Record<string, unknown>> }).data;
    expect(data.map((model) => model.id).sort()).toEqual(['base-model', 'other-model', 'sql-lora']);
    expect(data.every((model) => !('backends' in model))).toBe(true);
    const one = (await (await fetch(`${url}/v1/models/sql-lora`)).json()) as Record<string, unknown>;
    expect('backends' in one).toBe(false);
  });
});
