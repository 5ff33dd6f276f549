import { request as httpRequest } from 'node:http';
import OpenAI from 'openai';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { FakeResponsesBackend } from './fake-responses-backend';
import { scrapeAt, sumWhere } from './metrics-scrape';
import { startTestCluster, waitFor } from './start-test-cluster';

/**
 * Acceptance (issue 16): the Responses API through 3 router replicas sharing Redis, with the official
 * openai client. Each sim stores only its own responses (another answers 404 to a
 * `previous_response_id` it does not hold), so a follow-up succeeds only if the replica that routes it
 * finds, in Redis, the backend that another replica learnt the id from.
 */
interface Cluster {
  sims: Array<{ url: string; sim: SimServer; id: string }>;
  routers: RouterServer[];
  clients: OpenAI[];
}

async function startCluster(
  replicas: number,
  redisUrl: string | undefined,
  extra: Partial<RouterConfig> = {},
  backends = 3,
): Promise<Cluster> {
  const sims = await Promise.all(
    Array.from({ length: backends }, async () => {
      const sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model' }));
      const url = await sim.listen();
      return { url, sim, id: new URL(url).host };
    }),
  );
  const routers: RouterServer[] = [];
  const clients: OpenAI[] = [];
  for (let index = 0; index < replicas; index++) {
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        backends: sims.map((sim) => sim.url),
        retryBackoffMs: 1,
        ...(redisUrl ? { redisUrl, redisTimeoutMs: 200 } : {}),
        ...extra,
      }),
    );
    routers.push(router);
    clients.push(new OpenAI({ baseURL: `${await router.listen()}/v1`, apiKey: 'unused', maxRetries: 0 }));
  }
  return { sims, routers, clients };
}

async function stopCluster(cluster: Cluster): Promise<void> {
  for (const router of cluster.routers) await router.close();
  await Promise.all(cluster.sims.map((sim) => sim.sim.close()));
}

/** A different long system prompt per conversation: its first turn is prefix-routed on it. */
function instructionsOf(conversation: number): string {
  return `Conversation ${conversation}: you are agent number ${conversation * 7919}. `.repeat(30);
}

