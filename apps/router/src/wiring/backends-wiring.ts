import { backendsWithRoles } from '../pd/pd-config';
import type { FastifyBaseLogger } from 'fastify';
import type { ShutdownStack, UpstreamKeys } from '@kvroute/platform';
import { createRedis, readFollowedKvEventStreams, RedisBackendSet, type RedisClient } from '@kvroute/redis-store';
import type { RoutingStateStore } from '@kvroute/routing';
import { request as undiciRequest, type Dispatcher } from 'undici';
import { LocalBackendChanges, type BackendChanges } from '../backends/backend-changes';
import { BackendRegistry, type Backend, type ModelListing } from '../backends/backend-registry';
import { createRestartForgetter } from '../backends/engine-restarts';
import type { EngineStateView } from '../backends/engine-state-view';
import type { BackendAddressPolicy } from '../admin/backend-address-policy';
import { SharedBackendSet } from '../backends/shared-backend-set';
import { EventStreamsWatch } from '../backends/cache-views';
import type { RouterConfig } from '../config';
import type { RouterMetrics } from '../router-metrics';
import { UpstreamPools } from '../proxy/upstream-pool';

/** Failed reads of one pending backend's models between two warnings: at the 4 s backoff cap, about a minute. */
const MODELS_RETRY_WARN_EVERY = 15;

/** The backends a replica routes over, their connection pools, and how the set changes at run time. */
/** How often a replica reads which backends' KV events the indexer follows (their cache view), ms. */
const EVENT_STREAMS_READ_MS = 5_000;

export interface BackendParts {
  readonly registry: BackendRegistry;
  readonly upstreams: UpstreamPools;
  /** Where admin changes go: the fleet's shared set with Redis, else this replica's registry. */
  readonly changes: BackendChanges;
  /** The shared set's version; null without Redis. */
  readonly sharedVersion: () => number | null;
  /** Which backends' KV events the poller's indexer follows (their cache view `events`); null without Redis. */
  readonly eventStreams: EventStreamsWatch | null;
  /** Follows the shared set (with Redis), then discovers models and starts refreshing them, then follows engine restarts. */
  start(): Promise<void>;
}

export interface BackendsWiringDeps {
  readonly nowMs: () => number;
  /** Jitter of the retries of pending backends' models. */
  readonly random: () => number;
  readonly logger: FastifyBaseLogger | undefined;
  /** What a departing engine was believed to cache is forgotten here. */
  readonly state: RoutingStateStore;
  /** The request-path Redis connection (the shared backend set lives there); null without Redis. */
  readonly redis: RedisClient | null;
  /** The health poller's published states (null without Redis): an engine restart forgets what its backend was believed to cache. */
  readonly engineStates: EngineStateView | null;
  readonly metrics: Pick<RouterMetrics, 'recordBackendRestart' | 'forgetBackend'>;
  /** The API keys the backends get, on proxied requests and on model discovery alike. */
  readonly upstreamKeys: UpstreamKeys;
  /** The backend address policy, asked about every backend the shared set brings that is not configured here. */
  readonly addressPolicy: Pick<BackendAddressPolicy, 'check' | 'connectLookup'>;
}

/** Registry, upstream pools and (with Redis) the shared backend set; closers onto `closers` as each opens. */
export function wireBackends(config: RouterConfig, deps: BackendsWiringDeps, closers: ShutdownStack): BackendParts {
  const { logger } = deps;
  const upstreams = new UpstreamPools({
    connectTimeoutMs: config.connectTimeoutMs,
    // A call setting no bound of its own (none does: UpstreamPoolOptions) waits as long as a stream may for its first byte.
    headersTimeoutMs: config.streamFirstByteTimeoutMs,
    idleTimeoutMs: config.idleTimeoutMs,
    keys: deps.upstreamKeys,
    // Every connection re-checks and pins the backend's addresses (DNS rebinding).
    lookupFor: (backend) => deps.addressPolicy.connectLookup(backend.url),
  });
  closers.push('upstream pools', () => upstreams.close());
  const registry = createRegistry(config, deps, upstreams);
  closers.push('backend registry', () => registry.stop());
  // After the first model discovery, so a restart published before the start forgets in the right pools.
  const startRegistry = async (): Promise<void> => {
    await registry.start(config.modelsRefreshMs);
    deps.engineStates?.followRestarts(
      createRestartForgetter({
        registry,
        state: deps.state,
        recordRestart: (id) => deps.metrics.recordBackendRestart(id),
        logger: logger?.child({ component: 'engine-restarts' }),
      }),
    );
  };
  if (deps.redis === null || config.redisUrl === undefined) {
    return {
      registry,
      upstreams,
      changes: new LocalBackendChanges(registry),
      sharedVersion: () => null,
      eventStreams: null,
      start: startRegistry,
    };
  }
  const redis = deps.redis;
  const eventStreams = new EventStreamsWatch({
    read: (ids) => readFollowedKvEventStreams(redis, ids),
    backendIds: () => registry.backends.map((backend) => backend.id),
    intervalMs: EVENT_STREAMS_READ_MS,
    onError: (error) => logger?.debug({ err: error }, 'could not read which KV-event streams are followed'),
  });
  closers.push('KV-event streams watch', () => eventStreams.stop());
  // With Redis the backend set is the fleet's: seeded from config, changed through any replica's admin API.
  const subscriber = createRedis(config.redisUrl, 'worker');
  closers.push('backend-set subscriber', () => subscriber.disconnect());
  const shared = new SharedBackendSet({
    set: new RedisBackendSet({ redis: deps.redis, nowMs: () => Date.now() }),
    subscriber,
    registry,
    pollIntervalMs: config.backendSetPollMs,
    nowMs: () => Date.now(),
    logger: logger?.child({ component: 'backend-set' }),
    admitUrl: (url) => deps.addressPolicy.check(url),
    configuredUrls: new Set(backendsWithRoles(config).map((backend) => backend.url)),
    configuredRoles: new Map(
      backendsWithRoles(config).map((backend) => [
        backend.url,
        ('role' in backend ? backend.role : undefined) ?? 'both',
      ]),
    ),
  });
  closers.push('shared backend set', () => shared.stop());
  return {
    registry,
    upstreams,
    changes: shared,
    sharedVersion: () => shared.version,
    eventStreams,
    async start() {
      await shared.start();
      await startRegistry();
      await eventStreams.start();
    },
  };
}

