import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { generateApiKey } from '../src/tenants/api-key';
import { writeTestKeyFile } from './api-key-file';
import { FakeEngine, json } from './fake-engine';

/**
 * Issue 30, "Tenants' reach": the engine request id is the router's (the client's is logged and echoed),
 * Responses `background: true` is refused, and in open mode a stored response the owner map does not
 * know is looked for on the backends.
 */
async function startRouter(
  engines: readonly FakeEngine[],
  overrides: Partial<RouterConfig> = {},
): Promise<{ router: RouterServer; url: string }> {
  const router = await createRouterServer(
    RouterConfig.parse({
      host: '127.0.0.1',
      port: 0,
      opsPort: 0,
      backends: engines.map((engine) => engine.url),
      retryBackoffMs: 1,
      ...overrides,
    }),
  );
  const url = await router.listen();
  await router.registry.refreshModels();
  return { router, url };
}

const storedResponse = (id: string) => ({
  id,
  object: 'response',
  created_at: 1,
  status: 'completed',
  model: 'm',
  output: [],
  usage: { input_tokens: 3, output_tokens: 1, total_tokens: 4 },
});

describe('engine request ids and background responses', () => {
  let engine: FakeEngine;
  let router: RouterServer;
  let url: string;

  beforeAll(async () => {
    engine = await new FakeEngine([{ id: 'm' }]).start();
    ({ router, url } = await startRouter([engine]));
  });

  afterAll(async () => {
    await router?.close();
    await engine?.close();
  });

  it("a client's X-Request-Id and body request_id never reach the engine as its id; the client's id is echoed", async () => {
    const sent: Array<[string, object]> = [
      ['/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'hi' }], request_id: 'dup-body' }],
      ['/v1/completions', { model: 'm', prompt: 'hi', request_id: 'dup-body' }],
    ];
    const before = engine.received.length;
    for (const [path, body] of sent) {
      for (let attempt = 0; attempt < 2; attempt++) {
        const response = await fetch(`${url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-request-id': 'dup-1' },
          body: JSON.stringify(body),
        });
        expect(response.status).toBe(200);
        expect(response.headers.get('x-request-id')).toBe('dup-1');
        await response.arrayBuffer();
      }
    }
    const received = engine.received.slice(before);
    expect(received).toHaveLength(4);
    const ids = received.map((request) => request.headers['x-request-id']);
    expect(ids.every((id) => typeof id === 'string' && id !== 'dup-1')).toBe(true);
    expect(new Set(ids).size).toBe(4);
    for (const request of received) expect(JSON.parse(request.body)).not.toHaveProperty('request_id');
    // With the official client (it sends no id of its own): the router's id reaches the engine and comes back.
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${url}/v1`, maxRetries: 0 });
    const { response } = await client.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    expect(engine.received.at(-1)?.headers['x-request-id']).toBe(response.headers.get('x-request-id'));
  });

  it('Responses `background: true` is refused with a clear 400, and no engine generates it', async () => {
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${url}/v1`, maxRetries: 0 });
    const refused = await client.responses.create({ model: 'm', input: 'hi', background: true }).then(
      () => null,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('background');
    expect((refused as Error).message).toContain('background');
    expect(engine.requests('POST', '/v1/responses')).toEqual([]);
  });
});

describe('open mode: a stored response the owner map does not know is looked for on the backends', () => {
  let engines: FakeEngine[];
  let hanging: FakeEngine;
  let router: RouterServer;
  let url: string;
  let tenants: { router: RouterServer; url: string };
  let keyFile: ReturnType<typeof writeTestKeyFile>;
  const key = generateApiKey();

  beforeAll(async () => {
    engines = await Promise.all([0, 1, 2].map(() => new FakeEngine([{ id: 'm' }]).start()));
    // The second engine holds resp_known (stored there before the router knew: a restart, another fleet).
    engines[1]?.routes.push((request, response) =>
      request.method === 'GET' && request.url === '/v1/responses/resp_known'
        ? json(response, 200, storedResponse('resp_known'))
        : false,
    );
    for (const engine of engines)
      engine.routes.push((request, response) =>
        request.url.startsWith('/v1/responses/') ? json(response, 404, { error: { message: 'not found' } }) : false,
      );
    // One engine never answers a stored response's GET: the search is bounded in time.
    hanging = await new FakeEngine([{ id: 'm' }]).start();
    hanging.routes.push((request) => request.url.startsWith('/v1/responses/'));
    ({ router, url } = await startRouter([...engines, hanging]));
    keyFile = writeTestKeyFile([{ id: 'k', tenant: 'acme', digest: key.digest }]);
    tenants = await startRouter(engines, {
      auth: 'api-keys',
      apiKeysFile: keyFile.file,
      cacheSaltSecret: 'engine-ids-cache-salt-secret-0123',
    });
  });

  afterAll(async () => {
    await router?.close();
    await tenants?.router.close();
    await Promise.all([...(engines ?? []), hanging].map((engine) => engine?.close()));
    keyFile?.remove();
  });

  it('the first backend to answer 200 serves it (responses.retrieve), and is remembered', async () => {
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${url}/v1`, maxRetries: 0 });
    const startedAt = performance.now();
    const found = await client.responses.retrieve('resp_known');
    expect(found.id).toBe('resp_known');
    expect(performance.now() - startedAt).toBeLessThan(1_500);
    const probes = engines[1]?.requests('GET', '/v1/responses/resp_known').length ?? 0;
    // Remembered: the next GET goes straight to the owner (one more request there, none to the others).
    const others = () => engines.filter((_, index) => index !== 1).flatMap((e) => e.requests('GET', '/v1/responses/'));
    const othersBefore = others().length;
    expect((await client.responses.retrieve('resp_known')).id).toBe('resp_known');
    expect(engines[1]?.requests('GET', '/v1/responses/resp_known').length).toBe(probes + 1);
    expect(others().length).toBe(othersBefore);
  });

  it('an id no backend holds is a 404 within the search bound, even with an engine that never answers', async () => {
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${url}/v1`, maxRetries: 0 });
    const startedAt = performance.now();
    await expect(client.responses.retrieve('resp_nowhere')).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    expect(performance.now() - startedAt).toBeLessThan(4_000);
  });

  it('with tenants, an id outside the caller scope is not searched for', async () => {
    const before = engines[1]?.requests('GET', '/v1/responses/resp_known').length ?? 0;
    const answer = await fetch(`${tenants.url}/v1/responses/resp_known`, {
      headers: { authorization: `Bearer ${key.secret}` },
    });
    expect(answer.status).toBe(404);
    expect(engines[1]?.requests('GET', '/v1/responses/resp_known').length).toBe(before);
  });
});