describe('Responses API through 3 router replicas sharing Redis', () => {
  let redis: TestRedis;
  let cluster: Cluster;
  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
    cluster = await startCluster(3, redis.url);
  });
  afterAll(async () => {
    await stopCluster(cluster);
    await redis.stop();
  });

  it('create on one replica, previous_response_id follow-ups on the other two: same backend, every turn succeeds, GET works from any replica', async () => {
    const { clients, sims } = cluster;
    // Several conversations, so that their first turns spread over the backends and a follow-up's
    // backend is not the only one there is: a first turn's backend follows its head's rendezvous weight
    // over ids with random ports, so 6 could share one (1 in 243); more run until two are seen.
    const firstBackends = new Set<string>();
    for (let conversation = 0; conversation < 12 && (conversation < 6 || firstBackends.size < 2); conversation++) {
      const first = await (clients[0] as OpenAI).responses
        .create({
          model: 'test-model',
          instructions: instructionsOf(conversation),
          input: `Hello from ${conversation}`,
          max_output_tokens: 4,
        })
        .withResponse();
      const backend = first.response.headers.get('x-router-backend') as string;
      expect(sims.map((sim) => sim.id)).toContain(backend);
      firstBackends.add(backend);
      let previous = first.data;
      // Follow-ups carry neither the instructions nor the earlier turns (the backend holds them): no
      // prefix routes them; only the response-owner map does.
      for (let turn = 1; turn <= 2; turn++) {
        const client = clients[turn % 3] as OpenAI;
        const next = await client.responses
          .create({
            model: 'test-model',
            previous_response_id: previous.id,
            input: `turn ${turn}`,
            max_output_tokens: 4,
          })
          .withResponse();
        expect(next.response.headers.get('x-router-backend')).toBe(backend);
        expect(next.response.headers.get('x-router-reason')).toBe('previous-response');
        expect(next.data.previous_response_id).toBe(previous.id);
        if (turn === 2) {
          // The backend continued its stored conversation (instructions are not carried over, as in
          // OpenAI's API): turn 2's prompt is turn 1's plus its answer and input, and turn 1's is cached.
          const before = previous.usage?.input_tokens ?? 0;
          expect(next.data.usage?.input_tokens).toBeGreaterThan(before);
          expect(next.data.usage?.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(
            Math.floor((before - 1) / 16) * 16 - 16,
          );
        }
        previous = next.data;
      }
      // GET of the first response through a replica that neither created nor continued it.
      const fetched = await (clients[1] as OpenAI).responses.retrieve(first.data.id);
      expect(fetched.id).toBe(first.data.id);
      expect(fetched.output_text).toBe(first.data.output_text);
    }
    expect(firstBackends.size).toBeGreaterThan(1);
  });

  it('streams a create with the openai stream helper, learns its id from response.created, and continues it on another replica', async () => {
    const { clients } = cluster;
    const metrics = (cluster.routers[2] as RouterServer).metrics.registry;
    const countOf = async (
      name: string,
      filter: (labels: Partial<Record<string, string | number>>) => boolean,
    ): Promise<number> =>
      ((await metrics.getSingleMetric(name)?.get())?.values ?? [])
        .filter((value) => filter(value.labels))
        .reduce((sum, value) => sum + value.value, 0);
    const ttftBefore = await countOf('kvroute_router_time_to_first_token_seconds', (labels) => labels.le === '+Inf');
    const checkedBefore = await countOf(
      'kvroute_router_prefix_predictions_total',
      (labels) => labels.outcome !== 'unverified',
    );
    const stream = (clients[2] as OpenAI).responses.stream({
      model: 'test-model',
      instructions: instructionsOf(100),
      input: 'stream me',
      max_output_tokens: 6,
    });
    let deltas = '';
    for await (const event of stream) if (event.type === 'response.output_text.delta') deltas += event.delta;
    const final = await stream.finalResponse();
    expect(final.output_text).toBe(deltas);
    expect(final.usage?.output_tokens).toBe(6);
    // The relay read the stream: a first output (output_text.delta) timed, and the usage of
    // response.completed (input_tokens, cached_tokens) checked against the routing prediction.
    expect(await countOf('kvroute_router_time_to_first_token_seconds', (labels) => labels.le === '+Inf')).toBe(
      ttftBefore + 1,
    );
    expect(await countOf('kvroute_router_prefix_predictions_total', (labels) => labels.outcome !== 'unverified')).toBe(
      checkedBefore + 1,
    );
    const next = await (clients[0] as OpenAI).responses
      .create({ model: 'test-model', previous_response_id: final.id, input: 'and then?', max_output_tokens: 3 })
      .withResponse();
    expect(next.response.headers.get('x-router-reason')).toBe('previous-response');
    expect(next.data.previous_response_id).toBe(final.id);
    expect((await (clients[1] as OpenAI).responses.retrieve(final.id)).output_text).toBe(deltas);
  });

  it('DELETE through one replica goes to the owner and forgets the id for every replica', async () => {
    const { clients } = cluster;
    const created = await (clients[0] as OpenAI).responses.create({
      model: 'test-model',
      input: 'delete me',
      max_output_tokens: 2,
    });
    await (clients[1] as OpenAI).responses.delete(created.id);
    await expect((clients[2] as OpenAI).responses.retrieve(created.id)).rejects.toMatchObject({
      status: 404,
      error: { code: 'ROUTER_ERR_RESPONSE_NOT_FOUND' },
    });
  });

  it('an unknown previous_response_id is prefix-routed (the engine answers its 404); an unknown GET is the router 404; a bad id is a 400', async () => {
    const { clients } = cluster;
    const unknown = 'resp_ffffffffffffffffffffffffffffffff';
    await expect(
      (clients[0] as OpenAI).responses.create({ model: 'test-model', previous_response_id: unknown, input: 'hi' }),
    ).rejects.toMatchObject({ status: 404, error: { param: 'previous_response_id' } });
    await expect((clients[1] as OpenAI).responses.retrieve(unknown)).rejects.toMatchObject({
      status: 404,
      error: { type: 'invalid_request_error', param: 'response_id' },
    });
    await expect(
      (clients[1] as OpenAI).responses.create({
        model: 'test-model',
        previous_response_id: 'x'.repeat(129),
        input: 'hi',
      }),
    ).rejects.toMatchObject({ status: 400 });
    const badGet = await fetch(`${(clients[2] as OpenAI).baseURL}/responses/${'%22'.repeat(3)}`);
    expect(badGet.status).toBe(400);
  });

  it('a store: false response is not remembered', async () => {
    const { clients } = cluster;
    const created = await (clients[0] as OpenAI).responses.create({
      model: 'test-model',
      input: 'ephemeral',
      store: false,
      max_output_tokens: 2,
    });
    await expect((clients[1] as OpenAI).responses.retrieve(created.id)).rejects.toMatchObject({
      status: 404,
      error: { code: 'ROUTER_ERR_RESPONSE_NOT_FOUND' },
    });
  });
});

