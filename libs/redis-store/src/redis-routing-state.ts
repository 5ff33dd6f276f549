import {
  DEFAULT_MAX_RETENTION_MS,
  DEFAULT_MIN_EVIDENCE_AGE_MS,
  type AtomicOutcomeBase,
  type AtomicRouteInput,
  type BackendId,
  type BackendInfo,
  type BlockHash,
  type Candidate,
  type DecisionScope,
  type LearnInput,
  type LearnReply,
  type RoutingRequest,
  type RoutingSnapshot,
  type RoutingStateStore,
} from '@kvroute/routing';
import { BacklogClears, DEFAULT_BACKLOG_CLEAR_WAIT_MS } from './backlog-clears';
import { DEFAULT_KEY_NAMESPACE } from './keys';
import { cellKeyOf, PoolLayout, requestCellOrder } from './pool-cells';
import { learnInPool, type PoolLearnOptions } from './pool-learn';
import { PoolLeases } from './pool-leases';
import { PoolMembers } from './pool-members';
import { RedisStoreError } from './redis-store-error';
import { runRoute, type RouteCall, type RouteReply } from './route-call';
import { runScript, SCRIPTS, type RedisClient } from './scripts';
import { shortlistPicks } from './shortlist';
import { DEFAULT_CELL_KEY_BYTES, DEFAULT_SHORTLIST, RECORD_BLOCKS_PER_CALL } from './store-limits';

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
  /** Corrections (`learn`): an entry younger than this is no evidence of an eviction (default 1000 ms). */
  readonly minEvidenceAgeMs?: number;
  /** Corrections: the longest retention learned (default: the idle TTL, or a day without one). */
  readonly maxRetentionMs?: number;
  /**
   * Pools of more backends than this decide over a shortlist (`DEFAULT_SHORTLIST`), not every backend,
   * so a decision's cost does not grow with the pool (default 32; Infinity: never).
   */
  readonly shortlistAbove?: number;
  /**
   * Cells each pool is split into (docs/adr/0007; default 1: not split). Each cell is its own hash slot
   * with the owner index, leases and load of its backends (`backendCell`); a decision runs in the
   * request's cell (`requestCellOrder`, by `cellKeyOf`), and in the next one too when every backend
   * of the first is saturated. On a Redis Cluster, a pool of c cells spreads over up to c shards.
   */
  readonly poolCells?: number;
  /** How far into a conversation's first turn its cell key reaches, bytes of routing text (`cellKeyOf`; default DEFAULT_CELL_KEY_BYTES). */
  readonly cellKeyBytes?: number;
  /** Called when a decision's first cell was saturated and it ran in the next one too (metrics). */
  readonly onCellSpill?: (pool: string) => void;
  /**
   * How long a backlog clear (`clearBacklog`) waits for this replica's next decision in its pool cell to carry it,
   * ms, before it is sent in a call of its own (default 50; 0: at once). BacklogClears has why.
   */
  readonly backlogClearWaitMs?: number;
  /** A backlog clear sent on its own failed (it is not retried: the lease's release clears it too). */
  readonly onDeferredError?: (error: unknown) => void;
}

/**
 * Routing state shared by every router replica, in Redis: the same behaviour as InMemoryRoutingState
 * (prefix-closed ownership, binary-search match, leases that carry pending prefill tokens), with each
 * operation one Lua script on the pool's hash slot. The store runs scripts; it runs no policy and
 * knows no rule: `routeAtomically` is one script (route.lua composed with the policy's rule, whose
 * codec makes its argument and reads its detail: route-call.ts) that reads the figures, evaluates the
 * rule, takes the lease and records ownership in one round trip, and the rule's outcome goes back to
 * the policy (`decide` in @kvroute/routing); other policies snapshot, choose, then reserve.
 *
 * The parts, one module each: the lease and ownership calls (pool-leases.ts), a decision's call
 * (route-call.ts) with its member sets and engine figures (pool-members.ts) and big pools' shortlist
 * (shortlist.ts), cells (pool-cells.ts), and learning (pool-learn.ts).
 *
 * Differences from the in-memory store:
 * - The owner index is per pool and generational (src/lua/lib/owner-index.lua): LRU at the granularity
 *   of a generation, capped by `maxBlocksPerPool` over all backends of the pool.
 * - Leases expire `leaseTtlMs` after they were taken or last renewed (`renew`), so a crashed replica's
 *   leases stop counting; and they count per pool: a backend serving two models has two lease sets.
 * - `inflightCounts()` must answer synchronously, so it reads a local cache: per pool and backend, the
 *   in-flight count the last snapshot, decision or release of this replica saw (leases of every replica).
 *   It only feeds metrics; a backend this replica stopped asking about keeps its last count.
 */
