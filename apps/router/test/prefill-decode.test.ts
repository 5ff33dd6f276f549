import type { ServerResponse } from 'node:http';
import { NIXL_PREFILL_PARAMS } from '@kvroute/protocols';
import OpenAI from 'openai';
import { Writable } from 'node:stream';
import { createLogger } from '@kvroute/platform';
import { startRedis } from '@kvroute/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { generateApiKey } from '../src/tenants/api-key';
import { writeTestKeyFile } from './api-key-file';
import { FakeEngine, json, type EngineRequest } from './fake-engine';
import { totalInflight, waitFor } from './start-test-cluster';

/**
 * Prefill/decode disaggregation (issue 32) against recording fake engines: the exact leg bodies and headers of vLLM's
 * NixlConnector and SGLang's bootstrap protocol, the params forwarded untouched, the stream relayed from the decode
 * engine, and every fault ending with a correct answer or an OpenAI-shaped error and no lease left.
 */
const MODEL = 'pd-model';
const ADMIN_TOKEN = 'pd-admin-token-0123456789abcdef';
/** ~4 KB of prompt: ~1,000 tokens at 4 bytes a token, past the default pdMinUncachedTokens (512). */
const LONG = 'The quarterly report covers revenue, churn and the roadmap in detail. '.repeat(60);

const PREFILL_ANSWER_PARAMS = {
  do_remote_prefill: true,
  do_remote_decode: false,
  remote_block_ids: [[4, 5, 6]],
  remote_engine_id: 'prefill-engine-1',
  remote_request_id: 'cmpl-internal-1',
  remote_host: '10.1.2.3',
  remote_port: 5600,
  tp_size: 1,
  // A field this router does not know: forwarded all the same.
  future_field: { nested: [1, 'two'] },
};

/** A prefill engine's answer: one token, the params, its own cached tokens. */
function answerPrefill(params: unknown = PREFILL_ANSWER_PARAMS) {
  return (request: EngineRequest, response: ServerResponse): boolean => {
    if (request.url !== '/v1/chat/completions') return false;
    return json(response, 200, {
      id: 'chatcmpl-p',
      object: 'chat.completion',
      model: MODEL,
      choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, finish_reason: 'length' }],
      usage: {
        prompt_tokens: 1000,
        completion_tokens: 1,
        total_tokens: 1001,
        prompt_tokens_details: { cached_tokens: 480 },
      },
      kv_transfer_params: params,
    });
  };
}

/** A decode engine's usage: it counts the pulled blocks as cached (all but the last prompt token). */
const DECODE_USAGE = {
  prompt_tokens: 1000,
  completion_tokens: 2,
  total_tokens: 1002,
  prompt_tokens_details: { cached_tokens: 999 },
};

/** A decode engine's answer: a stream when asked for one. */
function answerDecode(text = 'decoded') {
  return (request: EngineRequest, response: ServerResponse): boolean => {
    if (request.url !== '/v1/chat/completions') return false;
    const body = JSON.parse(request.body) as { stream?: boolean };
    if (body.stream !== true) {
      return json(response, 200, {
        id: 'chatcmpl-d',
        object: 'chat.completion',
        model: MODEL,
        choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }],
        usage: DECODE_USAGE,
      });
    }
    response.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = (delta: object, finish: string | null) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-d', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    response.write(chunk({ role: 'assistant', content: '' }, null));
    response.write(chunk({ content: text }, null));
    response.write(chunk({}, 'stop'));
    response.write(
      `data: ${JSON.stringify({ id: 'chatcmpl-d', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage: DECODE_USAGE })}\n\n`,
    );
    response.end('data: [DONE]\n\n');
    return true;
  };
}

/** A chat request as a plain client sends it (a body of `extra` fields on top). */
function postChat(
  url: string,
  content: string,
  extra: Record<string, unknown> = {},
  signal?: AbortSignal,
): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 8, ...extra }),
    ...(signal === undefined ? {} : { signal }),
  });
}

async function startRouter(overrides: Record<string, unknown>): Promise<{ router: RouterServer; url: string }> {
  const router = await createRouterServer(
    RouterConfig.parse({ host: '127.0.0.1', port: 0, opsPort: 0, logLevel: 'silent', ...overrides }),
  );
  return { router, url: await router.listen() };
}

async function metricText(router: RouterServer, name: string): Promise<string> {
  return router.metrics.registry.getSingleMetricAsString(name);
}