describe('Responses API with a pool split into cells', () => {
  it('sends a follow-up to its owner whatever cell its routing text would pick', async () => {
    const redis = await startRedis({ fresh: true });
    const cluster = await startCluster(2, redis.url, { poolCells: 2 }, 4);
    try {
      const [one, two] = cluster.clients as [OpenAI, OpenAI];
      for (let conversation = 0; conversation < 6; conversation++) {
        const first = await one.responses
          .create({
            model: 'test-model',
            instructions: instructionsOf(300 + conversation),
            input: 'open',
            max_output_tokens: 2,
          })
          .withResponse();
        // A follow-up's own routing text (no instructions, another input) may hash to the other cell.
        const next = await two.responses
          .create({
            model: 'test-model',
            previous_response_id: first.data.id,
            input: `a different opening ${conversation}`,
            max_output_tokens: 2,
          })
          .withResponse();
        expect(next.response.headers.get('x-router-backend')).toBe(first.response.headers.get('x-router-backend'));
        expect(next.response.headers.get('x-router-reason')).toBe('previous-response');
      }
    } finally {
      await stopCluster(cluster);
      await redis.stop();
    }
  });
});

describe('Responses API on one replica without Redis (local state)', () => {
  it('keeps a chain on its backend through the in-memory map, and falls back to the policy when that backend is drained', async () => {
    const cluster = await startCluster(1, undefined);
    try {
      const client = cluster.clients[0] as OpenAI;
      const first = await client.responses
        .create({ model: 'test-model', instructions: instructionsOf(7), input: 'local', max_output_tokens: 3 })
        .withResponse();
      const backend = first.response.headers.get('x-router-backend') as string;
      const next = await client.responses
        .create({ model: 'test-model', previous_response_id: first.data.id, input: 'again', max_output_tokens: 3 })
        .withResponse();
      expect(next.response.headers.get('x-router-backend')).toBe(backend);
      expect(next.response.headers.get('x-router-reason')).toBe('previous-response');

      const registry = (cluster.routers[0] as RouterServer).registry;
      expect(registry.setDrained(backend, true)).toBe(true);
      // The owner is drained: routed elsewhere, and the reason says why; that engine does not hold the id.
      const moved = await client.responses
        .create({ model: 'test-model', previous_response_id: next.data.id, input: 'moved' })
        .withResponse()
        .catch((error: unknown) => error);
      expect(moved).toMatchObject({ status: 404, headers: expect.anything() });
      expect((moved as { headers: Headers }).headers.get('x-router-reason')).toBe('previous-response-fallback');
      expect((moved as { headers: Headers }).headers.get('x-router-backend')).not.toBe(backend);
    } finally {
      await stopCluster(cluster);
    }
  });
});

describe('Responses API when the owner fails', () => {
  it("a follow-up whose owner answers 503 is not sent to another engine (which would answer 404): the client gets the owner's 503 to retry", async () => {
    const cluster = await startCluster(1, undefined);
    try {
      const client = cluster.clients[0] as OpenAI;
      const first = await client.responses
        .create({ model: 'test-model', instructions: instructionsOf(9), input: 'busy soon', max_output_tokens: 2 })
        .withResponse();
      const owner = cluster.sims.find((sim) => sim.id === first.response.headers.get('x-router-backend'));
      owner?.sim.faults.update({ errorRate: 1, errorStatus: 503 });
      const failed = await client.responses
        .create({ model: 'test-model', previous_response_id: first.data.id, input: 'now?' })
        .catch((error: unknown) => error);
      // Another engine would have answered 404 (it does not hold the response); the owner's own answer is relayed.
      expect(failed).toMatchObject({ status: 503, error: { message: 'Injected fault (vllm-sim).' } });
      owner?.sim.faults.clear();
      const next = await client.responses.create({
        model: 'test-model',
        previous_response_id: first.data.id,
        input: 'now!',
        max_output_tokens: 2,
      });
      expect(next.previous_response_id).toBe(first.data.id);
    } finally {
      await stopCluster(cluster);
    }
  });
});