/**
 * The registry of this replica's backends: their breakers, model discovery through each backend's own
 * pool, and what a departing backend takes with it (its pool; its metric series and, if the engine
 * itself went, what it was believed to cache).
 */
function createRegistry(config: RouterConfig, deps: BackendsWiringDeps, upstreams: UpstreamPools): BackendRegistry {
  const { logger } = deps;
  const registry: BackendRegistry = new BackendRegistry(backendsWithRoles(config), {
    breakerFailureThreshold: config.breakerFailureThreshold,
    breakerCooldownMs: config.breakerCooldownMs,
    nowMs: deps.nowMs,
    random: deps.random,
    modelsPendingMaxMs: config.modelsPendingMaxMs,
    // Through the backend's own pool: its connections are the checked, pinned ones.
    fetchModels: (backend) =>
      fetchModels(backend, upstreams.for(backend), upstreams.authorizationOf(backend), config.connectTimeoutMs),
    onRefreshError: (backend, error, modelsReadFailures) => {
      if (modelsReadFailures === 0)
        return logger?.warn(
          { backend: backend.id, err: error },
          'could not read the backend models (keeping the last known)',
        );
      // Models still pending: asked again every few seconds (a backend still starting is normal at
      // start). A warning on the first failure and then about once a minute; the rest at debug.
      const details = { backend: backend.id, err: error, attempts: modelsReadFailures };
      if (modelsReadFailures === 1 || modelsReadFailures % MODELS_RETRY_WARN_EVERY === 0)
        logger?.warn(details, 'could not read the backend models yet: retrying');
      else logger?.debug(details, 'could not read the backend models yet: retrying');
    },
    // A departing backend's requests in flight keep their pool (closed once they finish). What it was
    // believed to cache is forgotten only if the engine itself went (a new weight keeps its cache).
    onRemoved: (backend, models, departure) => {
      const retired = upstreams.retire(backend);
      // Gone for good (not replaced under the same id): its metric series go too, once its requests in
      // flight have ended and recorded (the next turn of the loop), unless the id came back meanwhile.
      // Discovered pods get a new id each, so without this /metrics would grow with every pod ever seen.
      if (departure === 'removed') {
        void retired.then(() =>
          setImmediate(() => {
            if (registry.get(backend.id) === undefined) deps.metrics.forgetBackend(backend.id);
          }),
        );
      }
      if (departure === 'updated') return;
      for (const model of models) deps.state.forgetBackend(model, backend.id).catch(() => undefined);
    },
  });
  return registry;
}

/** `authorization`: the backend's upstream key header (an engine started with `--api-key` answers 401 without it). */
async function fetchModels(
  backend: Backend,
  pool: Dispatcher,
  authorization: string | null,
  timeoutMs: number,
): Promise<ModelListing> {
  const response = await undiciRequest(`${backend.origin}${backend.basePath}/v1/models`, {
    dispatcher: pool,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    ...(authorization === null ? {} : { headers: { authorization } }),
  });
  if (response.statusCode !== 200) {
    await response.body.dump();
    throw new Error(`GET /v1/models answered ${response.statusCode}`);
  }
  const body = (await response.body.json()) as { data?: Array<{ id?: unknown; parent?: unknown }> };
  const ids: string[] = [];
  // vLLM lists a LoRA adapter with `parent`: its base model (a tenant allowed the base may use it).
  const parents = new Map<string, string>();
  for (const model of body.data ?? []) {
    if (typeof model.id !== 'string') continue;
    ids.push(model.id);
    if (typeof model.parent === 'string' && model.parent !== '' && model.parent !== model.id)
      parents.set(model.id, model.parent);
  }
  return { ids, parents };
}
