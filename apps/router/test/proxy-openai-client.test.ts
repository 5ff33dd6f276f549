import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, type TestCluster } from './start-test-cluster';

/** Acceptance 1: the official client through the router equals a direct call; routing headers on every response. */
describe('router with the official openai client, 3 vllm-sim backends', () => {
  let cluster: TestCluster;
  let viaRouter: OpenAI;
  let direct: OpenAI;
  beforeAll(async () => {
    cluster = await startTestCluster({ backends: 3, sim: { seed: 7 } });
    viaRouter = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    direct = new OpenAI({ baseURL: `${cluster.sims[0]?.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => cluster.close());

  const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Name three colours.' },
  ];

  it('non-streams chat with the same output as a direct call', async () => {
    const routed = await viaRouter.chat.completions.create({ model: 'test-model', messages, max_tokens: 12 });
    const expected = await direct.chat.completions.create({ model: 'test-model', messages, max_tokens: 12 });
    expect(routed.choices[0]?.message.content).toBe(expected.choices[0]?.message.content);
    expect(routed.usage?.completion_tokens).toBe(12);
  });

  it('streams chat with the same text as a direct call', async () => {
    const collect = async (client: OpenAI) => {
      const stream = await client.chat.completions.create({
        model: 'test-model',
        messages,
        max_tokens: 9,
        stream: true,
        stream_options: { include_usage: true },
      });
      let text = '';
      let usage: OpenAI.Completions.CompletionUsage | undefined;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? '';
        if (chunk.usage) usage = chunk.usage;
      }
      return { text, usage };
    };
    const routed = await collect(viaRouter);
    const expected = await collect(direct);
    expect(routed.text).toBe(expected.text);
    expect(routed.usage?.completion_tokens).toBe(9);
  });

  it('non-streams and streams text completions the same as direct', async () => {
    const routed = await viaRouter.completions.create({
      model: 'test-model',
      prompt: 'Once upon a time',
      max_tokens: 6,
    });
    const expected = await direct.completions.create({
      model: 'test-model',
      prompt: 'Once upon a time',
      max_tokens: 6,
    });
    expect(routed.choices[0]?.text).toBe(expected.choices[0]?.text);
    const stream = await viaRouter.completions.create({
      model: 'test-model',
      prompt: 'Once upon a time',
      max_tokens: 6,
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    expect(text).toBe(expected.choices[0]?.text);
  });

  it('adds X-Router-Backend, X-Router-Reason and X-Request-Id, and SSE anti-buffering headers', async () => {
    const response = await fetch(`${cluster.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': 'req-123' },
      body: JSON.stringify({ model: 'test-model', messages, max_tokens: 2, stream: true }),
    });
    await response.text();
    expect(cluster.sims.map((sim) => sim.id)).toContain(response.headers.get('x-router-backend'));
    expect(response.headers.get('x-router-reason')).toMatch(/^[a-z-]+$/);
    expect(response.headers.get('x-request-id')).toBe('req-123');
    expect(response.headers.get('x-accel-buffering')).toBe('no');
    expect(response.headers.get('content-type')).toContain('text/event-stream');
  });

  it('lists the merged models and answers probes', async () => {
    const models = await viaRouter.models.list();
    expect(models.data.map((model) => model.id)).toEqual(['test-model']);
    expect((await fetch(`${cluster.routerUrl}/healthz`)).status).toBe(200);
    expect((await fetch(`${cluster.routerUrl}/readyz`)).status).toBe(200);
    const metrics = await (await fetch(`${cluster.opsUrl}/metrics`)).text();
    expect(metrics).toContain('kvroute_router_requests_total{');
    expect(metrics).toContain('kvroute_router_time_to_first_token_seconds_bucket');
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('passes other POST /v1/* through unchanged (status and body from the backend)', async () => {
    const response = await fetch(`${cluster.routerUrl}/v1/no-such-endpoint`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test-model', input: 'hello' }),
    });
    expect(response.status).toBe(404);
    expect(await response.json()).toEqual({ detail: 'Not Found' });
    expect(cluster.sims.map((sim) => sim.id)).toContain(response.headers.get('x-router-backend'));
  });
});

describe('router with several models', () => {
  let cluster: TestCluster;
  beforeAll(async () => {
    cluster = await startTestCluster({ sims: [{ model: 'alpha' }, { model: 'alpha' }, { model: 'beta' }] });
  });
  afterAll(() => cluster.close());

  it('routes each request within the pool serving its model', async () => {
    const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    expect((await client.models.list()).data.map((model) => model.id).sort()).toEqual(['alpha', 'beta']);
    const beta = cluster.sims[2]?.id;
    for (let i = 0; i < 5; i++) {
      const response = await client.chat.completions
        .create({ model: 'beta', messages: [{ role: 'user', content: `q${i}` }], max_tokens: 1 })
        .withResponse();
      expect(response.response.headers.get('x-router-backend')).toBe(beta);
    }
    for (let i = 0; i < 5; i++) {
      const response = await client.chat.completions
        .create({ model: 'alpha', messages: [{ role: 'user', content: `q${i}` }], max_tokens: 1 })
        .withResponse();
      expect(response.response.headers.get('x-router-backend')).not.toBe(beta);
    }
  });
});
