import OpenAI from 'openai';
import { startRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { generateApiKey } from '../src/tenants/api-key';
import { writeTestKeyFile } from './api-key-file';
import { FakeResponsesBackend } from './fake-responses-backend';
import { startTestCluster, waitFor, type TestCluster } from './start-test-cluster';

/**
 * Responses API with tenants: the response-owner map is per cache scope (a tenant's, or its team's),
 * so one tenant can neither fetch, delete nor continue another's stored response through the router,
 * and an id unknown in the caller's scope is refused by the router, never prefix-routed to an engine
 * (engines keep responses with no notion of tenant).
 */
const keys = { a: generateApiKey(), b: generateApiKey(), teamOne: generateApiKey(), teamTwo: generateApiKey() };

describe('Responses API with tenants', () => {
  let cluster: TestCluster;
  let keyFile: ReturnType<typeof writeTestKeyFile>;
  const clientOf = (key: string): OpenAI =>
    new OpenAI({ apiKey: key, baseURL: `${cluster.routerUrl}/v1`, maxRetries: 0 });

  beforeAll(async () => {
    keyFile = writeTestKeyFile([
      { id: 'a', tenant: 'tenant-a', digest: keys.a.digest },
      { id: 'b', tenant: 'tenant-b', digest: keys.b.digest },
      { id: 'one', tenant: 'tenant-c', digest: keys.teamOne.digest },
      { id: 'two', tenant: 'tenant-d', digest: keys.teamTwo.digest },
    ]);
    cluster = await startTestCluster({
      backends: 1,
      router: {
        auth: 'api-keys',
        apiKeysFile: keyFile.file,
        cacheSaltSecret: 'test-cache-salt-secret-0123456789',
        tenants: [
          { id: 'tenant-c', team: 'research' },
          { id: 'tenant-d', team: 'research' },
        ],
      },
    });
  });

  afterAll(async () => {
    await cluster?.close();
    keyFile?.remove();
  });

  it("a tenant cannot fetch, delete or continue another tenant's response, even on the one backend that holds it", async () => {
    const owner = clientOf(keys.a.secret);
    const other = clientOf(keys.b.secret);
    const created = await owner.responses.create({ model: 'test-model', input: 'private notes', max_output_tokens: 3 });
    const notFound = { status: 404, error: { code: 'ROUTER_ERR_RESPONSE_NOT_FOUND' } };
    await expect(other.responses.retrieve(created.id)).rejects.toMatchObject(notFound);
    await expect(other.responses.delete(created.id)).rejects.toMatchObject(notFound);
    // One backend: a prefix-routed guess would reach the engine that holds it; the router refuses instead.
    await expect(
      other.responses.create({ model: 'test-model', previous_response_id: created.id, input: 'tell me' }),
    ).rejects.toMatchObject({ ...notFound, error: { param: 'previous_response_id' } });
    // Still there for its owner.
    expect((await owner.responses.retrieve(created.id)).id).toBe(created.id);
    const next = await owner.responses.create({
      model: 'test-model',
      previous_response_id: created.id,
      input: 'more',
      max_output_tokens: 2,
    });
    expect(next.previous_response_id).toBe(created.id);
  });

  it("refuses a body with request_id (the engine would store under that id, over another tenant's response) before sending it anywhere", async () => {
    const owner = clientOf(keys.a.secret);
    const created = await owner.responses.create({ model: 'test-model', input: 'keep me', max_output_tokens: 2 });
    const sim = cluster.sims[0]?.sim;
    const before = sim?.generationRequestsReceived;
    const hijack = await fetch(`${cluster.routerUrl}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${keys.b.secret}` },
      body: JSON.stringify({ model: 'test-model', input: 'overwrite', request_id: created.id }),
    });
    expect(hijack.status).toBe(400);
    expect(((await hijack.json()) as { error: unknown }).error).toMatchObject({
      type: 'invalid_request_error',
      param: 'request_id',
      code: 'ROUTER_ERR_INVALID_REQUEST',
    });
    // Even a tenant's own id is refused: the router cannot tell whose an id will be on the engine.
    await expect(
      owner.responses.create({ model: 'test-model', input: 'x', request_id: 'resp_mine' } as never),
    ).rejects.toMatchObject({ status: 400, error: { param: 'request_id' } });
    expect(sim?.generationRequestsReceived).toBe(before);
    expect((await owner.responses.retrieve(created.id)).output_text).toBe(created.output_text);
  });

  it("tenants of one team share their responses, as they share the team's cache", async () => {
    const created = await clientOf(keys.teamOne.secret).responses.create({
      model: 'test-model',
      input: 'team notes',
      max_output_tokens: 2,
    });
    const next = await clientOf(keys.teamTwo.secret).responses.create({
      model: 'test-model',
      previous_response_id: created.id,
      input: 'and?',
      max_output_tokens: 2,
    });
    expect(next.previous_response_id).toBe(created.id);
  });
});

