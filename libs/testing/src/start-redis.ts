import { probeDocker } from './docker-probe';
import { startLocalRedisServer } from './local-redis-server';

export type TestRedisSource = 'env' | 'testcontainers' | 'local-redis-server';

export interface TestRedis {
  url: string;
  source: TestRedisSource;
  port: number;
  /** Stops what startRedis started. For `env` a no-op: a shared Redis is never stopped or flushed. */
  stop(): Promise<void>;
  /** SIGKILL (crash tests). Throws for `env`. */
  kill(): Promise<void>;
  /** Stops (if running) and starts again on the same port (outage tests). Only for `local-redis-server`. */
  restart(): Promise<void>;
}

export interface StartRedisOptions {
  /** Ignore `REDIS_URL` and start a Redis of this test's own (needed to kill or restart it). Default false. */
  fresh?: boolean;
  /** Receives the one line saying which source was used. Default `console.info`. */
  logger?: (line: string) => void;
}

export const TESTCONTAINERS_REDIS_IMAGE = 'redis:7';

function unsupported(source: TestRedisSource, operation: string): () => Promise<never> {
  return () =>
    Promise.reject(
      new Error(`${operation}() is not supported for a Redis from ${source}; use startRedis({ fresh: true })`),
    );
}

function portOf(url: string): number {
  try {
    const parsed = new URL(url);
    return parsed.port ? Number(parsed.port) : 6379;
  } catch {
    throw new Error(`REDIS_URL is not a valid URL: ${url}`);
  }
}

async function startWithTestcontainers(): Promise<TestRedis> {
  // Imported only once an engine answered: without one, testcontainers can hang on a silent socket.
  const { RedisContainer } = await import('@testcontainers/redis');
  const container = await new RedisContainer(TESTCONTAINERS_REDIS_IMAGE).start();
  let stopped = false;
  const stopWith = async (timeout: number): Promise<void> => {
    if (stopped) return;
    stopped = true;
    await container.stop({ timeout });
  };
  return {
    url: container.getConnectionUrl(),
    source: 'testcontainers',
    port: container.getPort(),
    stop: () => stopWith(10_000),
    kill: () => stopWith(0),
    restart: unsupported('testcontainers', 'restart'),
  };
}

async function startLocal(): Promise<TestRedis> {
  const server = await startLocalRedisServer();
  return {
    url: server.url,
    source: 'local-redis-server',
    port: server.port,
    stop: () => server.stop(),
    kill: () => server.kill(),
    restart: () => server.restart(),
  };
}

/**
 * A Redis for tests: `REDIS_URL` when set (unless `fresh`), else a `redis:7` container when a Docker engine
 * answers `/_ping` within 500 ms, else a local `redis-server` on a free loopback port. Logs one line naming the source.
 */
export async function startRedis(options: StartRedisOptions = {}): Promise<TestRedis> {
  const log = options.logger ?? ((line: string) => console.info(line));

  const envUrl = process.env['REDIS_URL'];
  if (!options.fresh && envUrl) {
    const redis: TestRedis = {
      url: envUrl,
      source: 'env',
      port: portOf(envUrl),
      stop: () => Promise.resolve(),
      kill: unsupported('env', 'kill'),
      restart: unsupported('env', 'restart'),
    };
    log(`[testing] Redis source: env (REDIS_URL, port ${redis.port})`);
    return redis;
  }

  let fallbackReason = 'no Docker engine answered /_ping';
  if (await probeDocker()) {
    try {
      const redis = await startWithTestcontainers();
      log(`[testing] Redis source: testcontainers (${TESTCONTAINERS_REDIS_IMAGE}, port ${redis.port})`);
      return redis;
    } catch (error) {
      fallbackReason = `testcontainers failed: ${error instanceof Error ? error.message : String(error)}`;
    }
  }

  const redis = await startLocal();
  log(`[testing] Redis source: local-redis-server (port ${redis.port}; ${fallbackReason})`);
  return redis;
}
