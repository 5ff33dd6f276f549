import type { BackendId, BlockHash, RoutingSnapshot, RoutingStateStore } from '@kvroute/routing';
import { blockHashArg, DEFAULT_KEY_NAMESPACE, poolKeys, type PoolKeys } from './keys';
import { integerArrayReply, integerReply, runScript, SCRIPTS, type RedisClient } from './scripts';

export interface RedisRoutingStateOptions {
  /** A request-path connection (`createRedis(url, 'request-path')`): state reads must fail fast. */
  readonly redis: RedisClient;
  /** Prefix blocks remembered per pool, over all its backends (the pool LRU's cap); the oldest are evicted in batches of cap/16. */
  readonly maxBlocksPerPool: number;
  /** A block no backend recorded for this long is forgotten (its key expires). 0 = never. */
  readonly blockIdleTtlMs: number;
  /** A lease not released or renewed within this long stops counting (its router replica died, say). */
  readonly leaseTtlMs: number;
  /** Re-recording a block a backend recorded less than this long ago is skipped (default 1000 ms). Below `blockIdleTtlMs`. */
  readonly refreshGranularityMs?: number;
  /** Wall-clock ms (Date.now-like): leases and idle blocks expire on Redis's clock, so replicas need synchronised clocks. */
  readonly nowMs: () => number;
  /** Key namespace (default `kvr:v1`); tests give each run its own. */
  readonly keyNamespace?: string;
}

/**
 * Routing state shared by every router replica, in Redis: the same behaviour as InMemoryRoutingState
 * (prefix-closed ownership recorded deepest first, binary-search match, refresh granularity, leases that
 * carry pending prefill tokens), with each operation one Lua script on the pool's hash slot.
 *
 * Differences from the in-memory store:
 * - The block cap is per pool (`maxBlocksPerPool`), not per backend: one LRU per pool, whose members are
 *   block hashes; evicting a block forgets it for every backend.
 * - Leases expire `leaseTtlMs` after they were taken or last renewed (`renew`), so a crashed replica's
 *   leases stop counting; and they count per pool: a backend serving two models has two lease sets.
 * - `inflightCounts()` must answer synchronously, so it reads a local cache: per pool and backend, the
 *   in-flight count the last snapshot, reserve or release of this replica saw (leases of every replica).
 *   It only feeds metrics; a backend this replica stopped asking about keeps its last count.
 */
export class RedisRoutingState implements RoutingStateStore {
  private readonly redis: RedisClient;
  private readonly namespace: string;
  private readonly refreshGranularityMs: number;
  private readonly keysByPool = new Map<string, PoolKeys>();
  /** pool → backend → in-flight count last seen (see inflightCounts). */
  private readonly inflightSeen = new Map<string, Map<BackendId, number>>();

  constructor(private readonly options: RedisRoutingStateOptions) {
    this.redis = options.redis;
    this.namespace = options.keyNamespace ?? DEFAULT_KEY_NAMESPACE;
    this.refreshGranularityMs = options.refreshGranularityMs ?? 1000;
    requireInteger('maxBlocksPerPool', options.maxBlocksPerPool, 1);
    requireInteger('blockIdleTtlMs', options.blockIdleTtlMs, 0);
    requireInteger('leaseTtlMs', options.leaseTtlMs, 1);
    requireInteger('refreshGranularityMs', this.refreshGranularityMs, 0);
    if (options.blockIdleTtlMs > 0 && this.refreshGranularityMs >= options.blockIdleTtlMs) {
      throw new RangeError(`refreshGranularityMs (${this.refreshGranularityMs}) must be below blockIdleTtlMs (${options.blockIdleTtlMs})`);
    }
  }

  async snapshot(pool: string, backends: readonly BackendId[], blockHashes: readonly BlockHash[]): Promise<RoutingSnapshot> {
    const matchBlocks = new Map<BackendId, number>();
    const inflight = new Map<BackendId, number>();
    const pendingPrefillTokens = new Map<BackendId, number>();
    if (backends.length === 0) return { matchBlocks, inflight, pendingPrefillTokens };
    const keys = this.keys(pool);
    const reply = await runScript(
      this.redis,
      SCRIPTS.snapshot,
      [keys.forgotten, keys.leaseDeadlines, keys.inflight, keys.pending],
      [this.options.nowMs(), keys.prefix, this.options.blockIdleTtlMs, backends.length, ...backends, ...blockHashes.map(blockHashArg)],
    );
    const values = integerArrayReply(SCRIPTS.snapshot, reply, 3 * backends.length);
    backends.forEach((backend, index) => {
      const count = values[3 * index] as number;
      const depth = values[3 * index + 2] as number;
      inflight.set(backend, count);
      pendingPrefillTokens.set(backend, values[3 * index + 1] as number);
      if (depth > 0) matchBlocks.set(backend, depth);
      this.sawInflight(pool, backend, count);
    });
    return { matchBlocks, inflight, pendingPrefillTokens };
  }

