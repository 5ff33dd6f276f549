import {
  decideWithSnapshot,
  DEFAULT_BYTES_PER_TOKEN,
  engineReportedFreeTokens,
  engineWaiting,
  rendezvousOrder,
  type AtomicRule,
  type BackendId,
  type BlockHash,
  type Candidate,
  type DecideInput,
  type DecideResult,
  type RoutingDecision,
  type RoutingSnapshot,
  type RoutingStateStore,
} from '@kvroute/routing';
import { blockHashArg, DEFAULT_KEY_NAMESPACE, poolKeys, type PoolKeys } from './keys';
import { integerArrayReply, integerReply, runScript, SCRIPTS, type RedisClient } from './scripts';

export interface RedisRoutingStateOptions {
  /** A request-path connection (`createRedis(url, 'request-path')`): state reads must fail fast. */
  readonly redis: RedisClient;
  /**
   * Prefix blocks remembered per pool over all its backends (the owner index's cap): a generation turns
   * when it holds half of it, and the previous one, the least recently used half, is dropped.
   */
  readonly maxBlocksPerPool: number;
  /** A block not recorded for this long is forgotten (within two of them: a generation lasts one). 0 = never. */
  readonly blockIdleTtlMs: number;
  /** A lease not released or renewed within this long stops counting (its router replica died, say). */
  readonly leaseTtlMs: number;
  /** Wall-clock ms (Date.now-like): leases and idle blocks expire on Redis's clock, so replicas need synchronised clocks. */
  readonly nowMs: () => number;
  /** Key namespace (default `kvr:v1`); tests give each run its own. */
  readonly keyNamespace?: string;
}

/**
 * Routing state shared by every router replica, in Redis: the same behaviour as InMemoryRoutingState
 * (prefix-closed ownership, binary-search match, leases that carry pending prefill tokens), with each
 * operation one Lua script on the pool's hash slot. `decide` is one script (route.lua) for policies
 * with an atomic rule (cacheaware, leastloaded): figures, choice, lease and ownership in one round
 * trip; other policies snapshot first (see decideWithSnapshot).
 *
 * Differences from the in-memory store:
 * - The owner index is per pool and generational (src/lua/lib/owner-index.lua): LRU at the granularity
 *   of a generation, capped by `maxBlocksPerPool` over all backends of the pool.
 * - Leases expire `leaseTtlMs` after they were taken or last renewed (`renew`), so a crashed replica's
 *   leases stop counting; and they count per pool: a backend serving two models has two lease sets.
 * - `inflightCounts()` must answer synchronously, so it reads a local cache: per pool and backend, the
 *   in-flight count the last snapshot, reserve or release of this replica saw (leases of every replica).
 *   It only feeds metrics; a backend this replica stopped asking about keeps its last count.
 */
export class RedisRoutingState implements RoutingStateStore {
  private readonly redis: RedisClient;
  private readonly namespace: string;
  private readonly keysByPool = new Map<string, PoolKeys>();
  /** Backend ids already checked by requireIndexableId (a fleet has a handful). */
  private readonly indexableIds = new Set<BackendId>();
  /** pool → backend → in-flight count last seen (see inflightCounts). */
  private readonly inflightSeen = new Map<string, Map<BackendId, number>>();

  constructor(private readonly options: RedisRoutingStateOptions) {
    this.redis = options.redis;
    this.namespace = options.keyNamespace ?? DEFAULT_KEY_NAMESPACE;
    requireInteger('maxBlocksPerPool', options.maxBlocksPerPool, 1);
    requireInteger('blockIdleTtlMs', options.blockIdleTtlMs, 0);
    requireInteger('leaseTtlMs', options.leaseTtlMs, 1);
  }

