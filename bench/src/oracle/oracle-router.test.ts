import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { freePort } from '../local-sims';
import { startOracleRouter, type OracleRouter } from './oracle-router';

const MODEL = 'test-model';

async function postJson(url: string, body: unknown): Promise<{ response: Response; json: Record<string, any> }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { response, json: (await response.json()) as Record<string, any> };
}

async function waitFor(check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const inflightOf = (oracle: OracleRouter): number[] => oracle.state().backends.map((backend) => backend.inflight);

/**
 * Over real vllm-sim backends (in this process, real HTTP on loopback): the oracle asks each sim's
 * /sim/match and sends the request where the sim itself says its prefix is cached.
 */
describe('oracle router over vllm-sim', () => {
  let sims: { url: string; id: string; sim: SimServer }[];
  let oracle: OracleRouter;
  beforeAll(async () => {
    sims = await Promise.all(
      [0, 1].map(async () => {
        const sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: MODEL }));
        const url = await sim.listen();
        return { url, id: new URL(url).host, sim };
      }),
    );
    oracle = await startOracleRouter({ backends: sims.map((sim) => sim.url) });
  });
  beforeEach(async () => {
    await Promise.all(
      sims.map((sim) => fetch(`${sim.url}/sim/reset-cache`, { method: 'POST' }).then((response) => response.text())),
    );
  });
  afterAll(async () => {
    await oracle?.close();
    await Promise.all((sims ?? []).map((sim) => sim.sim.close()));
  });

  const bodyOf = (topic: string, extra: Record<string, unknown> = {}) => ({
    model: MODEL,
    messages: [{ role: 'user', content: `${topic}: ${'tell me what this long shared prompt is about. '.repeat(40)}` }],
    max_tokens: 4,
    ...extra,
  });

  it('sends a prompt to the sim that holds it, though nothing routed it there', async () => {
    const body = bodyOf('warmed behind the oracle');
    const warm = sims[1]!;
    expect((await postJson(`${warm.url}/v1/chat/completions`, body)).response.status).toBe(200);
    const trueMatch = (await postJson(`${warm.url}/sim/match`, body)).json.cached_tokens as number;
    expect(trueMatch).toBeGreaterThan(0);

    const before = oracle.state().decisions['cache-hit'] ?? 0;
    const { response, json } = await postJson(`${oracle.url}/v1/chat/completions`, body);
    expect(response.status).toBe(200);
    expect(response.headers.get('x-router-backend')).toBe(warm.id);
    expect(response.headers.get('x-router-reason')).toBe('cache-hit');
    expect(json.usage.prompt_tokens_details?.cached_tokens).toBe(trueMatch);
    expect(oracle.state().decisions['cache-hit']).toBe(before + 1);
    expect(inflightOf(oracle)).toEqual([0, 0]);
  });

  it('routes a prompt no sim holds to the least loaded (the first of equals)', async () => {
    const { response } = await postJson(`${oracle.url}/v1/chat/completions`, bodyOf('cold'));
    expect(response.status).toBe(200);
    expect(response.headers.get('x-router-backend')).toBe(sims[0]?.id);
    expect(response.headers.get('x-router-reason')).toBe('least-loaded');
  });

  it('streams completions through as SSE, and keeps a conversation where its prefix is', async () => {
    const first = await fetch(`${oracle.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: 'x '.repeat(400), max_tokens: 3, stream: true }),
    });
    expect(first.headers.get('content-type')).toContain('text/event-stream');
    const text = await first.text();
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const home = first.headers.get('x-router-backend');
    const again = await postJson(`${oracle.url}/v1/completions`, {
      model: MODEL,
      prompt: 'x '.repeat(400) + 'and more',
      max_tokens: 3,
    });
    expect(again.response.headers.get('x-router-backend')).toBe(home);
    expect(again.response.headers.get('x-router-reason')).toBe('cache-hit');
    expect(inflightOf(oracle)).toEqual([0, 0]);
  });

  it('answers what the bench reads from a router: /v1/models, /readyz, /healthz; other paths in the OpenAI error shape', async () => {
    const models = (await (await fetch(`${oracle.url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data[0]?.id).toBe(MODEL);
    expect((await fetch(`${oracle.url}/readyz`)).status).toBe(200);
    expect((await fetch(`${oracle.url}/healthz`)).status).toBe(200);
    const missing = await fetch(`${oracle.url}/v1/embeddings`, { method: 'POST', body: '{}' });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({
      error: { code: 'ORACLE_ERR_NOT_FOUND', type: 'invalid_request_error' },
    });
    expect((await fetch(`${oracle.url}/v1/chat/completions`)).status).toBe(405);
  });
});