describe('Responses API when the owner refuses', () => {
  it("relays the owner's 429 with its Retry-After and body, rather than the router's own 503", async () => {
    const backends = await Promise.all([new FakeResponsesBackend().start(), new FakeResponsesBackend().start()]);
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        backends: backends.map((backend) => ({ url: backend.url, models: ['test-model'] })),
        retryBackoffMs: 1,
      }),
    );
    try {
      const url = `${await router.listen()}/v1/responses`;
      const post = (body: unknown): Promise<Response> =>
        fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const created = await post({ model: 'test-model', input: 'first' });
      const first = (await created.json()) as { id: string };
      const ownerIndex = backends.findIndex((backend) => backend.requests('POST', '/v1/responses').length === 1);
      const owner = backends[ownerIndex] as FakeResponsesBackend;
      const other = backends[1 - ownerIndex] as FakeResponsesBackend;
      owner.create = { kind: 'refuse', status: 429, retryAfter: '7' };
      const refused = await post({ model: 'test-model', previous_response_id: first.id, input: 'next' });
      expect(refused.status).toBe(429);
      expect(refused.headers.get('retry-after')).toBe('7');
      expect(((await refused.json()) as { error: { message: string } }).error.message).toBe(
        'The engine is busy (fake backend).',
      );
      expect(refused.headers.get('x-router-reason')).toBe('previous-response');
      // The other engine, which does not hold the conversation, was not tried.
      expect(other.requests('POST', '/v1/responses')).toHaveLength(0);
    } finally {
      await router.close();
      await Promise.all(backends.map((backend) => backend.close()));
    }
  });
});

describe('Responses API: a stored response on an engine that does not answer', () => {
  it('a client leaving aborts the upstream GET/DELETE; one that waits gets 504 after the headers timeout', async () => {
    const backend = await new FakeResponsesBackend().start();
    const routerWith = async (extra: Partial<RouterConfig>): Promise<RouterServer> =>
      createRouterServer(
        RouterConfig.parse({
          host: '127.0.0.1',
          port: 0,
          backends: [{ url: backend.url, models: ['test-model'] }],
          ...extra,
        }),
      );
    // Default timeouts (the stored-response calls' headers timeout: 30 s): only the client's leaving can end the call soon.
    const patient = await routerWith({});
    // A short streamFirstByteTimeoutMs caps that headers timeout too.
    const hasty = await routerWith({ streamFirstByteTimeoutMs: 300 });
    const create = async (base: string): Promise<string> =>
      (
        (await (
          await fetch(base, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'test-model', input: 'hi' }),
          })
        ).json()) as { id: string }
      ).id;
    try {
      const base = `${await patient.listen()}/v1/responses`;
      const id = await create(base);
      backend.stored = 'hang';
      for (const method of ['GET', 'DELETE'] as const) {
        // A client of its own connection (node:http, no pool), so that leaving closes it.
        const leaving = httpRequest(`${base}/${id}`, { method, agent: false });
        leaving.on('error', () => undefined);
        leaving.end();
        await waitFor(() => backend.requests(method, '/v1/responses/').length === 1);
        leaving.destroy();
        // The engine sees the router's call go away (no timeout of the router's would end it for 30 s).
        await waitFor(() => backend.requests(method, '/v1/responses/')[0]?.abortedBeforeAnswer === true, 10_000);
      }

      const hastyBase = `${await hasty.listen()}/v1/responses`;
      const waited = await fetch(`${hastyBase}/${await create(hastyBase)}`);
      expect(waited.status).toBe(504);
      expect(((await waited.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_UPSTREAM_TIMEOUT');
    } finally {
      await patient.close();
      await hasty.close();
      await backend.close();
    }
  });
});

