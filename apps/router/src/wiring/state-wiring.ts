import type { FastifyBaseLogger } from 'fastify';
import type { ShutdownStack } from '@kvroute/platform';
import {
  createRedis,
  quitRedis,
  RedisBackendStateStore,
  RedisResponseOwners,
  RedisRoutingState,
  waitUntilReady,
  type RedisClient,
} from '@kvroute/redis-store';
import { InMemoryResponseOwners, InMemoryRoutingState, type RoutingStateStore } from '@kvroute/routing';
import { EngineStateView } from '../backends/engine-state-view';
import type { RouterConfig } from '../config';
import type { RouterMetrics } from '../router-metrics';
import { FailoverRoutingState } from '../routing/failover-routing-state';
import { SharedResponseOwners } from '../routing/response-owners';

/** How long Redis may take to acknowledge QUIT. */
const REDIS_QUIT_MS = 1_000;
/** Response-owner calls get this many times `redisTimeoutMs` (a miss costs a lost conversation, not a slower decision). */
const RESPONSE_OWNER_TIMEOUT_FACTOR = 4;

/** The routing state a replica routes on, and what it follows of the health poller. */
export interface StateParts {
  readonly state: RoutingStateStore;
  /** Null without Redis. */
  readonly failover: FailoverRoutingState | null;
  /** The request-path Redis connection; null without Redis. */
  readonly redis: RedisClient | null;
  /** The health poller's published backend states (health, engine load); null without Redis. */
  readonly engineStates: EngineStateView | null;
  /** Shared leases expire unless renewed: renew at a third of their TTL; 0 (never) for local leases. */
  readonly leaseRenewIntervalMs: number;
  /** How long a stream's prefill-done call waits to merge into its release (`prefillDoneMergeMs`); 0 for local state, whose calls cost no round trip. */
  readonly prefillDoneDelayMs: number;
  /** Which backend stored each Responses API response: in Redis over this replica's map, or the local map alone. */
  readonly responseOwners: SharedResponseOwners;
  /**
   * Why routing runs on less than the shared state now, for /readyz; empty: not degraded (and always
   * without Redis, where local state is all there is).
   */
  degradedReasons(): string[];
  /** Connects: Redis (degraded, not failed, if it is not there yet), then the poller's states. */
  start(): Promise<void>;
}

export interface StateWiringDeps {
  readonly nowMs: () => number;
  readonly logger: FastifyBaseLogger | undefined;
  readonly metrics: RouterMetrics;
  /** Routing state given by the caller (tests); default: Redis with local failover, or local only. */
  readonly state?: RoutingStateStore | undefined;
}

/**
 * Routing state: in memory for a single replica; with `redisUrl`, shared in Redis by every replica,
 * with this replica's local state as the fallback while Redis is in trouble (degraded, never errors).
 * Closers go on `closers` as each resource opens: the poller's subscriber, then Redis last of all.
 */
