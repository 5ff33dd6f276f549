import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { generateApiKey } from '../src/tenants/api-key';
import { chatRequest, exchange, statusOf, v2Header } from './proxy-client';

/**
 * Issue 30's finding: the API-key failure limiter counted per socket peer, so behind the shipped HAProxy
 * (every client one peer) 100 wrong keys locked out new and newly issued keys for everyone. Now it
 * counts per real client (PROXY protocol from the balancer, 127.0.0.1 here) and per key prefix from
 * that client. Real Redis (keys issued through the admin API live there), a real router, raw sockets.
 */
const MAX_FAILURES = 100;
const ADMIN_TOKEN = 'auth-failures-admin-token-0123456789';

describe('API-key failures count against the real client and the key, not the balancer', () => {
  let redis: TestRedis;
  let backend: Server;
  let router: RouterServer;
  let port: number;

  beforeAll(async () => {
    redis = await startRedis({ fresh: true, logger: () => undefined });
    backend = createServer((incoming, response) => {
      incoming.resume();
      incoming.on('end', () => {
        response.setHeader('content-type', 'application/json');
        response.end('{"id":"c","object":"chat.completion","model":"m","choices":[]}');
      });
    });
    backend.listen(0, '127.0.0.1');
    await once(backend, 'listening');
    const url = `http://127.0.0.1:${(backend.address() as AddressInfo).port}`;
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        adminHost: '127.0.0.1',
        adminPort: 0,
        adminToken: ADMIN_TOKEN,
        redisUrl: redis.url,
        auth: 'api-keys',
        backends: [{ url, id: 'b0', models: ['m'] }],
        maxAuthFailures: MAX_FAILURES,
        proxyProtocolFrom: ['127.0.0.1'],
      }),
      { logger: false },
    );
    port = Number(new URL(await router.listen()).port);
  });

  afterAll(async () => {
    await router?.close({ graceMs: 10 });
    backend?.closeAllConnections();
    await new Promise((resolve) => backend?.close(resolve));
    await redis?.stop();
  });

  /** A key issued now through the admin API: in Redis, not yet in any replica's memory. */
  async function issueKey(tenant: string): Promise<string> {
    const answer = await fetch(`${router.adminUrl}/admin/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ tenant }),
    });
    expect(answer.status).toBe(201);
    return ((await answer.json()) as { key: string }).key;
  }

  /** A chat request through the balancer (127.0.0.1) for the client `client`. */
  const viaBalancer = (client: string, apiKey: string): Promise<string> =>
    exchange(port, '127.0.0.1', [Buffer.concat([v2Header(client, 40_000), chatRequest({ apiKey })])]);

  it('locks out only the client behind the balancer that guessed keys: another client’s new key is served', async () => {
    for (let attempt = 0; attempt < MAX_FAILURES; attempt++)
      expect(statusOf(await viaBalancer('203.0.113.7', generateApiKey().secret))).toBe(401);
    expect(statusOf(await viaBalancer('203.0.113.7', generateApiKey().secret))).toBe(429);
    const fresh = await issueKey('tenant-y');
    expect(statusOf(await viaBalancer('198.51.100.9', fresh))).toBe(200);
    // The guesser itself: its unknown keys are refused without a lookup, the new key included.
    expect(statusOf(await viaBalancer('203.0.113.7', await issueKey('tenant-x')))).toBe(429);
  });

  it('locks out only a repeated wrong key when clients share one address (a balancer without PROXY protocol)', async () => {
    // 127.0.0.2 is not a listed balancer: every client behind it is that one address.
    const revoked = generateApiKey().secret;
    const fromShared = (apiKey: string): Promise<string> => exchange(port, '127.0.0.2', [chatRequest({ apiKey })]);
    for (let attempt = 0; attempt < MAX_FAILURES; attempt++) expect(statusOf(await fromShared(revoked))).toBe(401);
    const limited = await fromShared(revoked);
    expect(statusOf(limited)).toBe(429);
    expect(limited).toContain('ROUTER_ERR_AUTH_RATE_LIMITED');
    // Another client behind the same address, with a key issued just now, is served.
    expect(statusOf(await fromShared(await issueKey('tenant-z')))).toBe(200);
  });
});
