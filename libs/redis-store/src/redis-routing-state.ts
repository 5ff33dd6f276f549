import {
  CALIBRATED_PARAMS,
  DEFAULT_MAX_RETENTION_MS,
  DEFAULT_MIN_EVIDENCE_AGE_MS,
  engineReportedFreeTokens,
  engineWaiting,
  estimatePrefillTokens,
  rendezvousOrder,
  hashString53,
  type AtomicOutcome,
  type AtomicRouteInput,
  type BackendInfo,
  type DecisionScope,
  type RoutingRequest,
  type AtomicRule,
  type BackendId,
  type BlockHash,
  type Candidate,
  type CostLine,
  type CostReason,
  type CalibratedParam,
  type LearnInput,
  type LearnReply,
  type RoutingSnapshot,
  type RoutingStateStore,
} from '@kvroute/routing';
import { blockHashArg, DEFAULT_KEY_NAMESPACE, MAX_POOL_CELLS, packBlockHashes, poolKeys, type PoolKeys } from './keys';
import { backendCell, cellKeyOf, DEFAULT_CELL_KEY_BYTES, requestCellOrder } from './pool-cells';
import { RedisStoreError } from './redis-store-error';
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
}

/**
 * Who takes part in a big pool's decision (route.lua ARGV[17]): the backends with entries on the
 * chain's deepest recorded blocks (found by the script in the owner index), and the caller's picks:
 * the first of the request's rendezvous order (where a cold prompt goes), the least loaded as this
 * replica last saw them (its view is refreshed by every reply), and a few more spread by the lease id
 * (so every backend's load is read now and then). The rule then runs over them as over a whole pool.
 */
export const DEFAULT_SHORTLIST = { above: 32, owners: 8, rendezvous: 4, leastLoaded: 4, spread: 2 } as const;

/**
 * New blocks one script call records at most (~1 ms of Redis on the machines we measure; a 2,048-block
 * chain recorded in one call took 2–4 ms of CPU and up to ~13 ms by SLOWLOG's clock on a loaded host).
 * Prompts up to 32 k tokens (at 256-byte blocks) are recorded in the call that takes the lease or
 * completes the prefill; a longer one takes one more call per 512 blocks.
 */
export const RECORD_BLOCKS_PER_CALL = 512;

