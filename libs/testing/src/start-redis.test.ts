import net from 'node:net';
import http from 'node:http';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { parseDockerHost, probeDocker } from './docker-probe';
import { findFreePort, pingRedis, startLocalRedisServer } from './local-redis-server';
import { startRedis, type TestRedis } from './start-redis';
import { uniqueKeyPrefix } from './unique-key-prefix';

/** A client that fails fast instead of reconnecting, so a dead server shows up as an error. */
function client(url: string): Redis {
  return new Redis(url, {
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    connectTimeout: 1_000,
  });
}

const started: TestRedis[] = [];
const clients: Redis[] = [];

async function fresh(): Promise<{ redis: TestRedis; lines: string[] }> {
  const lines: string[] = [];
  const redis = await startRedis({ fresh: true, logger: (line) => lines.push(line) });
  started.push(redis);
  return { redis, lines };
}

function track(redis: Redis): Redis {
  clients.push(redis);
  return redis;
}

afterEach(() => {
  vi.unstubAllEnvs();
  for (const c of clients.splice(0)) c.disconnect();
});

afterAll(async () => {
  await Promise.all(started.map((redis) => redis.stop().catch(() => undefined)));
});

describe('startRedis', () => {
  it('starts a fresh Redis that answers PING through ioredis and logs its source once', async () => {
    const { redis, lines } = await fresh();
    console.info(`start-redis.test: Redis source ${redis.source} on port ${redis.port}`);
    expect(['testcontainers', 'local-redis-server']).toContain(redis.source);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(redis.source);
    const c = track(client(redis.url));
    await c.connect();
    expect(await c.ping()).toBe('PONG');
  });

  it('uses REDIS_URL when set, and stop() leaves that Redis running and its keys alone', async () => {
    const { redis: shared } = await fresh();
    const setup = track(client(shared.url));
    await setup.connect();
    await setup.set('other-suite:key', 'kept');
    vi.stubEnv('REDIS_URL', shared.url);

    const lines: string[] = [];
    const fromEnv = await startRedis({ logger: (line) => lines.push(line) });
    expect(fromEnv.source).toBe('env');
    expect(fromEnv.url).toBe(shared.url);
    expect(fromEnv.port).toBe(shared.port);
    expect(lines).toEqual([expect.stringContaining('env')]);
    await expect(fromEnv.kill()).rejects.toThrow(/not supported/);
    await expect(fromEnv.restart()).rejects.toThrow(/not supported/);
    await fromEnv.stop();

    const after = track(client(shared.url));
    await after.connect();
    expect(await after.ping()).toBe('PONG');
    expect(await after.get('other-suite:key')).toBe('kept');
  });

  it('ignores REDIS_URL when fresh is true', async () => {
    vi.stubEnv('REDIS_URL', 'redis://127.0.0.1:1');
    const { redis } = await fresh();
    expect(redis.source).not.toBe('env');
    expect(redis.port).not.toBe(1);
  });
});

describe('local redis-server', () => {
  it('kill() makes existing and new connections fail', async () => {
    const server = await startLocalRedisServer();
    try {
      const before = track(client(server.url));
      await before.connect();
      expect(await before.ping()).toBe('PONG');

      await server.kill();
      expect(server.running).toBe(false);
      await expect(before.ping()).rejects.toThrow();
      const after = track(client(server.url));
      await expect(after.connect()).rejects.toThrow();
      expect(await pingRedis(server.port)).toBe(false);
    } finally {
      await server.stop();
    }
  });

  it('restart() brings it back on the same port, after a kill or while running', async () => {
    const server = await startLocalRedisServer();
    try {
      const port = server.port;
      await server.kill();
      await server.restart();
      expect(server.port).toBe(port);
      const c = track(client(server.url));
      await c.connect();
      expect(await c.ping()).toBe('PONG');

      await server.restart();
      expect(await pingRedis(port)).toBe(true);
    } finally {
      await server.stop();
    }
    expect(server.running).toBe(false);
    expect(await pingRedis(server.port)).toBe(false);
  });

  it('startRedis({ fresh: true }) exposes kill and restart for a local server', async () => {
    const { redis } = await fresh();
    if (redis.source !== 'local-redis-server') return; // a machine with Docker gets a container instead
    await redis.kill();
    expect(await pingRedis(redis.port)).toBe(false);
    await redis.restart();
    expect(await pingRedis(redis.port)).toBe(true);
  });
});

describe('probeDocker', () => {
  it('returns false quickly when nothing listens', async () => {
    const port = await findFreePort();
    const t0 = Date.now();
    expect(await probeDocker({ dockerHost: `tcp://127.0.0.1:${port}` })).toBe(false);
    expect(await probeDocker({ dockerHost: 'unix:///nonexistent/docker.sock' })).toBe(false);
    expect(Date.now() - t0).toBeLessThan(1_000);
  });

  it('returns false within ~1 s from a socket that accepts and never answers', async () => {
    const sockets: net.Socket[] = [];
    const silent = net.createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as net.AddressInfo;
    try {
      const t0 = Date.now();
      expect(await probeDocker({ dockerHost: `tcp://127.0.0.1:${port}`, timeoutMs: 500 })).toBe(false);
      const elapsed = Date.now() - t0;
      expect(elapsed).toBeGreaterThanOrEqual(450);
      expect(elapsed).toBeLessThan(1_000);
      expect(sockets.length).toBe(1);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('returns true only for a 200 answer to GET /_ping', async () => {
    const engine = http.createServer((request, response) => {
      response.statusCode = request.url === '/_ping' ? 200 : 404;
      response.end('OK');
    });
    await new Promise<void>((resolve) => engine.listen(0, '127.0.0.1', resolve));
    const { port } = engine.address() as net.AddressInfo;
    try {
      expect(await probeDocker({ dockerHost: `tcp://127.0.0.1:${port}` })).toBe(true);
    } finally {
      await new Promise((resolve) => engine.close(resolve));
    }
  });

  it('parses DOCKER_HOST forms and rejects the ones it cannot probe', () => {
    expect(parseDockerHost('unix:///var/run/docker.sock')).toEqual({
      kind: 'unix',
      socketPath: '/var/run/docker.sock',
    });
    expect(parseDockerHost('/run/user/1000/docker.sock')).toEqual({
      kind: 'unix',
      socketPath: '/run/user/1000/docker.sock',
    });
    expect(parseDockerHost('tcp://10.0.0.5:2375')).toEqual({ kind: 'tcp', host: '10.0.0.5', port: 2375 });
    expect(parseDockerHost('tcp://[::1]:2375')).toEqual({ kind: 'tcp', host: '::1', port: 2375 });
    expect(parseDockerHost('npipe:////./pipe/docker_engine')).toBeUndefined();
    expect(parseDockerHost('ssh://user@host')).toBeUndefined();
  });
});

describe('uniqueKeyPrefix', () => {
  it('differs on every call and carries the label', () => {
    const prefixes = Array.from({ length: 100 }, () => uniqueKeyPrefix('routing table'));
    expect(new Set(prefixes).size).toBe(100);
    expect(prefixes[0]).toMatch(/^test:routing-table:\d+:\d+:[0-9a-f]{8}$/);
  });
});
