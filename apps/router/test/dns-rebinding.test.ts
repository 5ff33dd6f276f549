import { createServer, type Server } from 'node:net';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ResolvedAddress } from '../src/admin/backend-address-policy';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';

/**
 * DNS rebinding (issue 14, admin): a backend named `rebind.test` (RFC 6761: never in real DNS, so only
 * the injected resolver can answer it) passes the address check on 127.0.0.2, then its DNS answers
 * 127.0.0.3, which the allowlist does not hold and where a trap counts connections. The router's
 * connections resolve through the policy itself (pinned: checked and connected to the same addresses),
 * so model discovery and requests reach the sim while the name is good, and once it turns, new
 * connections fail before a socket opens: the trap sees none. Only loopback addresses are used.
 */
describe('a backend name that rebinds to a denied address', () => {
  let sim: SimServer;
  let trap: Server;
  let trapConnections = 0;
  let router: RouterServer;
  let publicUrl: string;
  const table: Record<string, string> = { 'rebind.test': '127.0.0.2' };
  let lookups = 0;

  beforeAll(async () => {
    sim = await createSimServer(SimConfig.parse({ host: '127.0.0.2', port: 0, profile: 'fast', model: 'test-model' }));
    const port = new URL(await sim.listen()).port;
    // The same port on another loopback address: where a rebound name would send the router.
    trap = createServer((socket) => {
      trapConnections += 1;
      socket.destroy();
    });
    await new Promise<void>((resolve) => trap.listen(Number(port), '127.0.0.3', resolve));
    const resolveHost = async (hostname: string): Promise<readonly ResolvedAddress[]> => {
      lookups += 1;
      const address = table[hostname];
      if (address === undefined) throw Object.assign(new Error('not in the test table'), { code: 'ENOTFOUND' });
      return [{ address, family: 4 }];
    };
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [`http://rebind.test:${port}`],
        backendAllowlist: ['127.0.0.2/32'],
        retryBackoffMs: 1,
        routingHeaders: 'all',
      }),
      { resolveHost },
    );
    publicUrl = await router.listen();
  });

  afterAll(async () => {
    await router?.close();
    await sim?.close();
    await new Promise((resolve) => trap?.close(resolve));
  });

  const chat = (content: string) =>
    fetch(`${publicUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content }], max_tokens: 2 }),
    });

  it('connects to the checked address while the name is good, and to nothing once it rebinds', async () => {
    // Discovery went through the pinned lookup (the system resolver knows no rebind.test).
    for (let attempt = 0; attempt < 100 && (await fetch(`${publicUrl}/readyz`)).status !== 200; attempt++)
      await new Promise((resolve) => setTimeout(resolve, 50));
    const first = await chat('while the name is good');
    expect(first.status).toBe(200);
    const lookupsWhileGood = lookups;
    expect(lookupsWhileGood).toBeGreaterThan(0);

    table['rebind.test'] = '127.0.0.3';
    // More at once than the pool has idle connections: new connections must be opened, and each asks DNS again.
    const statuses = await Promise.all(
      Array.from({ length: 4 }, async (_, index) => {
        const response = await chat(`after the rebind ${index}`);
        const body = (await response.json()) as { error?: { type?: string } };
        return { status: response.status, hasError: body.error !== undefined };
      }),
    );
    expect(lookups).toBeGreaterThan(lookupsWhileGood);
    expect(trapConnections).toBe(0);
    const refused = statuses.filter((entry) => entry.status !== 200);
    expect(refused.length).toBeGreaterThan(0);
    for (const entry of refused) {
      expect(entry.status).toBeGreaterThanOrEqual(502);
      expect(entry.hasError).toBe(true);
    }

    // The name turns good again: new connections go through.
    table['rebind.test'] = '127.0.0.2';
    expect((await chat('good again')).status).toBe(200);
    expect(trapConnections).toBe(0);
  });
});
