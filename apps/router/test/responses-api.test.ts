import type OpenAI from 'openai';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RouterServer } from '../src/create-router';
import {
  instructionsOf,
  startResponsesCluster,
  stopResponsesCluster,
  type ResponsesCluster,
} from './responses-cluster';
import { waitFor } from './start-test-cluster';

/**
 * Acceptance (issue 16): the Responses API through 3 router replicas sharing Redis, with the official
 * openai client. Each sim stores only its own responses (another answers 404 to a
 * `previous_response_id` it does not hold), so a follow-up succeeds only if the replica that routes it
 * finds, in Redis, the backend that another replica learnt the id from. Stored responses' own calls:
 * stored-responses.test.ts; follow-ups to a failing owner, prefix routing and bad input:
 * responses-routing.test.ts.
 */
describe('Responses API through 3 router replicas sharing Redis', () => {
  let redis: TestRedis;
  let cluster: ResponsesCluster;
  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
    cluster = await startResponsesCluster(3, redis.url);
  });
  afterAll(async () => {
    await stopResponsesCluster(cluster);
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
    const cluster = await startResponsesCluster(2, redis.url, { poolCells: 2 }, 4);
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
      await stopResponsesCluster(cluster);
      await redis.stop();
    }
  });
});

describe('Responses API on one replica without Redis (local state)', () => {
  it('keeps a chain on its backend through the in-memory map, and falls back to the policy when that backend is drained', async () => {
    const cluster = await startResponsesCluster(1, undefined);
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
      await stopResponsesCluster(cluster);
    }
  });
});

describe('Responses API while Redis is down', () => {
  it(
    'a replica keeps the chains it learnt itself (its local map); another prefix-routes their follow-ups, ' +
      'answers their GET 503, and learns again once Redis is back',
    async () => {
      const redis = await startRedis({ fresh: true });
      const cluster = await startResponsesCluster(2, redis.url);
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
        await stopResponsesCluster(cluster);
        await redis.stop();
      }
    },
  );
});
