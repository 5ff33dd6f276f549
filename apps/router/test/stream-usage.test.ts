import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { UpstreamKeys } from '@kvroute/platform';
import { DEFAULT_GENERATION_LIMITS } from '@kvroute/protocols';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import type { Backend } from '../src/backends/backend-registry';
import { CircuitBreaker } from '../src/backends/circuit-breaker';
import { NODE_TIMERS } from '../src/one-shot-timers';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { parseRequest, registerBodyParser, type Endpoint } from '../src/pipeline/parse';
import { send } from '../src/pipeline/send';
import { UpstreamPools } from '../src/proxy/upstream-pool';
import { RouterMetrics } from '../src/router-metrics';

/**
 * Issue 13 (part): the router asks engines for a stream's usage when its client did not
 * (`stream_options.include_usage`), learns from it, and takes it out again: the client receives exactly
 * the bytes the engine sends without the option. Real HTTP on loopback throughout: a fake vLLM that
 * writes fixed bytes (in awkward pieces) depending on the option, vllm-sim, the router, the openai client.
 */

const FINGERPRINT = 'vllm-0.19.1-8c3e1f0a';

/** vLLM-shaped stream bytes with and without include_usage (vllm chat_completion/serving.py, completion/serving.py). */
function vllmStream(kind: 'chat' | 'text', eol: string): { withUsage: string; without: string } {
  const head =
    kind === 'chat'
      ? '{"id":"chatcmpl-9a1b","object":"chat.completion.chunk","created":1761204418,"model":"m"'
      : '{"id":"cmpl-9a1b","object":"text_completion","created":1761204418,"model":"m"';
  const event = (json: string): string => `data: ${json}${eol}${eol}`;
  const delta = (text: string): string =>
    kind === 'chat'
      ? `${head},"choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":null,"token_ids":null}]}`
      : `${head},"choices":[{"index":0,"text":${JSON.stringify(text)},"logprobs":null,"finish_reason":null,` +
        `"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}`;
  const terminal = (stamp: boolean): string => {
    const tail = stamp ? `,"system_fingerprint":"${FINGERPRINT}"` : '';
    return kind === 'chat'
      ? `${head},"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}]${tail}}`
      : `${head},"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null,` +
          `"prompt_token_ids":null,"token_ids":null}]${tail}}`;
  };
  const opening =
    kind === 'chat'
      ? [
          event(
            `${head},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":null}`,
          ),
        ]
      : [];
  const deltas = ['The', ' "choices":[] of', ' a \\"usage\\" é ✓', ' day'].map((text) => event(delta(text)));
  const usage = event(
    `${head},"choices":[],"usage":{"prompt_tokens":40,"total_tokens":44,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":32}},` +
      `"system_fingerprint":"${FINGERPRINT}"}`,
  );
  const done = event('[DONE]');
  return {
    withUsage: [...opening, ...deltas, event(terminal(false)), usage, done].join(''),
    without: [...opening, ...deltas, event(terminal(true)), done].join(''),
  };
}

/**
 * A fake vLLM: answers each request with `vllmStream(...)`, the include_usage variant when the body asked
 * for it, written in pieces cut at `cuts` (byte offsets), each flushed and followed by a pause so that
 * the router reads it as a chunk of its own.
 */
class FakeVllm {
  readonly bodies: string[] = [];
  url = '';
  private readonly server: Server = createServer((incoming: IncomingMessage, response: ServerResponse) =>
    this.answer(incoming, response),
  );

  constructor(
    private readonly eol: string,
    private readonly cutsOf: (length: number) => readonly number[],
  ) {}

