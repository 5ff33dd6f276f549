import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import type { Endpoint } from '../src/pipeline/parse';
import { awkwardCuts, CHAT, FakeVllm, FINGERPRINT, post, TEXT, vllmStream } from './fake-vllm-stream';

/**
 * Issue 13 (part): the router asks engines for a stream's usage when its client did not
 * (`stream_options.include_usage`), learns from it, and takes it out again: the client receives exactly
 * the bytes the engine sends without the option. Real HTTP on loopback throughout: a fake vLLM that
 * writes fixed bytes (in awkward pieces) depending on the option, vllm-sim, the router, the openai client.
 * With the option off: stream-usage-off.test.ts.
 */

async function metric(opsUrl: string, series: string): Promise<number> {
  const text = await (await fetch(`${opsUrl}/metrics`)).text();
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

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
        opsPort: 0,
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
      RouterConfig.parse({ host: '127.0.0.1', port: 0, opsPort: 0, backends: [simUrl], policy: 'cacheaware' }),
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
      (await metric(router.opsUrl as string, series('confirmed'))) +
      (await metric(router.opsUrl as string, series('overpredicted'))) +
      (await metric(router.opsUrl as string, series('underpredicted')));
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
    const before = {
      verified: await verified(),
      unverified: await metric(router.opsUrl as string, series('unverified')),
    };
    for (let i = 0; i < 2; i++) {
      const routed = await post(routerUrl, '/v1/chat/completions', body);
      expect(routed.text).not.toContain('"usage"');
    }
    expect((await verified()) - before.verified).toBe(2);
    expect((await metric(router.opsUrl as string, series('unverified'))) - before.unverified).toBe(0);
    expect(await metric(router.opsUrl as string, series('confirmed'))).toBeGreaterThanOrEqual(1);
    expect(
      await metric(router.opsUrl as string, `kvroute_router_backend_reports_cached_tokens{backend="${backend}"}`),
    ).toBe(1);
  });
});
