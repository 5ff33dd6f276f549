import { detectEngineRestart, hitRateOverInterval, parseEngineMetrics } from '@kvroute/engine-metrics';
import { loadUpstreamKeys, ShutdownStack, type ShutdownResult } from '@kvroute/platform';
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import {
  createRedis,
  DEFAULT_KEY_NAMESPACE,
  KvEventsIndex,
  KvEventsLeases,
  quitRedis,
  RedisBackendSet,
  RedisBackendStateStore,
  waitUntilReady,
  type BackendEntry,
  type BackendSetWatch,
} from '@kvroute/redis-store';
import { Queue, Worker, type Job } from 'bullmq';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { Agent } from 'undici';
import { buildPollerApp } from './app';
import { configuredBackends, mergeBackendLists, type PolledBackend } from './backend-list';
import type { PollerConfig } from './config';
import { createHttpGet } from './http-get';
import { rankStreams, type KvEventsDefaults, type RankStream } from './kv-events/endpoints';
import { KvEventsIndexer } from './kv-events/indexer';
import { PollerMetrics } from './poller-metrics';
import { RedisReachability } from './redis-reachability';
import { scrapeBackend, type ParseEngineMetrics } from './scrape-backend';
import { runScrapeJob, type ScrapeJobData, type ScrapeJobResult } from './scrape-job';
import { ScrapeSchedules, stuckCheckMs } from './schedule-scrapes';

export interface HealthPoller {
  readonly app: FastifyInstance;
  readonly metrics: PollerMetrics;
  /** The backends this replica keeps job schedulers for, as last reconciled. */
  readonly backends: readonly PolledBackend[];
  /** The KV-event indexer: the backend ranks' event streams this replica reads (kv-events/indexer.ts). */
  readonly kvEvents: KvEventsIndexer;
  /** Connects, follows the backend set, reconciles the job schedulers, starts the worker, listens; returns the base URL. */
  start(): Promise<string>;
  /**
   * Graceful stop, under `shutdownGraceMs`: /healthz turns 503, the backend set is no longer followed,
   * the worker finishes the scrapes it runs and takes no more (other replicas take the next jobs),
   * then the queue, the HTTP server and client, and the Redis connections close, in reverse order of
   * creation.
   */
  close(): Promise<ShutdownResult>;
}

export interface HealthPollerDeps {
  readonly logger?: FastifyBaseLogger | false;
  /** Wall clock, ms since the Unix epoch (states are stamped with it; BullMQ plans on it too). */
  readonly nowMs?: () => number;
  /** Redis key namespace of the states, the backend set and the queue (default `kvr:v1`); tests give each run its own. */
  readonly keyNamespace?: string;
  /** /metrics text → figures (default `parseEngineMetrics` of @kvroute/engine-metrics). */
  readonly parse?: ParseEngineMetrics;
  /** Where `apiKeyEnv`/`upstreamApiKeyEnv` are read (main.ts: `process.env`; default: none set). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Called after each job (tests, diagnostics). */
  readonly onJob?: (backendId: string, result: ScrapeJobResult) => void;
  /** This replica's id among the pollers sharing the KV-event streams (default host:pid:random). */
  readonly replicaId?: string;
}

/** The BullMQ queue of scrape jobs; its keys are `<ns>:{poller}:scrapes:*`, one hash tag (one Redis Cluster slot). */
export const SCRAPE_QUEUE_NAME = 'scrapes';

/**
 * Builds one poller replica. Each resource is created here and its closer pushed at once, so `close`
 * releases them in reverse order: worker before queue, both before the connections they use.
 *
 * BullMQ settings, for jobs that last milliseconds and recur every interval:
 * - a worker that dies (crash, SIGKILL) is no gap: the next job of each scheduler is planned as soon as
 *   the current one is taken, so the other replicas take it on time. Only the job it was running is
 *   lost, and it comes back from the stalled check after `jobLockMs` + up to `stalledCheckMs` — late,
 *   so the job skips itself (`runScrapeJob`). `maxStalledCount` 1: such a job is taken back once, then
 *   given up. A worker that dies in the one round trip between taking a job and planning the next
 *   leaves its scheduler with no next job: `repairStuck` re-plans it within half an interval.
 * - `jobLockMs` (default 5 s) is far above a job's longest run (two requests in sequence plus two
 *   Redis calls), so a slow event loop never loses a live job's lock, which would run it twice.
 * - a graceful stop (`worker.close()`) lets the running scrapes finish and takes no new job.
 */
