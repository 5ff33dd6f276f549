import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startLoopbackServer, type LoopbackServer } from '@kvroute/testing';
import { createLogger } from '@kvroute/platform';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { AddBackendBody } from '../src/routes/admin-routes';

/**
 * Issue 14, acceptance 4 (header hygiene), against a recording backend: a node:http server on loopback
 * that records every request's headers and, when it has a key, answers 401 without it (as vLLM started
 * with `--api-key` does on /v1/*). Clients are real: the official openai client, and node:http for the
 * hop-by-hop headers fetch will not send.
 */
const MODEL = 'test-model';
const CHAT_BODY = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 0,
  model: MODEL,
  choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
};

interface Recorded {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
}

class RecordingBackend {
  readonly requests: Recorded[] = [];
  private server: LoopbackServer | null = null;

  /** `requiredKey`: answer 401 to any request without `Authorization: Bearer <it>`; null = open. */
  constructor(private readonly requiredKey: string | null) {}

  get url(): string {
    if (this.server === null) throw new Error('not started');
    return this.server.url;
  }

  async start(): Promise<this> {
    this.server = await startLoopbackServer((request, response) => this.answer(request, response));
    return this;
  }

  close(): Promise<void> {
    return this.server?.close() ?? Promise.resolve();
  }

  /** The generation requests it received (model discovery aside). */
  generations(): Recorded[] {
    return this.requests.filter((request) => request.method === 'POST');
  }

  private answer(request: IncomingMessage, response: ServerResponse): void {
    this.requests.push({ method: request.method ?? '', url: request.url ?? '', headers: request.headers });
    request.resume();
    request.on('end', () => {
      if (this.requiredKey !== null && request.headers.authorization !== `Bearer ${this.requiredKey}`) {
        response
          .writeHead(401, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { message: 'Unauthorized', type: 'invalid_request_error', code: 401 } }));
        return;
      }
      // What an engine (or a gateway beside it) may add: none of it is the client's business.
      const upstreamOnly = { server: 'uvicorn', 'set-cookie': ['engine_session=s3cr3t; HttpOnly', 'affinity=b1'] };
      if (request.url === '/v1/models') {
        response
          .writeHead(200, { 'content-type': 'application/json', ...upstreamOnly })
          .end(JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model' }] }));
        return;
      }
      response.writeHead(200, { 'content-type': 'application/json', ...upstreamOnly }).end(JSON.stringify(CHAT_BODY));
    });
  }
}

const tempDir = mkdtempSync(join(tmpdir(), 'kvroute-header-hygiene-'));
afterAll(() => rmSync(tempDir, { recursive: true, force: true }));

function keyFile(name: string, key: string): string {
  const path = join(tempDir, name);
  // A trailing newline, as `echo key > file` and Kubernetes secrets leave it.
  writeFileSync(path, `${key}\n`, { mode: 0o600 });
  return path;
}

/** A router with its logs captured (every line, debug level) to check no key reaches them. */
async function startRouter(
  config: Record<string, unknown>,
  env: Record<string, string> = {},
): Promise<{ router: RouterServer; url: string; logs: () => string }> {
  const lines: string[] = [];
  const logger = createLogger({
    service: 'kvroute-router',
    level: 'debug',
    destination: { write: (line: string) => void lines.push(line) },
  });
  const router = await createRouterServer(
    RouterConfig.parse({ host: '127.0.0.1', port: 0, opsPort: 0, retryBackoffMs: 1, logLevel: 'debug', ...config }),
    { logger, env },
  );
  const url = await router.listen();
  return { router, url, logs: () => lines.join('') };
}

async function waitForStatus(url: string, status: number, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 0;
  while (Date.now() < deadline) {
    last = (await fetch(url)).status;
    if (last === status) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`${url} answered ${last}, not ${status}, for ${timeoutMs} ms`);
}

/** What a backend must never see of the client's (`authorization` is checked apart: it gets the upstream key). */
const CLIENT_ONLY_HEADERS = [
  'x-api-key',
  'api-key',
  'cookie',
  'proxy-authorization',
  'proxy-connection',
  'proxy-x-anything',
  'keep-alive',
  'te',
  'trailer',
  'x-hop-secret',
  'forwarded',
  'x-real-ip',
];

/** `Connection` at the backend is the router's own hop (undici's keep-alive), never the client's tokens. */
function expectOnlyTheRoutersConnection(headers: IncomingHttpHeaders): void {
  expect([undefined, 'keep-alive']).toContain(headers.connection);
}

