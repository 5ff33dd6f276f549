import { once } from 'node:events';
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Readable } from 'node:stream';
import { Agent, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import type { ChatCompletionRequest } from '@kvroute/protocols';
import { buildRoutingRequest } from '@kvroute/routing';
import { RouterConfig } from '../config';
import { createRouterServer, type RouterServer } from '../create-router';

/**
 * The fast tier of the proxy's tests: the request path (retry before the first byte, timeouts,
 * circuit breakers, mid-stream failures, client aborts, in-flight accounting, first output) against
 * in-process scripted backends: plain node:http servers on loopback, each answering as the test says.
 * No simulator, no Redis; every case runs in a few tens of milliseconds. The slower end-to-end tests
 * against vllm-sim stay in test/ (faults.test.ts, inflight-accounting.test.ts).
 *
 * Nothing waits on a sleep for ordering: tests wait on events (a backend received a request, its
 * response closed) or poll a condition with a bounded helper.
 */

/** How long any awaited event may take before the test fails: generous, the events take milliseconds. */
const EVENT_BOUND_MS = 2_000;

// ---------------------------------------------------------------------------------------------------
// Scripted backends

/** One request as a scripted backend received it. */
interface ReceivedRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  /** Resolves when the response's connection closed before the backend ended the response (the router aborted it). */
  readonly aborted: Promise<void>;
}

/** What a scripted backend does with one request (its body already read). */
type Script = (response: ServerResponse, received: ReceivedRequest) => void;

const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' };
const sseEvent = (data: string): string => `data: ${data}\n\n`;
const ROLE_CHUNK = JSON.stringify({
  id: 'c1',
  object: 'chat.completion.chunk',
  choices: [{ index: 0, delta: { role: 'assistant', content: '' } }],
});
const textChunk = (text: string): string =>
  JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: text } }] });

const scripts = {
  /** Answers `status` with a JSON body. */
  json(status: number, body: unknown, headers: Record<string, string> = {}): Script {
    const text = JSON.stringify(body);
    return (response) => {
      response.writeHead(status, {
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(text)),
        ...headers,
      });
      response.end(text);
    };
  },
  /** An SSE stream of `events`, then `[DONE]`, then the end. */
  sse(events: readonly string[]): Script {
    return (response) => {
      response.writeHead(200, SSE_HEADERS);
      for (const event of events) response.write(sseEvent(event));
      response.end(sseEvent('[DONE]'));
    };
  },
  /** An SSE stream of `events`, then the socket destroyed (no `[DONE]`, no terminating chunk). */
  sseThenDestroy(events: readonly string[]): Script {
    return (response) => {
      response.writeHead(200, SSE_HEADERS);
      response.write(events.map(sseEvent).join(''), () => response.socket?.destroy());
    };
  },
  /** An SSE stream of `events`, then silence with the response left open. */
  sseThenHold(events: readonly string[]): Script {
    return (response) => {
      response.writeHead(200, SSE_HEADERS);
      response.write(events.map(sseEvent).join(''));
    };
  },
  /** An SSE body written in `pieces`, each after the previous one was flushed and `gapMs` passed, so the router reads them as separate chunks. */
  ssePieces(pieces: readonly string[], gapMs = 15): Script {
    return (response) => {
      response.writeHead(200, SSE_HEADERS);
      const writeFrom = (index: number): void => {
        if (index === pieces.length) return void response.end();
        response.write(pieces[index], () => setTimeout(() => writeFrom(index + 1), gapMs));
      };
      writeFrom(0);
    };
  },
  /** Never answers: no status line, no headers. */
  hang(): Script {
    return () => undefined;
  },
  /** Takes the request, then closes the connection without a byte of answer (an engine killed mid-request). */
  closeWithoutAnswer(): Script {
    return (response) => response.socket?.destroy();
  },
};

class ScriptedBackend {
  /** Every request received, in order. */
  readonly received: ReceivedRequest[] = [];
  private readonly waiters = new Set<() => void>();