export async function createHealthPoller(config: PollerConfig, deps: HealthPollerDeps = {}): Promise<HealthPoller> {
  const logger = deps.logger === false ? undefined : deps.logger;
  const nowMs = deps.nowMs ?? (() => Date.now());
  const namespace = deps.keyNamespace ?? DEFAULT_KEY_NAMESPACE;
  const shutdown = new ShutdownStack();
  let closing = false;
  let working = false;
  const configured = configuredBackends(config.backends);
  // Read at start, before anything opens; held in memory only: a scrape job's data (in Redis) carries the URL, never a key.
  const upstreamKeys = loadUpstreamKeys(config, { env: deps.env ?? {} });
  let shared: readonly BackendEntry[] = [];
  let backends: readonly PolledBackend[] = configured;

  // Redis: one connection for the states and the backend set, one in subscriber mode for the set's
  // change notices, one for BullMQ (queue and worker share it; the worker adds its blocking duplicate).
  // All `worker` role: nobody waits on a scrape, so commands wait through an outage instead of failing.
  // A cluster URL makes each of them a Cluster client, BullMQ's included (its duplicates are too).
  // One warning per outage and one line when Redis is back (redis-reachability.ts), followed on the main
  // connection; the other connections' errors (the same outage, retried on their own) go to debug.
  const reachability = new RedisReachability(logger, nowMs, 3 * config.intervalMs + 5_000);
  const onRedisError = (error: Error): void => reachability.failed(error, 'Redis connection error');
  const redis = createRedis(config.redisUrl, 'worker', {
    overrides: { connectionName: 'kvroute-poller' },
  });
  reachability.watch(redis);
  shutdown.push('redis', () => quitRedis(redis));
  const subscriber = createRedis(config.redisUrl, 'worker', {
    onError: onRedisError,
    overrides: { connectionName: 'kvroute-poller-subscriber' },
  });
  shutdown.push('redis-subscriber', () => quitRedis(subscriber));
  const bullRedis = createRedis(config.redisUrl, 'worker', {
    onError: onRedisError,
    overrides: { connectionName: 'kvroute-poller-bullmq' },
  });
  shutdown.push('bullmq-redis', () => quitRedis(bullRedis));

  // The KV-event indexer's writes (one script per event batch) on a connection of their own, so a burst
  // of them never queues the scrapes' state writes.
  const kvRedis = createRedis(config.redisUrl, 'worker', {
    onError: onRedisError,
    overrides: { connectionName: 'kvroute-poller-kv-events' },
  });
  shutdown.push('kv-events-redis', () => quitRedis(kvRedis));

  const dispatcher = new Agent({ connect: { timeout: config.scrapeTimeoutMs }, connections: 4 });
  shutdown.push('http-client', () => dispatcher.close());

  const metrics = new PollerMetrics({ backends: () => backends.length });
  const app = await buildPollerApp({
    metrics,
    isClosing: () => closing,
    isWorking: () => working,
    logger: logger?.child({ component: 'http' }) ?? false,
  });
  shutdown.push('http-server', () => app.close());

  const store = new RedisBackendStateStore({ redis, keyNamespace: namespace });
  const backendSet = new RedisBackendSet({ redis, nowMs, keyNamespace: namespace });
  // BullMQ's scripts take several keys of a queue at once: on a Redis Cluster they must share a slot,
  // which the hash tag in the prefix gives every key of the queue (BullMQ's documented requirement).
  const prefix = `${namespace}:{poller}`;
  const queue = new Queue<ScrapeJobData>(SCRAPE_QUEUE_NAME, { connection: bullRedis, prefix });
  queue.on('error', (error) => reachability.failed(error, 'scrape queue error'));
  shutdown.push('queue', () => queue.close());

  const get = createHttpGet({ dispatcher, timeoutMs: config.scrapeTimeoutMs });
  const parse = deps.parse ?? parseEngineMetrics;
  const jobDeps = {
    store,
    scrape: (target: Parameters<typeof scrapeBackend>[0]) => {
      const authorization = upstreamKeys.authorizationFor(target.url);
      return scrapeBackend(target, { get: authorization === null ? get : (url) => get(url, { authorization }), parse });
    },
    hitRate: hitRateOverInterval,
    detectRestart: detectEngineRestart,
    metrics,
    nowMs,
    intervalMs: config.intervalMs,
    hysteresis: { failuresToUnhealthy: config.failuresToUnhealthy, successesToHealthy: config.successesToHealthy },
    stateTtlMs: config.stateTtlIntervals * config.intervalMs,
    logger: logger?.child({ component: 'scrape' }),
  };
  const worker = new Worker<ScrapeJobData>(
    SCRAPE_QUEUE_NAME,
    async (job) => {
      const result = await runScrapeJob(job.data, plannedAtMs(job), jobDeps);
      deps.onJob?.(job.data.backendId, result);
      if (result.kind === 'scraped' && result.published)
        logger?.debug({ state: result.state }, 'backend state changed');
    },
    {
      connection: bullRedis,
      prefix,
      autorun: false,
      concurrency: config.concurrency,
      lockDuration: config.jobLockMs,
      stalledInterval: config.stalledCheckMs,
      maxStalledCount: 1,
    },
  );
  worker.on('error', (error) => reachability.failed(error, 'scrape worker error'));
  worker.on('failed', (job, error) =>
    reachability.failed(error, 'scrape job failed', { backend: job?.data.backendId }),
  );
  shutdown.push('worker', async () => {
    working = false;
    await worker.close();
  });

  const kvEvents = createKvEventsIndexer(config, {
    redis: kvRedis,
    nowMs,
    namespace,
    metrics,
    replicaId: deps.replicaId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`,
    logger: logger?.child({ component: 'kv-events' }),
  });

  const schedules = new ScrapeSchedules({
    queue,
    intervalMs: config.intervalMs,
    nowMs,
    logger: logger?.child({ component: 'schedules' }),
    inOutage: () => reachability.inOutage,
  });
  const kvDefaults: KvEventsDefaults = {
    port: config.kvEventsPort === 0 ? null : config.kvEventsPort,
    replayPort: config.kvEventsReplayPort === 0 ? null : config.kvEventsReplayPort,
    replay: config.kvEventsReplay,
    dataParallelSize: config.kvEventsDataParallelSize,
    model: config.kvEventsModel ?? null,
  };
  const reconcile = (): Promise<void> => {
    backends = mergeBackendLists(configured, shared);
    kvEvents.setStreams(kvEventStreams(backends, kvDefaults, logger));
    // Every replica reads the same list: each drops the series of backends that left it.
    void metrics
      .forgetDepartedBackends(new Set(backends.map((backend) => backend.id)))
      .catch((error: unknown) => logger?.warn({ err: error }, 'could not drop the metrics of departed backends'));
    return schedules.reconcile(backends).then(
      () => undefined,
      (error: unknown) =>
        reachability.failed(error, 'could not update the scrape schedulers (retrying at the next reconcile)'),
    );
  };

  // Every quarter interval: a scheduler whose worker died between taking its job and planning the next
  // is found and re-planned within half an interval (see ScrapeSchedules). One pass at a time.
  let repairing: Promise<void> | null = null;
  const repairStuck = (): void => {
    repairing ??= schedules
      .repairStuck(backends)
      .then(
        () => undefined,
        (error: unknown) => reachability.failed(error, 'could not check the scrape schedulers for stuck ones'),
      )
      .finally(() => {
        repairing = null;
      });
  };

  let watch: BackendSetWatch | null = null;
  let reconcileTimer: NodeJS.Timeout | null = null;
  let repairTimer: NodeJS.Timeout | null = null;

  return {
    app,
    metrics,
    get backends() {
      return backends;
    },
    kvEvents,
    async start() {
      await waitUntilReady(redis, 10_000);
      if (config.followSharedSet) {
        watch = backendSet.watch({
          subscriber,
          pollIntervalMs: config.backendSetPollMs,
          onChange: (list) => {
            shared = list.backends;
            if (list.unreadable.length > 0)
              logger?.warn({ backends: list.unreadable }, 'shared backend set: ignoring entries that cannot be read');
            void reconcile();
          },
          onError: (error) => reachability.failed(error, 'shared backend set unreachable: scraping the last set read'),
        });
        shutdown.push('backend-set-watch', () => watch?.stop());
        // Only once the shared set was read does the list hold every backend: an earlier reconcile
        // would remove the schedulers of shared backends the other replicas keep.
        await watch.refresh();
      }
      await reconcile();
      reconcileTimer = setInterval(() => void reconcile(), config.reconcileMs);
      reconcileTimer.unref();
      repairTimer = setInterval(repairStuck, stuckCheckMs(config.intervalMs));
      repairTimer.unref();
      shutdown.push('reconcile', async () => {
        if (reconcileTimer) clearInterval(reconcileTimer);
        if (repairTimer) clearInterval(repairTimer);
        await schedules.settled();
        await repairing;
      });
      kvEvents.start();
      shutdown.push('kv-events', () => kvEvents.close());
      void worker.run().catch((error: unknown) => logger?.error({ err: error }, 'scrape worker stopped'));
      await worker.waitUntilReady();
      working = true;
      const url = await app.listen({ host: config.host, port: config.port });
      logger?.info(
        { url, backends: backends.map((backend) => backend.id), intervalMs: config.intervalMs },
        'kvroute health poller running',
      );
      return url;
    },
    close() {
      closing = true;
      return shutdown.closeAll({ deadlineMs: config.shutdownGraceMs, logger });
    },
  };
}

/**
 * When the job scheduler planned this job: the `<ms>` of its id `repeat:<scheduler id>:<ms>` (BullMQ's
 * scheduler job ids), else its creation time plus delay.
 */
function plannedAtMs(job: Job<ScrapeJobData>): number {
  const planned = Number(job.id?.slice(job.id.lastIndexOf(':') + 1));
  return Number.isSafeInteger(planned) && planned > 0 ? planned : job.timestamp + (job.delay ?? 0);
}

/** The indexer of this replica: its writer (KvEventsIndex), its leases, and the wire's caps from the config. */
function createKvEventsIndexer(
  config: PollerConfig,
  deps: {
    redis: ReturnType<typeof createRedis>;
    nowMs: () => number;
    namespace: string;
    metrics: PollerMetrics;
    replicaId: string;
    logger: FastifyBaseLogger | undefined;
  },
): KvEventsIndexer {
  const index = new KvEventsIndex({
    redis: deps.redis,
    nowMs: deps.nowMs,
    blockIdleTtlMs: config.blockIdleTtlMs,
    maxBlocksPerPool: config.maxBlocksPerPool,
    poolCells: config.poolCells,
    keyNamespace: deps.namespace,
  });
  const leases = new KvEventsLeases({
    redis: deps.redis,
    replicaId: deps.replicaId,
    leaseTtlMs: config.kvEventsLeaseMs,
    keyNamespace: deps.namespace,
  });
  return new KvEventsIndexer({
    replicaId: deps.replicaId,
    leases,
    apply: (pool, rankId, batch) => index.apply(pool, rankId, batch),
    nowMs: deps.nowMs,
    leaseTtlMs: config.kvEventsLeaseMs,
    topic: config.kvEventsTopic,
    limits: {
      maxBatchEvents: config.kvEventsMaxBatchEvents,
      maxBatchBlocks: config.kvEventsMaxBatchBlocks,
      maxBatchBytes: config.kvEventsMaxMessageBytes,
    },
    maxQueuedBatches: config.kvEventsMaxQueuedBatches,
    replayTimeoutMs: config.kvEventsReplayTimeoutMs,
    namesPerRank: config.kvEventsNamesPerRank,
    metrics: deps.metrics,
    logger: deps.logger,
  });
}

/** Every backend's rank streams; a backend whose endpoint cannot be offset per rank is left out (logged). */
function kvEventStreams(
  backends: readonly PolledBackend[],
  defaults: KvEventsDefaults,
  logger: FastifyBaseLogger | undefined,
): RankStream[] {
  return backends.flatMap((backend) => {
    try {
      return rankStreams(backend, defaults);
    } catch (error) {
      logger?.warn({ backend: backend.id, err: error }, 'KV events: cannot resolve the endpoints of this backend');
      return [];
    }
  });
}