  async reserve(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    blockHashes: readonly BlockHash[],
    prefillTokens: number,
    maxInflight = 0,
  ): Promise<boolean> {
    requireInteger('maxInflight', maxInflight, 0);
    const keys = this.keys(pool);
    const reply = await runScript(
      this.redis,
      SCRIPTS.reserve,
      [keys.prefill(backendId), keys.lru, keys.forgotten, keys.leaseDeadlines, keys.inflight, keys.pending],
      [
        this.options.nowMs(),
        leaseId,
        this.options.leaseTtlMs,
        Math.max(0, Math.round(prefillTokens)),
        maxInflight,
        this.options.blockIdleTtlMs,
        this.refreshGranularityMs,
        this.options.maxBlocksPerPool,
        keys.prefix,
        backendId,
        ...blockHashes.map(blockHashArg),
      ],
    );
    const [taken, count] = integerArrayReply(SCRIPTS.reserve, reply, 2) as [number, number];
    this.sawInflight(pool, backendId, count);
    return taken === 1;
  }

  async renew(pool: string, backendId: BackendId, leaseId: string): Promise<boolean> {
    const keys = this.keys(pool);
    const reply = await runScript(
      this.redis,
      SCRIPTS.renew,
      [keys.prefill(backendId), keys.leaseDeadlines, keys.inflight, keys.pending],
      [this.options.nowMs(), leaseId, this.options.leaseTtlMs, keys.prefix, backendId],
    );
    return integerReply(SCRIPTS.renew, reply) === 1;
  }

  async prefillDone(pool: string, backendId: BackendId, leaseId: string): Promise<void> {
    const keys = this.keys(pool);
    const reply = await runScript(this.redis, SCRIPTS.prefillDone, [keys.prefill(backendId), keys.pending], [leaseId, backendId]);
    integerReply(SCRIPTS.prefillDone, reply);
  }

  async release(pool: string, backendId: BackendId, leaseId: string): Promise<void> {
    const keys = this.keys(pool);
    const reply = await runScript(
      this.redis,
      SCRIPTS.release,
      [keys.prefill(backendId), keys.leaseDeadlines, keys.inflight, keys.pending],
      [leaseId, backendId],
    );
    const [, count] = integerArrayReply(SCRIPTS.release, reply, 2) as [number, number];
    this.sawInflight(pool, backendId, count);
  }

  async forgetBackend(pool: string, backendId: BackendId): Promise<void> {
    const reply = await runScript(this.redis, SCRIPTS.forgetBackend, [this.keys(pool).forgotten], [this.options.nowMs(), backendId, this.options.blockIdleTtlMs]);
    integerReply(SCRIPTS.forgetBackend, reply);
  }

  /** In-flight per backend, summed over pools, as this replica last saw it (a cache: see the class comment). */
  inflightCounts(): ReadonlyMap<BackendId, number> {
    const counts = new Map<BackendId, number>();
    for (const backends of this.inflightSeen.values()) {
      for (const [backend, count] of backends) counts.set(backend, (counts.get(backend) ?? 0) + count);
    }
    return counts;
  }

  private keys(pool: string): PoolKeys {
    let keys = this.keysByPool.get(pool);
    if (!keys) {
      keys = poolKeys(pool, this.namespace);
      this.keysByPool.set(pool, keys);
    }
    return keys;
  }

  private sawInflight(pool: string, backendId: BackendId, count: number): void {
    let backends = this.inflightSeen.get(pool);
    if (!backends) {
      backends = new Map();
      this.inflightSeen.set(pool, backends);
    }
    backends.set(backendId, count);
  }
}

function requireInteger(name: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) throw new RangeError(`${name} must be an integer >= ${min}, got ${value}`);
}
