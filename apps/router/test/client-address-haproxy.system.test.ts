import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { findFreePorts, startRedis, type TestRedis } from '@kvroute/testing';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { generateApiKey } from '../src/tenants/api-key';
import { HAPROXY_SOURCE_ADDRESS, startHaproxy, type RunningHaproxy } from './haproxy-kit';
import { waitFor } from './start-test-cluster';

/**
 * Issue 30, behind a real HAProxy (`send-proxy-v2`, as the shipped config): the router sees each
 * client's own address, and the finding "100 wrong keys behind HAProxy lock out new and newly issued
 * keys for everyone" no longer holds. Clients are distinct loopback addresses (undici `localAddress`).
 * System test (`npm run test:system`): needs haproxy.
 */
const MAX_FAILURES = 100;
const ADMIN_TOKEN = 'client-address-admin-token-0123456789';

describe('client addresses behind HAProxy with PROXY protocol', () => {
  let redis: TestRedis;
  let backend: Server;
  let router: RouterServer;
  let haproxy: RunningHaproxy | undefined;
  let frontUrl = '';
  const agents: Agent[] = [];

  beforeAll(async () => {
    redis = await startRedis({ fresh: true, logger: () => undefined });
    backend = createServer((incoming, response) => {
      incoming.resume();
      incoming.on('end', () => {
        response.setHeader('content-type', 'application/json');
        response.end(
          JSON.stringify({
            id: 'c',
            object: 'chat.completion',
            model: 'm',
            choices: [],
            forwardedFor: incoming.headers['x-forwarded-for'],
          }),
        );
      });
    });
    backend.listen(0, '127.0.0.1');
    await once(backend, 'listening');
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
        backends: [{ url: `http://127.0.0.1:${(backend.address() as AddressInfo).port}`, id: 'b0', models: ['m'] }],
        maxAuthFailures: MAX_FAILURES,
        proxyProtocolFrom: [HAPROXY_SOURCE_ADDRESS],
      }),
      { logger: false },
    );
    const routerPort = Number(new URL(await router.listen()).port);
    const [frontPort] = (await findFreePorts(1)) as [number];
    haproxy = startHaproxy({
      retries: 2,
      defaults: ['  timeout check 2s'],
      sections: [
        'frontend openai',
        `  bind 127.0.0.1:${frontPort}`,
        '  default_backend routers',
        'backend routers',
        '  option httpchk GET /readyz',
        `  server r0 127.0.0.1:${routerPort} check inter 200ms`,
      ],
    });
    frontUrl = `http://127.0.0.1:${frontPort}`;
    await waitFor(async () => (await fetch(`${frontUrl}/healthz`).catch(() => null))?.status === 200, 10_000);
  }, 30_000);

  afterAll(async () => {
    haproxy?.stop();
    await Promise.all(agents.map((agent) => agent.close()));
    await router?.close({ graceMs: 10 });
    backend?.closeAllConnections();
    await new Promise((resolve) => backend?.close(resolve));
    await redis?.stop();
  });

  /** A chat request through HAProxy from the client at `localAddress`: status and the backend's echo. */
  async function chatFrom(localAddress: string, apiKey: string): Promise<{ status: number; forwardedFor?: string }> {
    const agent = new Agent({ localAddress });
    agents.push(agent);
    const answer = await request(`${frontUrl}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    const body = (await answer.body.json()) as { forwardedFor?: string };
    return { status: answer.statusCode, forwardedFor: body.forwardedFor };
  }

  async function issueKey(tenant: string): Promise<string> {
    const answer = await fetch(`${router.adminUrl}/admin/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ tenant }),
    });
    expect(answer.status).toBe(201);
    return ((await answer.json()) as { key: string }).key;
  }

  it('sees each client’s own address through HAProxy', async () => {
    const key = await issueKey('tenant-a');
    const answer = await chatFrom('127.0.0.3', key);
    expect(answer).toEqual({ status: 200, forwardedFor: '127.0.0.3' });
  });

  it('locks out only the client that sent 100 wrong keys; another client’s newly issued key is served', async () => {
    for (let attempt = 0; attempt < MAX_FAILURES; attempt++)
      expect((await chatFrom('127.0.0.4', generateApiKey().secret)).status).toBe(401);
    expect((await chatFrom('127.0.0.4', generateApiKey().secret)).status).toBe(429);
    expect((await chatFrom('127.0.0.5', await issueKey('tenant-b'))).status).toBe(200);
  });
});