describe('Responses API with tenants: what reaches the engine', () => {
  let backend: FakeResponsesBackend;
  let router: RouterServer;
  let routerUrl: string;
  let keyFile: ReturnType<typeof writeTestKeyFile>;

  beforeAll(async () => {
    backend = await new FakeResponsesBackend().start();
    keyFile = writeTestKeyFile([{ id: 'a', tenant: 'tenant-a', digest: keys.a.digest }]);
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [{ url: backend.url, models: ['test-model'] }],
        retryBackoffMs: 1,
        auth: 'api-keys',
        apiKeysFile: keyFile.file,
        cacheSaltSecret: 'test-cache-salt-secret-0123456789',
      }),
    );
    routerUrl = await router.listen();
  });

  afterAll(async () => {
    await router?.close();
    await backend?.close();
    keyFile?.remove();
  });

  const post = (body: unknown, headers: Record<string, string> = {}): Promise<Response> =>
    fetch(`${routerUrl}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${keys.a.secret}`, ...headers },
      body: JSON.stringify(body),
    });

  it("sends the engine a router-made X-Request-Id, not the client's; the client's response keeps its own", async () => {
    const answer = await post({ model: 'test-model', input: 'hello' }, { 'x-request-id': 'resp_chosen_by_client' });
    expect(answer.status).toBe(200);
    expect(answer.headers.get('x-request-id')).toBe('resp_chosen_by_client');
    const sent = backend.requests('POST', '/v1/responses').at(-1);
    expect(sent?.headers['x-request-id']).toMatch(/^kvroute-[0-9a-f-]{36}$/);
    // The next request gets another id: an engine keying anything by it sees no two requests share one.
    await post({ model: 'test-model', input: 'again' }, { 'x-request-id': 'resp_chosen_by_client' });
    expect(backend.requests('POST', '/v1/responses').at(-1)?.headers['x-request-id']).not.toBe(
      sent?.headers['x-request-id'],
    );
  });

  it('a body with request_id never reaches the engine', async () => {
    const before = backend.requests('POST', '/v1/responses').length;
    const refused = await post({ model: 'test-model', input: 'x', request_id: null });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { param: string } }).error.param).toBe('request_id');
    expect(backend.requests('POST', '/v1/responses').length).toBe(before);
  });
});

describe('Responses API with tenants while Redis is unusable', () => {
  it("answers 503 with Retry-After, not a final 404, for an owner it cannot look up; a replica's own map still answers", async () => {
    const redis = await startRedis({ fresh: true });
    const keyFile = writeTestKeyFile([{ id: 'a', tenant: 'tenant-a', digest: keys.a.digest }]);
    const cluster = await startTestCluster({ backends: 2 });
    const routers: RouterServer[] = [];
    try {
      const clients: OpenAI[] = [];
      for (let replica = 0; replica < 2; replica++) {
        const router = await createRouterServer(
          RouterConfig.parse({
            host: '127.0.0.1',
            port: 0,
            opsPort: 0,
            backends: cluster.sims.map((sim) => sim.url),
            retryBackoffMs: 1,
            redisUrl: redis.url,
            redisTimeoutMs: 200,
            auth: 'api-keys',
            apiKeysFile: keyFile.file,
            cacheSaltSecret: 'test-cache-salt-secret-0123456789',
          }),
        );
        routers.push(router);
        clients.push(new OpenAI({ apiKey: keys.a.secret, baseURL: `${await router.listen()}/v1`, maxRetries: 0 }));
      }
      const [here, there] = clients as [OpenAI, OpenAI];
      const created = await here.responses.create({ model: 'test-model', input: 'remember me', max_output_tokens: 2 });
      // Up: the other replica finds it in Redis.
      await waitFor(async () => (await there.responses.retrieve(created.id).catch(() => null)) !== null);

      await redis.kill();
      const unavailable = { status: 503, error: { code: 'ROUTER_ERR_RESPONSE_OWNERS_UNAVAILABLE' } };
      const followUp = await there.responses
        .create({ model: 'test-model', previous_response_id: created.id, input: 'still mine?' })
        .withResponse()
        .catch((error: unknown) => error);
      expect(followUp).toMatchObject({ ...unavailable, error: { param: 'previous_response_id' } });
      expect((followUp as { headers: Headers }).headers.get('retry-after')).toBe('1');
      await expect(there.responses.retrieve(created.id)).rejects.toMatchObject({
        ...unavailable,
        error: { param: 'response_id' },
      });
      await expect(there.responses.delete(created.id)).rejects.toMatchObject(unavailable);
      // The replica that learnt it answers from its own map, Redis or not.
      const next = await here.responses.create({
        model: 'test-model',
        previous_response_id: created.id,
        input: 'yes',
        max_output_tokens: 2,
      });
      expect(next.previous_response_id).toBe(created.id);

      await redis.restart();
      // Back (an empty Redis: the test server keeps nothing across a kill): once the other replica
      // leaves degraded mode, an id nobody stored is a 404 again, not a 503…
      await waitFor(
        async () =>
          (await there.responses
            .retrieve('resp_ffffffffffffffffffffffffffffffff')
            .catch((error: { status?: number }) => error.status)) === 404,
        15_000,
      );
      // …and, once the creating replica writes to Redis again too, a response stored now is found from either.
      await waitFor(async () => {
        const after = await here.responses.create({ model: 'test-model', input: 'after', max_output_tokens: 2 });
        return (await there.responses.retrieve(after.id).catch(() => null)) !== null;
      }, 15_000);
    } finally {
      for (const router of routers) await router.close();
      await cluster.close();
      await redis.stop();
      keyFile.remove();
    }
  });
});
