import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer } from '../src/create-router';
import { FakeResponsesBackend } from './fake-responses-backend';
import { instructionsOf, startResponsesCluster, stopResponsesCluster } from './responses-cluster';
import { startTestCluster } from './start-test-cluster';

/**
 * Responses API requests routed through the request path: a follow-up whose owner fails or refuses
 * (relayed, not sent to an engine that does not hold the conversation), prefix routing of a
 * conversation resent whole, and bad input answered in the OpenAI shape.
 */
describe('Responses API when the owner fails', () => {
  it("a follow-up whose owner answers 503 is not sent to another engine (which would answer 404): the client gets the owner's 503 to retry", async () => {
    const cluster = await startResponsesCluster(1, undefined);
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
      // Another engine would have answered 404 (it does not hold the response); the owner's own status is
      // relayed (its 5xx body replaced by the router's error: issue 30).
      expect(failed).toMatchObject({ status: 503, error: { code: 'ROUTER_ERR_UPSTREAM_ERROR' } });
      owner?.sim.faults.clear();
      const next = await client.responses.create({
        model: 'test-model',
        previous_response_id: first.data.id,
        input: 'now!',
        max_output_tokens: 2,
      });
      expect(next.previous_response_id).toBe(first.data.id);
    } finally {
      await stopResponsesCluster(cluster);
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
        opsPort: 0,
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