describe("Responses API: a stored response's calls go through the send stage", () => {
  it("a failing owner's GET, cancel and DELETE count in its circuit breaker, which then refuses them (503) before they reach it, and in the request metrics", async () => {
    const backend = await new FakeResponsesBackend().start();
    const backendId = new URL(backend.url).host;
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        backends: [{ url: backend.url, models: ['test-model'] }],
        breakerFailureThreshold: 3,
        // No half-open probe during the test: the circuit stays open once opened.
        breakerCooldownMs: 600_000,
      }),
    );
    try {
      const routerUrl = await router.listen();
      const client = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
      const created = await client.responses.create({ model: 'test-model', input: 'keep me' });
      expect((await client.responses.retrieve(created.id)).id).toBe(created.id);
      backend.stored = 'fail';
      // The engine's 500s are relayed as it sent them, and each is a failure of that backend.
      await expect(client.responses.retrieve(created.id)).rejects.toMatchObject({ status: 500 });
      await expect(client.responses.cancel(created.id)).rejects.toMatchObject({ status: 500 });
      await expect(client.responses.delete(created.id)).rejects.toMatchObject({ status: 500 });
      expect(router.registry.get(backendId)?.breaker.state).toBe('open');
      // Open: refused by the router, and the engine does not see the call.
      await expect(client.responses.retrieve(created.id)).rejects.toMatchObject({
        status: 503,
        error: { code: 'ROUTER_ERR_NO_BACKEND' },
      });
      expect(backend.requests('GET', '/v1/responses/')).toHaveLength(2);
      // The same breaker as generation's: a create finds no backend either.
      await expect(client.responses.create({ model: 'test-model', input: 'more' })).rejects.toMatchObject({
        status: 503,
      });
      expect(backend.requests('POST', '/v1/responses')).toHaveLength(2);

      const samples = await scrapeAt(routerUrl);
      const stored = { backend: backendId, model: '', policy: 'none', reason: 'response-owner' };
      expect(sumWhere(samples, 'kvroute_router_requests_total', { ...stored, status: '200' })).toBe(1);
      expect(sumWhere(samples, 'kvroute_router_requests_total', { ...stored, status: '500' })).toBe(3);
      expect(
        sumWhere(samples, 'kvroute_router_request_duration_seconds_count', { backend: backendId, model: '' }),
      ).toBe(4);
      expect(sumWhere(samples, 'kvroute_router_backend_circuit_state', { backend: backendId })).toBe(2);
      expect(sumWhere(samples, 'kvroute_router_rejected_requests_total', { code: 'ROUTER_ERR_NO_BACKEND' })).toBe(2);
    } finally {
      await router.close();
      await backend.close();
    }
  });
});

describe('Responses API: a half-open probe whose client leaves', () => {
  it('frees the probe slot: the next call probes the owner again instead of finding its circuit stuck', async () => {
    const backend = await new FakeResponsesBackend().start();
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        backends: [{ url: backend.url, models: ['test-model'] }],
        breakerFailureThreshold: 1,
        breakerCooldownMs: 100,
      }),
    );
    try {
      const base = `${await router.listen()}/v1/responses`;
      const created = await fetch(base, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'test-model', input: 'hi' }),
      });
      const id = ((await created.json()) as { id: string }).id;
      backend.stored = 'fail';
      expect((await fetch(`${base}/${id}`)).status).toBe(500);
      expect((await fetch(`${base}/${id}`)).status).toBe(503);
      await new Promise((resolve) => setTimeout(resolve, 150));
      // Half-open: this GET is the probe; its client leaves before the engine answers.
      backend.stored = 'hang';
      const leaving = httpRequest(`${base}/${id}`, { agent: false });
      leaving.on('error', () => undefined);
      leaving.end();
      await waitFor(() => backend.requests('GET', '/v1/responses/').length === 2);
      leaving.destroy();
      await waitFor(() => backend.requests('GET', '/v1/responses/')[1]?.abortedBeforeAnswer === true, 10_000);
      backend.stored = 'answer';
      const probe = await fetch(`${base}/${id}`);
      expect(probe.status).toBe(200);
      expect(router.registry.get(new URL(backend.url).host)?.breaker.state).toBe('closed');
    } finally {
      await router.close();
      await backend.close();
    }
  });
});

