import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '@kvroute/platform';
import { apiKeyKeys, createRedis, quitRedis, RedisApiKeyStore, waitUntilReady } from '@kvroute/redis-store';
import { startLocalRedisServer, type LocalRedisServer } from '@kvroute/testing';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { generateApiKey } from '../src/tenants/api-key';
import { SaltSecretKeeper } from '../src/tenants/salt-secret';
import { writeTestKeyFile } from './api-key-file';
import { waitFor } from './start-test-cluster';

/**
 * Issue 31, durable tenant state: routers configured with no salt secret share one through Redis, its only
 * copy. A Redis restarted without persistence (the shipped one, before AOF) loses it; a replica started
 * afterwards must still salt a tenant as the running replicas do, or the tenant's cache splits in two.
 * Keys come from a key file (they survive any Redis); admin-made keys need Redis persistence (docs).
 */
const MODEL = 'test-model';
const SECRET_KEY = apiKeyKeys().cacheSaltSecret;
// Long enough for many KV blocks, so that a hit is unmistakable.
const SYSTEM = `You are the billing assistant of Example Corp. ${'Answer from the tariff sheet only. '.repeat(40)}`;

/** A logger whose lines the test reads. */
function capturedLogger(): { lines: string[]; logger: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { lines, logger: createLogger({ service: 'kvroute-router', level: 'info', destination: sink as never }) };
}

