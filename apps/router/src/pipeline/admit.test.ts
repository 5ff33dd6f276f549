import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { RouterConfig } from '../config';
import { createRouterServer, type RouterServer } from '../create-router';
import { unsafePathReason } from './admit';

describe('unsafePathReason', () => {
  it('accepts plain paths, whatever the query holds', () => {
    for (const path of ['/v1/chat/completions', '/v1/embeddings?x=%2e%2e/../', '/healthz', '/v1/models/'])
      expect(unsafePathReason(path)).toBeNull();
  });

  it('refuses dot segments, empty segments, backslashes and encoded separators', () => {
    for (const path of [
      '/v1/../x',
      '/v1/./x',
      '/v1/..',
      '/v1//chat/completions',
      '//v1/x',
      '/v1/%2e%2e/x',
      '/v1/%2E/x',
      '/v1/a%2fb',
      '/v1/a%5Cb',
      '/v1/a\\b',
      'v1/x',
    ]) {
      expect(unsafePathReason(path), path).not.toBeNull();
    }
  });
});

/** Caps, against a backend that holds every request open until the test ends. */
describe('admit caps', () => {
  let backend: Server;
  let router: RouterServer;
  let agent: Agent;

  async function start(overrides: Partial<RouterConfig>): Promise<string> {
    backend = createServer(() => undefined);
    await new Promise<void>((resolve) => backend.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(backend.address() as AddressInfo).port}`;
    router = await createRouterServer(
      RouterConfig.parse({ host: '127.0.0.1', port: 0, backends: [{ url, id: 'b0', models: ['m'] }], ...overrides }),
      { logger: false },
    );
    agent = new Agent({ connections: 16 });
    return router.listen();
  }

  afterEach(async () => {
    await agent.close();
    backend.closeAllConnections();
    await router.close({ graceMs: 10 });
    await new Promise((resolve) => backend.close(resolve));
  });

  const chat = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true });

  it('answers 503 with Retry-After beyond maxInflightRequests, before reading the body, and probes still answer', async () => {
    const base = await start({ maxInflightRequests: 2 });
    const held = [0, 1].map(() => {
      const controller = new AbortController();
      const done = request(`${base}/v1/chat/completions`, {
        method: 'POST',
        body: chat,
        headers: { 'content-type': 'application/json' },
        dispatcher: agent,
        signal: controller.signal,
      }).catch(() => undefined);
      return { controller, done };
    });
    await waitUntil(() => router.inflightRequests >= 2);
    const refused = await request(`${base}/v1/chat/completions`, {
      method: 'POST',
      body: chat,
      headers: { 'content-type': 'application/json' },
      dispatcher: agent,
    });
    const body = (await refused.body.json()) as { error: { code: string; type: string } };
    expect(refused.statusCode).toBe(503);
    expect(refused.headers['retry-after']).toBe('1');
    expect(body.error).toMatchObject({ code: 'ROUTER_ERR_OVERLOADED', type: 'service_unavailable' });
    const health = await request(`${base}/healthz`, { dispatcher: agent });
    expect(health.statusCode).toBe(200);
    await health.body.dump();
    for (const { controller, done } of held) {
      controller.abort();
      await done;
    }
    await waitUntil(() => router.heldLeases === 0 && router.inflightRequests === 0);
  });

  it('answers 503 and closes the connection for requests on connections beyond maxConnections', async () => {
    const base = await start({ maxConnections: 1 });
    const first = new Agent({ connections: 1 });
    const second = new Agent({ connections: 1 });
    try {
      const health = await request(`${base}/healthz`, { dispatcher: first }); // holds the one connection (keep-alive)
      await health.body.dump();
      const refused = await request(`${base}/v1/chat/completions`, {
        method: 'POST',
        body: chat,
        headers: { 'content-type': 'application/json' },
        dispatcher: second,
      });
      expect(refused.statusCode).toBe(503);
      expect(refused.headers.connection).toBe('close');
      expect(((await refused.body.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_OVERLOADED');
    } finally {
      await first.close();
      await second.close();
    }
  });
});

async function waitUntil(check: () => boolean, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