describe('Responses API while Redis is down', () => {
  it(
    'a replica keeps the chains it learnt itself (its local map); another prefix-routes their follow-ups, ' +
      'answers their GET 503, and learns again once Redis is back',
    async () => {
      const redis = await startRedis({ fresh: true });
      const cluster = await startCluster(2, redis.url);
      try {
        const [here, there] = cluster.clients as [OpenAI, OpenAI];
        const writes = async (result: string): Promise<number> =>
          (
            (
              await (cluster.routers[0] as RouterServer).metrics.registry
                .getSingleMetric('kvroute_router_response_owner_writes_total')
                ?.get()
            )?.values ?? []
          )
            .filter((value) => value.labels.result === result)
            .reduce((sum, value) => sum + value.value, 0);
        const before = await here.responses.create({
          model: 'test-model',
          input: 'before the outage',
          max_output_tokens: 2,
        });
        await waitFor(async () => (await writes('ok')) === 1);
        await redis.kill();
        const first = await here.responses
          .create({ model: 'test-model', instructions: instructionsOf(55), input: 'while down', max_output_tokens: 3 })
          .withResponse();
        // The write reached this replica's map only: counted as failed (and logged as a warning).
        await waitFor(async () => (await writes('failed')) >= 1);
        expect(await writes('ok')).toBe(1);
        const next = await here.responses
          .create({
            model: 'test-model',
            previous_response_id: first.data.id,
            input: 'still here?',
            max_output_tokens: 3,
          })
          .withResponse();
        expect(next.response.headers.get('x-router-reason')).toBe('previous-response');
        expect(next.response.headers.get('x-router-backend')).toBe(first.response.headers.get('x-router-backend'));
        // The other replica never heard of it: routed by the policy (it may or may not reach the owner).
        const elsewhere = await there.responses
          .create({ model: 'test-model', previous_response_id: next.data.id, input: 'elsewhere' })
          .withResponse()
          .then(
            (answer) => answer.response.headers,
            (error: { headers: Headers }) => error.headers,
          );
        expect(elsewhere.get('x-router-reason')).not.toBe('previous-response');
        // A GET has no prefix to route on, and a 404 would be a guess: the other replica answers 503 to
        // retry, for an id it cannot look up, whether Redis held it (`before`) or not; this one finds its own.
        for (const id of [first.data.id, before.id]) {
          const unavailable = await fetch(`${there.baseURL}/responses/${id}`);
          expect(unavailable.status).toBe(503);
          expect(unavailable.headers.get('retry-after')).toBe('1');
          expect(((await unavailable.json()) as { error: { code: string } }).error.code).toBe(
            'ROUTER_ERR_RESPONSE_OWNERS_UNAVAILABLE',
          );
        }
        expect((await here.responses.retrieve(first.data.id)).id).toBe(first.data.id);

        await redis.restart();
        // Back: a new response is remembered in Redis, so the other replica finds it.
        let learnt: string | null = null;
        for (let attempt = 0; attempt < 50 && learnt === null; attempt++) {
          const created = await here.responses.create({
            model: 'test-model',
            input: `after ${attempt}`,
            max_output_tokens: 2,
          });
          const answer = await there.responses
            .create({ model: 'test-model', previous_response_id: created.id, input: 'found?', max_output_tokens: 2 })
            .withResponse()
            .catch(() => null);
          if (answer?.response.headers.get('x-router-reason') === 'previous-response') learnt = created.id;
          else await new Promise((resolve) => setTimeout(resolve, 100));
        }
        expect(learnt).not.toBeNull();
      } finally {
        await stopCluster(cluster);
        await redis.stop();
      }
    },
  );
});