  async start(): Promise<this> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  private answer(incoming: IncomingMessage, response: ServerResponse): void {
    const chunks: Buffer[] = [];
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
    incoming.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      this.bodies.push(body);
      const parsed = JSON.parse(body) as { stream_options?: { include_usage?: boolean } | null };
      const stream = vllmStream(incoming.url?.includes('chat') ? 'chat' : 'text', this.eol);
      const bytes = Buffer.from(parsed.stream_options?.include_usage === true ? stream.withUsage : stream.without);
      response.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      const cuts = [...this.cutsOf(bytes.length), bytes.length];
      const writeFrom = (index: number, from: number): void => {
        if (index === cuts.length) return void response.end();
        const to = cuts[index] as number;
        response.write(bytes.subarray(from, to), () => setTimeout(() => writeFrom(index + 1, to), 3));
      };
      writeFrom(0, 0);
    });
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Cuts that land inside line endings, inside the usage event and between events, so several events share a piece. */
function awkwardCuts(eol: string): (length: number) => readonly number[] {
  return (length) => {
    const cuts = new Set<number>();
    for (let at = 7; at < length; at += eol === '\r\n' ? 173 : 149) cuts.add(at);
    return [...cuts].sort((a, b) => a - b);
  };
}

async function post(
  url: string,
  path: string,
  body: string,
): Promise<{ status: number; text: string; headers: Headers }> {
  const response = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  return { status: response.status, text: await response.text(), headers: response.headers };
}

async function metric(routerUrl: string, series: string): Promise<number> {
  const text = await (await fetch(`${routerUrl}/metrics`)).text();
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

const CHAT = {
  model: 'm',
  messages: [{ role: 'user', content: 'Tell me about the day' }],
  max_tokens: 4,
  stream: true,
};
const TEXT = { model: 'm', prompt: 'Once upon a time', max_tokens: 4, stream: true };

describe.each([
  ['LF', '\n'],
  ['CRLF', '\r\n'],
])('through the router to a fake vLLM (%s framing, awkward chunks)', (_name, eol) => {
  let fake: FakeVllm;
  let router: RouterServer;
  let routerUrl: string;
  beforeAll(async () => {
    fake = await new FakeVllm(eol, awkwardCuts(eol)).start();
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        backends: [{ url: fake.url, id: 'fake', models: ['m'] }],
        policy: 'leastloaded',
      }),
      { logger: false },
    );
    routerUrl = await router.listen();
  });
  afterAll(async () => {
    await router.close({ graceMs: 10 });
    await fake.close();
  });

  it.each<[string, Endpoint, string, object]>([
    ['chat', 'chat', '/v1/chat/completions', CHAT],
    ['completions', 'completions', '/v1/completions', TEXT],
  ])(
    '%s: asks for usage with the spliced member, and the client gets the bytes sent without it',
    async (kind, _endpoint, path, request) => {
      const body = JSON.stringify(request);
      const routed = await post(routerUrl, path, body);
      expect(routed.status).toBe(200);
      expect(fake.bodies.at(-1)).toBe(`{"stream_options":{"include_usage":true},${body.slice(1)}`);
      const expected = vllmStream(kind === 'chat' ? 'chat' : 'text', eol);
      expect(routed.text).toBe(expected.without);
      expect(routed.text).not.toBe(expected.withUsage);
      expect(routed.headers.get('x-router-backend')).toBe('fake');
    },
  );

  it('re-serialises a stream_options without include_usage (continuous_usage_stats dropped, other keys kept)', async () => {
    const body = `{"model":"m",  "stream":true,"stream_options":{"continuous_usage_stats":true,"x_extra":1},"messages":[{"role":"user","content":"hi"}]}`;
    const routed = await post(routerUrl, '/v1/chat/completions', body);
    expect(JSON.parse(fake.bodies.at(-1) as string)).toEqual({
      model: 'm',
      stream: true,
      stream_options: { x_extra: 1, include_usage: true },
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(routed.text).toBe(vllmStream('chat', eol).without);
    await post(
      routerUrl,
      '/v1/chat/completions',
      '{"model":"m","stream":true,"stream_options":null,"messages":[{"role":"user","content":"hi"}]}',
    );
    expect(JSON.parse(fake.bodies.at(-1) as string).stream_options).toEqual({ include_usage: true });
  });

  it('leaves a client that asked for usage alone: its body forwarded as it came, the usage chunk delivered (openai client)', async () => {
    const body = JSON.stringify({ ...CHAT, stream_options: { include_usage: true } });
    const routed = await post(routerUrl, '/v1/chat/completions', body);
    expect(fake.bodies.at(-1)).toBe(body);
    expect(routed.text).toBe(vllmStream('chat', eol).withUsage);

    const client = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage: OpenAI.Completions.CompletionUsage | null | undefined;
    let fingerprint: string | undefined;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      if (chunk.system_fingerprint) fingerprint = chunk.system_fingerprint;
    }
    expect(usage).toEqual({
      prompt_tokens: 40,
      total_tokens: 44,
      completion_tokens: 4,
      prompt_tokens_details: { cached_tokens: 32 },
    });
    expect(fingerprint).toBe(FINGERPRINT);
  });

  it('does not touch non-streaming requests', async () => {
    const body = JSON.stringify({ ...CHAT, stream: false });
    await post(routerUrl, '/v1/chat/completions', body);
    expect(fake.bodies.at(-1)).toBe(body);
  });
});