/**
 * Routing state shared by every router replica, in Redis: the same behaviour as InMemoryRoutingState
 * (prefix-closed ownership, binary-search match, leases that carry pending prefill tokens), with each
 * operation one Lua script on the pool's hash slot. `routeAtomically` is one script (route.lua) that
 * evaluates a policy's atomic rule (cacheaware's cost, leastloaded): figures, choice, lease and
 * ownership in one round trip, and the rule's outcome back, from which the policy builds its decision
 * (`decide` in @kvroute/routing); other policies snapshot, choose, then reserve. The store runs no policy.
 * Every script takes the request's block hashes as one packed argument and works in bounded chunks,
 * so any number of blocks is safe (the router caps them: maxRoutedBlocks); a script records at most
 * RECORD_BLOCKS_PER_CALL new blocks, and the rest of a longer chain goes in further calls
 * (record-ownership.lua), so no call keeps Redis busy for long.
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
  /** cell → pool → its keys. */
  private readonly keysByCell: Map<string, PoolKeys>[] = [];
  /** Backend ids already checked by requireIndexableId (a fleet has a handful). */
  private readonly indexableIds = new Set<BackendId>();
  /** pool → backend → in-flight count last seen (see inflightCounts). */
  private readonly inflightSeen = new Map<string, Map<BackendId, number>>();
  private readonly cells: number;
  /** backend id → its cell (a function of the id and `cells`; a fleet has a bounded number of ids). */
  private readonly cellByBackend = new Map<BackendId, number>();

  constructor(private readonly options: RedisRoutingStateOptions) {
    this.redis = options.redis;
    this.namespace = options.keyNamespace ?? DEFAULT_KEY_NAMESPACE;
    requireInteger('maxBlocksPerPool', options.maxBlocksPerPool, 1);
    requireInteger('blockIdleTtlMs', options.blockIdleTtlMs, 0);
    requireInteger('leaseTtlMs', options.leaseTtlMs, 1);
    this.cells = options.poolCells ?? 1;
    requireInteger('poolCells', this.cells, 1);
    if (this.cells > MAX_POOL_CELLS)
      throw new RangeError(`poolCells must be at most ${MAX_POOL_CELLS}, got ${this.cells}`);
  }

  /** One read per cell the backends are in (one in a pool that is not split). */
  async snapshot(
    pool: string,
    backends: readonly BackendId[],
    blockHashes: readonly BlockHash[],
  ): Promise<RoutingSnapshot> {
    backends.forEach((backend) => this.requireIndexableId(backend));
    const snapshot = {
      matchBlocks: new Map<BackendId, number>(),
      matchRecordedAtMs: new Map<BackendId, number>(),
      inflight: new Map<BackendId, number>(),
      pendingPrefillTokens: new Map<BackendId, number>(),
    };
    if (backends.length === 0) return snapshot;
    if (this.cells === 1) {
      await this.snapshotCell(pool, 0, backends, blockHashes, snapshot);
      return snapshot;
    }
    const byCell = this.splitByCell(backends, (backend) => backend);
    await Promise.all(
      byCell.map((members, cell) =>
        members.length === 0 ? undefined : this.snapshotCell(pool, cell, members, blockHashes, snapshot),
      ),
    );
    return snapshot;
  }

  /** snapshot.lua on one cell's keys: the figures of `backends` (all of that cell) into `into`. */
  private async snapshotCell(
    pool: string,
    cell: number,
    backends: readonly BackendId[],
    blockHashes: readonly BlockHash[],
    into: {
      matchBlocks: Map<BackendId, number>;
      matchRecordedAtMs: Map<BackendId, number>;
      inflight: Map<BackendId, number>;
      pendingPrefillTokens: Map<BackendId, number>;
    },
  ): Promise<void> {
    const { matchBlocks, matchRecordedAtMs, inflight, pendingPrefillTokens } = into;
    const keys = this.keys(pool, cell);
    const reply = await runScript(
      this.redis,
      SCRIPTS.snapshot,
      [keys.forgotten, keys.leaseDeadlines, keys.inflight, keys.pending, keys.ownersNew, keys.ownersOld],
      ([this.options.nowMs(), keys.prefix, packBlockHashes(blockHashes)] as (string | number)[]).concat(backends),
    );
    const values = integerArrayReply(SCRIPTS.snapshot, reply, 4 * backends.length);
    backends.forEach((backend, index) => {
      const count = values[4 * index] as number;
      const depth = values[4 * index + 2] as number;
      const recordedAt = values[4 * index + 3] as number;
      inflight.set(backend, count);
      pendingPrefillTokens.set(backend, values[4 * index + 1] as number);
      if (depth > 0) matchBlocks.set(backend, depth);
      if (depth > 0 && recordedAt >= 0) matchRecordedAtMs.set(backend, recordedAt);
      this.sawInflight(pool, backend, count);
    });
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
    const reply = await this.route(pool, this.cellOf(backendId), {
      rule: { kind: 'fixed', maxInflight },
      candidates: [{ id: backendId, weight: 1, rank: 0, waiting: 0, freeTokens: -1 }],
      leaseId,
      blockHashes,
      request: { textBytes: 0, blockSizeBytes: 0, maxTokens: null },
      prefillTokens: Math.max(0, Math.round(prefillTokens)),
      record: blockHashes.length > 0,
      shortlist: null,
    });
    if (reply.chosen === 1) await this.recordRestOfTaken(pool, backendId, blockHashes, reply.recordedTo);
    return reply.chosen === 1;
  }

  /**
   * One decision: route.lua in the request's cell (the pool's only one when it is not split). When
   * every backend taking part in that cell was saturated (the cost rule lifted its valve) and another
   * cell has backends, the next cell decides too and the lease not used is released (not awaited): a
   * second round trip only under overload. If that second call fails, the first decision stands.
   * A policy that records at routing has its ownership recorded only for the decision kept (one call
   * more), never for a backend that was passed over.
   */
  async routeAtomically(input: AtomicRouteInput): Promise<AtomicOutcome> {
    if (this.cells === 1) return this.routeInCell(input, 0);
    const { members, order } = this.cellsFor(input.request, input.backends);
    const [first, next] = order;
    if (first === undefined) throw new RangeError('routeAtomically needs at least one backend');
    // Only the cost rule spills: it records after the choice is final.
    const recordAfter = input.recordOwnership && input.rule.kind === 'cost' && input.blockHashes.length > 0;
    const inCell = (cell: number): Promise<AtomicOutcome> =>
      this.routeInCell(
        { ...input, backends: members[cell] as CellMembers, recordOwnership: input.recordOwnership && !recordAfter },
        cell,
      );
    let kept = await inCell(first);
    if (kept.kind === 'cost' && kept.valveLifted && next !== undefined) {
      this.options.onCellSpill?.(input.pool);
      const spilled = await inCell(next).catch(() => null);
      if (spilled !== null) {
        const [better, dropped] = spilled.kind === 'cost' && !spilled.valveLifted ? [spilled, kept] : [kept, spilled];
        const droppedBackend = dropped.candidates[dropped.chosen]?.backend.id;
        if (droppedBackend !== undefined)
          this.release(input.pool, droppedBackend, input.leaseId).catch(() => undefined);
        kept = better;
      }
    }
    const keptBackend = kept.candidates[kept.chosen]?.backend.id;
    if (recordAfter && keptBackend !== undefined)
      await this.recordRestOfTaken(input.pool, keptBackend, input.blockHashes, 0);
    return kept;
  }

  /** The request's cell and its eligible backends: what routeAtomically decides over first (for dry runs). */
  decisionScope(_pool: string, request: RoutingRequest, backends: readonly BackendInfo[]): DecisionScope {
    if (this.cells === 1) return { backends, cell: null };
    const { members, order } = this.cellsFor(request, backends);
    const first = order[0];
    return first === undefined ? { backends, cell: null } : { backends: members[first] as CellMembers, cell: first };
  }

  /** `backends` split by cell, and the cells in the order the request tries them. */
  private cellsFor(
    request: RoutingRequest,
    backends: readonly BackendInfo[],
  ): { members: CellMembers[]; order: number[] } {
    const members = this.splitByCell(backends, (backend) => backend.id);
    return {
      members,
      order: requestCellOrder(
        cellKeyOf(request, this.options.cellKeyBytes ?? DEFAULT_CELL_KEY_BYTES),
        members.map((cell) => cell.length),
      ),
    };
  }

  /** routeAtomically within one cell: `input.backends` are all of cell `cell`. */
  private async routeInCell(input: AtomicRouteInput, cell: number): Promise<AtomicOutcome> {
    const { request, backends, rule } = input;
    const ranks = new Map<BackendId, number>();
    // Indices of `backends` in the request's rendezvous order (cost rule only).
    let order: readonly number[] = [];
    if (rule.kind === 'cost') {
      const stubs = backends.map((backend) => ({ backend, inflight: 0, matchBlocks: 0, pendingPrefillTokens: 0 }));
      order = rendezvousOrder(request.headHash, stubs);
      for (const [rank, index] of order.entries()) ranks.set((backends[index] as { id: string }).id, rank);
    }
    // The engine terms' figures come from the policy's own functions, so the rule reads the integers `choose` would.
    const reply = await this.route(input.pool, cell, {
      rule,
      candidates: backends.map((backend) => {
        const engine = input.engine?.get(backend.id) ?? null;
        return {
          id: backend.id,
          weight: backend.weight,
          rank: ranks.get(backend.id) ?? 0,
          waiting: engineWaiting(engine),
          freeTokens: engineReportedFreeTokens(engine),
        };
      }),
      leaseId: input.leaseId,
      blockHashes: input.blockHashes,
      request,
      // Least-loaded reads no depths: its lease carries the whole prompt, as on the snapshot path.
      prefillTokens: estimatePrefillTokens(request, 0),
      record: input.recordOwnership && input.blockHashes.length > 0,
      shortlist:
        rule.kind === 'cost' && backends.length > (this.options.shortlistAbove ?? DEFAULT_SHORTLIST.above)
          ? this.shortlistPicks(input.pool, backends, order, input.leaseId)
          : null,
    });
    // The participants, in configuration order: every backend, or the shortlist's.
    const candidates: Candidate[] = reply.participants.map((index, participant) => {
      const backend = backends[index] as (typeof backends)[number];
      return { backend, ...(reply.figures[participant] as Figures), engine: input.engine?.get(backend.id) ?? null };
    });
    const chosen = reply.chosen - 1;
    if (input.recordOwnership)
      await this.recordRestOfTaken(
        input.pool,
        (candidates[chosen] as Candidate).backend.id,
        input.blockHashes,
        reply.recordedTo,
      );
    if (rule.kind === 'least-loaded') return { kind: 'least-loaded', candidates, chosen, reason: 'least-loaded' };
    return {
      kind: 'cost',
      candidates,
      chosen,
      reason: costReason(reply.reason),
      valveLifted: reply.valveLifted,
      lines: costLines(reply.lines, candidates.length),
    };
  }

  /**
   * The caller's part of a big pool's shortlist (DEFAULT_SHORTLIST), as indices into `backends`: the
   * first of the rendezvous order, the least loaded by this replica's last view of the pool (backends
   * it has not seen yet count as idle), and a few spread by the lease id. The script adds the deepest
   * owners. O(backends) here, in the router, where it is spread over replicas; O(1) in Redis.
   */
  private shortlistPicks(
    pool: string,
    backends: readonly { readonly id: BackendId }[],
    order: readonly number[],
    leaseId: string,
  ): { owners: number; picks: number[] } {
    const picks = new Set<number>(order.slice(0, DEFAULT_SHORTLIST.rendezvous));
    const seen = this.inflightSeen.get(pool);
    const byLoad = backends
      .map((backend, index) => ({ index, inflight: seen?.get(backend.id) ?? 0 }))
      .sort((a, b) => a.inflight - b.inflight || a.index - b.index);
    let added = 0;
    for (const { index } of byLoad) {
      if (added === DEFAULT_SHORTLIST.leastLoaded) break;
      if (!picks.has(index)) {
        picks.add(index);
        added++;
      }
    }
    // Spread by the lease id (random per request, never the client's): every backend's load is read now and then.
    let spread = hashString53(leaseId);
    for (let count = 0; count < DEFAULT_SHORTLIST.spread; count++) {
      picks.add(spread % backends.length);
      spread = Math.floor(spread / backends.length);
    }
    return { owners: DEFAULT_SHORTLIST.owners, picks: [...picks] };
  }

  /** Runs route.lua: one decision (or, for 'fixed', one conditional reservation) in one round trip. */
  private async route(pool: string, cell: number, call: RouteCall): Promise<RouteReply> {
    for (const candidate of call.candidates) this.requireIndexableId(candidate.id);
    const keys = this.keys(pool, cell);
    const { rule, request } = call;
    const args: (string | number)[] = [
      this.options.nowMs(),
      keys.prefix,
      this.options.blockIdleTtlMs,
      this.options.maxBlocksPerPool,
      call.leaseId,
      this.options.leaseTtlMs,
      call.record ? RECORD_BLOCKS_PER_CALL : 0,
      rule.kind,
      rule.kind === 'cost' ? rule.packedParams : '',
      request.textBytes,
      request.blockSizeBytes,
      request.maxTokens ?? 0,
      call.prefillTokens,
      rule.kind === 'fixed' ? rule.maxInflight : 0,
      packBlockHashes(call.blockHashes),
    ];
    const [records, starts] = packCandidates(call.candidates);
    args.push(
      records,
      call.shortlist === null
        ? ''
        : `${call.shortlist.owners};${call.shortlist.picks.map((index) => index + 1).join(',')}`,
      starts,
    );
    const reply = await runScript(
      this.redis,
      SCRIPTS.route,
      [
        keys.forgotten,
        keys.leaseDeadlines,
        keys.inflight,
        keys.pending,
        keys.ownersNew,
        keys.ownersOld,
        keys.generation,
      ],
      args,
      'buffers',
    );
    const decoded = decodeRouteReply(reply, call.candidates.length);
    const idOf = (participant: number): BackendId =>
      (call.candidates[decoded.participants[participant] as number] as RouteCandidate).id;
    decoded.figures.forEach((figures, participant) => this.sawInflight(pool, idOf(participant), figures.inflight));
    if (decoded.chosen > 0) this.sawInflight(pool, idOf(decoded.chosen - 1), decoded.inflightAfter);
    return decoded;
  }

  async renew(pool: string, backendId: BackendId, leaseId: string): Promise<boolean> {
    const keys = this.keys(pool, this.cellOf(backendId));
    const reply = await runScript(
      this.redis,
      SCRIPTS.renew,
      [keys.prefill(backendId), keys.leaseDeadlines, keys.inflight, keys.pending],
      [this.options.nowMs(), leaseId, this.options.leaseTtlMs, keys.prefix, backendId],
    );
    return integerReply(SCRIPTS.renew, reply) === 1;
  }

  async prefillDone(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    heldBlocks: readonly BlockHash[] = [],
  ): Promise<void> {
    if (heldBlocks.length > 0) this.requireIndexableId(backendId);
    const keys = this.keys(pool, this.cellOf(backendId));
    const reply = await runScript(
      this.redis,
      SCRIPTS.prefillDone,
      [keys.prefill(backendId), keys.pending, keys.forgotten, keys.ownersNew, keys.ownersOld, keys.generation],
      [
        leaseId,
        backendId,
        this.options.nowMs(),
        this.options.blockIdleTtlMs,
        this.options.maxBlocksPerPool,
        packBlockHashes(heldBlocks),
        RECORD_BLOCKS_PER_CALL,
      ],
    );
    const [, recordedTo] = integerArrayReply(SCRIPTS.prefillDone, reply, 2) as [number, number];
    await this.recordRest(pool, backendId, heldBlocks, recordedTo);
  }

  /**
   * recordRest once the lease is taken: the decision stands whatever happens to the recording (an
   * owner is a hint), so a failed call costs the next request's match, never this request's lease —
   * which a rejection here would strand in Redis until its TTL while the caller routed elsewhere.
   */
  private async recordRestOfTaken(
    pool: string,
    backendId: BackendId,
    blockHashes: readonly BlockHash[],
    heldTo: number,
  ): Promise<void> {
    await this.recordRest(pool, backendId, blockHashes, heldTo).catch(() => undefined);
  }

  /**
   * Records the rest of a chain a script left over (it records at most RECORD_BLOCKS_PER_CALL new
   * blocks), one bounded call at a time: each sends the next blocks and the one before them, which
   * the backend must still hold (else a turn or a forget came in between and the chain starts over:
   * bounded all the same).
   */
  private async recordRest(
    pool: string,
    backendId: BackendId,
    blockHashes: readonly BlockHash[],
    heldTo: number,
  ): Promise<void> {
    const keys = this.keys(pool, this.cellOf(backendId));
    const maxCalls = 2 * Math.ceil(blockHashes.length / RECORD_BLOCKS_PER_CALL) + 2;
    let held = heldTo;
    for (let calls = 0; held < blockHashes.length && calls < maxCalls; calls++) {
      const anchor = held > 0 ? blockHashArg(blockHashes[held - 1] as BlockHash) : '';
      const next = blockHashes.slice(held, held + RECORD_BLOCKS_PER_CALL);
      const reply = await runScript(
        this.redis,
        SCRIPTS.recordOwnership,
        [keys.forgotten, keys.ownersNew, keys.ownersOld, keys.generation],
        [
          backendId,
          this.options.nowMs(),
          this.options.blockIdleTtlMs,
          this.options.maxBlocksPerPool,
          anchor,
          packBlockHashes(next),
          RECORD_BLOCKS_PER_CALL,
        ],
      );
      const recorded = integerReply(SCRIPTS.recordOwnership, reply);
      held = recorded < 0 ? 0 : held + recorded;
    }
  }

  async release(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    heldBlocks: readonly BlockHash[] = [],
  ): Promise<void> {
    if (heldBlocks.length > 0) this.requireIndexableId(backendId);
    const keys = this.keys(pool, this.cellOf(backendId));
    const reply = await runScript(
      this.redis,
      SCRIPTS.release,
      [
        keys.prefill(backendId),
        keys.leaseDeadlines,
        keys.inflight,
        keys.pending,
        keys.forgotten,
        keys.ownersNew,
        keys.ownersOld,
        keys.generation,
      ],
      [
        leaseId,
        backendId,
        this.options.nowMs(),
        this.options.blockIdleTtlMs,
        this.options.maxBlocksPerPool,
        packBlockHashes(heldBlocks),
        RECORD_BLOCKS_PER_CALL,
      ],
    );
    const [, count, recordedTo] = integerArrayReply(SCRIPTS.release, reply, 3) as [number, number, number];
    this.sawInflight(pool, backendId, count);
    // The lease is gone whatever happens to the rest of the chain (an owner is a hint).
    if (heldBlocks.length > 0) await this.recordRestOfTaken(pool, backendId, heldBlocks, recordedTo);
  }

  async forgetBackend(pool: string, backendId: BackendId): Promise<void> {
    const reply = await runScript(
      this.redis,
      SCRIPTS.forgetBackend,
      [this.keys(pool, this.cellOf(backendId)).forgotten],
      [this.options.nowMs(), backendId, this.options.blockIdleTtlMs],
    );
    integerReply(SCRIPTS.forgetBackend, reply);
  }

  /**
   * learn.lua: a correction and a calibration batch in one call (see RoutingStateStore.learn). In a
   * split pool the correction goes to its backend's cell and the calibration to cell 0 (one set of
   * learned figures per pool): two calls when those differ.
   */
  async learn(pool: string, input: LearnInput): Promise<LearnReply> {
    const correction = input.correction;
    if (correction !== null) this.requireIndexableId(correction.backendId);
    const batch = Object.entries(input.calibration ?? {})
      .filter(([, figures]) => figures.samples > 0 && Number.isFinite(figures.sum))
      .map(([name, figures]) => `${name},${figures.samples},${figures.sum}`)
      .join(';');
    const correctionCell = correction === null ? 0 : this.cellOf(correction.backendId);
    if (correctionCell === 0 || batch === '') return this.learnInCell(pool, correctionCell, correction, batch);
    const [corrected, calibrated] = await Promise.all([
      this.learnInCell(pool, correctionCell, correction, ''),
      this.learnInCell(pool, 0, null, batch),
    ]);
    return { retentionMs: corrected.retentionMs, calibration: calibrated.calibration };
  }

  private async learnInCell(
    pool: string,
    cell: number,
    correction: LearnInput['correction'],
    batch: string,
  ): Promise<LearnReply> {
    const keys = this.keys(pool, cell);
    const minEvidenceAgeMs = this.options.minEvidenceAgeMs ?? DEFAULT_MIN_EVIDENCE_AGE_MS;
    const maxRetentionMs =
      this.options.maxRetentionMs ??
      (this.options.blockIdleTtlMs > 0 ? this.options.blockIdleTtlMs : DEFAULT_MAX_RETENTION_MS);
    const reply = await runScript(
      this.redis,
      SCRIPTS.learn,
      [keys.forgotten, keys.ownersNew, keys.ownersOld, keys.generation, keys.calibration],
      [
        this.options.nowMs(),
        correction?.backendId ?? '',
        this.options.blockIdleTtlMs,
        this.options.maxBlocksPerPool,
        correction === null ? '' : correction.outcome === 'overpredicted' ? 'over' : 'under',
        correction === null ? '' : packBlockHashes(correction.blockHashes),
        correction?.matchRecordedAtMs ?? -1,
        correction?.routedAtMs ?? 0,
        minEvidenceAgeMs,
        RECORD_BLOCKS_PER_CALL,
        batch,
        maxRetentionMs,
      ],
    );
    if (
      !Array.isArray(reply) ||
      reply.length < 2 ||
      (reply.length - 2) % 3 !== 0 ||
      !Number.isInteger(reply[0]) ||
      !Number.isInteger(reply[1])
    ) {
      throw new RedisStoreError(
        'REDIS_STORE_ERR_BAD_REPLY',
        SCRIPTS.learn.name,
        `learn.lua returned ${JSON.stringify(reply)?.slice(0, 120)}`,
      );
    }
    const calibration: Partial<Record<CalibratedParam, { value: number; samples: number }>> = {};
    for (let at = 2; at < reply.length; at += 3) {
      const name = String(reply[at]) as CalibratedParam;
      const value = Number(String(reply[at + 1]));
      if (CALIBRATED_PARAMS.includes(name) && Number.isFinite(value))
        calibration[name] = { value, samples: Number(reply[at + 2]) };
    }
    const recordedTo = reply[1] as number;
    if (correction !== null && recordedTo > 0)
      await this.recordRestOfTaken(pool, correction.backendId, correction.blockHashes, recordedTo);
    return { retentionMs: (reply[0] as number) < 0 ? null : (reply[0] as number), calibration };
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
    if (/[\u0000-\u001f\u007f]/.test(id))
      throw new RangeError(`backend id must not contain control characters: ${JSON.stringify(id)}`);
    this.indexableIds.add(id);
  }

  private keys(pool: string, cell: number): PoolKeys {
    const known = (this.keysByCell[cell] ??= new Map());
    let keys = known.get(pool);
    if (!keys) {
      keys = poolKeys(pool, this.namespace, { index: cell, count: this.cells });
      known.set(pool, keys);
    }
    return keys;
  }

  /** `items` per cell (index = cell; empty for a cell none is in), by their backend's cell. */
  private splitByCell<T>(items: readonly T[], idOf: (item: T) => BackendId): T[][] {
    const byCell: T[][] = Array.from({ length: this.cells }, () => []);
    for (const item of items) (byCell[this.cellOf(idOf(item))] as T[]).push(item);
    return byCell;
  }

  /** The cell holding a backend's leases and ownership (always 0 in a pool that is not split). */
  private cellOf(backendId: BackendId): number {
    if (this.cells === 1) return 0;
    let cell = this.cellByBackend.get(backendId);
    if (cell === undefined) {
      cell = backendCell(backendId, this.cells);
      this.cellByBackend.set(backendId, cell);
    }
    return cell;
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

/** The eligible backends of one cell (AtomicRouteInput.backends, split by cell). */
type CellMembers = AtomicRouteInput['backends'][number][];

/** A candidate as route.lua takes it: engine figures from the health poller (0 and -1 when unknown). */
interface RouteCandidate {
  readonly id: BackendId;
  readonly weight: number;
  readonly rank: number;
  readonly waiting: number;
  readonly freeTokens: number;
}

/** One route.lua call: a policy's atomic rule, or 'fixed' (a lease on the one candidate, conditional on its in-flight count). */
interface RouteCall {
  readonly rule: AtomicRule | { readonly kind: 'fixed'; readonly maxInflight: number };
  readonly candidates: readonly RouteCandidate[];
  readonly leaseId: string;
  readonly blockHashes: readonly BlockHash[];
  readonly request: { readonly textBytes: number; readonly blockSizeBytes: number; readonly maxTokens?: number | null };
  /** The lease's prefill tokens, for the rules that read no depths ('fixed', 'least-loaded'). */
  readonly prefillTokens: number;
  readonly record: boolean;
  /** Only these candidates (0-based) and `owners` deepest owners take part; null: every candidate. */
  readonly shortlist: { readonly owners: number; readonly picks: readonly number[] } | null;
}

/** A candidate's figures as route.lua read them. */
type Figures = Pick<Candidate, 'inflight' | 'matchBlocks' | 'pendingPrefillTokens' | 'matchRecordedAtMs'>;

const ROUTE_REPLY_HEADER = 7;

interface RouteReply {
  /** 1-based; 0 = a 'fixed' conflict. */
  readonly chosen: number;
  readonly inflightAfter: number;
  readonly reason: string;
  readonly valveLifted: boolean;
  /** The cost rule's packed cost lines (empty for the other rules). */
  readonly lines: Buffer;
  /** When recording: the leading blocks the chosen backend now holds in the current generation. */
  readonly recordedTo: number;
  /** The candidates (0-based, ascending) that took part; `chosen` and `figures` are theirs. */
  readonly participants: readonly number[];
  readonly figures: readonly Figures[];
}

/** route.lua's reply (see its header): 7 header fields (the last: which candidates took part), then 4 integers per participant. */
function decodeRouteReply(reply: unknown, candidateTotal: number): RouteReply {
  const bad = (expected: string) =>
    new RedisStoreError(
      'REDIS_STORE_ERR_BAD_REPLY',
      SCRIPTS.route.name,
      `route.lua returned an unexpected reply: ${expected}`,
    );
  if (!Array.isArray(reply) || reply.length < ROUTE_REPLY_HEADER)
    throw bad(`expected at least ${ROUTE_REPLY_HEADER} values`);
  const [chosen, inflightAfter, reason, valveLifted, lines, recordedTo, positions] = reply as unknown[];
  if (
    !Number.isInteger(chosen) ||
    !Number.isInteger(inflightAfter) ||
    !Number.isInteger(valveLifted) ||
    !Number.isInteger(recordedTo)
  )
    throw bad('non-integer header');
  if (!Buffer.isBuffer(reason) || !Buffer.isBuffer(lines) || !Buffer.isBuffer(positions))
    throw bad('reason, lines and participants must be strings');
  const participants =
    positions.length === 0
      ? Array.from({ length: candidateTotal }, (_, index) => index)
      : positions
          .toString('latin1')
          .split(',')
          .map((position) => Number(position) - 1);
  if (participants.some((index) => !Number.isInteger(index) || index < 0 || index >= candidateTotal))
    throw bad(`participants ${positions.toString('latin1').slice(0, 80)} of ${candidateTotal}`);
  const candidateCount = participants.length;
  if (reply.length !== ROUTE_REPLY_HEADER + 4 * candidateCount)
    throw bad(`expected ${ROUTE_REPLY_HEADER + 4 * candidateCount} values`);
  const figures: Figures[] = [];
  for (let index = 0; index < candidateCount; index++) {
    const at = ROUTE_REPLY_HEADER + 4 * index;
    const [inflight, pendingPrefillTokens, matchBlocks, recordedAt] = [
      reply[at],
      reply[at + 1],
      reply[at + 2],
      reply[at + 3],
    ] as unknown[];
    if (
      !Number.isInteger(inflight) ||
      !Number.isInteger(pendingPrefillTokens) ||
      !Number.isInteger(matchBlocks) ||
      !Number.isInteger(recordedAt)
    ) {
      throw bad(`non-integer figures of participant ${index + 1}`);
    }
    const matchRecordedAtMs =
      (matchBlocks as number) > 0 && (recordedAt as number) >= 0 ? (recordedAt as number) : null;
    figures.push({
      inflight: inflight as number,
      pendingPrefillTokens: pendingPrefillTokens as number,
      matchBlocks: matchBlocks as number,
      matchRecordedAtMs,
    });
  }
  if ((chosen as number) < 0 || (chosen as number) > candidateCount)
    throw bad(`chosen ${String(chosen)} of ${candidateCount}`);
  return {
    chosen: chosen as number,
    inflightAfter: inflightAfter as number,
    reason: reason.toString('utf8'),
    valveLifted: valveLifted === 1,
    lines,
    recordedTo: recordedTo as number,
    participants,
    figures,
  };
}

const COST_REASONS: Readonly<Record<CostReason, true>> = {
  'prefix-affinity': true,
  'spilled-from-saturated': true,
  'least-loaded': true,
  'load-guard': true,
  'cold-hash': true,
};

function costReason(reason: string): CostReason {
  if (!Object.hasOwn(COST_REASONS, reason))
    throw new RedisStoreError(
      'REDIS_STORE_ERR_BAD_REPLY',
      SCRIPTS.route.name,
      `route.lua returned an unknown cost reason ${JSON.stringify(reason)}`,
    );
  return reason as CostReason;
}

/** Doubles per candidate in route.lua's packed cost lines (lib/choose-backend.lua packCostLines), in this order. */
const COST_LINE_DOUBLES = 9;
const EXCLUSIONS: readonly CostLine['excluded'][] = [undefined, 'saturated', 'load-spread'];

function costLines(packed: Buffer, candidateCount: number): CostLine[] {
  if (packed.length !== 8 * COST_LINE_DOUBLES * candidateCount) {
    throw new RedisStoreError(
      'REDIS_STORE_ERR_BAD_REPLY',
      SCRIPTS.route.name,
      `route.lua returned ${packed.length} bytes of cost lines for ${candidateCount} candidates`,
    );
  }
  const lines: CostLine[] = [];
  for (let index = 0, at = 0; index < candidateCount; index++, at += 8 * COST_LINE_DOUBLES) {
    const read = (field: number): number => packed.readDoubleLE(at + 8 * field);
    const excluded = EXCLUSIONS[read(6)];
    const hashRank = read(7);
    const line: CostLine = {
      prefillMs: read(0),
      backlogMs: read(1),
      queueMs: read(2),
      waitingMs: read(3),
      kvMs: read(4),
      totalMs: read(5),
    };
    lines.push({
      ...line,
      ...(excluded === undefined ? {} : { excluded }),
      ...(hashRank < 0 ? {} : { cold: { hashRank, bound: read(8) } }),
    });
  }
  return lines;
}

function requireInteger(name: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min)
    throw new RangeError(`${name} must be an integer >= ${min}, got ${value}`);
}

