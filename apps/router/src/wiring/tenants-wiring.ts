import { randomBytes, randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { ShutdownStack } from '@kvroute/platform';
import {
  probeRedisAuth,
  RedisApiKeyStore,
  redisUrlNodes,
  RouterReplicas,
  TenantLimits,
  type RedisClient,
} from '@kvroute/redis-store';
import { AuthFailureLimiter } from '../admin/auth-failure-limiter';
import type { RouterConfig } from '../config';
import type { LimitDeps } from '../pipeline/limit';
import { Authenticator } from '../tenants/authenticate';
import { CacheSalter } from '../tenants/cache-salt';
import { SaltSecretKeeper } from '../tenants/salt-secret';
import { CachedRedisKeys, keyLookupChain, type KeyLookup } from '../tenants/key-directory';
import { loadKeyFile } from '../tenants/key-file';
import { LimitGate } from '../tenants/limit-gate';
import { TenantDirectory } from '../tenants/tenant-directory';

/** Peers whose wrong API keys are remembered at once (~100 B each). */
const MAX_TRACKED_PEERS = 10_000;
/** API key lookups remembered per replica. */
const MAX_CACHED_KEYS = 50_000;
/** How often a replica tells Redis it is alive (the divisor of limits during an outage); stale after 3. */
const REPLICA_HEARTBEAT_MS = 2_000;
/**
 * How often a replica without a configured salt secret checks Redis still holds it (one SET NX): the window
 * after a Redis data loss in which a starting replica would mint another secret.
 */
const SALT_SECRET_CHECK_MS = 2_000;

export interface TenantParts {
  readonly authenticator: Authenticator;
  readonly tenants: TenantDirectory;
  /** Null in open mode. */
  readonly limit: LimitDeps | null;
  /** The salter, once `start` resolved the secret (null in open mode). */
  readonly salter: () => CacheSalter | null;
  /** The admin API's key store; null without Redis. */
  readonly apiKeys: RedisApiKeyStore | null;
  /**
   * Replicas alive in the fleet by their Redis heartbeats (1 without Redis; the last count while Redis is
   * away): what each replica's share is while it enforces limits or queues on its own.
   */
  readonly liveReplicas: () => number;
  /** Resolves the salt secret (from Redis if it is shared there), starts the replica heartbeat. */
  start(): Promise<void>;
}

export interface TenantsWiringDeps {
  readonly redis: RedisClient | null;
  /** Wall-clock ms. */
  readonly nowMs: () => number;
  readonly logger: FastifyBaseLogger;
  readonly bytesPerToken: (pool: string) => number;
  readonly readFile: (path: string) => string;
}

/**
 * Tenants (docs/adr/0006): identity (key file, keys in Redis), limits (Redis, with this replica's share
 * in memory while Redis is away), cache salts. In open mode (`auth: none`) only the authenticator
 * exists, and it lets everyone through as nobody.
 */
export function wireTenants(config: RouterConfig, deps: TenantsWiringDeps, closers: ShutdownStack): TenantParts {
  const { redis, logger } = deps;
  const clockMs = (): number => performance.now();
  const apiKeys = redis === null ? null : new RedisApiKeyStore({ redis });
  const sources: KeyLookup[] = [];
  if (config.auth === 'api-keys') {
    if (config.apiKeysFile !== undefined) sources.push(loadKeyFile(config.apiKeysFile));
    if (apiKeys !== null)
      sources.push(
        new CachedRedisKeys({
          store: apiKeys,
          cacheMs: config.apiKeyCacheMs,
          maxEntries: MAX_CACHED_KEYS,
          nowMs: clockMs,
          logger,
        }),
      );
  }
  const authenticator = new Authenticator({
    mode: config.auth,
    keys: sources.length === 0 ? null : keyLookupChain(sources),
    identityHeader: config.identityHeader,
    failures: new AuthFailureLimiter({
      maxFailures: config.maxAuthFailures,
      windowMs: config.authFailureWindowMs,
      maxPeers: MAX_TRACKED_PEERS,
      nowMs: clockMs,
    }),
  });
  const tenants = new TenantDirectory(config.tenants);
  const replicas = replicaCounter(redis, deps.nowMs, closers);
  if (config.auth === 'none')
    return {
      authenticator,
      tenants,
      limit: null,
      salter: () => null,
      apiKeys,
      liveReplicas: replicas.live,
      start: async () => replicas.start(),
    };

  const gate = new LimitGate({
    shared: redis === null ? null : new TenantLimits({ redis }),
    liveReplicas: replicas.live,
    retryAfterMs: config.redisRetryAfterMs,
    clockMs,
    logger,
  });
  const limit: LimitDeps = {
    gate,
    tenants,
    bytesPerToken: deps.bytesPerToken,
    reservedCompletionTokens: config.reservedCompletionTokens,
    leaseTtlMs: config.tenantLeaseTtlMs,
    nowMs: deps.nowMs,
  };
  const configuredSecret =
    config.cacheSaltSecret ??
    (config.cacheSaltSecretFile === undefined ? undefined : deps.readFile(config.cacheSaltSecretFile).trim());
  if (configuredSecret !== undefined && configuredSecret.length < 16)
    throw new Error('cacheSaltSecretFile: the secret must be at least 16 characters');
  // A configured secret (a mounted Secret, the env) is the only one: Redis never holds nor overrides it.
  const configured = configuredSecret === undefined ? null : new CacheSalter(Buffer.from(configuredSecret, 'utf8'));
  const salt = configured === null ? processOrSharedSalt(apiKeys, logger, closers) : null;

  return {
    authenticator,
    tenants,
    limit,
    salter: () => configured ?? salt?.salter() ?? null,
    apiKeys,
    async start() {
      if (config.redisUrl !== undefined) await warnIfRedisOpen(config.redisUrl, config.auth, logger);
      await salt?.start();
      replicas.start();
    },
    liveReplicas: replicas.live,
  };
}

/**
 * The salt secret of a replica configured with none: shared through Redis and kept there (SaltSecretKeeper,
 * checked every SALT_SECRET_CHECK_MS), or without Redis, this process's own.
 */
function processOrSharedSalt(
  apiKeys: RedisApiKeyStore | null,
  logger: FastifyBaseLogger,
  closers: ShutdownStack,
): { salter: () => CacheSalter | null; start: () => Promise<void> } {
  const mint = (): string => randomBytes(32).toString('base64url');
  if (apiKeys === null) {
    let own: CacheSalter | null = null;
    return {
      salter: () => own,
      async start() {
        logger.info(
          'cache salts use a secret of this process (no cacheSaltSecret, no Redis): fine for one replica; set cacheSaltSecretFile for several',
        );
        own = new CacheSalter(Buffer.from(mint(), 'utf8'));
      },
    };
  }
  const keeper = new SaltSecretKeeper({ shared: apiKeys, mint, logger });
  return {
    salter: () => keeper.salter,
    async start() {
      await keeper.start();
      const timer = setInterval(() => void keeper.check(), SALT_SECRET_CHECK_MS);
      timer.unref();
      closers.push('cache-salt secret check', async () => clearInterval(timer));
    },
  };
}

/** The fleet's live replicas by heartbeat in Redis; `start` begins beating (and registers its closer). */
function replicaCounter(
  redis: RedisClient | null,
  nowMs: () => number,
  closers: ShutdownStack,
): { live: () => number; start: () => void } {
  let live = 1;
  if (redis === null) return { live: () => live, start: () => undefined };
  const replicas = new RouterReplicas({ redis, replicaId: randomUUID(), staleAfterMs: 3 * REPLICA_HEARTBEAT_MS });
  return {
    live: () => live,
    start() {
      const beat = (): void => {
        replicas.heartbeat(nowMs()).then(
          (count) => {
            live = count;
          },
          () => undefined, // Redis away: the last count stands (that is the point of it).
        );
      };
      beat();
      const timer = setInterval(beat, REPLICA_HEARTBEAT_MS);
      timer.unref();
      closers.push('replica heartbeat', async () => {
        clearInterval(timer);
        await replicas.leave().catch(() => undefined);
      });
    },
  };
}

/**
 * With tenants on, Redis holds what they rely on (key digests, limits, the cache-salt secret, the backend
 * set): a Redis that answers without a password lets anyone who reaches its port mint keys or lift limits.
 * Started anyway (a private network may be the operator's choice), with a warning.
 */
async function warnIfRedisOpen(redisUrl: string, auth: string, logger: FastifyBaseLogger): Promise<void> {
  if ((await probeRedisAuth(redisUrl)) !== 'open') return;
  const nodes = redisUrlNodes(redisUrl).map((node) => `${node.host}:${node.port}`);
  logger.warn(
    { auth, redis: nodes[0] },
    'Redis accepts commands without a password while auth is on: anyone who reaches it can add API keys and ' +
      'lift limits; set requirepass (or an ACL user) and put the password in KVROUTE_REDIS_URL',
  );
}