  private constructor(
    readonly id: string,
    readonly url: string,
    private readonly server: Server,
  ) {}

  static async start(id: string, script: Script): Promise<ScriptedBackend> {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const backend = new ScriptedBackend(id, `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server);
    server.on('request', (incoming: IncomingMessage, response: ServerResponse) => {
      const aborted = new Promise<void>((resolve) =>
        response.once('close', () => (response.writableEnded ? undefined : resolve())),
      );
      const chunks: Buffer[] = [];
      incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
      incoming.on('end', () => {
        const received = {
          method: incoming.method ?? '',
          url: incoming.url ?? '',
          headers: incoming.headers,
          body: Buffer.concat(chunks).toString('utf8'),
          aborted,
        };
        backend.received.push(received);
        for (const wake of [...backend.waiters]) wake();
        script(response, received);
      });
    });
    return backend;
  }

  /** The `count`-th request (1-based), once it has arrived. */
  async nth(count: number): Promise<ReceivedRequest> {
    await within(
      new Promise<void>((resolve) => {
        const check = (): void => {
          if (this.received.length < count) return;
          this.waiters.delete(check);
          resolve();
        };
        this.waiters.add(check);
        check();
      }),
      `backend ${this.id} to receive request #${count}`,
    );
    return this.received[count - 1] as ReceivedRequest;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** A URL on which nothing listens: connections are refused. */
async function refusingUrl(): Promise<string> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}`;
}

// ---------------------------------------------------------------------------------------------------
// Bounded waiting

async function within<T>(promise: Promise<T>, what: string, timeoutMs = EVENT_BOUND_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function until(check: () => boolean, what: string, timeoutMs = EVENT_BOUND_MS): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

// ---------------------------------------------------------------------------------------------------
// One router over scripted backends, and a client

interface Harness {
  readonly router: RouterServer;
  readonly routerUrl: string;
  readonly backends: readonly ScriptedBackend[];
  readonly client: Agent;
}

/** Backends that refuse connections are given as `'refuse'`, with the id `b<index>` like the others. */
type BackendScript = Script | 'refuse';

let harness: Harness | undefined;

async function startHarness(
  backendScripts: readonly BackendScript[],
  router: Record<string, unknown> = {},
): Promise<Harness> {
  const backends: ScriptedBackend[] = [];
  const specs: { url: string; id: string; models: string[] }[] = [];
  for (const [index, script] of backendScripts.entries()) {
    const id = `b${index}`;
    if (script === 'refuse') {
      specs.push({ url: await refusingUrl(), id, models: ['m'] });
      continue;
    }
    const backend = await ScriptedBackend.start(id, script);
    backends.push(backend);
    specs.push({ url: backend.url, id, models: ['m'] });
  }
  let server: RouterServer | undefined;
  try {
    server = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: specs,
        policy: 'leastloaded',
        retryBackoffMs: 0,
        ...router,
      }),
      { logger: false },
    );
    const routerUrl = await server.listen();
    harness = { router: server, routerUrl, backends, client: new Agent() };
    return harness;
  } catch (error) {
    await server?.close({ graceMs: 10 });
    await Promise.all(backends.map((scripted) => scripted.close()));
    throw error;
  }
}

/** The scripted backend with id `id` (backends that refuse have none). */
function backend(id: string): ScriptedBackend {
  const found = harness?.backends.find((candidate) => candidate.id === id);
  if (!found) throw new Error(`no scripted backend ${id}`);
  return found;
}

function leaseCounts(router: RouterServer): number[] {
  return [...router.state.inflightCounts().values()];
}

const sum = (values: readonly number[]): number => values.reduce((total, value) => total + value, 0);

afterEach(async () => {
  const current = harness;
  harness = undefined;
  if (!current) return;
  try {
    // Exactly-once release on every path: nothing left held, nothing released twice (no count below 0).
    await until(
      () => sum(leaseCounts(current.router)) === 0 && current.router.heldLeases === 0,
      'every lease to be released',
    );
    expect(leaseCounts(current.router).every((count) => count === 0)).toBe(true);
    expect(current.router.heldLeases).toBe(0);
  } finally {
    await current.client.destroy();
    await current.router.close({ graceMs: 10 });
    await Promise.all(current.backends.map((scripted) => scripted.close()));
  }
});

const CHAT_BODY = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 8 });
const STREAM_BODY = JSON.stringify({
  model: 'm',
  messages: [{ role: 'user', content: 'Stream to me' }],
  max_tokens: 8,
  stream: true,
});

function postChat(body: string, options: { signal?: AbortSignal } = {}) {
  const current = harness as Harness;
  return request(`${current.routerUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    dispatcher: current.client,
    ...(options.signal ? { signal: options.signal } : {}),
  });
}