describe('Responses API prefix routing', () => {
  it(
    'routes by instructions, tools and input: an agent resending its conversation stays on the ' +
      'backend that holds it, and /debug/route explains it',
    async () => {
      const cluster = await startTestCluster({ backends: 3, router: { debugRoutes: true } });
      try {
        const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
        const tools = [
          {
            type: 'function' as const,
            name: 'read_file',
            description: 'Read a file',
            parameters: { type: 'object', properties: { path: { type: 'string' } } },
            strict: false,
          },
        ];
        const homes = new Set<string | null>();
        // New conversations spread: each one's home follows the rendezvous weight of its head over the
        // backends' ids (random ports), so 4 agents may all land on one backend (1 in 27); more are run
        // until two homes are seen (all 12 on one: ~1 in 180,000).
        for (let agent = 0; agent < 12 && (agent < 4 || homes.size < 2); agent++) {
          // store: false, no previous_response_id: the client resends the whole conversation each step.
          const input: OpenAI.Responses.ResponseInput = [
            {
              role: 'user',
              content: `Task ${agent}: fix the failing test in module ${agent}. ${'Context line. '.repeat(40)}`,
            },
          ];
          const first = await client.responses
            .create({
              model: 'test-model',
              instructions: instructionsOf(200 + agent),
              tools,
              input,
              store: false,
              max_output_tokens: 2,
            })
            .withResponse();
          const home = first.response.headers.get('x-router-backend');
          homes.add(home);
          for (let step = 0; step < 3; step++) {
            input.push({
              type: 'function_call',
              call_id: `call_${step}`,
              name: 'read_file',
              arguments: `{"path":"src/m${agent}/f${step}.ts"}`,
            });
            input.push({
              type: 'function_call_output',
              call_id: `call_${step}`,
              output: `file ${step} of module ${agent} `.repeat(10),
            });
            const next = await client.responses
              .create({
                model: 'test-model',
                instructions: instructionsOf(200 + agent),
                tools,
                input,
                store: false,
                max_output_tokens: 2,
              })
              .withResponse();
            expect(next.response.headers.get('x-router-backend')).toBe(home);
            expect(next.data.usage?.input_tokens_details.cached_tokens).toBeGreaterThan(0);
          }
          const explained = (await (
            await cluster.debugRoute(
              JSON.stringify({ model: 'test-model', instructions: instructionsOf(200 + agent), tools, input }),
            )
          ).json()) as {
            decision: { backendId: string; scores: { backendId: string; matchBlocks: number }[] };
          };
          expect(explained.decision.backendId).toBe(home);
          expect(explained.decision.scores.find((score) => score.backendId === home)?.matchBlocks).toBeGreaterThan(0);
        }
        expect(homes.size).toBeGreaterThan(1);
      } finally {
        await cluster.close();
      }
    },
  );
});

describe('Responses API bad input', () => {
  it('answers bounded 4xx in the OpenAI shape, never a 500', async () => {
    const cluster = await startTestCluster({ backends: 1, router: { maxMessages: 16 } });
    try {
      const post = (body: unknown): Promise<Response> =>
        fetch(`${cluster.routerUrl}/v1/responses`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      const cases: Array<[unknown, string]> = [
        [{ model: 'test-model' }, 'input'],
        [{ model: 'test-model', input: 42 }, 'input'],
        [{ model: 'test-model', input: [1, null, 'x'] }, 'input'],
        [{ model: 'test-model', input: Array.from({ length: 17 }, () => ({ role: 'user', content: 'hi' })) }, 'input'],
        [{ model: 'test-model', input: 'x', tools: [1] }, 'tools'],
        [{ model: 'test-model', input: 'x', previous_response_id: 'a/b' }, 'previous_response_id'],
        [{ model: 'test-model', input: 'x', instructions: { nested: true } }, 'instructions'],
        [{ model: '', input: 'x' }, 'model'],
        [{ model: 42, input: 'x' }, 'model'],
      ];
      for (const [body, param] of cases) {
        const response = await post(body);
        expect(response.status, JSON.stringify(body).slice(0, 80)).toBe(400);
        const error = ((await response.json()) as { error: { type: string; param: string } }).error;
        expect(error.type).toBe('invalid_request_error');
        expect(error.param.startsWith(param), `${error.param} for ${JSON.stringify(body).slice(0, 80)}`).toBe(true);
      }
      // No `model`, as chat and completions: the backends serve one model, and that is the request's (vLLM's own rule).
      const modelless = await post({ input: 'x', max_output_tokens: 2 });
      expect(modelless.status, await modelless.clone().text()).toBe(200);
      expect(((await modelless.json()) as { model: string }).model).toBe('test-model');
      expect((await fetch(`${cluster.routerUrl}/v1/responses/${'r'.repeat(100)}`)).status).toBe(404);
      expect((await fetch(`${cluster.routerUrl}/v1/responses/resp_x`, { method: 'PUT' })).status).toBeLessThan(500);
    } finally {
      await cluster.close();
    }
  });
});
