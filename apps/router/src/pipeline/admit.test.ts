import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
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
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [{ url, id: 'b0', models: ['m'] }],
        ...overrides,
      }),
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
    // Two callers (client addresses), each within its share (one of two), fill the router.
    const peers = ['127.0.0.1', '127.0.0.2'].map((localAddress) => new Agent({ connections: 4, localAddress }));
    const held = peers.map((dispatcher) => {
      const controller = new AbortController();
      const done = request(`${base}/v1/chat/completions`, {
        method: 'POST',
        body: chat,
        headers: { 'content-type': 'application/json' },
        dispatcher,
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
    await Promise.all(peers.map((peer) => peer.close()));
    await waitUntil(() => router.heldLeases === 0 && router.inflightRequests === 0);
  });

  /**
   * Issue 30's finding: one caller opened maxInflightRequests requests whose bodies never came, and every
   * other client got 503 for the whole body timeout. Now a caller holds at most its share (half by default),
   * refused with 429 before its body is read, and another caller still gets through.
   */
  it('keeps one caller that never sends its bodies to its share: another caller is still served', async () => {
    const base = await start({ maxInflightRequests: 4, requestBodyTimeoutMs: 30_000 });
    const port = Number(new URL(base).port);
    const stalled = await Promise.all([0, 1, 2, 3].map(() => openStalledRequest(port, '127.0.0.1')));
    try {
      // Its first two wait for their bodies; the other two are refused at once, before their bodies.
      const answers = await Promise.all(stalled.map((socket) => firstBytes(socket, 1_000)));
      const refused = answers.filter((text) => text.startsWith('HTTP/1.1 429'));
      expect(refused).toHaveLength(2);
      for (const text of refused) expect(text).toContain('ROUTER_ERR_CALLER_INFLIGHT');
      expect(router.inflightRequests).toBe(2);
      const other = new Agent({ connections: 1, localAddress: '127.0.0.2' });
      const controller = new AbortController();
      const served = request(`${base}/v1/chat/completions`, {
        method: 'POST',
        body: chat,
        headers: { 'content-type': 'application/json' },
        dispatcher: other,
        signal: controller.signal,
      }).catch(() => undefined);
      // It reached the backend (which holds every request open): in flight, not refused.
      await waitUntil(() => router.inflightRequests === 3 && router.heldLeases === 1);
      controller.abort();
      await served;
      await other.close();
    } finally {
      for (const socket of stalled) socket.destroy();
    }
    await waitUntil(() => router.heldLeases === 0 && router.inflightRequests === 0);
  });

  it('answers 503 and closes the connection for requests on connections beyond maxConnections, all busy', async () => {
    const base = await start({ maxConnections: 1 });
    const first = new Agent({ connections: 1, localAddress: '127.0.0.1' });
    const second = new Agent({ connections: 1, localAddress: '127.0.0.2' });
    const controller = new AbortController();
    try {
      // Holds the one connection with a request in progress (an idle one would be closed to make room).
      const held = request(`${base}/v1/chat/completions`, {
        method: 'POST',
        body: chat,
        headers: { 'content-type': 'application/json' },
        dispatcher: first,
        signal: controller.signal,
      }).catch(() => undefined);
      await waitUntil(() => router.inflightRequests === 1);
      const refused = await request(`${base}/v1/chat/completions`, {
        method: 'POST',
        body: chat,
        headers: { 'content-type': 'application/json' },
        dispatcher: second,
      });
      expect(refused.statusCode).toBe(503);
      expect(refused.headers.connection).toBe('close');
      expect(((await refused.body.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_OVERLOADED');
      controller.abort();
      await held;
    } finally {
      await first.close();
      await second.close();
    }
  });
});

/** A request whose headers promise 1000 bytes of body, of which only the first few are sent. */
async function openStalledRequest(port: number, localAddress: string): Promise<Socket> {
  const socket = connect({ port, host: '127.0.0.1', localAddress });
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.write(
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":"m"',
  );
  return socket;
}

/** What `socket` receives within `ms` (empty: nothing). */
function firstBytes(socket: Socket, ms: number): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    const timer = setTimeout(() => resolve(text), ms);
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('utf8');
    });
    socket.once('close', () => {
      clearTimeout(timer);
      resolve(text);
    });
  });
}

async function waitUntil(check: () => boolean, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