async function postChatText(body: string): Promise<{ status: number; headers: IncomingHttpHeaders; text: string }> {
  const response = await postChat(body);
  return { status: response.statusCode, headers: response.headers, text: await response.body.text() };
}

/** The block hashes the router routes `body` on (its default block size). */
function parseRoutingBlocks(body: string): readonly number[] {
  return buildRoutingRequest(JSON.parse(body) as ChatCompletionRequest, { blockSizeBytes: 256 }).blockHashes;
}

/** A sample of the router's /metrics (0 when the series does not exist yet). */
async function metricValue(series: string): Promise<number> {
  const current = harness as Harness;
  const response = await request(`${current.router.opsUrl}/metrics`, { dispatcher: current.client });
  const text = await response.body.text();
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

/** Reads a response body until what arrived contains `marker` (the stream is left open, paused). */
function readUntil(body: Readable, marker: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const onData = (chunk: Buffer): void => {
      text += chunk.toString('utf8');
      if (!text.includes(marker)) return;
      body.off('data', onData);
      body.off('error', reject);
      body.pause();
      resolve(text);
    };
    body.on('data', onData);
    body.once('error', reject);
  });
}

/** The `data:` payloads of an SSE body, in order. */
function sseData(text: string): string[] {
  return text
    .split('\n\n')
    .filter((frame) => frame.trim() !== '')
    .map((frame) => {
      expect(frame.startsWith('data: ')).toBe(true);
      return frame.slice('data: '.length);
    });
}

// ---------------------------------------------------------------------------------------------------