describe('through the router to vllm-sim, against the same request sent directly', () => {
  let sim: SimServer;
  let simUrl: string;
  let router: RouterServer;
  let routerUrl: string;
  beforeAll(async () => {
    sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'm', seed: 11 }));
    simUrl = await sim.listen();
    router = await createRouterServer(
      RouterConfig.parse({ host: '127.0.0.1', port: 0, backends: [simUrl], policy: 'cacheaware' }),
      { logger: false },
    );
    routerUrl = await router.listen();
  });
  afterAll(async () => {
    await router.close({ graceMs: 10 });
    await sim.close();
  });

  /**
   * Each answer has its own id and creation second: the bytes are compared with those two values
   * replaced, event by event, grouped by choice: how the engine interleaves the choices of one stream
   * depends on its step timing (the routed request meets a warm cache), what each choice sends does not.
   */
  const normalised = (text: string): string => {
    const events = text
      .replace(/"id":"[^"]+"/g, '"id":"ID"')
      .replace(/"created":\d+/g, '"created":0')
      .split('\n\n');
    const byChoice = new Map<string, string[]>();
    for (const event of events) {
      const choice = /"choices":\[\{"index":(\d+)/.exec(event)?.[1] ?? 'none';
      byChoice.set(choice, [...(byChoice.get(choice) ?? []), event]);
    }
    return [...byChoice]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([choice, lines]) => `choice ${choice}:\n${lines.join('\n\n')}`)
      .join('\n----\n');
  };

  // In order: the first stream's usage event teaches the router the sim's fingerprint, which the two-choice
  // stream needs for the choice that finishes first (usage-strip.ts, FingerprintMemory).
  it.each([
    [
      'chat',
      '/v1/chat/completions',
      { ...CHAT, messages: [{ role: 'user', content: 'A sim-backed stream, byte for byte.' }], max_tokens: 6 },
    ],
    [
      'chat, two choices',
      '/v1/chat/completions',
      { ...CHAT, messages: [{ role: 'user', content: 'Two at once.' }], max_tokens: 5, n: 2, ignore_eos: true },
    ],
    ['completions', '/v1/completions', { ...TEXT, prompt: 'The router and the engine', max_tokens: 6 }],
  ])(
    '%s: the routed stream equals the direct one (the sim stamps its fingerprint, which comes back)',
    async (_name, path, request) => {
      const body = JSON.stringify(request);
      const direct = await post(simUrl, path, body);
      const routed = await post(routerUrl, path, body);
      expect(routed.status).toBe(200);
      expect(direct.text).toContain('"system_fingerprint":"');
      expect(direct.text).not.toContain('"choices":[]');
      expect(normalised(routed.text)).toBe(normalised(direct.text));
    },
  );

  it('learns from the stripped usage: a stream whose client did not ask for usage gets a verified prediction outcome', async () => {
    const backend = new URL(simUrl).host;
    const series = (outcome: string) =>
      `kvroute_router_prefix_predictions_total{backend="${backend}",outcome="${outcome}"}`;
    const verified = async () =>
      (await metric(routerUrl, series('confirmed'))) +
      (await metric(routerUrl, series('overpredicted'))) +
      (await metric(routerUrl, series('underpredicted')));
    const long = 'You are a careful assistant who answers in full sentences. '.repeat(30);
    const body = JSON.stringify({
      ...CHAT,
      messages: [
        { role: 'system', content: long },
        { role: 'user', content: 'First question.' },
      ],
    });
    // The first one fills the sim's cache (a miss reports no cached_tokens at all: "does not say").
    await post(routerUrl, '/v1/chat/completions', body);
    const before = { verified: await verified(), unverified: await metric(routerUrl, series('unverified')) };
    for (let i = 0; i < 2; i++) {
      const routed = await post(routerUrl, '/v1/chat/completions', body);
      expect(routed.text).not.toContain('"usage"');
    }
    expect((await verified()) - before.verified).toBe(2);
    expect((await metric(routerUrl, series('unverified'))) - before.unverified).toBe(0);
    expect(await metric(routerUrl, series('confirmed'))).toBeGreaterThanOrEqual(1);
    expect(await metric(routerUrl, `kvroute_router_backend_reports_cached_tokens{backend="${backend}"}`)).toBe(1);
  });
});