export class RedisRoutingState implements RoutingStateStore {
  private readonly layout: PoolLayout;
  private readonly leases: PoolLeases;
  private readonly backlogClears: BacklogClears;
  private readonly learning: PoolLearnOptions;
  /** Backend ids already checked by requireIndexableId (a fleet has a handful). */
  private readonly indexableIds = new Set<BackendId>();
  /** pool → backend → in-flight count last seen (see inflightCounts). */
  private readonly inflightSeen = new Map<string, Map<BackendId, number>>();
  /** pool cell's key prefix → this replica's member set and sent engine figures there. */
  private readonly members = new Map<string, PoolMembers>();

  constructor(private readonly options: RedisRoutingStateOptions) {
    requireInteger('maxBlocksPerPool', options.maxBlocksPerPool, 1);
    requireInteger('blockIdleTtlMs', options.blockIdleTtlMs, 0);
    requireInteger('leaseTtlMs', options.leaseTtlMs, 1);
    this.layout = new PoolLayout(options.poolCells ?? 1, options.keyNamespace ?? DEFAULT_KEY_NAMESPACE);
    const shared = {
      redis: options.redis,
      layout: this.layout,
      nowMs: options.nowMs,
      blockIdleTtlMs: options.blockIdleTtlMs,
      maxBlocksPerPool: options.maxBlocksPerPool,
    };
    this.leases = new PoolLeases({
      ...shared,
      leaseTtlMs: options.leaseTtlMs,
      sawInflight: (pool, backend, count) => this.sawInflight(pool, backend, count),
    });
    this.backlogClears = new BacklogClears({
      waitMs: options.backlogClearWaitMs ?? DEFAULT_BACKLOG_CLEAR_WAIT_MS,
      send: async (keys, clears) => {
        await runScript(options.redis, SCRIPTS.clearBacklogs, [keys.pending], [keys.prefix, clears]);
      },
      onError: options.onDeferredError ?? (() => undefined),
    });
    this.learning = {
      ...shared,
      leases: this.leases,
      minEvidenceAgeMs: options.minEvidenceAgeMs ?? DEFAULT_MIN_EVIDENCE_AGE_MS,
      maxRetentionMs:
        options.maxRetentionMs ?? (options.blockIdleTtlMs > 0 ? options.blockIdleTtlMs : DEFAULT_MAX_RETENTION_MS),
    };
  }

  async snapshot(
    pool: string,
    backends: readonly BackendId[],
    blockHashes: readonly BlockHash[],
  ): Promise<RoutingSnapshot> {
    backends.forEach((backend) => this.requireIndexableId(backend));
    return this.leases.snapshot(pool, backends, blockHashes);
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
    this.requireIndexableId(backendId);
    return this.leases.reserve(pool, backendId, leaseId, blockHashes, prefillTokens, maxInflight);
  }

  /**
   * One decision: route.lua in the request's cell (the pool's only one when it is not split). When the
   * rule reports every participant of that cell saturated and another cell has backends, the next
   * cell decides too and the lease not used is released (not awaited): a second round trip only under
   * overload. If that second call fails, the first decision stands. In a split pool, ownership is
   * recorded only for the decision kept (one call more), never for a backend that was passed over.
   */
  async routeAtomically(input: AtomicRouteInput): Promise<AtomicOutcomeBase> {
    if (this.layout.cells === 1) return (await this.routeInCell(input, 0, input.recordOwnership)).outcome;
    const { members, order } = this.cellsFor(input.request, input.backends);
    const [first, next] = order;
    if (first === undefined) throw new RangeError('routeAtomically needs at least one backend');
    const inCell = (cell: number) =>
      this.routeInCell({ ...input, backends: members[cell] as BackendInfo[] }, cell, false);
    let kept = await inCell(first);
    if (kept.saturated && next !== undefined) {
      this.options.onCellSpill?.(input.pool);
      const spilled = await inCell(next).catch(() => null);
      if (spilled !== null) {
        const [better, dropped] = spilled.saturated ? [kept, spilled] : [spilled, kept];
        const droppedBackend = dropped.outcome.candidates[dropped.outcome.chosen]?.backend.id;
        if (droppedBackend !== undefined)
          this.release(input.pool, droppedBackend, input.leaseId).catch(() => undefined);
        kept = better;
      }
    }
    const keptBackend = kept.outcome.candidates[kept.outcome.chosen]?.backend.id;
    if (input.recordOwnership && keptBackend !== undefined && input.blockHashes.length > 0) {
      await this.leases.recordRestOfTaken(input.pool, keptBackend, input.blockHashes, 0);
    }
    return kept.outcome;
  }