describe('prefill/decode disaggregation against recording engines', () => {
  const engines: FakeEngine[] = [];
  const routers: RouterServer[] = [];
  async function engine(...routes: Array<(request: EngineRequest, response: ServerResponse) => boolean>) {
    const started = await new FakeEngine([{ id: MODEL }]).start();
    started.routes.push(...routes);
    engines.push(started);
    return started;
  }
  async function router(overrides: Record<string, unknown>) {
    const started = await startRouter(overrides);
    routers.push(started.router);
    return started;
  }
  afterEach(async () => {
    for (const each of routers.splice(0)) {
      await waitFor(() => totalInflight(each) === 0, 3_000).catch(() => undefined);
      expect(totalInflight(each)).toBe(0);
      await each.close();
    }
    await Promise.all(engines.splice(0).map((each) => each.close()));
  });

  it('vLLM: leg 1 is the toy proxy body, leg 2 the client body with the params untouched; one request id; the stream comes from the decode engine', async () => {
    const prefill = await engine(answerPrefill());
    const decode = await engine(answerDecode('hello from decode'));
    const { url } = await router({ prefillBackends: [prefill.url], decodeBackends: [decode.url] });
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create({
        model: MODEL,
        messages: [{ role: 'user', content: LONG }],
        stream: true,
        max_tokens: 64,
        max_completion_tokens: 64,
        min_tokens: 4,
      } as OpenAI.ChatCompletionCreateParamsStreaming)
      .withResponse();
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe('hello from decode');
    expect(response.headers.get('x-router-backend')).toBe(new URL(decode.url).host);
    expect(response.headers.get('x-router-prefill-backend')).toBe(new URL(prefill.url).host);

    const [leg1] = prefill.requests('POST', '/v1/chat/completions');
    const [leg2] = decode.requests('POST', '/v1/chat/completions');
    expect(prefill.requests('POST', '/v1/chat/completions')).toHaveLength(1);
    expect(decode.requests('POST', '/v1/chat/completions')).toHaveLength(1);
    const first = JSON.parse(leg1?.body as string);
    const second = JSON.parse(leg2?.body as string);
    expect(first).toEqual({
      model: MODEL,
      messages: [{ role: 'user', content: LONG }],
      stream: false,
      max_tokens: 1,
      max_completion_tokens: 1,
      kv_transfer_params: NIXL_PREFILL_PARAMS,
    });
    expect(second.kv_transfer_params).toEqual(PREFILL_ANSWER_PARAMS);
    expect(second).toMatchObject({ stream: true, max_tokens: 64, max_completion_tokens: 64, min_tokens: 4 });
    expect(second.messages).toEqual([{ role: 'user', content: LONG }]);
    // One id on both legs, made by the router.
    expect(leg1?.headers['x-request-id']).toBeTruthy();
    expect(leg1?.headers['x-request-id']).toBe(leg2?.headers['x-request-id']);
  });

  it("usage merged: the client gets, and the router counts, the prefill engine's cached tokens in the decode engine's usage", async () => {
    const prefill = await engine(answerPrefill());
    const decode = await engine(answerDecode());
    const { router: started, url } = await router({ prefillBackends: [prefill.url], decodeBackends: [decode.url] });
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    // Three conversations the decode engine holds nothing of: each is split.
    const messages = (n: number): OpenAI.ChatCompletionMessageParam[] => [{ role: 'user', content: `${n}: ${LONG}` }];
    const whole = await client.chat.completions.create({ model: MODEL, messages: messages(1), max_tokens: 8 });
    expect(whole.usage).toEqual({ ...DECODE_USAGE, prompt_tokens_details: { cached_tokens: 480 } });
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: messages(2),
      max_tokens: 8,
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) usage = chunk.usage ?? usage;
    expect(usage).toEqual({ ...DECODE_USAGE, prompt_tokens_details: { cached_tokens: 480 } });
    // Without include_usage the router asked for it and took it out: learnt from all the same, merged.
    const unasked = await client.chat.completions.create({
      model: MODEL,
      messages: messages(3),
      max_tokens: 8,
      stream: true,
    });
    for await (const chunk of unasked) expect(chunk.usage).toBeFalsy();
    expect(prefill.requests('POST', '/v1/chat/completions')).toHaveLength(3);
    await waitFor(
      async () => (await metricText(started, 'kvroute_router_tokens_total')).includes('kind="prompt"'),
      3_000,
    );
    const tokens = await metricText(started, 'kvroute_router_tokens_total');
    const decodeHost = new URL(decode.url).host;
    const cachedLine = tokens.split('\n').find((line) => line.includes(decodeHost) && line.includes('kind="cached"'));
    expect(Number(cachedLine?.split(' ').at(-1))).toBe(3 * 480);
  });

  it('a decode stream cut mid-event: what the usage merge and the usage strip held reaches the client once, then the error', async () => {
    const prefill = await engine(answerPrefill());
    const decode = await engine((request, response) => {
      if (request.url !== '/v1/chat/completions') return false;
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write(
        `data: ${JSON.stringify({ id: 'd', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'whole' } }] })}\n\n`,
      );
      response.write(
        'data: {"id":"d","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"PARTIAL',
      );
      setTimeout(() => response.socket?.destroy(), 50);
      return true;
    });
    const { url } = await router({ prefillBackends: [prefill.url], decodeBackends: [decode.url] });
    const answer = await postChat(url, LONG, { stream: true });
    const text = await answer.text();
    expect(text).toContain('whole');
    expect(text.split('PARTIAL').length - 1).toBe(1);
    expect(text).toContain('ROUTER_ERR_UPSTREAM_STREAM');
  });

  it('a decode backend that holds most of the prompt serves it whole (cached-enough), and a short prompt is never split', async () => {
    const prefill = await engine(answerPrefill());
    const decode = await engine(answerDecode());
    const { url, router: started } = await router({ prefillBackends: [prefill.url], decodeBackends: [decode.url] });
    const response = await postChat(url, 'short question', { max_tokens: 4 });
    expect(response.status).toBe(200);
    expect(response.headers.get('x-router-prefill-backend')).toBeNull();
    await response.text();
    expect(prefill.requests('POST', '/v1/')).toHaveLength(0);
    expect(JSON.parse(decode.requests('POST', '/v1/chat/completions')[0]?.body as string)).not.toHaveProperty(
      'kv_transfer_params',
    );
    expect(await metricText(started, 'kvroute_router_pd_requests_total')).toMatch(
      /model="pd-model",mode="decode-only",reason="cached-enough"} 1/,
    );
  });

  it('SGLang: the same body to both engines with the prefill engine bootstrap address and one room; only the decode answer returns', async () => {
    const prefill = await engine(answerDecode('from prefill, discarded'));
    const decode = await engine(answerDecode('from decode'));
    const { url } = await router({
      backends: [
        { url: prefill.url, role: 'prefill', bootstrapPort: 9000 },
        { url: decode.url, role: 'decode' },
      ],
      pdProtocol: 'sglang',
    });
    const response = await postChat(url, LONG);
    expect(response.status).toBe(200);
    const body = (await response.json()) as { choices: Array<{ message: { content: string } }> };
    expect(body.choices[0]?.message.content).toBe('from decode');
    await waitFor(() => prefill.requests('POST', '/v1/chat/completions').length === 1);
    const toPrefill = JSON.parse(prefill.requests('POST', '/v1/chat/completions')[0]?.body as string);
    const toDecode = JSON.parse(decode.requests('POST', '/v1/chat/completions')[0]?.body as string);
    // The prefill engine's answer is dropped: it is asked for without a stream.
    expect(toPrefill).toEqual({ ...toDecode, stream: false });
    expect(toDecode).toMatchObject({ bootstrap_host: '127.0.0.1', bootstrap_port: 9000, max_tokens: 8 });
    expect(Number.isSafeInteger(toDecode.bootstrap_room)).toBe(true);
  });

  it('SGLang decode-mode engines cannot prefill: a short prompt is split all the same; a batch of prompts is never split with vLLM', async () => {
    const prefill = await engine(answerDecode('from prefill'));
    const decode = await engine(answerDecode('from decode'));
    const sglang = await router({ prefillBackends: [prefill.url], decodeBackends: [decode.url], pdProtocol: 'sglang' });
    const short = await postChat(sglang.url, 'short question');
    expect(short.status).toBe(200);
    expect(short.headers.get('x-router-prefill-backend')).toBe(new URL(prefill.url).host);
    await short.text();
    const vllmPrefill = await engine(answerPrefill());
    const vllmDecode = await engine(answerDecode());
    const vllm = await router({ prefillBackends: [vllmPrefill.url], decodeBackends: [vllmDecode.url] });
    const batch = await fetch(`${vllm.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: [LONG, `${LONG} again`], max_tokens: 4 }),
    });
    expect(batch.status).toBe(200);
    await batch.text();
    expect(vllmPrefill.requests('POST', '/v1/')).toHaveLength(0);
    expect(await metricText(vllm.router, 'kvroute_router_pd_requests_total')).toMatch(/reason="not-splittable"} 1/);
  });

  it('a prefill engine that fails (503) is tried no more than pdPrefillTries; then the decode engine serves the request whole', async () => {
    const failing = (request: EngineRequest, response: ServerResponse) =>
      request.url === '/v1/chat/completions' && json(response, 503, { error: { message: 'busy' } });
    const prefillA = await engine(failing);
    const prefillB = await engine(failing);
    const decode = await engine(answerDecode('whole'));
    const { url, router: started } = await router({
      prefillBackends: [prefillA.url, prefillB.url],
      decodeBackends: [decode.url],
      pdPrefillTries: 2,
    });
    const response = await postChat(url, LONG);
    expect(response.status).toBe(200);
    expect(
      ((await response.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content,
    ).toBe('whole');
    expect(prefillA.requests('POST', '/v1/').length + prefillB.requests('POST', '/v1/').length).toBe(2);
    expect(JSON.parse(decode.requests('POST', '/v1/chat/completions')[0]?.body as string)).not.toHaveProperty(
      'kv_transfer_params',
    );
    expect(await metricText(started, 'kvroute_router_pd_requests_total')).toMatch(/reason="prefill-failed"} 1/);
    expect(await metricText(started, 'kvroute_router_pd_prefill_failures_total')).toMatch(/cause="status"} 1/);
  });

  it('malformed params from the prefill engine are never relayed: the decode engine gets the plain body, and they are counted', async () => {
    const prefill = await engine(answerPrefill({ do_remote_prefill: true, remote_engine_id: 42 }));
    const decode = await engine(answerDecode());
    const { url, router: started } = await router({ prefillBackends: [prefill.url], decodeBackends: [decode.url] });
    const response = await postChat(url, LONG);
    expect(response.status).toBe(200);
    await response.text();
    expect(JSON.parse(decode.requests('POST', '/v1/chat/completions')[0]?.body as string)).not.toHaveProperty(
      'kv_transfer_params',
    );
    expect(await metricText(started, 'kvroute_router_pd_malformed_params_total')).toMatch(/} 1/);
  });

  it('a decode engine that fails before its first byte is retried on another decode engine with the same prefill', async () => {
    const prefill = await engine(answerPrefill());
    const refusing = (request: EngineRequest, response: ServerResponse) =>
      request.url === '/v1/chat/completions' && json(response, 503, { error: { message: 'busy' } });
    const decodeA = await engine(refusing);
    const decodeB = await engine(refusing);
    // Whichever decode engine is tried first refuses once; the other answers.
    let refused = 0;
    for (const decode of [decodeA, decodeB]) {
      decode.routes.unshift((request, response) => {
        if (request.url !== '/v1/chat/completions' || refused > 0) return false;
        refused++;
        return json(response, 503, { error: { message: 'busy' } });
      });
      decode.routes.splice(1, 1, answerDecode('second try'));
    }
    const { url } = await router({ prefillBackends: [prefill.url], decodeBackends: [decodeA.url, decodeB.url] });
    const response = await postChat(url, LONG);
    expect(response.status).toBe(200);
    await response.text();
    expect(prefill.requests('POST', '/v1/')).toHaveLength(1);
    const decodeBodies = [...decodeA.requests('POST', '/v1/'), ...decodeB.requests('POST', '/v1/')].map(
      (request) => JSON.parse(request.body).kv_transfer_params,
    );
    expect(decodeBodies).toEqual([PREFILL_ANSWER_PARAMS, PREFILL_ANSWER_PARAMS]);
  });

  it('a decode engine that loses its connection mid-request gets the next decode try a prefill leg of its own', async () => {
    const prefill = await engine(answerPrefill());
    // Whichever decode engine is tried first drops the connection once, after reading the request.
    let dropped = 0;
    const dropOnce = (request: EngineRequest, response: ServerResponse): boolean => {
      if (request.url !== '/v1/chat/completions' || dropped > 0) return false;
      dropped++;
      response.socket?.destroy();
      return true;
    };
    const decodeA = await engine(dropOnce, answerDecode('after the drop'));
    const decodeB = await engine(dropOnce, answerDecode('after the drop'));
    const { url } = await router({ prefillBackends: [prefill.url], decodeBackends: [decodeA.url, decodeB.url] });
    const response = await postChat(url, LONG);
    expect(response.status).toBe(200);
    await response.text();
    expect(dropped).toBe(1);
    expect(prefill.requests('POST', '/v1/chat/completions')).toHaveLength(2);
  });

  it('a client that goes away during the prefill leg: the leg is cancelled, nothing reaches the decode engine, no lease is left', async () => {
    let prefillClosed = false;
    const hanging = (request: EngineRequest, response: ServerResponse) => {
      if (request.url !== '/v1/chat/completions') return false;
      response.on('close', () => {
        prefillClosed = true;
      });
      return true; // never answers
    };
    const prefill = await engine(hanging);
    const decode = await engine(answerDecode());
    const { url } = await router({ prefillBackends: [prefill.url], decodeBackends: [decode.url] });
    const abort = new AbortController();
    const sent = postChat(url, LONG, {}, abort.signal).catch(() => null);
    await waitFor(() => prefill.requests('POST', '/v1/chat/completions').length === 1);
    abort.abort();
    await sent;
    await waitFor(() => prefillClosed);
    expect(decode.requests('POST', '/v1/')).toHaveLength(0);
  });

  it('shows each backend role: the full /readyz, the metrics, and /v1/models to a privileged key', async () => {
    const prefill = await engine(answerPrefill());
    const decode = await engine(answerDecode());
    const bench = generateApiKey();
    const keys = writeTestKeyFile([{ id: 'bench', tenant: 'ops', digest: bench.digest, extra: '    role: bench\n' }]);
    try {
      const { url, router: started } = await router({
        prefillBackends: [prefill.url],
        decodeBackends: [decode.url],
        auth: 'api-keys',
        apiKeysFile: keys.file,
      });
      const prefillId = new URL(prefill.url).host;
      const decodeId = new URL(decode.url).host;
      const readiness = (await (await fetch(`${started.opsUrl}/readyz`)).json()) as { roles: Record<string, string> };
      expect(readiness.roles).toEqual({ [prefillId]: 'prefill', [decodeId]: 'decode' });
      const metrics = await (await fetch(`${started.opsUrl}/metrics`)).text();
      expect(metrics).toContain(`kvroute_router_backend_role{backend="${prefillId}",role="prefill"} 1`);
      const models = (await (
        await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${bench.secret}` } })
      ).json()) as { data: Array<{ id: string; roles?: Record<string, string> }> };
      expect(models.data.find((model) => model.id === MODEL)?.roles).toEqual({
        [prefillId]: 'prefill',
        [decodeId]: 'decode',
      });
    } finally {
      keys.remove();
    }
  });

  it('/debug/route explains both legs: the decode decision, the tokens it lacks, whether that splits, the prefill decision', async () => {
    const prefill = await engine(answerPrefill());
    const decode = await engine(answerDecode());
    const { router: started } = await router({
      prefillBackends: [prefill.url],
      decodeBackends: [decode.url],
      adminToken: ADMIN_TOKEN,
      adminHost: '127.0.0.1',
      adminPort: 0,
      debugRoutes: true,
    });
    const explained = (await (
      await fetch(`${started.adminUrl}/debug/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: LONG }] }),
      })
    ).json()) as {
      decision: { backendId: string };
      prefill: { split: boolean; lackingTokens: number; decision: { backendId: string } };
    };
    expect(explained.decision.backendId).toBe(new URL(decode.url).host);
    expect(explained.prefill.split).toBe(true);
    expect(explained.prefill.lackingTokens).toBeGreaterThan(512);
    expect(explained.prefill.decision.backendId).toBe(new URL(prefill.url).host);
    // A dry run: nothing was sent.
    expect(prefill.requests('POST', '/v1/')).toHaveLength(0);
  });

  it("a role configured for a backend the fleet's shared set already holds is not applied, and says so once; the admin API lists roles", async () => {
    const prefill = await engine(answerPrefill());
    const decode = await engine(answerDecode());
    const redis = await startRedis({ fresh: true, logger: () => undefined });
    try {
      const first = await router({
        backends: [prefill.url, decode.url],
        redisUrl: redis.url,
        adminToken: ADMIN_TOKEN,
        adminHost: '127.0.0.1',
        adminPort: 0,
      });
      const lines: string[] = [];
      const sink = new Writable({
        write(chunk, _encoding, done) {
          lines.push(String(chunk));
          done();
        },
      });
      const second = await createRouterServer(
        RouterConfig.parse({
          host: '127.0.0.1',
          port: 0,
          opsPort: 0,
          prefillBackends: [prefill.url],
          decodeBackends: [decode.url],
          redisUrl: redis.url,
        }),
        { logger: createLogger({ service: 'kvroute-router', level: 'warn', destination: sink as never }) },
      );
      routers.push(second);
      await second.listen();
      await waitFor(() => lines.some((line) => line.includes("configured role is not the fleet's")));
      expect(lines.filter((line) => line.includes("configured role is not the fleet's"))).toHaveLength(2);
      const listed = (await (
        await fetch(`${first.router.adminUrl}/admin/backends`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })
      ).json()) as { data: Array<{ id: string; role: string }> };
      expect(listed.data.map((backend) => backend.role)).toEqual(['both', 'both']);
    } finally {
      for (const each of routers.splice(0)) await each.close();
      await redis.stop();
    }
  });

  it('refuses a client that sets kv_transfer_params or bootstrap fields itself (400, OpenAI error shape)', async () => {
    const prefill = await engine(answerPrefill());
    const decode = await engine(answerDecode());
    const { url } = await router({ prefillBackends: [prefill.url], decodeBackends: [decode.url] });
    for (const field of [{ kv_transfer_params: { do_remote_prefill: true } }, { bootstrap_room: 7 }]) {
      const response = await postChat(url, 'hi', field);
      expect(response.status).toBe(400);
      const body = (await response.json()) as { error: { param: string; type: string } };
      expect(body.error.param).toBe(Object.keys(field)[0]);
    }
    expect(prefill.requests('POST', '/v1/')).toHaveLength(0);
    expect(decode.requests('POST', '/v1/')).toHaveLength(0);
  });
});

describe('prefill/decode disaggregation over simulated vLLM engines (NIXL)', () => {
  let prefill: SimServer;
  let decode: SimServer;
  let prefillUrl: string;
  let decodeUrl: string;
  let started: { router: RouterServer; url: string };
  beforeAll(async () => {
    const common = { port: 0, profile: 'a100-8b', timeScale: 20, model: MODEL } as const;
    prefill = await createSimServer(SimConfig.parse({ ...common, pdRole: 'prefill' }));
    decode = await createSimServer(SimConfig.parse({ ...common, pdRole: 'decode' }));
    prefillUrl = await prefill.listen();
    decodeUrl = await decode.listen();
    started = await startRouter({ prefillBackends: [prefillUrl], decodeBackends: [decodeUrl] });
  });
  afterAll(async () => {
    await started.router.close();
    await Promise.all([prefill.close(), decode.close()]);
  });

  it('a new conversation is prefilled on the prefill engine and pulled by the decode engine; its follow-up stays on the decode engine whole', async () => {
    const client = new OpenAI({ baseURL: `${started.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: LONG }];
    const first = await client.chat.completions
      .create({ model: MODEL, messages, max_tokens: 8, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let answer = '';
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of first.data) {
      answer += chunk.choices[0]?.delta.content ?? '';
      usage = chunk.usage ?? usage;
    }
    expect(first.response.headers.get('x-router-prefill-backend')).toBe(new URL(prefillUrl).host);
    expect(first.response.headers.get('x-router-backend')).toBe(new URL(decodeUrl).host);
    // The decode engine pulled all but the last prompt token (vLLM counts them as cached), but the client is told
    // what the prefill engine found cached: nothing, a new conversation.
    expect(usage?.prompt_tokens_details?.cached_tokens ?? 0).toBe(0);
    expect(decode.engine.stats.promptTokensBySource.external_kv_transfer).toBe((usage?.prompt_tokens ?? 0) - 1);
    expect(prefill.engine.stats.requestSuccess.length).toBe(1);
    // The decode engine said it read the blocks: the prefill engine holds nothing.
    await waitFor(() => prefill.engine.holds.count === 0, 3_000);

    messages.push({ role: 'assistant', content: answer }, { role: 'user', content: 'And the churn?' });
    const second = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8 }).withResponse();
    expect(second.response.headers.get('x-router-prefill-backend')).toBeNull();
    expect(second.response.headers.get('x-router-backend')).toBe(new URL(decodeUrl).host);
    expect(second.data.usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThan(LONG.length / 8);
    expect(prefill.engine.stats.requestSuccess.length).toBe(1);
    await waitFor(() => totalInflight(started.router) === 0, 3_000);
  });
});