/**
 * `requestStreamUsage: false`, through the parse and send stages (the request path's stages 2 and 4,
 * composed as pipeline/request-path.ts composes them) over loopback HTTP: the body goes out as the client
 * sent it. The same harness with the option on shows the test can tell the two apart.
 */
describe('requestStreamUsage off', () => {
  let fake: FakeVllm;
  let app: FastifyInstance | undefined;
  const pools = new UpstreamPools({
    connectTimeoutMs: 1_000,
    headersTimeoutMs: 5_000,
    idleTimeoutMs: 5_000,
    keys: UpstreamKeys.none(),
  });
  beforeAll(async () => {
    fake = await new FakeVllm('\n', () => [31, 200]).start();
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });
  afterAll(async () => {
    await pools.close();
    await fake.close();
  });

  async function startStages(requestStreamUsage: boolean): Promise<string> {
    const origin = fake.url;
    const backend: Backend = {
      id: 'fake',
      url: origin,
      origin,
      basePath: '',
      info: { id: 'fake', weight: 1 },
      configuredModels: ['m'],
      breaker: new CircuitBreaker({ failureThreshold: 5, cooldownMs: 1_000, nowMs: () => Date.now() }),
    };
    const metrics = new RouterMetrics();
    const stages = Fastify();
    registerBodyParser(stages, 1024 * 1024, 64);
    stages.post('/v1/chat/completions', async (request, reply) => {
      const parsed = await parseRequest('chat', request, {
        blockSizeBytes: 256,
        maxRoutedBlocks: 64,
        maxJsonDepth: 64,
        limits: DEFAULT_GENERATION_LIMITS,
        requestStreamUsage,
      });
      reply.hijack();
      await send(
        {
          upstreams: pools,
          connectionLostRetryMs: 2_000,
          timers: NODE_TIMERS,
          metrics,
          logger: stages.log,
        },
        {
          backend,
          method: 'POST',
          reason: 'test',
          policyName: 'test',
          model: 'm',
          path: '/v1/chat/completions',
          headers: request.headers,
          clientHop: { peerAddress: request.ip, proto: 'http' },
          body: parsed.body,
          requestId: 'r1',
          arrivedAtMs: performance.now(),
          mayRetryStatus: false,
          deadline: parsed.stream ? { until: 'first-output', ms: 5_000 } : { until: 'end', ms: 5_000 },
          readsUsage: true,
          readsUsageAtStart: false,
          stripsStreamUsage: parsed.stripsStreamUsage,
          showsRoutingHeaders: true,
          extraHeaders: null,
          events: { firstOutput: () => undefined, finished: () => undefined },
        },
        reply.raw,
      );
    });
    app = stages;
    return stages.listen({ host: '127.0.0.1', port: 0 });
  }

  it('forwards a stream body unchanged, and relays the engine bytes as they are', async () => {
    const url = await startStages(false);
    const body = JSON.stringify(CHAT);
    const routed = await post(url, '/v1/chat/completions', body);
    expect(fake.bodies.at(-1)).toBe(body);
    expect(routed.text).toBe(vllmStream('chat', '\n').without);
  });

  it('(the same stages with it on splice the option in and strip the usage again)', async () => {
    const url = await startStages(true);
    const body = JSON.stringify(CHAT);
    const routed = await post(url, '/v1/chat/completions', body);
    expect(fake.bodies.at(-1)).toBe(`{"stream_options":{"include_usage":true},${body.slice(1)}`);
    expect(routed.text).toBe(vllmStream('chat', '\n').without);
  });
});