describe('header hygiene through the router, against a recording backend', () => {
  const upstreamKey = 'upstream-key-0123456789abcdef';
  let backend: RecordingBackend;
  let started: Awaited<ReturnType<typeof startRouter>>;
  beforeAll(async () => {
    backend = await new RecordingBackend(upstreamKey).start();
    started = await startRouter({ backends: [{ url: backend.url, apiKeyFile: keyFile('backend.key', upstreamKey) }] });
  });
  afterAll(async () => {
    await started.router.close();
    await backend.close();
  });

  it('sends the upstream key, never the client credentials or cookies, and extends X-Forwarded-For with the real peer', async () => {
    const client = new OpenAI({
      baseURL: `${started.url}/v1`,
      apiKey: 'client-key-must-not-leak',
      maxRetries: 0,
      defaultHeaders: {
        cookie: 'router_session=victim',
        'x-api-key': 'anthropic-style-client-key',
        'api-key': 'azure-style-client-key',
        'proxy-authorization': 'Basic Y2xpZW50OnNlY3JldA==',
        'proxy-x-anything': 'x',
        // Forged: the client claims to be someone else, and to have come over TLS.
        'x-forwarded-for': '203.0.113.7, 198.51.100.1',
        'x-forwarded-proto': 'https',
        forwarded: 'for=203.0.113.7',
        'x-real-ip': '203.0.113.7',
      },
    });
    const { data, response } = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }] })
      .withResponse();
    expect(data.choices[0]?.message.content).toBe('hi');

    const [received] = backend.generations();
    expect(received).toBeDefined();
    const headers = received?.headers ?? {};
    expect(headers.authorization).toBe(`Bearer ${upstreamKey}`);
    for (const name of CLIENT_ONLY_HEADERS) expect(headers[name], name).toBeUndefined();
    expectOnlyTheRoutersConnection(headers);
    // The client's chain is kept in front (it is only a claim); the last element is the socket peer.
    expect(headers['x-forwarded-for']).toBe('203.0.113.7, 198.51.100.1, 127.0.0.1');
    expect(headers['x-forwarded-proto']).toBe('https, http');
    expect(headers['x-request-id']).toBe(response.headers.get('x-request-id'));

    // Nothing of the engine's own comes back: no cookie under the router's origin, no server banner.
    expect(response.headers.get('set-cookie')).toBeNull();
    expect(response.headers.get('server')).toBeNull();
    expect(response.headers.get('x-router-backend')).toBe(new URL(backend.url).host);
  });

  it('drops the hop-by-hop headers a raw client sends, and any named in Connection', async () => {
    const before = backend.generations().length;
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hop' }] });
    const answer = await new Promise<{ status: number; headers: IncomingHttpHeaders }>((resolve, reject) => {
      const request = httpRequest(`${started.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          // No content-length: a chunked body, with which a `Trailer` announcement is valid.
          'content-type': 'application/json',
          authorization: 'Bearer client-key-must-not-leak',
          connection: 'keep-alive, x-hop-secret',
          'x-hop-secret': 'for this hop only',
          'keep-alive': 'timeout=5',
          te: 'trailers',
          trailer: 'x-checksum',
          'proxy-connection': 'keep-alive',
          'x-end-to-end': 'kept',
        },
      });
      request.on('response', (response) => {
        response.resume();
        response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers }));
      });
      request.on('error', reject);
      request.end(body);
    });
    expect(answer.status).toBe(200);
    expect(answer.headers['set-cookie']).toBeUndefined();
    expect(answer.headers.server).toBeUndefined();
    const received = backend.generations()[before]?.headers ?? {};
    for (const name of CLIENT_ONLY_HEADERS) expect(received[name], name).toBeUndefined();
    expectOnlyTheRoutersConnection(received);
    expect(received.authorization).toBe(`Bearer ${upstreamKey}`);
    expect(received['x-end-to-end']).toBe('kept');
    expect(received['x-forwarded-for']).toBe('127.0.0.1');
    expect(received['x-forwarded-proto']).toBe('http');
  });

  it('discovers the models of a backend that requires a key, and is ready', async () => {
    const discovery = backend.requests.find((request) => request.url === '/v1/models');
    expect(discovery?.headers.authorization).toBe(`Bearer ${upstreamKey}`);
    expect(started.router.registry.models()).toEqual([MODEL]);
    expect((await fetch(`${started.url}/readyz`)).status).toBe(200);
    const models = (await (await fetch(`${started.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((model) => model.id)).toEqual([MODEL]);
  });

  it('writes no key to its logs or metrics', async () => {
    const metrics = await (await fetch(`${started.router.opsUrl}/metrics`)).text();
    const readyz = await (await fetch(`${started.router.opsUrl}/readyz`)).text();
    for (const text of [started.logs(), metrics, readyz]) {
      expect(text).not.toContain(upstreamKey);
      expect(text).not.toContain('client-key-must-not-leak');
    }
  });
});

describe('upstream keys: where they come from and who gets them', () => {
  const key = 'fleet-key-fedcba9876543210';
  const backends: RecordingBackend[] = [];
  const routers: RouterServer[] = [];
  afterEach(async () => {
    await Promise.all(routers.splice(0).map((router) => router.close()));
    await Promise.all(backends.splice(0).map((backend) => backend.close()));
  });
  async function keyedBackend(): Promise<RecordingBackend> {
    const backend = await new RecordingBackend(key).start();
    backends.push(backend);
    return backend;
  }

  it('without a key, a keyed fleet has no models and is not ready (the bug the key fixes)', async () => {
    const backend = await keyedBackend();
    const { router, url } = await startRouter({ backends: [backend.url] });
    routers.push(router);
    expect(router.registry.models()).toEqual([]);
    expect((await fetch(`${url}/readyz`)).status).toBe(503);
  });

  it('the fleet key from an environment variable reaches every configured backend, and turns /readyz 200', async () => {
    const [first, second] = [await keyedBackend(), await keyedBackend()];
    const { router, url } = await startRouter(
      { backends: [first?.url, second?.url], upstreamApiKeyEnv: 'TEST_FLEET_KEY' },
      { TEST_FLEET_KEY: key },
    );
    routers.push(router);
    await waitForStatus(`${url}/readyz`, 200);
    expect(router.registry.backends.map((backend) => router.registry.modelsOf(backend.id))).toEqual([[MODEL], [MODEL]]);
    for (const backend of [first, second])
      expect(backend?.requests.every((request) => request.headers.authorization === `Bearer ${key}`)).toBe(true);
  });

  it('a backend added at run time gets the fleet key only when upstreamApiKeyForAddedBackends says so', async () => {
    const [configured, added, addedOptedIn] = [await keyedBackend(), await keyedBackend(), await keyedBackend()];
    const fleetKeyFile = keyFile('fleet.key', key);
    const closed = await startRouter({ backends: [configured?.url], upstreamApiKeyFile: fleetKeyFile });
    routers.push(closed.router);
    closed.router.registry.add({ url: added?.url ?? '', weight: 1 });
    const open = await startRouter({
      backends: [configured?.url],
      upstreamApiKeyFile: fleetKeyFile,
      upstreamApiKeyForAddedBackends: true,
    });
    routers.push(open.router);
    open.router.registry.add({ url: addedOptedIn?.url ?? '', weight: 1 });
    const discoveryOf = (backend: RecordingBackend | undefined) =>
      backend?.requests.find((request) => request.url === '/v1/models');
    await waitForValue(() => discoveryOf(added) !== undefined && discoveryOf(addedOptedIn) !== undefined);
    expect(discoveryOf(added)?.headers.authorization).toBeUndefined();
    expect(discoveryOf(addedOptedIn)?.headers.authorization).toBe(`Bearer ${key}`);
  });

  it('fails the start when a named key file or variable cannot be read, naming the source and not a key', async () => {
    const missing = join(tempDir, 'no-such.key');
    await expect(
      createRouterServer(
        RouterConfig.parse({ port: 0, opsPort: 0, backends: ['http://127.0.0.1:9'], upstreamApiKeyFile: missing }),
        { logger: false },
      ),
    ).rejects.toThrow(missing);
    await expect(
      createRouterServer(
        RouterConfig.parse({
          port: 0,
          opsPort: 0,
          backends: [{ url: 'http://127.0.0.1:9', apiKeyEnv: 'UNSET_KEY_VAR' }],
        }),
        { logger: false, env: {} },
      ),
    ).rejects.toThrow('UNSET_KEY_VAR');
  });

  it('the admin API cannot name a key file or variable for a backend it adds', () => {
    expect(AddBackendBody.safeParse({ url: 'http://127.0.0.1:9', apiKeyFile: '/etc/shadow' }).success).toBe(false);
    expect(AddBackendBody.safeParse({ url: 'http://127.0.0.1:9', apiKeyEnv: 'KVROUTE_ADMIN_TOKEN' }).success).toBe(
      false,
    );
  });
});

async function waitForValue(check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
