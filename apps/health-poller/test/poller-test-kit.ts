import type { BackendState } from '@kvroute/protocols';
import { createRedis, RedisBackendStateStore, waitUntilReady } from '@kvroute/redis-store';
import { startRedis, uniqueKeyPrefix, type TestRedis } from '@kvroute/testing';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import type { z } from 'zod';
import { PollerConfig } from '../src/config';
import { createHealthPoller, type HealthPoller, type HealthPollerDeps } from '../src/create-poller';

/**
 * Poller tests on loopback: a Redis of the file's own (`startRedis({ fresh: true })`), vllm-sim backends
 * in this process (real HTTP), and poller replicas in this process, each with its own connections,
 * queue client and worker, exactly as separate processes would have.
 */
export interface TestEnv {
  readonly redis: TestRedis;
  /** The key namespace of the current test (its pollers, states, backend set and queue). */
  readonly namespace: string;
  /** The current test's states, as a router reads them. */
  readonly store: RedisBackendStateStore;
  /** A connection for assertions and for changing the shared backend set. */
  readonly client: ReturnType<typeof createRedis>;
  /** Starts a poller replica on the current test's namespace. */
  startPoller(
    config: Partial<z.input<typeof PollerConfig>>,
    deps?: Omit<HealthPollerDeps, 'keyNamespace'>,
  ): Promise<HealthPoller>;
  /** A new namespace (`namespace` to choose it): pollers of earlier tests keep running on theirs, unseen. */
  beginTest(label: string, namespace?: string): void;
  /** Closes the pollers still running. */
  closePollers(): Promise<void>;
  /** Closes every poller still running, every connection, and Redis. */
  close(): Promise<void>;
}

export async function openTestEnv(): Promise<TestEnv> {
  const redis = await startRedis({ fresh: true, logger: () => undefined });
  const client = createRedis(redis.url, 'request-path', { commandTimeoutMs: 5000 });
  await waitUntilReady(client);
  // Redis runs its timers 10 times a second by default, so a scheduled job can start up to 100 ms late
  // (measured: gaps 209–395 ms at a 300 ms interval); at 100 the jitter is ~10 ms (287–308 ms), which
  // keeps the tests' once-per-interval bounds about the poller, not about Redis's clock. (docs: a
  // poller's Redis may run with `hz 100` for the same reason.)
  await client.config('SET', 'hz', '100');
  const pollers: HealthPoller[] = [];
  let namespace = uniqueKeyPrefix('health-poller');
  let store = new RedisBackendStateStore({ redis: client, keyNamespace: namespace });
  const closePollers = async (): Promise<void> => {
    await Promise.all(pollers.splice(0).map((poller) => poller.close()));
  };
  return {
    redis,
    client,
    get namespace() {
      return namespace;
    },
    get store() {
      return store;
    },
    async startPoller(config, deps = {}) {
      const parsed = PollerConfig.parse({
        host: '127.0.0.1',
        port: 0,
        redisUrl: redis.url,
        logLevel: 'silent',
        ...config,
      });
      const poller = await createHealthPoller(parsed, { logger: false, ...deps, keyNamespace: namespace });
      pollers.push(poller);
      await poller.start();
      return poller;
    },
    beginTest(label, chosen) {
      namespace = chosen ?? uniqueKeyPrefix(`health-poller-${label}`);
      store = new RedisBackendStateStore({ redis: client, keyNamespace: namespace });
    },
    closePollers,
    async close() {
      await closePollers();
      client.disconnect();
      await redis.stop();
    },
  };
}

/** One simulated backend, with the times at which it answered `GET /metrics` (what a scrape reads). */
export interface TestSim {
  readonly sim: SimServer;
  readonly url: string;
  readonly id: string;
  readonly port: number;
  readonly metricsScrapes: number[];
}

export async function startSim(overrides: Partial<SimConfig> = {}, port = 0): Promise<TestSim> {
  const sim = await createSimServer(
    SimConfig.parse({ port, profile: 'fast', model: 'test-model', logLevel: 'silent', ...overrides }),
  );
  const url = await sim.listen();
  const metricsScrapes: number[] = [];
  // Observes requests beside Fastify's own handler (a second 'request' listener only watches).
  sim.app.server.on('request', (request: { url?: string }) => {
    if (request.url === '/metrics') metricsScrapes.push(Date.now());
  });
  return { sim, url, id: new URL(url).host, port: Number(new URL(url).port), metricsScrapes };
}

/** As a crashed process: the port stops accepting and every open connection is reset, requests in flight included. */
export async function killSim(sim: TestSim): Promise<void> {
  const server = sim.sim.app.server;
  const closed = sim.sim.close();
  const deadline = Date.now() + 2000;
  while (server.listening && Date.now() < deadline) await new Promise((resolve) => setImmediate(resolve));
  server.closeAllConnections();
  await closed;
}

/** Polls `read` every 10 ms until `check` accepts a value; the value and when. */
export async function waitForValue<T>(
  read: () => Promise<T>,
  check: (value: T) => boolean,
  timeoutMs = 5000,
): Promise<{ value: T; atMs: number }> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < deadline) {
    last = await read();
    if (check(last)) return { value: last, atMs: Date.now() };
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`condition not met within ${timeoutMs} ms (last value ${JSON.stringify(last)})`);
}

/** The published state of one backend (null: none yet). */
export function stateOf(env: TestEnv, id: string): () => Promise<BackendState | null> {
  return () => env.store.read(id);
}