/** Width of one record start in route.lua's ARGV[18]: a position below 10^10. */
const START_WIDTH = 10;

/**
 * The candidates as route.lua takes them (ARGV[16], ARGV[18]): one record per candidate, in
 * configuration order, `<id>\t<weight> <rank> <waiting> <free tokens>` between LFs (numbers as
 * JavaScript prints them: Lua's tonumber reads back the same doubles), and where each record starts
 * (1-based, as Lua counts: UTF-8 byte offsets) followed by the end's position, START_WIDTH characters
 * each. The script reads only the participants' records (one pattern match each) and finds an owner's
 * record by one plain search for `\n<id>\t`. requireIndexableId has refused ids with control
 * characters (a tab or LF inside one would shift everything after it). Text, as every argument: a
 * Buffer argument makes ioredis write the whole command through buffers (~+10 % router instructions).
 * ~30 bytes per candidate plus the start, where fixed-width figures took 106: at 1,024 backends the
 * arguments were ~125 KB a call, and Redis spends ~1.3 µs per KB receiving them.
 */
function packCandidates(candidates: readonly RouteCandidate[]): [string, string] {
  let records = '\n';
  let starts = '';
  let at = 2; // after the opening LF, 1-based
  for (const candidate of candidates) {
    const record = `${candidate.id}\t${candidate.weight} ${candidate.rank} ${candidate.waiting} ${candidate.freeTokens}\n`;
    starts += fixedWidth(at, START_WIDTH);
    at += Buffer.byteLength(record, 'utf8');
    records += record;
  }
  starts += fixedWidth(at, START_WIDTH);
  return [records, starts];
}

function fixedWidth(value: number, width: number): string {
  const text = String(value);
  if (text.length > width) throw new RangeError(`${text} does not fit ${width} characters`);
  return text.padStart(width);
}