export function wireState(config: RouterConfig, deps: StateWiringDeps, closers: ShutdownStack): StateParts {
  const { logger, metrics } = deps;
  const localState = new InMemoryRoutingState({
    maxBlocksPerBackend: config.maxBlocksPerBackend,
    blockIdleTtlMs: config.blockIdleTtlMs,
    refreshGranularityMs: config.blockRefreshMs,
    minEvidenceAgeMs: config.evictionEvidenceMinAgeMs,
    nowMs: deps.nowMs,
  });
  const localOwners = new InMemoryResponseOwners({
    ttlMs: config.responseOwnerTtlMs,
    maxEntries: config.maxLocalResponseOwners,
    nowMs: deps.nowMs,
  });
  const ownersOver = (redis: RedisClient | null, failover: FailoverRoutingState | null): SharedResponseOwners =>
    new SharedResponseOwners(
      redis === null ? null : new RedisResponseOwners({ redis, ttlMs: config.responseOwnerTtlMs }),
      localOwners,
      {
        // A lookup decides where a turn's conversation is, worth more than a routing call's 50 ms.
        timeoutMs: RESPONSE_OWNER_TIMEOUT_FACTOR * config.redisTimeoutMs,
        onError: (error) => logger?.debug({ err: error }, 'shared response-owner map call failed: using the local map'),
        sharedDown: () => failover?.degraded === true,
      },
    );
  if (config.redisUrl === undefined) {
    const state = deps.state ?? localState;
    return {
      state,
      failover: null,
      redis: null,
      engineStates: null,
      leaseRenewIntervalMs: 0,
      prefillDoneDelayMs: 0,
      responseOwners: ownersOver(null, null),
      degradedReasons: () => [],
      start: async () => undefined,
    };
  }
  const redisUrl = config.redisUrl;
  // The failover's deadline (redisTimeoutMs) decides when a call is too slow, tolerating event-loop lag;
  // the client's own command timeout is only the backstop behind it (a timer of its own would fire
  // first whenever the loop was busy, and flip the replica to degraded with Redis's reply already read).
  const redis = createRedis(redisUrl, 'request-path', { commandTimeoutMs: Math.max(4 * config.redisTimeoutMs, 200) });
  redis.on('error', () => undefined); // connection errors surface as failed calls, handled by the failover
  closers.push('redis', () => quitRedis(redis, REDIS_QUIT_MS));
  const shared = new RedisRoutingState({
    redis,
    maxBlocksPerPool: config.maxBlocksPerPool,
    blockIdleTtlMs: config.blockIdleTtlMs,
    leaseTtlMs: config.leaseTtlMs,
    minEvidenceAgeMs: config.evictionEvidenceMinAgeMs,
    shortlistAbove: config.shortlistAbove,
    poolCells: config.poolCells,
    cellKeyBytes: config.cellKeyBytes,
    onCellSpill: (pool) => metrics.recordCellSpill(pool),
    // Redis unreachable: the failover reports that; the lease's release takes the prefill off the backlog anyway.
    onDeferredError: (error) => logger?.debug({ err: error }, 'a deferred backlog clear failed'),
    nowMs: () => Date.now(),
  });
  // Before Redis closes (closers run in reverse): the clears still waiting go out, and their timers stop.
  closers.push('backlog clears', () => shared.sendBacklogClears());
  const failover = new FailoverRoutingState(shared, localState, {
    timeoutMs: config.redisTimeoutMs,
    retryAfterMs: config.redisRetryAfterMs,
    maxRetryAfterMs: 10_000,
    nowMs: () => Date.now(),
    onDegradedChange: (degraded, error) => {
      metrics.recordDegradedChange(degraded);
      if (degraded) logger?.warn({ err: error }, 'shared routing state unavailable: routing on local state (degraded)');
      else logger?.info('shared routing state is back: routing on shared state');
    },
  });

  const stateSubscriber = createRedis(redisUrl, 'worker');
  closers.push('backend-state subscriber', () => stateSubscriber.disconnect());
  const backendStates = new RedisBackendStateStore({ redis });
  const engineStates = new EngineStateView({
    source: {
      readAll: () => backendStates.readAll(),
      subscribe: (options) => backendStates.subscribe({ ...options, subscriber: stateSubscriber }),
    },
    maxAgeMs: config.engineStateMaxAgeMs,
    refreshMs: config.engineStateRefreshMs,
    nowMs: () => Date.now(),
    onError: (error) => logger?.debug({ err: error }, 'backend states from the health poller could not be read'),
  });
  closers.push('engine states', () => engineStates.stop());

  return {
    state: deps.state ?? failover,
    failover,
    redis,
    engineStates,
    leaseRenewIntervalMs: Math.floor(config.leaseTtlMs / 3),
    responseOwners: ownersOver(redis, failover),
    prefillDoneDelayMs: config.prefillDoneMergeMs,
    degradedReasons: () => degradedReasonsOf(redis, failover),
    async start() {
      // Start on shared state when Redis is there; if it is not, start degraded rather than not at all.
      await waitUntilReady(redis, 2_000).catch((error: unknown) =>
        logger?.warn({ err: error }, 'Redis not reachable at start: routing on local state until it is'),
      );
      await engineStates.start();
    },
  };
}

/**
 * Two signals, either one enough: the failover has switched to local state (a shared call failed or
 * was too slow; it stays there until a call after the backoff succeeds, which needs a request), or the
 * request-path connection is not up (so the next request will switch it: this one tells even while no
 * request comes). Neither names Redis's address: the ops /readyz is read by people and tools alike.
 */
function degradedReasonsOf(redis: RedisClient, failover: FailoverRoutingState): string[] {
  const reasons: string[] = [];
  if (failover.degraded)
    reasons.push("shared routing state in Redis unreachable: routing on this replica's local state");
  if (redis.status !== 'ready') reasons.push(`Redis connection ${redis.status}`);
  return reasons;
}