  /** The request's cell and its eligible backends: what routeAtomically decides over first (for dry runs). */
  decisionScope(_pool: string, request: RoutingRequest, backends: readonly BackendInfo[]): DecisionScope {
    if (this.layout.cells === 1) return { backends, cell: null };
    const { members, order } = this.cellsFor(request, backends);
    const first = order[0];
    return first === undefined ? { backends, cell: null } : { backends: members[first] as BackendInfo[], cell: first };
  }

  /** `backends` split by cell, and the cells in the order the request tries them. */
  private cellsFor(
    request: RoutingRequest,
    backends: readonly BackendInfo[],
  ): { members: BackendInfo[][]; order: number[] } {
    const members = this.layout.splitByCell(backends, (backend) => backend.id);
    const cellKey = cellKeyOf(request, this.options.cellKeyBytes ?? DEFAULT_CELL_KEY_BYTES);
    return {
      members,
      order: requestCellOrder(
        cellKey,
        members.map((cell) => cell.length),
      ),
    };
  }

  /**
   * routeAtomically within one cell (`input.backends` are all of cell `cell`): the rule's codec makes
   * its argument, the call names the cell's member set by version (stored again when Redis does not
   * know it: one more round trip), and the rule's codec reads the outcome.
   */
  private async routeInCell(
    input: AtomicRouteInput,
    cell: number,
    record: boolean,
  ): Promise<{ outcome: AtomicOutcomeBase; saturated: boolean }> {
    const { pool, rule, backends } = input;
    backends.forEach((backend) => this.requireIndexableId(backend.id));
    const keys = this.layout.keys(pool, cell);
    const members = this.membersOf(keys.prefix);
    const ruleCall = rule.encode(input.request, backends);
    const shortlisted = rule.readsDepths && backends.length > (this.options.shortlistAbove ?? DEFAULT_SHORTLIST.above);
    const call = {
      keys,
      rule,
      ruleArgument: ruleCall.argument,
      leaseId: input.leaseId,
      blockHashes: input.blockHashes,
      recordAtMost: record && input.blockHashes.length > 0 ? RECORD_BLOCKS_PER_CALL : 0,
      shortlist: shortlisted
        ? shortlistPicks(backends, ruleCall.preferred, this.inflightSeen.get(pool), input.leaseId)
        : null,
      members: members.membersOf(backends),
      boundaryBlocks: input.request.boundaryBlocks ?? [],
    };
    const decided = await this.callRoute(call, members, input);
    members.storedHere = true;
    const candidates: Candidate[] = decided.participants.map((index, participant) => {
      const backend = backends[index] as BackendInfo;
      this.sawInflight(pool, backend.id, decided.figures[participant]?.inflight ?? 0);
      return { backend, ...decided.figures[participant], engine: input.engine?.get(backend.id) ?? null } as Candidate;
    });
    const chosenBackend = (candidates[decided.chosen] as Candidate).backend.id;
    this.sawInflight(pool, chosenBackend, decided.inflightAfter);
    if (record) await this.leases.recordRestOfTaken(pool, chosenBackend, input.blockHashes, decided.recordedTo);
    let outcome: AtomicOutcomeBase;
    try {
      outcome = rule.decode({
        candidates,
        chosen: decided.chosen,
        detail: decided.detail,
        request: input.request,
        engineFigures: decided.engineFigures,
      });
    } catch (error) {
      // The lease is taken: give it back before failing the decision.
      this.release(pool, chosenBackend, input.leaseId).catch(() => undefined);
      throw new RedisStoreError('REDIS_STORE_ERR_BAD_REPLY', `route:${rule.name}`, String(error), { cause: error });
    }
    return { outcome, saturated: decided.saturated };
  }

