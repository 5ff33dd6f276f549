import { Writable } from 'node:stream';
import { createLogger } from '@kvroute/platform';
import { createRedis, quitRedis } from '@kvroute/redis-store';
import { startLocalRedisServer, type LocalRedisServer } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer } from '../src/create-router';

/**
 * Issue 30, guards: with tenants on, Redis holds the key digests, the limits and the cache-salt secret. A
 * Redis that answers without a password is warned about at start; one that wants a password is not.
 */
const PASSWORD = 'redis-auth-warning-pw-0123';
const WARNING = /Redis accepts commands without a password while auth is on/;

describe('startup warning: auth on, Redis unauthenticated', () => {
  let open: LocalRedisServer;
  let guarded: LocalRedisServer;

  beforeAll(async () => {
    open = await startLocalRedisServer();
    guarded = await startLocalRedisServer();
    const admin = createRedis(guarded.url, 'worker');
    await admin.config('SET', 'requirepass', PASSWORD);
    await quitRedis(admin).catch(() => undefined);
  });
  afterAll(async () => {
    await open?.stop();
    await guarded?.stop();
  });

  /** The log lines of a router started with `auth` on the Redis at `redisUrl`, then closed. */
  async function startupLines(auth: 'none' | 'api-keys', redisUrl: string): Promise<string[]> {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [{ url: 'http://127.0.0.1:9', models: ['m'] }],
        redisUrl,
        auth,
      }),
      { logger: createLogger({ service: 'kvroute-router', level: 'info', destination: sink as never }) },
    );
    try {
      await router.listen();
    } finally {
      await router.close();
    }
    return lines;
  }

  it('warns when api-keys is on and Redis answers PING without a password, naming no secret', async () => {
    const lines = await startupLines('api-keys', open.url);
    const warning = lines.find((line) => WARNING.test(line));
    expect(warning).toBeDefined();
    expect(JSON.parse(warning as string)).toMatchObject({ level: 'warn', auth: 'api-keys' });
  });

  it('does not warn for a Redis that wants a password, nor in open mode', async () => {
    const withPassword = new URL(guarded.url);
    withPassword.password = PASSWORD;
    const guardedLines = await startupLines('api-keys', withPassword.toString());
    expect(guardedLines.some((line) => WARNING.test(line))).toBe(false);
    expect(guardedLines.join('')).not.toContain(PASSWORD);
    expect((await startupLines('none', open.url)).some((line) => WARNING.test(line))).toBe(false);
  });
});
