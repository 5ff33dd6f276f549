import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { generateApiKey } from '../src/tenants/api-key';
import { writeTestKeyFile } from './api-key-file';
import { FakeEngine, json } from './fake-engine';

/**
 * Issue 30, "Tenants' reach", pass-through: the endpoints a caller reaches come from an allow-list per
 * role (engine control is for admin keys), whatever the path's spelling.
 */
const keys = {
  user: generateApiKey(),
  bench: generateApiKey(),
  admin: generateApiKey(),
  metered: generateApiKey(),
};

async function startRouter(
  engine: FakeEngine,
  overrides: Partial<RouterConfig>,
): Promise<{ router: RouterServer; url: string }> {
  const router = await createRouterServer(
    RouterConfig.parse({
      host: '127.0.0.1',
      port: 0,
      opsPort: 0,
      backends: [engine.url],
      retryBackoffMs: 1,
      ...overrides,
    }),
  );
  const url = await router.listen();
  await router.registry.refreshModels();
  return { router, url };
}

describe('pass-through allow-list per role', () => {
  let engine: FakeEngine;
  let router: RouterServer;
  let open: RouterServer;
  let url: string;
  let openUrl: string;
  let keyFile: ReturnType<typeof writeTestKeyFile>;

  beforeAll(async () => {
    engine = await new FakeEngine([{ id: 'm' }]).start();
    keyFile = writeTestKeyFile([
      { id: 'user', tenant: 'acme', digest: keys.user.digest },
      { id: 'bench', tenant: 'ops', digest: keys.bench.digest, extra: '    role: bench\n' },
      { id: 'admin', tenant: 'ops', digest: keys.admin.digest, extra: '    role: admin\n' },
      { id: 'metered', tenant: 'metered', digest: keys.metered.digest, extra: '    tokensPerMinute: 60000\n' },
    ]);
    ({ router, url } = await startRouter(engine, {
      auth: 'api-keys',
      apiKeysFile: keyFile.file,
      cacheSaltSecret: 'passthrough-reach-salt-secret-0123',
    }));
    ({ router: open, url: openUrl } = await startRouter(engine, {}));
  });

  afterAll(async () => {
    await router?.close();
    await open?.close();
    await engine?.close();
    keyFile?.remove();
  });

  const post = (base: string, path: string, key: string | null, body: object = {}) =>
    fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key === null ? {} : { authorization: `Bearer ${key}` }) },
      body: JSON.stringify(body),
    });
  const LORA = { lora_name: 'sql-lora', lora_path: '/adapters/sql' };

  it('a user or bench key, or anyone in open mode, cannot load or unload an adapter (403, the engine sees nothing)', async () => {
    for (const [base, key] of [
      [url, keys.user.secret],
      [url, keys.bench.secret],
      [openUrl, null],
    ] as const) {
      for (const path of ['/v1/load_lora_adapter', '/v1/unload_lora_adapter']) {
        const response = await post(base, path, key, LORA);
        expect([path, response.status]).toEqual([path, 403]);
        const body = (await response.json()) as { error: { code: string; type: string } };
        expect(body.error.code).toBe('ROUTER_ERR_ENDPOINT_NOT_ALLOWED');
      }
    }
    // The official client's generic post, as a script would call it.
    const client = new OpenAI({ apiKey: keys.user.secret, baseURL: `${url}/v1`, maxRetries: 0 });
    await expect(client.post('/load_lora_adapter', { body: LORA })).rejects.toBeInstanceOf(
      OpenAI.PermissionDeniedError,
    );
    expect(engine.requests('POST', '/v1/load_lora_adapter')).toEqual([]);
    expect(engine.requests('POST', '/v1/unload_lora_adapter')).toEqual([]);
  });

  it('an admin key loads an adapter through the router', async () => {
    const response = await post(url, '/v1/load_lora_adapter', keys.admin.secret, LORA);
    expect(response.status).toBe(200);
    expect(engine.requests('POST', '/v1/load_lora_adapter')).toHaveLength(1);
  });

  it('a pass-through body is charged by its size, not a flat amount', async () => {
    const remaining = async (input: string): Promise<{ status: number; tokens: number }> => {
      const response = await post(url, '/v1/embeddings', keys.metered.secret, { model: 'm', input });
      await response.arrayBuffer();
      return { status: response.status, tokens: Number(response.headers.get('x-ratelimit-remaining-tokens')) };
    };
    // ~40 bytes: a handful of tokens (a flat 256 would leave 59,744).
    const small = await remaining('hi');
    expect(small.status).toBe(200);
    expect(small.tokens).toBeGreaterThan(60_000 - 100);
    // 80 KB: thousands of tokens at any plausible bytes per token.
    const large = await remaining('word '.repeat(16_000));
    expect(large.status).toBe(200);
    expect(large.tokens).toBeLessThan(small.tokens - 10_000);
    // Larger than a whole minute's tokens: refused before it is sent, as a generation would be.
    const huge = await post(url, '/v1/embeddings', keys.metered.secret, { model: 'm', input: 'word '.repeat(100_000) });
    expect(huge.status).toBe(400);
    expect(((await huge.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_REQUEST_OVER_LIMIT');
  });

  it('a path spelt otherwise (trailing slash, letter case) takes the plain path: parsed, salted, limited, forwarded canonical', async () => {
    const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
    for (const path of ['/v1/chat/completions/', '/v1/Chat/Completions', '/V1/CHAT/COMPLETIONS/']) {
      const before = engine.received.length;
      const response = await post(url, path, keys.metered.secret, chat);
      expect([path, response.status]).toEqual([path, 200]);
      // The limit stage ran (its headers), and so did parse: the tenant's salt is in what the engine got.
      expect(response.headers.get('x-ratelimit-limit-tokens')).toBe('60000');
      const forwarded = engine.received.slice(before);
      expect(forwarded.map((request) => request.url)).toEqual(['/v1/chat/completions']);
      expect(JSON.parse(forwarded[0]?.body ?? '{}')).toHaveProperty('cache_salt');
      await response.arrayBuffer();
    }
    // Validation runs too: an invalid chat body with a trailing slash is the router's 400, not the engine's.
    const invalid = await post(url, '/v1/chat/completions/', keys.user.secret, { model: 'm', messages: 'nope' });
    expect(invalid.status).toBe(400);
    // And the allow-list: engine control spelt otherwise is still refused.
    for (const path of ['/v1/load_lora_adapter/', '/v1/Load_LoRA_Adapter'])
      expect([path, (await post(url, path, keys.user.secret, LORA)).status]).toEqual([path, 403]);
    const models = await fetch(`${url}/v1/Models/`, { headers: { authorization: `Bearer ${keys.user.secret}` } });
    expect(((await models.json()) as { data: { id: string }[] }).data.map((model) => model.id)).toEqual(['m']);
    // Two slashes are not a spelling: an empty segment, refused.
    expect((await post(url, '/v1/chat/completions//', keys.user.secret, chat)).status).toBe(400);
  });

  it("a tenant's pooling requests are salted as its chat requests are; open mode and tokenize are not", async () => {
    const saltOf = async (base: string, key: string | null, path: string, body: object): Promise<unknown> => {
      const before = engine.received.length;
      const response = await post(base, path, key, body);
      expect([path, response.status]).toEqual([path, 200]);
      await response.arrayBuffer();
      // It reached the engine (an answer without forwarding would leave no salt to check).
      expect(engine.received).toHaveLength(before + 1);
      return (JSON.parse((engine.received[before] as { body: string }).body) as { cache_salt?: unknown }).cache_salt;
    };
    const chatSalt = await saltOf(url, keys.user.secret, '/v1/chat/completions', {
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(typeof chatSalt).toBe('string');
    const pooling: Array<[string, object]> = [
      ['/v1/embeddings', { model: 'm', input: 'hi' }],
      ['/pooling', { model: 'm', input: 'hi' }],
      ['/classify', { model: 'm', input: 'hi' }],
      ['/score', { model: 'm', text_1: 'a', text_2: 'b' }],
      ['/v1/score', { model: 'm', text_1: 'a', text_2: 'b' }],
      ['/rerank', { model: 'm', query: 'a', documents: ['b'] }],
      ['/v1/rerank', { model: 'm', query: 'a', documents: ['b'] }],
      ['/v2/rerank', { model: 'm', query: 'a', documents: ['b'] }],
    ];
    for (const [path, body] of pooling)
      expect([path, await saltOf(url, keys.user.secret, path, body)]).toEqual([path, chatSalt]);
    // A client's own salt partitions within its tenant, never across: it is replaced by a derived one.
    const own = await saltOf(url, keys.user.secret, '/v1/embeddings', { model: 'm', input: 'hi', cache_salt: 'mine' });
    expect(own).not.toBe('mine');
    expect(own).not.toBe(chatSalt);
    // Another tenant: another salt.
    expect(await saltOf(url, keys.bench.secret, '/v1/embeddings', { model: 'm', input: 'hi' })).not.toBe(chatSalt);
    expect(await saltOf(openUrl, null, '/v1/embeddings', { model: 'm', input: 'hi' })).toBeUndefined();
    expect(await saltOf(url, keys.user.secret, '/tokenize', { model: 'm', prompt: 'hi' })).toBeUndefined();
  });

  it("GET pass-through: the official client's files.list and batches.list are answered by the engine", async () => {
    engine.routes.push((request, response) => {
      const path = request.url.split('?')[0];
      if (request.method !== 'GET') return false;
      if (path === '/v1/files')
        return json(response, 200, {
          object: 'list',
          data: [{ id: 'file-1', object: 'file', bytes: 3, created_at: 1, filename: 'a.jsonl', purpose: 'batch' }],
          has_more: false,
        });
      if (path === '/v1/batches') return json(response, 200, { object: 'list', data: [], has_more: false });
      return false;
    });
    for (const [base, key] of [
      [url, keys.user.secret],
      [openUrl, 'unused'],
    ] as const) {
      const client = new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 0 });
      const files = await client.files.list();
      expect(files.data.map((file) => file.id)).toEqual(['file-1']);
      const batches = await client.batches.list({ limit: 5 });
      expect(batches.data).toEqual([]);
    }
    // A metered key's GET: admitted by its limits, charged nothing but the request.
    const metered = await fetch(`${url}/v1/files`, { headers: { authorization: `Bearer ${keys.metered.secret}` } });
    expect(metered.status).toBe(200);
    expect(metered.headers.get('x-ratelimit-limit-tokens')).toBe('60000');
    await metered.arrayBuffer();
    const forwarded = engine.requests('GET', '/v1/batches');
    expect(forwarded.at(-1)?.url).toBe('/v1/batches?limit=5');
    // The client's key is not forwarded; the router's id is.
    expect(forwarded.at(-1)?.headers.authorization).toBeUndefined();
    // A GET is admitted as a POST is: a key is needed.
    expect((await fetch(`${url}/v1/files`)).status).toBe(401);
    // Under /v1/responses/ only a stored response's own GET exists: nothing else reaches an engine.
    const inputItems = await fetch(`${url}/v1/responses/resp_1/input_items`, {
      headers: { authorization: `Bearer ${keys.user.secret}` },
    });
    expect(inputItems.status).toBe(404);
    expect(engine.requests('GET', '/v1/responses')).toEqual([]);
  });

  it('engine control outside /v1/ is never proxied, and the other pass-through paths still are', async () => {
    for (const path of ['/reset_prefix_cache', '/sleep', '/wake_up', '/collective_rpc']) {
      expect([path, (await post(url, path, keys.admin.secret)).status]).toEqual([path, 404]);
    }
    expect(engine.requests('POST', '/reset_prefix_cache')).toEqual([]);
    expect((await post(url, '/tokenize', keys.user.secret, { model: 'm', prompt: 'hi' })).status).toBe(200);
    expect((await post(url, '/v1/embeddings', keys.user.secret, { model: 'm', input: 'hi' })).status).toBe(200);
  });
});