/** A scripted backend: answers /sim/match with `match()` (or never, when it returns undefined) and completions with `complete`. */
interface FakeBackend {
  readonly url: string;
  readonly id: string;
  readonly server: Server;
}

async function fakeBackend(options: {
  match?: () => { cached_tokens: number; prompt_tokens: number } | undefined;
  complete: (request: IncomingMessage, response: ServerResponse, body: Buffer) => void;
}): Promise<FakeBackend> {
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      if (request.url?.endsWith('/sim/match')) {
        const answer = (options.match ?? (() => ({ cached_tokens: 0, prompt_tokens: 10 })))();
        if (answer === undefined) return; // silent: never answers
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(JSON.stringify(answer));
        return;
      }
      if (request.url?.endsWith('/health')) return void response.end('ok');
      options.complete(request, response, Buffer.concat(chunks));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, id: new URL(url).host, server };
}

const answerOk = (_request: IncomingMessage, response: ServerResponse): void => {
  response.writeHead(200, { 'content-type': 'application/json' });
  response.end('{"ok":true}');
};

describe('oracle router with scripted backends', () => {
  let backends: FakeBackend[] = [];
  let oracle: OracleRouter | undefined;

  afterEach(async () => {
    await oracle?.close(100);
    oracle = undefined;
    await Promise.all(
      backends.map(({ server }) => {
        server.closeAllConnections();
        return new Promise((resolve) => server.close(resolve));
      }),
    );
    backends = [];
  });

  it('relays the request byte for byte (path, query, body, end-to-end headers) and the response as the backend wrote it', async () => {
    let seen: { method?: string; url?: string; headers?: IncomingHttpHeaders; body?: Buffer } = {};
    backends = [
      await fakeBackend({
        complete: (request, response, body) => {
          seen = { method: request.method, url: request.url, headers: request.headers, body };
          response.writeHead(201, {
            'content-type': 'application/json',
            'x-upstream': 'yes',
            'keep-alive': 'timeout=5',
          });
          response.end('{"answer": 42}');
        },
      }),
    ];
    oracle = await startOracleRouter({ backends: backends.map((backend) => backend.url) });
    const sent = Buffer.from('{"model":  "m",\n "messages": [ {"role":"user","content":"héllo"} ] }  ');
    const response = await request(`${oracle.url}/v1/chat/completions?api-version=1`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-client': 'c',
        'proxy-authorization': 'secret',
        authorization: 'Bearer t',
      },
      body: sent,
    });
    expect(response.statusCode).toBe(201);
    expect(response.headers['x-upstream']).toBe('yes');
    expect(response.headers['keep-alive']).not.toBe('timeout=5');
    expect(response.headers['x-router-backend']).toBe(backends[0]!.id);
    expect(response.headers['x-router-reason']).toBe('least-loaded');
    expect(await response.body.text()).toBe('{"answer": 42}');
    expect(seen.method).toBe('POST');
    expect(seen.url).toBe('/v1/chat/completions?api-version=1');
    expect(seen.body?.equals(sent)).toBe(true);
    expect(seen.headers).toMatchObject({
      'content-type': 'application/json',
      'x-client': 'c',
      authorization: 'Bearer t',
    });
    expect(seen.headers?.['proxy-authorization']).toBeUndefined();
  });

  it('counts a backend that does not answer /sim/match in time, or is down, as holding nothing, and never fails the request for it', async () => {
    let holds = 100;
    backends = [
      await fakeBackend({ match: () => undefined, complete: answerOk }),
      await fakeBackend({ match: () => ({ cached_tokens: holds, prompt_tokens: 200 }), complete: answerOk }),
    ];
    const down = `http://127.0.0.1:${await freePort()}`;
    oracle = await startOracleRouter({
      backends: [...backends.map((backend) => backend.url), down],
      matchTimeoutMs: 100,
    });
    const started = performance.now();
    const hit = await postJson(`${oracle.url}/v1/completions`, { prompt: 'p' });
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(hit.response.status).toBe(200);
    expect(hit.response.headers.get('x-router-backend')).toBe(backends[1]!.id);
    expect(hit.response.headers.get('x-router-reason')).toBe('cache-hit');

    holds = 0;
    const cold = await postJson(`${oracle.url}/v1/completions`, { prompt: 'p' });
    expect(cold.response.status).toBe(200);
    expect(cold.response.headers.get('x-router-backend')).toBe(backends[0]!.id);
    expect(cold.response.headers.get('x-router-reason')).toBe('least-loaded');
    expect(oracle.state().unansweredMatches).toBe(4);
    expect(inflightOf(oracle)).toEqual([0, 0, 0]);
  });

  it('breaks ties by its own in-flight count, released when a response ends or its client goes away; a client abort aborts the upstream request', async () => {
    const open: ServerResponse[] = [];
    const upstreamClosedEarly: string[] = [];
    const holdOpen = (name: string) => (_request: IncomingMessage, response: ServerResponse) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write('data: {"choices":[{"text":"a"}]}\n\n');
      response.once('close', () => {
        if (!response.writableFinished) upstreamClosedEarly.push(name);
      });
      open.push(response);
    };
    backends = [await fakeBackend({ complete: holdOpen('a') }), await fakeBackend({ complete: holdOpen('b') })];
    oracle = await startOracleRouter({ backends: backends.map((backend) => backend.url) });
    const router = oracle;

    const aborter = new AbortController();
    const first = await request(`${router.url}/v1/completions`, {
      method: 'POST',
      body: '{"prompt":"p","stream":true}',
      signal: aborter.signal,
    });
    expect(first.headers['x-router-backend']).toBe(backends[0]!.id);
    expect(inflightOf(router)).toEqual([1, 0]);
    const second = await request(`${router.url}/v1/completions`, {
      method: 'POST',
      body: '{"prompt":"p","stream":true}',
    });
    expect(second.headers['x-router-backend']).toBe(backends[1]!.id);
    expect(inflightOf(router)).toEqual([1, 1]);

    aborter.abort();
    await first.body.text().catch(() => undefined);
    await waitFor(() => upstreamClosedEarly.includes('a'));
    await waitFor(() => inflightOf(router)[0] === 0);
    open[1]!.end('data: [DONE]\n\n');
    expect(await second.body.text()).toBe('data: {"choices":[{"text":"a"}]}\n\ndata: [DONE]\n\n');
    await waitFor(() => inflightOf(router)[1] === 0);
    expect(upstreamClosedEarly).toEqual(['a']);
    expect(router.state().backends.map((backend) => backend.pendingPrefillTokens)).toEqual([0, 0]);
  });

  it('streams with backpressure: a client that stops reading stops the backend writing', async () => {
    const CHUNK = Buffer.alloc(64 * 1024, 'x');
    const CAP_BYTES = 256 * 1024 * 1024;
    let written = 0;
    let lastWriteAt = performance.now();
    let upstreamClosed = false;
    backends = [
      await fakeBackend({
        complete: (_request, response) => {
          response.writeHead(200, { 'content-type': 'text/event-stream' });
          response.once('close', () => (upstreamClosed = true));
          const pump = (): void => {
            while (written < CAP_BYTES && !response.destroyed) {
              written += CHUNK.length;
              lastWriteAt = performance.now();
              if (!response.write(CHUNK)) return void response.once('drain', pump);
            }
          };
          pump();
        },
      }),
    ];
    oracle = await startOracleRouter({ backends: backends.map((backend) => backend.url) });
    const router = oracle;
    const response = await request(`${router.url}/v1/completions`, {
      method: 'POST',
      body: '{"prompt":"p","stream":true}',
    });
    expect(response.statusCode).toBe(200);
    // Nobody reads the body: the backend must stall long before its cap.
    await waitFor(() => written > 0 && performance.now() - lastWriteAt > 300, 10_000);
    expect(written).toBeLessThan(32 * 1024 * 1024);
    response.body.destroy();
    await waitFor(() => upstreamClosed && inflightOf(router)[0] === 0);
  });

  it('answers 502 in the OpenAI shape when the backend fails before answering, and 413 for a body over the limit', async () => {
    const down = `http://127.0.0.1:${await freePort()}`;
    oracle = await startOracleRouter({ backends: [down], bodyLimitBytes: 1024 });
    const failed = await postJson(`${oracle.url}/v1/chat/completions`, { model: 'm', messages: [] });
    expect(failed.response.status).toBe(502);
    expect(failed.json).toMatchObject({ error: { code: 'ORACLE_ERR_UPSTREAM_UNAVAILABLE', type: 'upstream_error' } });
    const tooLarge = await postJson(`${oracle.url}/v1/completions`, { prompt: 'x'.repeat(2048) });
    expect(tooLarge.response.status).toBe(413);
    expect(tooLarge.json).toMatchObject({ error: { code: 'ORACLE_ERR_BODY_TOO_LARGE' } });
    expect(inflightOf(oracle)).toEqual([0]);
    expect((await fetch(`${oracle.url}/readyz`)).status).toBe(503);
  });

  it("oracle-cost: cacheaware's rule on the true matches and its own backlog, so a warm backend that is busy prefilling loses", async () => {
    const held: ServerResponse[] = [];
    let phase = 1;
    // Phase 1: a 20000-token prompt, 16 tokens of it cached on a. Phase 2: a 5000-token prompt, 4000 cached on a.
    const matchA = () =>
      phase === 1 ? { cached_tokens: 16, prompt_tokens: 20_000 } : { cached_tokens: 4000, prompt_tokens: 5000 };
    const matchB = () =>
      phase === 1 ? { cached_tokens: 0, prompt_tokens: 20_000 } : { cached_tokens: 0, prompt_tokens: 5000 };
    const holdSilent = (_request: IncomingMessage, response: ServerResponse) => void held.push(response);
    backends = [
      await fakeBackend({ match: matchA, complete: holdSilent }),
      await fakeBackend({ match: matchB, complete: answerOk }),
    ];
    oracle = await startOracleRouter({ backends: backends.map((backend) => backend.url), rule: 'oracle-cost' });
    const router = oracle;
    expect(router.state().rule).toBe('oracle-cost');

    // The first goes to a (16 tokens fewer to prefill) and produces no byte: 19984 tokens of backlog there.
    const first = request(`${router.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'm', prompt: 'first', max_tokens: 4 }),
    });
    first.catch(() => undefined); // a failed assertion closes the backends under it
    await waitFor(() => inflightOf(router)[0] === 1);
    expect(router.state().backends.map((backend) => backend.pendingPrefillTokens)).toEqual([19_984, 0]);

    // a: 1000 × 0.07 + 1 × 5 + 19984 × 0.07 ≈ 1474 ms; b: 5000 × 0.07 = 350 ms. The plain oracle would take a (4000 cached).
    phase = 2;
    const second = await postJson(`${router.url}/v1/completions`, { model: 'm', prompt: 'second', max_tokens: 4 });
    expect(second.response.status).toBe(200);
    expect(second.response.headers.get('x-router-backend')).toBe(backends[1]!.id);
    expect(second.response.headers.get('x-router-reason')).toBe('spilled-from-saturated');
    // The first: 16 cached tokens are a quarter of a 256-byte routing block, not yet affinity.
    expect(router.state().decisions).toEqual({ 'least-loaded': 1, 'spilled-from-saturated': 1 });

    held[0]!.writeHead(200, { 'content-type': 'application/json' });
    held[0]!.end('{}');
    await (await first).body.text();
    await waitFor(() => inflightOf(router)[0] === 0);
    expect(router.state().backends.map((backend) => backend.pendingPrefillTokens)).toEqual([0, 0]);
  });

  it('oracle-cost: refuses cacheaware parameters its table rejects, at start', async () => {
    backends = [await fakeBackend({ complete: answerOk })];
    await expect(
      startOracleRouter({ backends: [backends[0]!.url], rule: 'oracle-cost', prefillMsPerToken: -1 }),
    ).rejects.toThrow(/prefillMsPerToken/);
  });
});