  /**
   * The decision's call: the member set named by version, stored first when Redis does not know it (one more call),
   * with the engine figures and the backlog clears waiting in this cell. Clears a failed decision carried are put
   * back, whatever failed (applying one twice is harmless).
   */
  private async callRoute(
    call: Omit<RouteCall, 'storeMembers' | 'engineFigures' | 'backlogClears'>,
    members: PoolMembers,
    input: AtomicRouteInput,
  ): Promise<Extract<RouteReply, { kind: 'decided' }>> {
    // Carried by both tries: a call answered members-unknown changed nothing.
    const backlogClears = this.backlogClears.take(call.keys.prefix);
    const send = async (storeMembers: boolean): Promise<RouteReply> => {
      const engineFigures = members.engineFiguresToSend(input.backends, input.engine, storeMembers);
      try {
        return await runRoute(this.options.redis, this.routeSettings(), {
          ...call,
          storeMembers,
          engineFigures,
          backlogClears: backlogClears.argument,
        });
      } catch (error) {
        members.unsend(engineFigures);
        throw error;
      }
    };
    try {
      let reply = await send(!members.storedHere);
      if (reply.kind === 'members-unknown') reply = await send(true);
      if (reply.kind === 'members-unknown') {
        throw new RedisStoreError(
          'REDIS_STORE_ERR_BAD_REPLY',
          'route',
          'route.lua did not keep the member set it was given',
        );
      }
      return reply;
    } catch (error) {
      this.backlogClears.restore(call.keys, backlogClears);
      throw error;
    }
  }

  private routeSettings() {
    return {
      nowMs: this.options.nowMs(),
      blockIdleTtlMs: this.options.blockIdleTtlMs,
      maxBlocksPerPool: this.options.maxBlocksPerPool,
      leaseTtlMs: this.options.leaseTtlMs,
    };
  }

  private membersOf(cellPrefix: string): PoolMembers {
    let members = this.members.get(cellPrefix);
    if (members === undefined) {
      members = new PoolMembers();
      this.members.set(cellPrefix, members);
    }
    return members;
  }

  renew(pool: string, backendId: BackendId, leaseId: string): Promise<boolean> {
    return this.leases.renew(pool, backendId, leaseId);
  }

  async prefillDone(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    heldBlocks: readonly BlockHash[] = [],
  ): Promise<void> {
    if (heldBlocks.length > 0) this.requireIndexableId(backendId);
    return this.leases.prefillDone(pool, backendId, leaseId, heldBlocks);
  }

  /** Queued for this replica's next decision in the lease's cell, or a call of its own (BacklogClears). */
  async clearBacklog(pool: string, backendId: BackendId, leaseId: string): Promise<void> {
    this.backlogClears.add(this.layout.keys(pool, this.layout.cellOf(backendId)), backendId, leaseId);
  }

  /** Sends the backlog clears waiting now, in one call per cell (a replica's shutdown; tests). */
  sendBacklogClears(): Promise<void> {
    return this.backlogClears.flush();
  }

  /** Backlog clears waiting for a decision to carry them or for their own call. */
  get backlogClearsWaiting(): number {
    return this.backlogClears.size;
  }

  async release(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    heldBlocks: readonly BlockHash[] = [],
  ): Promise<void> {
    if (heldBlocks.length > 0) this.requireIndexableId(backendId);
    this.backlogClears.drop(this.layout.keys(pool, this.layout.cellOf(backendId)).prefix, leaseId);
    return this.leases.release(pool, backendId, leaseId, heldBlocks);
  }

  async forgetBackend(pool: string, backendId: BackendId): Promise<void> {
    await this.leases.forgetBackend(pool, backendId);
    // Its engine figures went with it: the next decision sends them again.
    this.members.get(this.layout.keys(pool, this.layout.cellOf(backendId)).prefix)?.forgetSent(backendId);
  }

  async learn(pool: string, input: LearnInput): Promise<LearnReply> {
    if (input.correction !== null) this.requireIndexableId(input.correction.backendId);
    return learnInPool(this.learning, pool, input);
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
   * The owner index delimits ids with control characters (src/lua/lib/owner-index.lua), and member sets
   * with tabs and LFs; an id never holds one anyway, since it travels in the X-Router-Backend header.
   * Checked once per id.
   */
  private requireIndexableId(id: BackendId): void {
    if (this.indexableIds.has(id)) return;
    if (/[\u0000-\u001f\u007f]/.test(id))
      throw new RangeError(`backend id must not contain control characters: ${JSON.stringify(id)}`);
    this.indexableIds.add(id);
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
  if (!Number.isSafeInteger(value) || value < min)
    throw new RangeError(`${name} must be an integer >= ${min}, got ${value}`);
}