describe('cache salts across a Redis restart without persistence', () => {
  let redis: LocalRedisServer;
  let sim: SimServer;
  let simUrl: string;
  let keyFile: ReturnType<typeof writeTestKeyFile>;
  const key = generateApiKey();
  const routers: RouterServer[] = [];

  beforeAll(async () => {
    redis = await startLocalRedisServer();
    sim = await createSimServer(SimConfig.parse({ port: 0, model: MODEL, timeScale: 0.1, logLevel: 'silent' }));
    simUrl = await sim.listen();
    keyFile = writeTestKeyFile([{ id: 'billing', tenant: 'tenant-billing', digest: key.digest }]);
  });
  afterAll(async () => {
    await Promise.all(routers.map((router) => router.close({ drainDelayMs: 0, graceMs: 1_000 })));
    await sim?.close();
    await redis?.stop();
    keyFile?.remove();
  });

  async function startReplica(overrides: Partial<RouterConfig> = {}): Promise<{ url: string; lines: string[] }> {
    const { lines, logger } = capturedLogger();
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [simUrl],
        redisUrl: redis.url,
        redisTimeoutMs: 500,
        auth: 'api-keys',
        apiKeysFile: keyFile.file,
        ...overrides,
      }),
      { logger },
    );
    routers.push(router);
    return { url: await router.listen(), lines };
  }

  /** The tenant's question through `routerUrl`; the prompt tokens the sim found in its cache. */
  async function cachedTokens(routerUrl: string, question: string): Promise<number> {
    const response = await fetch(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key.secret}` },
      body: JSON.stringify({
        model: MODEL,
        max_tokens: 2,
        messages: [
          { role: 'system', content: SYSTEM },
          { role: 'user', content: question },
        ],
      }),
    });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { usage: { prompt_tokens_details?: { cached_tokens?: number } } };
    return body.usage.prompt_tokens_details?.cached_tokens ?? 0;
  }

  it("a replica started after the restart salts the tenant as the running one: the follow-up hits the tenant's cache", async () => {
    const first = await startReplica();
    expect(await cachedTokens(first.url, 'What does plan A cost?')).toBe(0);
    const warm = await cachedTokens(first.url, 'What does plan B cost?');
    expect(warm).toBeGreaterThan(0);

    await redis.restart(); // `--save '' --appendonly no`: every key is gone, the secret with them.
    const probe = createRedis(redis.url, 'worker');
    try {
      await waitUntilReady(probe);
      expect(await probe.dbsize()).toBe(0);
      // The running replica puts its secret back within a check interval (2 s) of reconnecting.
      await waitFor(async () => (await probe.exists(SECRET_KEY)) === 1, 15_000);
    } finally {
      await quitRedis(probe).catch(() => undefined);
    }
    const second = await startReplica();
    // Same salt, same blocks on the engine: the new replica's follow-up reuses the tenant's prefix.
    expect(await cachedTokens(second.url, 'What does plan C cost?')).toBeGreaterThanOrEqual(warm);
    expect(first.lines.join('')).toMatch(/the secret was missing from Redis/);
    expect(second.lines.join('')).not.toMatch(/minted one/);
    // The request lines name the tenant and the key's id; neither the salt secret nor the API key is in any line.
    const requestLine = second.lines.find((line) => line.includes('"msg":"request"'));
    expect(JSON.parse(requestLine as string)).toMatchObject({
      tenant: 'tenant-billing',
      keyId: 'billing',
      status: 200,
    });
    const stored = await readSecret(redis.url);
    const output = [...first.lines, ...second.lines].join('');
    expect(stored).not.toBe('');
    expect(output).not.toContain(stored);
    expect(output).not.toContain(key.secret);
  }, 60_000);

  it('with cacheSaltSecretFile (a mounted Secret) the file is the only copy: Redis never holds it, a restart changes nothing', async () => {
    const secretFile = join(dirname(keyFile.file), 'cache-salt-secret');
    writeFileSync(secretFile, 'file-secret-of-the-fleet-0123456789\n');
    const first = await startReplica({ cacheSaltSecretFile: secretFile });
    // Another salt than the shared secret's of the test before: the engine holds none of this yet.
    expect(await cachedTokens(first.url, 'Which plans have a discount?')).toBe(0);
    const warm = await cachedTokens(first.url, 'Which plans are monthly?');
    expect(warm).toBeGreaterThan(0);
    await redis.restart();
    const second = await startReplica({ cacheSaltSecretFile: secretFile });
    expect(await cachedTokens(second.url, 'Which plans are yearly?')).toBeGreaterThanOrEqual(warm);
    expect(await readSecret(redis.url)).toBe('');
    expect([...first.lines, ...second.lines].join('')).not.toMatch(/cache salts:/);
  }, 60_000);

  it('adopts the secret Redis holds when it differs from its own, with one error, and stores its own where Redis has none', async () => {
    const client = createRedis(redis.url, 'worker');
    await waitUntilReady(client);
    const namespace = `salt-keeper-${Date.now()}`;
    const secretKey = apiKeyKeys(namespace).cacheSaltSecret;
    try {
      const { lines, logger } = capturedLogger();
      const minted = ['secret-minted-by-this-replica-0001', 'never-used-0002'];
      const keeper = new SaltSecretKeeper({
        shared: new RedisApiKeyStore({ redis: client, keyNamespace: namespace }),
        mint: () => minted.shift() as string,
        logger,
      });
      await keeper.start();
      expect(lines.join('')).toMatch(/no secret in Redis, this replica minted one/);
      const own = keeper.salter?.saltFor('tenant-a', null);

      await client.del(secretKey);
      await keeper.check();
      expect(await client.get(secretKey)).toBe('secret-minted-by-this-replica-0001');
      expect(keeper.salter?.saltFor('tenant-a', null)).toBe(own);

      // Another replica minted one in the window before this one wrote its own back.
      await client.set(secretKey, 'secret-of-a-replica-started-in-the-window');
      await keeper.check();
      await keeper.check();
      const errors = lines.filter((line) => line.includes('"level":"error"'));
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatch(/Redis holds another secret than this replica/);
      expect(errors[0]).not.toContain('secret-of-a-replica');
      expect(keeper.salter?.saltFor('tenant-a', null)).not.toBe(own);
      expect(await client.get(secretKey)).toBe('secret-of-a-replica-started-in-the-window');
    } finally {
      await client.del(secretKey);
      await quitRedis(client).catch(() => undefined);
    }
  });
});

async function readSecret(redisUrl: string): Promise<string> {
  const client = createRedis(redisUrl, 'worker');
  try {
    await waitUntilReady(client);
    return (await client.get(SECRET_KEY)) ?? '';
  } finally {
    await quitRedis(client).catch(() => undefined);
  }
}