describe('request path against scripted backends', () => {
  it('forwards the body byte for byte and relays a JSON 200 with the routing headers', async () => {
    const answer = {
      id: 'x',
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: 'hi' } }],
    };
    await startHarness([scripts.json(200, answer), scripts.json(200, { other: true })]);

    const result = await postChatText(CHAT_BODY);

    expect(result.status).toBe(200);
    expect(result.text).toBe(JSON.stringify(answer));
    expect(result.headers['x-router-backend']).toBe('b0');
    expect(result.headers['x-router-reason']).toBe('least-loaded');
    const received = await backend('b0').nth(1);
    expect(received.url).toBe('/v1/chat/completions');
    expect(received.body).toBe(CHAT_BODY);
    expect(received.headers['x-request-id']).toBe(result.headers['x-request-id']);
    expect(backend('b1').received).toHaveLength(0);
  });

  describe('retry before the first byte', () => {
    it.each([429, 503])('answers from the second backend when the first refuses with %i', async (status) => {
      const answer = { id: 'from-b1', choices: [] };
      await startHarness([
        scripts.json(status, { error: { message: 'busy', type: 'x', code: status } }),
        scripts.json(200, answer),
      ]);

      const result = await postChatText(CHAT_BODY);

      expect(result.status).toBe(200);
      expect(result.headers['x-router-backend']).toBe('b1');
      expect(result.text).toBe(JSON.stringify(answer));
      expect(backend('b0').received).toHaveLength(1);
      expect(backend('b1').received).toHaveLength(1);
      // The retried try carries the same bytes.
      expect(backend('b1').received[0]?.body).toBe(CHAT_BODY);
      expect(await metricValue(`kvroute_router_retries_total{backend="b0",cause="status-${status}"}`)).toBe(1);
    });

    it('answers the last possible try’s 503 with its status and headers (the body replaced), and tries no more than maxAttempts backends', async () => {
      const lastBody = { error: { message: 'b1 is full', type: 'server_error', param: null, code: 'b1-full' } };
      await startHarness(
        [
          scripts.json(503, { error: { message: 'b0 is full' } }),
          scripts.json(503, lastBody, { 'retry-after': '7' }),
          scripts.json(200, { never: true }),
        ],
        { maxAttempts: 2 },
      );

      const result = await postChatText(CHAT_BODY);

      expect(result.status).toBe(503);
      // A 5xx body is the operator's (a traceback, a gateway's page): the client gets the router's error.
      expect(JSON.parse(result.text)).toMatchObject({ error: { code: 'ROUTER_ERR_UPSTREAM_ERROR' } });
      expect(result.text).not.toContain('b1 is full');
      expect(result.headers['retry-after']).toBe('7');
      expect(result.headers['x-router-backend']).toBe('b1');
      expect(backend('b0').received).toHaveLength(1);
      expect(backend('b1').received).toHaveLength(1);
      expect(backend('b2').received).toHaveLength(0);
    });

    // A gateway's 502 or 504 may come after it passed the request on to an engine that is running it.
    it.each([502, 504])(
      'answers a %i from the backend with its status, without running the request again elsewhere',
      async (status) => {
        const gatewayError = { error: { message: 'gateway', type: 'x', code: status } };
        await startHarness([scripts.json(status, gatewayError), scripts.json(200, { never: true })]);

        const result = await postChatText(CHAT_BODY);

        expect(result.status).toBe(status);
        expect(JSON.parse(result.text)).toMatchObject({ error: { code: 'ROUTER_ERR_UPSTREAM_ERROR' } });
        expect(backend('b0').received).toHaveLength(1);
        expect(backend('b1').received).toHaveLength(0);
      },
    );

    it('relays a 400 from the backend as is, without retrying', async () => {
      const invalid = {
        error: { message: 'max_tokens is too large', type: 'invalid_request_error', param: 'max_tokens', code: null },
      };
      await startHarness([scripts.json(400, invalid), scripts.json(200, { never: true })]);

      const result = await postChatText(CHAT_BODY);

      expect(result.status).toBe(400);
      expect(result.text).toBe(JSON.stringify(invalid));
      expect(result.headers['x-router-backend']).toBe('b0');
      expect(backend('b0').received).toHaveLength(1);
      expect(backend('b1').received).toHaveLength(0);
      // A client error is the backend working: its circuit stays closed.
      expect(harness?.router.registry.get('b0')?.breaker.state).toBe('closed');
    });

    it('serves from another backend when one refuses connections, and opens the refusing one’s circuit after breakerFailureThreshold failures', async () => {
      const { router } = await startHarness(['refuse', scripts.json(200, { ok: true })], {
        breakerFailureThreshold: 2,
        breakerCooldownMs: 60_000,
      });
      const breakerOfB0 = () => router.registry.get('b0')?.breaker.state;

      const first = await postChatText(CHAT_BODY);
      expect(first.status).toBe(200);
      expect(first.headers['x-router-backend']).toBe('b1');
      expect(breakerOfB0()).toBe('closed');

      const second = await postChatText(CHAT_BODY);
      expect(second.status).toBe(200);
      expect(second.headers['x-router-backend']).toBe('b1');
      expect(breakerOfB0()).toBe('open');

      // With b0's circuit open the request goes straight to b1: no third connect failure.
      const third = await postChatText(CHAT_BODY);
      expect(third.status).toBe(200);
      expect(third.headers['x-router-backend']).toBe('b1');
      expect(backend('b1').received).toHaveLength(3);
      expect(await metricValue('kvroute_router_retries_total{backend="b0",cause="connect"}')).toBe(2);
      expect(await metricValue('kvroute_router_backend_circuit_state{backend="b0"}')).toBe(2);
    });

    it('sends a request to another backend when the one that took it closes the connection without answering (it is running nothing)', async () => {
      await startHarness([scripts.closeWithoutAnswer(), scripts.json(200, { ok: true })]);

      const result = await postChatText(CHAT_BODY);

      expect(result.status).toBe(200);
      expect(result.headers['x-router-backend']).toBe('b1');
      expect(backend('b0').received).toHaveLength(1);
      expect(backend('b1').received).toHaveLength(1);
      expect(await metricValue('kvroute_router_retries_total{backend="b0",cause="connection-lost"}')).toBe(1);
    });

    it(
      'answers 502 at once, without another try, when the connection is lost later than connectionLostRetryMs ' +
        'after sending (it may have run for long)',
      async () => {
        await startHarness([scripts.closeWithoutAnswer(), scripts.json(200, { ok: true })], {
          connectionLostRetryMs: 0,
        });

        const result = await postChatText(CHAT_BODY);

        expect(result.status).toBe(502);
        expect(JSON.parse(result.text).error.code).toBe('ROUTER_ERR_UPSTREAM_UNAVAILABLE');
        expect(backend('b1').received).toHaveLength(0);
        expect(await metricValue('kvroute_router_retries_total{backend="b0",cause="connection-lost"}')).toBe(0);
      },
    );

    it('answers 504 when a backend that took the request sends nothing in time, and does not send it to another one', async () => {
      await startHarness([scripts.hang(), scripts.json(200, { ok: true })], { generationTimeoutMs: 100 });

      const result = await postChatText(CHAT_BODY);

      expect(result.status).toBe(504);
      expect(JSON.parse(result.text).error.code).toBe('ROUTER_ERR_UPSTREAM_TIMEOUT');
      // The timed-out request was cancelled on the hanging backend, not left running, nor run again.
      await within((await backend('b0').nth(1)).aborted, 'the hanging request to be aborted');
      expect(backend('b1').received).toHaveLength(0);
    });

    it('answers 504 in the OpenAI error shape when every backend hangs', async () => {
      await startHarness([scripts.hang()], { generationTimeoutMs: 100 });
      const startedAt = performance.now();

      const result = await postChatText(CHAT_BODY);

      expect(result.status).toBe(504);
      expect(result.headers['x-router-backend']).toBe('none');
      expect(JSON.parse(result.text)).toEqual({
        error: {
          message: expect.any(String),
          type: 'upstream_error',
          param: null,
          code: 'ROUTER_ERR_UPSTREAM_TIMEOUT',
        },
      });
      expect(backend('b0').received).toHaveLength(1);
      await within((await backend('b0').nth(1)).aborted, 'the hanging request to be aborted');
      expect(performance.now() - startedAt).toBeLessThan(3_000);
    });
  });

  describe('after the first byte', () => {
    it('ends the stream with the router’s error event and [DONE] when the backend fails mid-stream, without retrying', async () => {
      await startHarness([scripts.sseThenDestroy([ROLE_CHUNK, textChunk('Hel')]), scripts.sse([textChunk('never')])]);

      const result = await postChatText(STREAM_BODY);

      expect(result.status).toBe(200);
      expect(result.headers['content-type']).toMatch(/^text\/event-stream/);
      expect(result.headers['x-router-backend']).toBe('b0');
      const data = sseData(result.text);
      expect(data.slice(0, 2)).toEqual([ROLE_CHUNK, textChunk('Hel')]);
      expect(JSON.parse(data.at(-2) as string)).toEqual({
        error: { message: expect.any(String), type: 'upstream_error', param: null, code: 'ROUTER_ERR_UPSTREAM_STREAM' },
      });
      expect(data.at(-1)).toBe('[DONE]');
      expect(data).toHaveLength(4);
      expect(backend('b1').received).toHaveLength(0);
      expect(await metricValue('kvroute_router_stream_errors_total{backend="b0"}')).toBe(1);
    });

    it('ends a stream whose headers came but no event within streamFirstByteTimeoutMs with the timeout event, aborting it upstream, not retrying', async () => {
      const { router } = await startHarness([scripts.sseThenHold([]), scripts.sse([textChunk('never')])], {
        streamFirstByteTimeoutMs: 150,
      });

      const result = await postChatText(STREAM_BODY);

      expect(result.status).toBe(200);
      const data = sseData(result.text);
      expect(JSON.parse(data[0] as string)).toEqual({
        error: {
          message: expect.any(String),
          type: 'upstream_error',
          param: null,
          code: 'ROUTER_ERR_UPSTREAM_TIMEOUT',
        },
      });
      expect(data).toEqual([data[0], '[DONE]']);
      await within((await backend('b0').nth(1)).aborted, 'the upstream request to be aborted');
      await until(
        () => sum(leaseCounts(router)) === 0 && router.heldLeases === 0 && router.inflightRequests === 0,
        'the lease and the request to end',
      );
      expect(backend('b1').received).toHaveLength(0);
    });

    it('lets a stream run past streamFirstByteTimeoutMs once its first output came', async () => {
      await startHarness(
        [scripts.ssePieces([sseEvent(textChunk('first')), sseEvent(textChunk('late')), sseEvent('[DONE]')], 250)],
        { streamFirstByteTimeoutMs: 100 },
      );

      const result = await postChatText(STREAM_BODY);

      expect(result.status).toBe(200);
      expect(sseData(result.text)).toEqual([textChunk('first'), textChunk('late'), '[DONE]']);
    });

    it('counts streamFirstByteTimeoutMs to the first output, not to opening events sent before prefill (a role chunk, response.created)', async () => {
      await startHarness(
        [scripts.ssePieces([sseEvent(ROLE_CHUNK), sseEvent(textChunk('late')), sseEvent('[DONE]')], 250)],
        { streamFirstByteTimeoutMs: 100 },
      );

      const result = await postChatText(STREAM_BODY);

      expect(result.status).toBe(200);
      const events = sseData(result.text);
      expect(events[0]).toBe(ROLE_CHUNK);
      expect(events.some((event) => event.includes('ROUTER_ERR_UPSTREAM_TIMEOUT'))).toBe(true);
      expect(events).not.toContain(textChunk('late'));
    });

    it('aborts the upstream request when the client goes away mid-stream, and returns its lease', async () => {
      const { router } = await startHarness([
        scripts.sseThenHold([ROLE_CHUNK, textChunk('Hel')]),
        scripts.sse([textChunk('never')]),
      ]);
      const controller = new AbortController();

      const response = await postChat(STREAM_BODY, { signal: controller.signal });
      expect(response.statusCode).toBe(200);
      await within(readUntil(response.body, 'Hel'), 'the first text event to reach the client');
      // The stream holds one lease while it runs (so the 0 afterwards is a release, not a lease never taken).
      expect(sum(leaseCounts(router))).toBe(1);
      expect(router.heldLeases).toBe(1);
      const clientError = once(response.body, 'error');
      controller.abort();
      await within(clientError, 'the client stream to error');

      await within((await backend('b0').nth(1)).aborted, 'the upstream request to be aborted');
      await until(
        () => sum(leaseCounts(router)) === 0 && router.heldLeases === 0 && router.inflightRequests === 0,
        'the lease and the request to end',
      );
      expect(backend('b1').received).toHaveLength(0);
      expect(await metricValue('kvroute_router_client_aborts_total{backend="b0"}')).toBe(1);
    });

    it('aborts the upstream request when the client goes away while waiting for headers, without retrying', async () => {
      const { router } = await startHarness([scripts.hang(), scripts.json(200, { never: true })]);
      const controller = new AbortController();

      const pending = postChat(CHAT_BODY, { signal: controller.signal }).then(
        () => 'answered',
        (error: Error) => error.name,
      );
      const received = await backend('b0').nth(1);
      expect(sum(leaseCounts(router))).toBe(1);
      controller.abort();

      expect(await within(pending, 'the client request to end')).toBe('AbortError');
      await within(received.aborted, 'the upstream request to be aborted');
      await until(
        () => sum(leaseCounts(router)) === 0 && router.heldLeases === 0 && router.inflightRequests === 0,
        'the lease and the request to end',
      );
      expect(backend('b1').received).toHaveLength(0);
    });
  });

  describe('first output', () => {
    it.each([
      [
        'a tool call',
        JSON.stringify({
          id: 'c1',
          object: 'chat.completion.chunk',
          choices: [
            {
              index: 0,
              delta: {
                tool_calls: [
                  { index: 0, id: 'chatcmpl-tool-1', type: 'function', function: { name: 'lookup', arguments: '' } },
                ],
              },
            },
          ],
        }),
      ],
      [
        'reasoning',
        JSON.stringify({
          id: 'c1',
          object: 'chat.completion.chunk',
          choices: [{ index: 0, delta: { reasoning_content: 'First, the user wants' } }],
        }),
      ],
    ])(
      'takes a stream whose first output is %s, split across chunks, as started: TTFT and prefix ownership recorded',
      async (_what, firstOutput) => {
        // The first output event arrives in three chunks, cut inside its JSON and between its two newlines.
        const event = sseEvent(firstOutput);
        const pieces = [
          sseEvent(ROLE_CHUNK) + event.slice(0, 40),
          event.slice(40, -1),
          event.slice(-1) + sseEvent('[DONE]'),
        ];
        await startHarness([scripts.ssePieces(pieces)], { policy: 'cacheaware' });
        const prompt = JSON.stringify({
          model: 'm',
          stream: true,
          messages: [{ role: 'user', content: 'an agent turn with a long history. '.repeat(40) }],
        });

        const result = await postChatText(prompt);
        expect(result.status).toBe(200);
        expect(result.text).toBe(pieces.join(''));
        expect(await metricValue('kvroute_router_time_to_first_token_seconds_count{backend="b0",model="m"}')).toBe(1);
        const blocks = parseRoutingBlocks(prompt);
        const snapshot = await (harness as Harness).router.state.snapshot('m', ['b0'], blocks);
        expect(snapshot.matchBlocks.get('b0')).toBe(blocks.length);
      },
    );

    it('checks every response’s cached tokens against the prefix the router predicted: unverified, confirmed, overpredicted', async () => {
      // The engine's answers, in order: no figure (a backend never seen reporting one: unverified), warm
      // (all but its last 16-token block, as vLLM answers), evicted (0), no figure again (vLLM leaves it
      // out when it is 0: from a backend that has reported before, it means 0).
      const cached: (number | null)[] = [null, 2_080, 0, null];
      const usageAnswer: Script = (response) => {
        const next = cached.shift();
        const details = next === null || next === undefined ? {} : { prompt_tokens_details: { cached_tokens: next } };
        const body = JSON.stringify({
          id: 'x',
          object: 'chat.completion',
          choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 2_100, completion_tokens: 1, total_tokens: 2_101, ...details },
        });
        response.writeHead(200, {
          'content-type': 'application/json',
          'content-length': String(Buffer.byteLength(body)),
        });
        response.end(body);
      };
      await startHarness([usageAnswer], { policy: 'cacheaware' });
      const prompt = JSON.stringify({
        model: 'm',
        messages: [{ role: 'user', content: 'a conversation long enough for several blocks. '.repeat(180) }],
      });
      const outcome = (name: string) =>
        metricValue(`kvroute_router_prefix_predictions_total{backend="b0",outcome="${name}"}`);

      await postChatText(prompt); // cold, and the backend has never reported cached tokens
      expect(await outcome('unverified')).toBe(1);
      expect(await metricValue('kvroute_router_backend_reports_cached_tokens{backend="b0"}')).toBe(0);
      await postChatText(prompt); // predicted the whole prefix (recorded at the first output), engine ~all of it
      expect(await outcome('confirmed')).toBe(1);
      expect(await metricValue('kvroute_router_backend_reports_cached_tokens{backend="b0"}')).toBe(1);
      await postChatText(prompt); // predicted the whole prefix, the engine evicted it
      expect(await outcome('overpredicted')).toBe(1);
      await postChatText(prompt); // no figure from a backend that reports them: 0 cached
      expect(await outcome('overpredicted')).toBe(2);
      const predicted = await metricValue('kvroute_router_prefix_predicted_tokens_total{backend="b0"}');
      const confirmedTokens = await metricValue('kvroute_router_prefix_confirmed_tokens_total{backend="b0"}');
      expect(await metricValue('kvroute_router_prefix_observed_cached_tokens_total{backend="b0"}')).toBe(2_080);
      // Token-weighted precision over the three verified answers: one of three predictions held.
      expect(confirmedTokens / predicted).toBeGreaterThan(0.3);
      expect(confirmedTokens / predicted).toBeLessThan(0.36);
      // Per-model token counters, from the four responses' usage: cached only where an engine said so.
      expect(await metricValue('kvroute_router_tokens_total{backend="b0",model="m",kind="prompt"}')).toBe(4 * 2_100);
      expect(await metricValue('kvroute_router_tokens_total{backend="b0",model="m",kind="cached"}')).toBe(2_080);
      expect(await metricValue('kvroute_router_tokens_total{backend="b0",model="m",kind="generated"}')).toBe(4);
      // Non-streaming: no time to first token (the whole answer came at once); end to end, four.
      expect(await metricValue('kvroute_router_time_to_first_token_seconds_count{backend="b0",model="m"}')).toBe(0);
      expect(
        await metricValue('kvroute_router_request_duration_seconds_count{backend="b0",model="m",stream="false"}'),
      ).toBe(4);
    });

    it('learns nothing from an error answer: no time to first token, no prefix ownership', async () => {
      const failure = {
        error: {
          message: 'This model maximum context length is 8 tokens',
          type: 'BadRequestError',
          param: null,
          code: 400,
        },
      };
      await startHarness([scripts.json(400, failure), scripts.json(200, { ok: true })], { policy: 'cacheaware' });
      const longPrompt = JSON.stringify({
        model: 'm',
        messages: [{ role: 'user', content: 'a long prompt that fills several prefix blocks. '.repeat(40) }],
      });

      const refused = await postChatText(longPrompt);
      expect(refused.status).toBe(400);
      const refusedBy = refused.headers['x-router-backend'] as string;
      await until(() => sum(leaseCounts((harness as Harness).router)) === 0, 'the lease to be released');
      expect(
        await metricValue(`kvroute_router_time_to_first_token_seconds_count{backend="${refusedBy}",model="m"}`),
      ).toBe(0);
      // The backend that refused is not believed to hold the prompt it refused.
      const snapshot = await (harness as Harness).router.state.snapshot(
        'm',
        ['b0', 'b1'],
        parseRoutingBlocks(longPrompt),
      );
      expect(snapshot.matchBlocks.get(refusedBy) ?? 0).toBe(0);
    });

    it('records the time to first token at the first event carrying text, not at the role chunk', async () => {
      await startHarness(
        [scripts.sse([ROLE_CHUNK]), scripts.sse([ROLE_CHUNK, textChunk('Hello'), textChunk(' world')])],
        { policy: 'roundrobin' },
      );
      const ttftCount = 'kvroute_router_time_to_first_token_seconds_count';

      const roleOnly = await postChatText(STREAM_BODY);
      expect(roleOnly.headers['x-router-backend']).toBe('b0');
      expect(sseData(roleOnly.text)).toEqual([ROLE_CHUNK, '[DONE]']);
      expect(await metricValue(`${ttftCount}{backend="b0",model="m"}`)).toBe(0);

      const withText = await postChatText(STREAM_BODY);
      expect(withText.headers['x-router-backend']).toBe('b1');
      expect(sseData(withText.text)).toEqual([ROLE_CHUNK, textChunk('Hello'), textChunk(' world'), '[DONE]']);
      expect(await metricValue(`${ttftCount}{backend="b1",model="m"}`)).toBe(1);
    });
  });
});