  async snapshot(pool: string, backends: readonly BackendId[], blockHashes: readonly BlockHash[]): Promise<RoutingSnapshot> {
    backends.forEach((backend) => this.requireIndexableId(backend));
    const matchBlocks = new Map<BackendId, number>();
    const inflight = new Map<BackendId, number>();
    const pendingPrefillTokens = new Map<BackendId, number>();
    if (backends.length === 0) return { matchBlocks, inflight, pendingPrefillTokens };
    const keys = this.keys(pool);
    const reply = await runScript(
      this.redis,
      SCRIPTS.snapshot,
      [keys.forgotten, keys.leaseDeadlines, keys.inflight, keys.pending, keys.ownersNew, keys.ownersOld],
      [this.options.nowMs(), keys.prefix, backends.length, ...backends, ...blockHashes.map(blockHashArg)],
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
    const reply = await this.route(
      pool,
      { kind: 'fixed', prefillTokens: Math.max(0, Math.round(prefillTokens)), maxInflight },
      [{ id: backendId, weight: 1, rank: 0, waiting: 0, freeTokens: -1 }],
      leaseId,
      blockHashes,
      { textBytes: 0, blockSizeBytes: 0, maxTokens: null },
      true,
    );
    return reply.chosen === 1;
  }

  async decide(input: DecideInput): Promise<DecideResult> {
    const rule = input.policy.atomicRule;
    if (rule === undefined) return decideWithSnapshot(this, input);
    const { request, backends } = input;
    const ranks = new Map<BackendId, number>();
    if (rule.kind === 'cost') {
      const stubs = backends.map((backend) => ({ backend, inflight: 0, matchBlocks: 0, pendingPrefillTokens: 0 }));
      for (const [rank, index] of rendezvousOrder(request.headHash, stubs).entries()) ranks.set((backends[index] as { id: string }).id, rank);
    }
    // The engine terms' figures come from the policy's own functions, so the rule and the explanation
    // read the same integers.
    const reply = await this.route(
      input.pool,
      rule,
      backends.map((backend) => {
        const engine = input.engine?.get(backend.id) ?? null;
        return {
          id: backend.id,
          weight: backend.weight,
          rank: ranks.get(backend.id) ?? 0,
          waiting: engineWaiting(engine),
          freeTokens: engineReportedFreeTokens(engine),
        };
      }),
      input.leaseId,
      input.policy.usesPrefixMatch ? request.blockHashes : [],
      request,
      input.policy.recordsOwnershipAtFirstToken !== true,
    );
    const candidates: Candidate[] = backends.map((backend, index) => ({
      backend,
      ...(reply.figures[index] as Figures),
      engine: input.engine?.get(backend.id) ?? null,
      // As candidatesOf does on the snapshot path, so every policy sees the same candidates on both.
      ...(input.trueMatchTokens === undefined ? {} : { trueMatchTokens: input.trueMatchTokens.get(backend.id) ?? null }),
    }));
    const chosenId = (backends[reply.chosen - 1] as { id: string }).id;
    // The rule decided; `choose` on the same figures explains the decision (and must agree).
    const explained = input.policy.choose(request, candidates, input.context);
    const ruleMismatch = explained.kind !== 'routed' || explained.backendId !== chosenId;
    const decision: RoutingDecision = ruleMismatch ? { kind: 'routed', backendId: chosenId, reason: explained.kind === 'routed' ? explained.reason : 'least-loaded', scores: explained.kind === 'routed' ? explained.scores : [] } : explained;
    return { decision, candidates, conflicts: [], ruleMismatch };
  }

  /** Runs route.lua: one decision (or, for 'fixed', one conditional reservation) in one round trip. */
  private async route(
    pool: string,
    rule: AtomicRule | { readonly kind: 'fixed'; readonly prefillTokens: number; readonly maxInflight: number },
    candidates: readonly RouteCandidate[],
    leaseId: string,
    blockHashes: readonly BlockHash[],
    request: { readonly textBytes: number; readonly blockSizeBytes: number; readonly maxTokens?: number | null },
    record: boolean,
  ): Promise<{ chosen: number; figures: Figures[] }> {
    for (const candidate of candidates) this.requireIndexableId(candidate.id);
    const keys = this.keys(pool);
    const cost = rule.kind === 'cost' ? rule.params : null;
    const reply = await runScript(
      this.redis,
      SCRIPTS.route,
      [keys.forgotten, keys.leaseDeadlines, keys.inflight, keys.pending, keys.ownersNew, keys.ownersOld, keys.generation],
      [
        this.options.nowMs(),
        keys.prefix,
        this.options.blockIdleTtlMs,
        this.options.maxBlocksPerPool,
        leaseId,
        this.options.leaseTtlMs,
        record && blockHashes.length > 0 ? 1 : 0,
        rule.kind,
        // Numbers as JavaScript prints them: Lua's tonumber reads back the same double.
        String(cost?.bytesPerToken ?? DEFAULT_BYTES_PER_TOKEN),
        String(cost?.prefillMsPerToken ?? 0),
        String(cost?.queueMsPerRequest ?? 0),
        cost?.minMatchBlocks ?? 0,
        cost?.saturationInflight ?? 0,
        String(cost?.spreadAbs ?? 0),
        String(cost?.spreadRel ?? 1),
        String(cost?.coldLoadFactor ?? 1),
        request.textBytes,
        request.blockSizeBytes,
        rule.kind === 'fixed' ? rule.prefillTokens : 0,
        rule.kind === 'fixed' ? rule.maxInflight : 0,
        String(cost?.engineWaitingMs ?? 0),
        String(cost?.kvFullMs ?? 0),
        request.maxTokens ?? 0,
        candidates.length,
        ...candidates.flatMap((candidate) => [candidate.id, String(candidate.weight), candidate.rank, candidate.waiting, candidate.freeTokens]),
        ...blockHashes.map(blockHashArg),
      ],
    );
    const values = integerArrayReply(SCRIPTS.route, reply, 2 + 3 * candidates.length);
    const chosen = values[0] as number;
    const figures = candidates.map((candidate, index) => {
      const inflight = values[2 + 3 * index] as number;
      this.sawInflight(pool, candidate.id, inflight);
      return { inflight, pendingPrefillTokens: values[3 + 3 * index] as number, matchBlocks: values[4 + 3 * index] as number };
    });
    if (chosen > 0) this.sawInflight(pool, (candidates[chosen - 1] as { id: string }).id, values[1] as number);
    return { chosen, figures };
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

  async prefillDone(pool: string, backendId: BackendId, leaseId: string, heldBlocks: readonly BlockHash[] = []): Promise<void> {
    if (heldBlocks.length > 0) this.requireIndexableId(backendId);
    const keys = this.keys(pool);
    const reply = await runScript(
      this.redis,
      SCRIPTS.prefillDone,
      [keys.prefill(backendId), keys.pending, keys.forgotten, keys.ownersNew, keys.ownersOld, keys.generation],
      [leaseId, backendId, this.options.nowMs(), this.options.blockIdleTtlMs, this.options.maxBlocksPerPool, ...heldBlocks.map(blockHashArg)],
    );
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

  /**
   * The owner index delimits ids with control characters (src/lua/lib/owner-index.lua); an id never
   * holds one anyway, since it travels in the X-Router-Backend header. Checked once per id.
   */
  private requireIndexableId(id: BackendId): void {
    if (this.indexableIds.has(id)) return;
    if (/[\u0000-\u001f\u007f]/.test(id)) throw new RangeError(`backend id must not contain control characters: ${JSON.stringify(id)}`);
    this.indexableIds.add(id);
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

/** A candidate as route.lua takes it: engine figures from the health poller (0 and -1 when unknown). */
interface RouteCandidate {
  readonly id: BackendId;
  readonly weight: number;
  readonly rank: number;
  readonly waiting: number;
  readonly freeTokens: number;
}

/** A candidate's figures as route.lua read them. */
type Figures = Pick<Candidate, 'inflight' | 'matchBlocks' | 'pendingPrefillTokens'>;


function requireInteger(name: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) throw new RangeError(`${name} must be an integer >= ${min}, got ${value}`);
}
