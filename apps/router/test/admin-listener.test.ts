import { createServer, type Server } from 'node:net';
import { Writable } from 'node:stream';
import { createLogger } from '@kvroute/platform';
import { createRedis, quitRedis } from '@kvroute/redis-store';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ResolvedAddress } from '../src/admin/backend-address-policy';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';

/**
 * Issue 14, acceptance 3. Nothing here targets a non-loopback address: the injected resolver maps
 * `.test` names (RFC 6761: they never resolve in real DNS) to the SSRF candidates, so even a check that
 * wrongly let one through would have nowhere real to connect; IP-literal candidates are refused before any
 * socket exists, and the loopback stand-ins count the connections that reach them.
 */
const TOKEN = 'admin-listener-test-token-0123';
const MAX_FAILURES = 3;

describe('the admin listener', () => {
  let redis: TestRedis;
  let sim: SimServer;
  let simUrl: string;
  let standIn: Server;
  let standInConnections = 0;
  let standInPort: number;
  let router: RouterServer;
  let publicUrl: string;
  let adminUrl: string;
  let now = 1_000_000;
  const resolved: string[] = [];
  const logLines: string[] = [];

  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
    sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model' }));
    simUrl = await sim.listen();
    // A loopback listener standing in for a backend that must not be reached.
    standIn = createServer((socket) => {
      standInConnections += 1;
      socket.destroy();
    });
    await new Promise<void>((resolve) => standIn.listen(0, '127.0.0.1', resolve));
    standInPort = (standIn.address() as { port: number }).port;
    const redisUrl = new URL(redis.url);
    const table: Record<string, string[]> = {
      'metadata-alias.test': ['169.254.169.254'],
      'redis-alias.test': [redisUrl.hostname === 'localhost' ? '127.0.0.1' : redisUrl.hostname],
      localhost: ['127.0.0.1'],
    };
    const resolveHost = async (hostname: string): Promise<readonly ResolvedAddress[]> => {
      resolved.push(hostname);
      const addresses = table[hostname];
      if (addresses === undefined) throw Object.assign(new Error('not in the test table'), { code: 'ENOTFOUND' });
      return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
    };
    const sink = new Writable({
      write(chunk, _encoding, done) {
        logLines.push(String(chunk));
        done();
      },
    });
    const logger = createLogger({ service: 'kvroute-router', level: 'info', destination: sink as never });
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        adminPort: 0,
        backends: [simUrl],
        redisUrl: redis.url,
        redisTimeoutMs: 200,
        adminToken: TOKEN,
        adminMaxAuthFailures: MAX_FAILURES,
        adminAuthWindowMs: 60_000,
        // Loopback is allowlisted (the test's backends live there); the stand-in's port is not.
        backendAllowlist: [`127.0.0.1:${new URL(simUrl).port}`, '127.0.0.2/32'],
      }),
      { resolveHost, nowMs: () => now, logger },
    );
    publicUrl = await router.listen();
    adminUrl = router.adminUrl as string;
  });
  afterAll(async () => {
    await router.close();
    await sim.close();
    await new Promise((resolve) => standIn.close(resolve));
    await redis.stop();
  });

  const admin = (method: string, path: string, options: { body?: unknown; token?: string; peerUrl?: string } = {}) =>
    fetch(`${options.peerUrl ?? adminUrl}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${options.token ?? TOKEN}`,
        ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
    });

  it('listens on a loopback port of its own; the public port answers the admin API 404', async () => {
    expect(new URL(adminUrl).hostname).toBe('127.0.0.1');
    expect(new URL(adminUrl).port).not.toBe(new URL(publicUrl).port);
    expect((await admin('GET', '/admin/backends')).status).toBe(200);
    const onPublic = await admin('GET', '/admin/backends', { peerUrl: publicUrl });
    expect(onPublic.status).toBe(404);
    expect(((await onPublic.json()) as { error: { code: string; type: string } }).error).toMatchObject({
      code: 'ROUTER_ERR_NOT_FOUND',
      type: 'invalid_request_error',
    });
  });

  it('refuses every SSRF candidate without a connection attempt', async () => {
    const redisPort = new URL(redis.url).port || '6379';
    const probe = createRedis(redis.url, 'worker');
    const connectionsReceived = async () =>
      Number(/total_connections_received:(\d+)/.exec(await probe.info('stats'))?.[1]);
    // The router's own connections (named kvroute-…) may reconnect on a loaded host (a request-path
    // command timing out): those are told apart by their client ids, so only a foreign connection counts.
    const kvrouteClientIds = async () =>
      new Set(
        String(await probe.client('LIST'))
          .split('\n')
          .filter((line) => / name=kvroute-/.test(line))
          .map((line) => /^id=(\d+)/.exec(line)?.[1]),
      );
    const redisConnectionsBefore = await connectionsReceived();
    const kvrouteClientsBefore = await kvrouteClientIds();
    const candidates = [
      'http://169.254.169.254/latest/meta-data/',
      'http://[fd00:ec2::254]/',
      'http://[fe80::1]:8000',
      'http://metadata.google.internal/computeMetadata/v1/',
      'http://metadata-alias.test:8000',
      `http://redis-alias.test:${redisPort}`,
      `http://127.0.0.1:${redisPort}`,
      `http://localhost:${standInPort}`,
      `http://127.0.0.1:${standInPort}`,
      'http://0.0.0.0:8000',
      `http://operator:hunter2-secret@127.0.0.1:${standInPort}`,
    ];
    for (const url of candidates) {
      const response = await admin('POST', '/admin/backends', { body: { url, models: ['test-model'] } });
      expect(response.status, url).toBe(403);
      const answer = (await response.json()) as { error: { code: string; param: string } };
      expect(answer.error).toMatchObject({ code: 'ROUTER_ERR_BACKEND_NOT_ALLOWED', param: 'url' });
      expect(JSON.stringify(answer)).not.toContain('hunter2-secret');
    }
    expect(resolved).toEqual(expect.arrayContaining(['metadata-alias.test', 'redis-alias.test', 'localhost']));
    expect(resolved).not.toContain('metadata.google.internal');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(standInConnections).toBe(0);
    const kvrouteReconnects = [...(await kvrouteClientIds())].filter((id) => !kvrouteClientsBefore.has(id)).length;
    expect((await connectionsReceived()) - kvrouteReconnects).toBe(redisConnectionsBefore);
    await quitRedis(probe);
    expect(router.registry.backends.map((backend) => backend.url)).toEqual([simUrl]);
    expect(
      logLines.filter(
        (line) =>
          line.includes('admin-audit') && line.includes('"action":"add"') && line.includes('"outcome":"refused"'),
      ),
    ).toHaveLength(candidates.length);
    // A URL with credentials is refused, and its password reaches neither the log nor the answer.
    expect(logLines.some((line) => line.includes('hunter2-secret'))).toBe(false);
  });

  it('adds an allowlisted loopback backend, and writes one audit line per change without the token', async () => {
    const added = await admin('POST', '/admin/backends', {
      body: { url: simUrl.replace('127.0.0.1', 'localhost'), id: 'sim-by-name', models: ['test-model'] },
    });
    // `localhost` is neither named in the allowlist nor does its address match an entry for its port.
    expect(added.status).toBe(403);
    expect((await admin('DELETE', `/admin/backends/${new URL(simUrl).host}`)).status).toBe(200);
    const readded = await admin('POST', '/admin/backends', {
      body: { url: simUrl, id: 'sim-again', models: ['test-model'] },
    });
    expect(readded.status).toBe(201);
    expect((await admin('POST', '/admin/backends/sim-again/drain')).status).toBe(200);
    expect((await admin('POST', '/admin/backends/sim-again/undrain')).status).toBe(200);
    const chat = await fetch(`${publicUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    });
    expect(chat.status).toBe(200);
    expect(chat.headers.get('x-router-backend')).toBe('sim-again');
    const audit = logLines
      .filter((line) => line.includes('admin-audit') && line.includes('"outcome":"done"'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(audit.map((line) => line.action)).toEqual(['remove', 'add', 'drain', 'undrain']);
    for (const line of audit) expect(line.peer).toMatch(/127\.0\.0\.1/);
    expect(logLines.join('')).not.toContain(TOKEN);
  });

  it('answers wrong tokens 401, then 429 with Retry-After (even the right token), until the window ends', async () => {
    for (let attempt = 0; attempt < MAX_FAILURES; attempt++) {
      const wrong = await admin('GET', '/admin/backends', { token: `wrong-token-${attempt}-0123456789` });
      expect(wrong.status).toBe(401);
    }
    const limited = await admin('GET', '/admin/backends', { token: 'wrong-token-again-0123456789' });
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('60');
    expect(((await limited.json()) as { error: { code: string } }).error.code).toBe(
      'ROUTER_ERR_ADMIN_AUTH_RATE_LIMITED',
    );
    expect((await admin('GET', '/admin/backends')).status).toBe(429);
    now += 60_000;
    expect((await admin('GET', '/admin/backends')).status).toBe(200);
    expect(logLines.join('')).not.toContain('wrong-token-0');
  });
});
