import {
  createRedis,
  quitRedis,
  RedisBackendSet,
  RedisBackendStateStore,
  waitUntilReady,
  type RedisClient,
} from '@kvroute/redis-store';
import { startRedisCluster, uniqueKeyPrefix, type TestRedisCluster } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PollerConfig } from '../src/config';
import { createHealthPoller, type HealthPoller } from '../src/create-poller';
import { startSim, waitForValue, type TestSim } from './poller-test-kit';

/**
 * Two poller replicas on a Redis Cluster (`redisUrl: redis+cluster://…`, a private 3-master cluster of
 * local redis-server processes): the BullMQ queue and worker run on Cluster clients with the queue's
 * keys in the `{poller}` slot, scrapes are recorded and published, and a backend added to the shared
 * set (its change notice over cluster pub/sub) gets scraped too.
 */
const POLLER = {
  intervalMs: 300,
  scrapeTimeoutMs: 200,
  jobLockMs: 2000,
  stalledCheckMs: 2000,
  reconcileMs: 1000,
  backendSetPollMs: 200,
};

describe('health poller replicas on a Redis Cluster', () => {
  const namespace = uniqueKeyPrefix('health-poller-cluster');
  let cluster: TestRedisCluster;
  let sims: TestSim[];
  let client: RedisClient;
  let pollers: HealthPoller[];
  /** Scrape jobs each replica ran. */
  const jobs = [0, 0];

  beforeAll(async () => {
    cluster = await startRedisCluster({ logger: () => undefined });
    sims = await Promise.all([startSim(), startSim()]);
    client = createRedis(cluster.url, 'request-path', { commandTimeoutMs: 5000 });
    await waitUntilReady(client, 10_000);
    pollers = await Promise.all(
      [0, 1].map(async (replica) => {
        const config = PollerConfig.parse({
          host: '127.0.0.1',
          port: 0,
          redisUrl: cluster.url,
          backends: [sims[0]?.url],
          logLevel: 'silent',
          ...POLLER,
        });
        const poller = await createHealthPoller(config, {
          logger: false,
          keyNamespace: namespace,
          onJob: () => (jobs[replica] = (jobs[replica] ?? 0) + 1),
        });
        await poller.start();
        return poller;
      }),
    );
  }, 40_000);

  afterAll(async () => {
    await Promise.all((pollers ?? []).map((poller) => poller.close()));
    if (client) await quitRedis(client);
    await Promise.all((sims ?? []).map((sim) => sim.sim.close()));
    await cluster?.stop();
  });

  it('scrapes and publishes through BullMQ on the cluster, and follows the shared backend set', async () => {
    const store = new RedisBackendStateStore({ redis: client, keyNamespace: namespace });
    const [configured, added] = sims as [TestSim, TestSim];
    const read = (id: string) => () => store.read(id);
    expect((await waitForValue(read(configured.id), (state) => state?.healthy === true, 5_000)).value?.engine).toBe(
      'vllm',
    );

    await new RedisBackendSet({ redis: client, nowMs: Date.now, keyNamespace: namespace }).add({
      id: added.id,
      url: added.url,
      weight: 1,
    });
    await waitForValue(read(added.id), (state) => state?.healthy === true, 5_000);

    // Every key of the queue is in the `{poller}` slot, on its master.
    const master = createRedis(cluster.masterOf(`${namespace}:{poller}:scrapes`).url, 'worker');
    try {
      await waitUntilReady(master);
      const [, keys] = await master.scan('0', 'MATCH', `${namespace}:{poller}:scrapes:*`, 'COUNT', 10_000);
      expect(keys.length).toBeGreaterThan(0);
    } finally {
      await quitRedis(master);
    }
    // The replicas share the jobs through the queue, and each backend is scraped once per interval
    // (both replicas created its job scheduler: BullMQ keeps one), ±1.
    await waitForValue(
      async () => jobs,
      (counts) => counts.every((count) => count > 0),
      5_000,
    );
    const windowStart = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const scrapes = configured.metricsScrapes.filter((at) => at >= windowStart && at < windowStart + 1_500).length;
    expect(Math.abs(scrapes - 1_500 / POLLER.intervalMs)).toBeLessThanOrEqual(1.5);
  }, 20_000);
});
