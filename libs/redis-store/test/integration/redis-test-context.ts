import { startRedis, uniqueKeyPrefix, type TestRedis } from '@kvroute/testing';
import { Redis } from 'ioredis';
import { createRedis, waitUntilReady } from '../../src/connection';
import { RedisRoutingState, type RedisRoutingStateOptions } from '../../src/redis-routing-state';
import type { RedisClient } from '../../src/scripts';

/** A clock the test moves by hand, starting at the real time (Redis expires keys on its own clock). */
export interface ManualClock {
  readonly nowMs: () => number;
  advance(ms: number): void;
}

export function manualClock(startMs: number = Date.now()): ManualClock {
  let now = startMs;
  return {
    nowMs: () => now,
    advance: (ms) => {
      now += ms;
    },
  };
}

export type StateOptions = Partial<Omit<RedisRoutingStateOptions, 'redis' | 'keyNamespace'>> & {
  readonly redis?: Redis;
};

/**
 * One test file's Redis: `startRedis()` from @kvroute/testing (REDIS_URL when set, else a Redis of its
 * own), connections that are closed at the end, and a key namespace per test whose keys are deleted
 * afterwards, so a shared Redis is left as it was found.
 */
export interface RedisTestContext {
  readonly server: TestRedis;
  /** A connection for setup and assertions. */
  readonly redis: Redis;
  /** The namespace of the current test (set by `beginTest`). */
  readonly namespace: string;
  /** Starts a test: a fresh namespace. */
  beginTest(label: string): void;
  /** Another connection (request-path role, generous timeout), closed by `close`. */
  connect(): Promise<Redis>;
  /** A store on the current namespace; defaults: cap 10 000, idle TTL 60 s, lease TTL 30 s, real clock. */
  createState(options?: StateOptions): RedisRoutingState;
  /** Keys of the current namespace (sorted). */
  keysOfTest(): Promise<string[]>;
  /** Deletes every key of every namespace this context handed out. */
  cleanup(): Promise<void>;
  /** Cleans up, closes the connections and stops what startRedis started. */
  close(): Promise<void>;
}

/**
 * Calls of `commands` since the server started or CONFIG RESETSTAT, summed, by their names in INFO commandstats
 * ('fcall', 'evalsha', 'function|load', …).
 */
export async function commandCalls(redis: RedisClient, ...commands: string[]): Promise<number> {
  const wanted = new Set(commands);
  let calls = 0;
  for (const line of (await redis.info('commandstats')).split('\n')) {
    const match = /^cmdstat_([^:]+):calls=(\d+)/.exec(line);
    if (match !== null && wanted.has(match[1] as string)) calls += Number(match[2]);
  }
  return calls;
}

/** Script calls (FCALL, EVALSHA, EVAL) since the server started or CONFIG RESETSTAT: a decision's round trips. */
export function scriptCalls(redis: RedisClient): Promise<number> {
  return commandCalls(redis, 'fcall', 'evalsha', 'eval');
}

/**
 * A connection createRedis made for a redis:// URL, as the single-server client it is: these tests
 * inspect one server (SCAN, CLIENT PAUSE, SLOWLOG, CONFIG RESETSTAT), which a cluster client would spread.
 */
export function singleServer(client: RedisClient): Redis {
  if (!(client instanceof Redis)) throw new Error('expected a connection to one Redis server, got a cluster client');
  return client;
}

export async function openRedisTestContext(options: { fresh?: boolean; label: string }): Promise<RedisTestContext> {
  const server = await startRedis({ fresh: options.fresh ?? false, logger: () => undefined });
  const clients: Redis[] = [];
  const namespaces: string[] = [];
  const connect = async (): Promise<Redis> => {
    const client = singleServer(createRedis(server.url, 'request-path', { commandTimeoutMs: 5000 }));
    clients.push(client);
    await waitUntilReady(client);
    return client;
  };
  const redis = await connect();
  let namespace = uniqueKeyPrefix(options.label);
  namespaces.push(namespace);

  const scan = async (ns: string): Promise<string[]> => {
    const found: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${ns}:*`, 'COUNT', 1000);
      cursor = next;
      found.push(...keys);
    } while (cursor !== '0');
    return found;
  };
  const cleanup = async (): Promise<void> => {
    for (const ns of namespaces.splice(0)) {
      const keys = await scan(ns);
      for (let from = 0; from < keys.length; from += 500) await redis.del(...keys.slice(from, from + 500));
    }
  };

  return {
    server,
    redis,
    get namespace() {
      return namespace;
    },
    beginTest(label) {
      namespace = uniqueKeyPrefix(`${options.label}-${label}`);
      namespaces.push(namespace);
    },
    connect,
    createState(stateOptions = {}) {
      return new RedisRoutingState({
        ...stateOptions,
        redis: stateOptions.redis ?? redis,
        maxBlocksPerPool: stateOptions.maxBlocksPerPool ?? 10_000,
        blockIdleTtlMs: stateOptions.blockIdleTtlMs ?? 60_000,
        leaseTtlMs: stateOptions.leaseTtlMs ?? 30_000,
        nowMs: stateOptions.nowMs ?? Date.now,
        keyNamespace: namespace,
      });
    },
    async keysOfTest() {
      return (await scan(namespace)).sort();
    },
    cleanup,
    async close() {
      await cleanup().catch(() => undefined);
      await Promise.all(clients.map((client) => client.quit().catch(() => client.disconnect())));
      await server.stop();
    },
  };
}
