import { spawn } from 'node:child_process';
import { Agent, request as httpRequest, type IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { createRedis, poolKeys, waitUntilReady } from '@kvroute/redis-store';
import { findFreePorts, startRedis, type TestRedis } from '@kvroute/testing';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { waitFor } from './start-test-cluster';

/**
 * Graceful shutdown of one router replica with shared state in Redis: readiness fails the moment the
 * shutdown starts, requests keep being served through the drain delay with `Connection: close`, a
 * stream in flight runs to its end, requests still running at the grace deadline are aborted, and in
 * every case the pool's in-flight count in Redis is back to 0 once `close` resolves (released, not
 * left to expire: the lease TTL is the default 15 s, far beyond these tests' waits).
 *
 * Backends: two vllm-sim `a100-7b` at real speed (~10 ms per output token), so `max_tokens` sets how
 * long a stream lasts.
 */
const MODEL = 'test-model';
const keys = poolKeys(MODEL);

describe('router graceful shutdown', () => {
  let redis: TestRedis;
  let client: ReturnType<typeof createRedis>;
  let sims: SimServer[];
  let backendUrls: string[];
  let router: RouterServer | undefined;

  beforeAll(async () => {
    redis = await startRedis({ fresh: true, logger: () => undefined });
    client = createRedis(redis.url, 'request-path', { commandTimeoutMs: 5_000 });
    await waitUntilReady(client);
    sims = await Promise.all(
      Array.from({ length: 2 }, () =>
        createSimServer(SimConfig.parse({ port: 0, profile: 'a100-7b', model: MODEL, logLevel: 'silent' })),
      ),
    );
    backendUrls = await Promise.all(sims.map((sim) => sim.listen()));
  });
  afterEach(async () => {
    await router?.close({ graceMs: 1_000 });
    router = undefined;
  });
  afterAll(async () => {
    client?.disconnect();
    await Promise.all((sims ?? []).map((sim) => sim.close()));
    await redis?.stop();
  });

  async function startRouter(overrides: Partial<RouterConfig> = {}): Promise<string> {
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: backendUrls,
        redisUrl: redis.url,
        redisTimeoutMs: 500,
        retryBackoffMs: 1,
        ...overrides,
      }),
    );
    return router.listen();
  }

  /** The pool's in-flight leases in Redis: the counts hash summed, and the lease index's size. */
  async function redisInflight(): Promise<{ counted: number; leases: number }> {
    const counts = await client.hgetall(keys.inflight);
    const counted = Object.values(counts).reduce((sum, value) => sum + Number(value), 0);
    return { counted, leases: await client.zcard(keys.leaseDeadlines) };
  }

  it('fails readiness the moment close starts and keeps serving, with Connection: close, through the drain delay', async () => {
    const url = await startRouter();
    expect((await fetch(`${url}/readyz`)).status).toBe(200);
    const closing = router?.close({ drainDelayMs: 1_500 });
    expect(router?.phase).toBe('draining');
    const readiness = await fetch(`${url}/readyz`);
    expect(readiness.status).toBe(503);
    expect(await readiness.json()).toEqual({ status: 'not-ready', degraded: false });
    // The ops listener says the same, in full, and is still scraped through the drain.
    const opsUrl = router?.opsUrl as string;
    const opsReadiness = await fetch(`${opsUrl}/readyz`);
    expect(opsReadiness.status).toBe(503);
    expect(await opsReadiness.json()).toMatchObject({ status: 'not-ready', shuttingDown: true });
    expect((await fetch(`${opsUrl}/metrics`)).status).toBe(200);
    // A new connection during the drain (a balancer that has not noticed yet) is still served.
    const response = await chat(url, { max_tokens: 3 });
    expect(response.status).toBe(200);
    expect(response.headers.get('connection')).toBe('close');
    const report = await closing;
    expect(report).toMatchObject({ aborted: 0, leasesReleasedAtDeadline: 0, releasesSettled: true });
    // The listener closed after the drain delay; the ops listener with the other resources, before close resolved.
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
    await expect(fetch(`${opsUrl}/healthz`)).rejects.toThrow();
  });

  it('marks every response after SIGTERM Connection: close: generation, stream, errors, probes (issue 30)', async () => {
    const url = await startRouter();
    const closing = router?.close({ drainDelayMs: 1_500 });
    // Each body read as soon as its headers arrive: undici asserts when a connection ends (the FIN after a
    // `Connection: close` answer) under a body nobody reads.
    const read = async (pending: Promise<Response>) => {
      const response = await pending;
      await response.arrayBuffer();
      return response;
    };
    const responses = await Promise.all(
      [
        chat(url, { max_tokens: 2 }),
        chat(url, { max_tokens: 2, stream: true }),
        fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: '{',
        }),
        fetch(`${url}/v1/nowhere`),
        fetch(`${url}/healthz`),
        fetch(`${url}/readyz`),
        fetch(`${url}/metrics`),
        fetch(`${url}/v1/models`),
      ].map(read),
    );
    // /metrics is on the ops listener (issue 31): here a 404 like any unknown path, closing too.
    expect(responses.map((response) => response.status)).toEqual([200, 200, 400, 404, 200, 503, 404, 200]);
    for (const response of responses) expect(response.headers.get('connection'), response.url).toBe('close');
    await closing;
  });

  it('answers a request sent on an existing keep-alive connection during the drain with Connection: close, then that connection closes', async () => {
    const url = await startRouter();
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const before = await nodeChat(url, agent);
      expect(before.status).toBe(200);
      expect(before.connection).toBe('keep-alive');
      const closing = router?.close({ drainDelayMs: 1_500 });
      const during = await nodeChat(url, agent);
      // The same TCP connection carried both requests.
      expect(during.localPort).toBe(before.localPort);
      expect(during.status).toBe(200);
      expect(during.connection).toBe('close');
      await during.socketClosed;
      expect(router?.phase).toBe('draining');
      await closing;
    } finally {
      agent.destroy();
    }
  });

  it('keeps an idle keep-alive connection open while its client sends on it after the listener closed: served with Connection: close (issue 30)', async () => {
    // The connection a stream started before SIGTERM leaves behind: its client sends the next request on
    // it right away. Closing idle connections with the listener closed this one under the client.
    const url = await startRouter();
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const before = await nodeChat(url, agent);
      expect(before.connection).toBe('keep-alive');
      const closing = router?.close({ drainDelayMs: 0, graceMs: 10_000 });
      expect(router?.phase).toBe('closing');
      await new Promise((resolve) => setTimeout(resolve, 100));
      const after = await nodeChat(url, agent);
      expect(after.localPort).toBe(before.localPort);
      expect(after.status).toBe(200);
      expect(after.connection).toBe('close');
      await after.socketClosed;
      expect(await closing).toMatchObject({ aborted: 0 });
    } finally {
      agent.destroy();
    }
  });

  it('closes a keep-alive connection that stays quiet once the listener closed, well before the grace ends', async () => {
    const url = await startRouter();
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const before = await nodeChat(url, agent);
      const startedAt = performance.now();
      const report = await router?.close({ drainDelayMs: 0, graceMs: 10_000 });
      expect(report).toMatchObject({ aborted: 0 });
      // About the quiet period (1 s), not the 10 s grace: the idle connection did not hold the shutdown.
      expect(performance.now() - startedAt).toBeLessThan(5_000);
      await before.socketClosed;
    } finally {
      agent.destroy();
    }
  });

  it('lets a stream in flight finish during the shutdown, then the in-flight count in Redis is 0', async () => {
    const url = await startRouter();
    const response = await chat(url, { max_tokens: 120, stream: true });
    expect(response.status).toBe(200);
    const reader = response.body?.getReader() as ReadableStreamDefaultReader<Uint8Array>;
    let text = new TextDecoder().decode((await reader.read()).value);
    expect(await redisInflight()).toEqual({ counted: 1, leases: 1 });
    const closing = router?.close({ drainDelayMs: 300, graceMs: 15_000 });
    expect((await fetch(`${url}/readyz`)).status).toBe(503);
    text += await readRest(reader);
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(text).toContain('"finish_reason":"length"');
    expect(text).not.toContain('ROUTER_ERR_');
    const report = await closing;
    expect(report).toMatchObject({
      inflightAtClose: 1,
      aborted: 0,
      leasesReleasedAtDeadline: 0,
      releasesSettled: true,
    });
    expect(await redisInflight()).toEqual({ counted: 0, leases: 0 });
    expect(router?.heldLeases).toBe(0);
  });

  it('aborts what still runs at the grace deadline and releases its leases', async () => {
    const url = await startRouter();
    const streams = await Promise.all([0, 1, 2].map(() => chat(url, { max_tokens: 5_000, stream: true })));
    const readers = streams.map((response) => response.body?.getReader() as ReadableStreamDefaultReader<Uint8Array>);
    await Promise.all(readers.map((reader) => reader.read()));
    expect((await redisInflight()).counted).toBe(3);
    const startedAt = performance.now();
    const report = await router?.close({ drainDelayMs: 0, graceMs: 500 });
    const elapsedMs = performance.now() - startedAt;
    expect(report).toMatchObject({ inflightAtClose: 3, aborted: 3, releasesSettled: true });
    // Bounded by the grace, not by the 50-second streams.
    expect(elapsedMs).toBeLessThan(10_000);
    // Each stream ends with the router's error event and [DONE] (or is cut), never hangs.
    for (const reader of readers) {
      const rest = await readRest(reader).catch(() => 'cut');
      expect(
        rest === 'cut' || (rest.includes('ROUTER_ERR_UPSTREAM_STREAM') && rest.trimEnd().endsWith('data: [DONE]')),
      ).toBe(true);
    }
    expect(await redisInflight()).toEqual({ counted: 0, leases: 0 });
    expect(router?.heldLeases).toBe(0);
    // The upstream requests were aborted, not left running on the backends.
    await waitFor(() => sims.every((sim) => sim.engine.runningCount === 0 && sim.engine.waitingCount === 0), 5_000);
  });

  it('on SIGTERM, a router process fails readiness at once, finishes its stream, releases its lease and exits 0', {
    timeout: 60_000,
  }, async () => {
    const [port, opsPort] = (await findFreePorts(2)) as [number, number];
    const url = `http://127.0.0.1:${port}`;
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(import.meta.dirname, '../src/main.ts'),
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--ops-port',
        String(opsPort),
        '--backends',
        backendUrls.join(','),
        '--redis-url',
        redis.url,
        '--redis-timeout-ms',
        '500',
        '--shutdown-drain-delay-ms',
        '1000',
        '--shutdown-grace-ms',
        '15000',
        '--log-level',
        'warn',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'], cwd: join(import.meta.dirname, '../../..') },
    );
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      await waitFor(async () => (await fetch(`${url}/readyz`).catch(() => null))?.status === 200, 40_000);
      const response = await chat(url, { max_tokens: 150, stream: true });
      const reader = response.body?.getReader() as ReadableStreamDefaultReader<Uint8Array>;
      let text = new TextDecoder().decode((await reader.read()).value);
      child.kill('SIGTERM');
      const signalledAt = performance.now();
      await waitFor(async () => (await fetch(`${url}/readyz`).catch(() => null))?.status === 503, 2_000);
      const readinessOffMs = performance.now() - signalledAt;
      text += await readRest(reader);
      expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
      expect(text).not.toContain('ROUTER_ERR_');
      expect(await exited).toBe(0);
      const exitedMs = performance.now() - signalledAt;
      console.info(
        `SIGTERM → /readyz 503 in ${readinessOffMs.toFixed(0)} ms, process exited 0 after ${exitedMs.toFixed(0)} ms (drain delay 1000 ms)`,
      );
      expect(exitedMs).toBeGreaterThanOrEqual(900);
      expect(await redisInflight()).toEqual({ counted: 0, leases: 0 });
    } finally {
      child.kill('SIGKILL');
      if (child.exitCode === null && child.signalCode === null) await exited;
      if (stderr.includes('"level":50')) console.warn(stderr);
    }
  });
});

function chat(url: string, options: { max_tokens: number; stream?: boolean }): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: MODEL,
      messages: [{ role: 'user', content: `shutdown test ${Math.random()}` }],
      ...options,
    }),
  });
}

async function readRest(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<string> {
  const decoder = new TextDecoder();
  let text = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text + decoder.decode();
    text += decoder.decode(value, { stream: true });
  }
}

/** One non-streaming chat over node:http with `agent` (keep-alive): status, Connection header, the client's local port. */
function nodeChat(
  url: string,
  agent: Agent,
): Promise<{
  status: number;
  connection: string | undefined;
  localPort: number | undefined;
  socketClosed: Promise<void>;
}> {
  const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'keep-alive' }], max_tokens: 3 });
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      `${url}/v1/chat/completions`,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (response: IncomingMessage) => {
        const socket = response.socket;
        const socketClosed = new Promise<void>((resolveClosed) =>
          socket.destroyed ? resolveClosed() : socket.once('close', () => resolveClosed()),
        );
        response.resume();
        response.once('end', () =>
          resolve({
            status: response.statusCode ?? 0,
            connection: response.headers.connection,
            localPort: socket.localPort,
            socketClosed,
          }),
        );
      },
    );
    request.once('error', reject);
    request.end(body);
  });
}
