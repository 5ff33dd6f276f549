import { request as undiciRequest } from 'undici';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { settlesWithin } from '@kvroute/platform';
import { createRedis, quitRedis, RedisBackendSet, RedisBackendStateStore, RedisRoutingState, waitUntilReady } from '@kvroute/redis-store';
import { createPolicy, InMemoryRoutingState, type RoutingPolicy, type RoutingStateStore } from '@kvroute/routing';
import { buildRouterApp } from './app';
import { LocalBackendChanges } from './backends/backend-changes';
import { BackendRegistry, type Backend } from './backends/backend-registry';
import { EngineStateView } from './backends/engine-state-view';
import { SharedBackendSet } from './backends/shared-backend-set';
import type { RouterConfig } from './config';
import { RequestDrain, type ShutdownPhase } from './http/request-drain';
import { simMatchAsker } from './proxy/true-match';
import { UpstreamPools } from './proxy/upstream-pool';
import { RouterMetrics } from './router-metrics';
import { FailoverRoutingState } from './routing/failover-routing-state';
import { HeldLeases } from './routing/held-leases';
import { policyParamsFromConfig } from './routing/policy-params';

export interface RouterServer {
  readonly app: FastifyInstance;
  readonly registry: BackendRegistry;
  readonly state: RoutingStateStore;
  readonly metrics: RouterMetrics;
  /** Where the replica is in its shutdown (`serving` until `beginDraining` or `close`). */
  readonly phase: ShutdownPhase;
  /** HTTP requests in flight. */
  readonly inflightRequests: number;
  /** In-flight leases this replica holds. */
  readonly heldLeases: number;
  /** Starts model discovery, then listens; returns the base URL. */
  listen(): Promise<string>;
  /**
   * Readiness fails from now on and every response carries `Connection: close`; requests are still
   * served. `close` starts with this.
   */
  beginDraining(): void;
  /** The graceful shutdown (SIGTERM): see `close` in `createRouterServer`. Runs once; later calls return the same promise. */
  close(options?: RouterCloseOptions): Promise<RouterCloseReport>;
}

export interface RouterCloseOptions {
  /** How long to go on serving, draining, before the listener closes (main.ts: `shutdownDrainDelayMs`). Default 0. */
  readonly drainDelayMs?: number;
  /** How long in-flight requests may take once the listener is closed. Default `shutdownGraceMs`. */
  readonly graceMs?: number;
}

export interface RouterCloseReport {
  /** Requests in flight when the listener closed, after the drain delay. */
  readonly inflightAtClose: number;
  /** Requests aborted at the grace deadline (0: every request finished). */
  readonly aborted: number;
  /** Leases the shutdown itself released (requests aborted before their own release ran). */
  readonly leasesReleasedAtDeadline: number;
  /** False if some lease release calls had not ended when the connections to the state store closed. */
  readonly releasesSettled: boolean;
  readonly elapsedMs: number;
}

/** After the last request: how long the release calls under way may take before Redis closes anyway. */
const RELEASE_SETTLE_MS = 2_000;
/** After the deadline's abort: how long aborted streams get to write their error event before their connections are cut. */
const ABORT_FLUSH_MS = 250;
/** A connection whose response just ended may carry one more request: how long no request must run before the idle ones close. */
const QUIET_BEFORE_CLOSE_MS = 200;
/** How long Redis may take to acknowledge QUIT. */
const REDIS_QUIT_MS = 1_000;

/**
 * Upper bound of what `close` takes after its drain delay and grace (abort and flush, lease releases,
 * background loops, QUIT: ABORT_FLUSH_MS + RELEASE_SETTLE_MS + REDIS_QUIT_MS and room for the loops).
 * main.ts gives the shutdown stack drain + grace + this.
 */
export const CLOSE_TAIL_MS = 5_000;

export interface RouterServerDeps {
  readonly logger?: FastifyBaseLogger | false;
  readonly nowMs?: () => number;
  readonly random?: () => number;
  /** Routing state (default: in memory, for a single replica). */
  readonly state?: RoutingStateStore;
}

/** Builds one router replica from its config: backends, upstream pools, routing state, policies, app. */
export async function createRouterServer(config: RouterConfig, deps: RouterServerDeps = {}): Promise<RouterServer> {
  const nowMs = deps.nowMs ?? (() => Date.now());
  const logger = deps.logger === false ? undefined : deps.logger;
  const random = deps.random ?? Math.random;
  const upstreams = new UpstreamPools({ connectTimeoutMs: config.connectTimeoutMs, headersTimeoutMs: config.headersTimeoutMs, idleTimeoutMs: config.idleTimeoutMs });
  const registry = new BackendRegistry(config.backends, {
    breakerFailureThreshold: config.breakerFailureThreshold,
    breakerCooldownMs: config.breakerCooldownMs,
    nowMs,
    fetchModels: (backend) => fetchModels(backend, config.connectTimeoutMs),
    onRefreshError: (backend, error) => logger?.warn({ backend: backend.id, err: error }, 'could not read the backend models'),
    // A departing backend's requests in flight keep their pool (closed once they finish). What it was
    // believed to cache is forgotten only if the engine itself went (a new weight keeps its cache).
    onRemoved: (backend, models, departure) => {
      upstreams.retire(backend);
      if (departure === 'updated') return;
      for (const model of models) state.forgetBackend(model, backend.id).catch(() => undefined);
    },
  });
  const localState = new InMemoryRoutingState({
    maxBlocksPerBackend: config.maxBlocksPerBackend,
    blockIdleTtlMs: config.blockIdleTtlMs,
    refreshGranularityMs: config.blockRefreshMs,
    nowMs,
  });
  // With a Redis URL, replicas share state; Redis trouble degrades to the local state, never to errors.
  const redis = config.redisUrl === undefined ? null : createRedis(config.redisUrl, 'request-path', { commandTimeoutMs: config.redisTimeoutMs });
  redis?.on('error', () => undefined); // connection errors surface as failed calls, handled by the failover
  // With Redis the backend set is the fleet's (seeded from config, changed through any replica's admin
  // API); without, it is this replica's config (changed through its own admin API).
  const backendSubscriber = config.redisUrl === undefined ? null : createRedis(config.redisUrl, 'worker');
  const sharedBackends =
    redis === null || backendSubscriber === null
      ? null
      : new SharedBackendSet({
          set: new RedisBackendSet({ redis, nowMs: () => Date.now() }),
          subscriber: backendSubscriber,
          registry,
          pollIntervalMs: config.backendSetPollMs,
          nowMs: () => Date.now(),
          logger: logger?.child({ component: 'backend-set' }),
        });
  // With Redis, the health poller's published backend states (health, engine load) are followed too.
  const stateSubscriber = config.redisUrl === undefined ? null : createRedis(config.redisUrl, 'worker');
  const backendStates = redis === null ? null : new RedisBackendStateStore({ redis });
  const engineStates =
    backendStates === null || stateSubscriber === null
      ? null
      : new EngineStateView({
          source: {
            readAll: () => backendStates.readAll(),
            subscribe: (options) => backendStates.subscribe({ ...options, subscriber: stateSubscriber }),
          },
          maxAgeMs: config.engineStateMaxAgeMs,
          refreshMs: config.engineStateRefreshMs,
          nowMs: () => Date.now(),
          onError: (error) => logger?.debug({ err: error }, 'backend states from the health poller could not be read'),
        });
  const failover =
    redis === null
      ? null
      : new FailoverRoutingState(
          new RedisRoutingState({
            redis,
            maxBlocksPerPool: config.maxBlocksPerPool,
            blockIdleTtlMs: config.blockIdleTtlMs,
            leaseTtlMs: config.leaseTtlMs,
            nowMs: () => Date.now(),
          }),
          localState,
          {
            timeoutMs: config.redisTimeoutMs,
            retryAfterMs: config.redisRetryAfterMs,
            maxRetryAfterMs: 10_000,
            nowMs: () => Date.now(),
            onDegradedChange: (degraded, error) => {
              metrics.recordDegradedChange(degraded);
              if (degraded) logger?.warn({ err: error }, 'shared routing state unavailable: routing on local state (degraded)');
              else logger?.info('shared routing state is back: routing on shared state');
            },
          },
        );
  const state: RoutingStateStore = deps.state ?? failover ?? localState;
  const metrics = new RouterMetrics({
    inflight: () => state.inflightCounts(),
    breakerStates: () => new Map(registry.backends.map((backend) => [backend.id, backend.breaker.stateCode])),
    degraded: () => (failover?.degraded ? 1 : 0),
  });
  const params = policyParamsFromConfig(config);
  const policies = new Map<string, RoutingPolicy>();
  const policyFor = (pool: string, kind: 'generation' | 'passthrough'): RoutingPolicy => {
    const key = `${kind}\u0000${pool}`;
    let policy = policies.get(key);
    if (!policy) {
      policy = createPolicy(kind === 'generation' ? config.policy : config.passthroughPolicy, params);
      policies.set(key, policy);
    }
    return policy;
  };
  // Fail at start, not on the first request, if a parameter is out of range.
  policyFor('', 'generation');
  policyFor('', 'passthrough');

  const drain = new RequestDrain();
  const heldLeases = new HeldLeases();
  const app = await buildRouterApp({
    registry,
    upstreams,
    // Shared leases expire unless renewed: renew at a third of the TTL, so one lost renewal never expires
    // a live lease. Local leases never expire, so requests then carry no timer at all.
    routing: {
      state,
      nowMs,
      random,
      leaseRenewIntervalMs: redis === null ? 0 : Math.floor(config.leaseTtlMs / 3),
      engineStates,
      askTrueMatches: simMatchAsker(upstreams, config.oracleMatchTimeoutMs),
      heldLeases,
    },
    metrics,
    policyFor,
    blockSizeBytes: config.blockSizeBytes,
    requestBodyLimitBytes: config.requestBodyLimitBytes,
    maxAttempts: config.maxAttempts,
    retryBackoffMs: config.retryBackoffMs,
    debugRoutes: config.debugRoutes,
    admin:
      config.adminToken === undefined
        ? null
        : {
            token: config.adminToken,
            registry,
            changes: sharedBackends ?? new LocalBackendChanges(registry),
            inflight: () => state.inflightCounts(),
            sharedVersion: () => (sharedBackends ? sharedBackends.version : null),
          },
    logger: deps.logger ?? false,
    drain,
    startedAtUnixSeconds: Math.floor(Date.now() / 1000),
  });

  /**
   * The graceful shutdown, in order:
   * 1. drain: /readyz answers 503 at once and every response carries `Connection: close`, while
   *    requests are still served for `drainDelayMs`, long enough for the balancer's health check to take
   *    the replica out and for active keep-alive clients to move to other replicas;
   * 2. the listener closes (idle connections with it); requests under way, and any a client sends on a
   *    connection still open, are served to their end for up to `graceMs`;
   * 3. at that deadline, what still runs is aborted (streams end with the router's error event and
   *    `[DONE]`) and every lease left is released;
   * 4. the lease releases under way are awaited (bounded), then background loops stop and the Redis
   *    connections close (QUIT), so no in-flight count is left behind in Redis.
   */
  const closeOnce = async (options: RouterCloseOptions): Promise<RouterCloseReport> => {
    const startedAt = performance.now();
    const drainDelayMs = options.drainDelayMs ?? 0;
    const graceMs = options.graceMs ?? config.shutdownGraceMs;
    drain.beginDraining();
    if (drainDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, drainDelayMs));
    drain.beginClosing();
    const inflightAtClose = drain.inflight;
    const serverClosed = app.close();
    const graceEndsAt = performance.now() + graceMs;
    let finished = await drain.waitUntilIdle(graceMs, QUIET_BEFORE_CLOSE_MS);
    if (finished) {
      // Every connection left is idle: close them (a request arriving meanwhile keeps its connection
      // open, and is served until the deadline).
      app.server.closeIdleConnections();
      finished = await settlesWithin(serverClosed, Math.max(graceEndsAt - performance.now(), QUIET_BEFORE_CLOSE_MS));
    }
    let aborted = 0;
    let leasesReleasedAtDeadline = 0;
    if (!finished) {
      aborted = drain.inflight;
      drain.beginAborting();
      logger?.warn({ requests: aborted, graceMs }, 'shutdown grace passed: aborting the requests still in flight');
      await upstreams.destroy();
      leasesReleasedAtDeadline = heldLeases.releaseAll();
      await drain.waitUntilIdle(ABORT_FLUSH_MS);
      app.server.closeAllConnections();
    }
    await serverClosed;
    leasesReleasedAtDeadline += heldLeases.releaseAll();
    const releasesSettled = await heldLeases.settled(RELEASE_SETTLE_MS);
    registry.stop();
    await engineStates?.stop();
    stateSubscriber?.disconnect();
    await sharedBackends?.stop();
    backendSubscriber?.disconnect();
    await upstreams.close();
    if (redis) await quitRedis(redis, REDIS_QUIT_MS);
    return { inflightAtClose, aborted, leasesReleasedAtDeadline, releasesSettled, elapsedMs: Math.round(performance.now() - startedAt) };
  };
  let closing: Promise<RouterCloseReport> | undefined;

  return {
    app,
    registry,
    state,
    metrics,
    get phase() {
      return drain.phase;
    },
    get inflightRequests() {
      return drain.inflight;
    },
    get heldLeases() {
      return heldLeases.size;
    },
    async listen() {
      // Start on shared state when Redis is there; if it is not, start degraded rather than not at all.
      if (redis) await waitUntilReady(redis, 2_000).catch((error: unknown) => logger?.warn({ err: error }, 'Redis not reachable at start: routing on local state until it is'));
      await sharedBackends?.start();
      await engineStates?.start();
      await registry.start(config.modelsRefreshMs);
      return app.listen({ host: config.host, port: config.port });
    },
    beginDraining() {
      drain.beginDraining();
    },
    close(options = {}) {
      closing ??= closeOnce(options);
      return closing;
    },
  };
}

async function fetchModels(backend: Backend, timeoutMs: number): Promise<readonly string[]> {
  const response = await undiciRequest(`${backend.origin}${backend.basePath}/v1/models`, { headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
  if (response.statusCode !== 200) {
    await response.body.dump();
    throw new Error(`GET /v1/models answered ${response.statusCode}`);
  }
  const body = (await response.body.json()) as { data?: Array<{ id?: unknown }> };
  return (body.data ?? []).map((model) => model.id).filter((id): id is string => typeof id === 'string');
}
