import type { BackendId, BlockHash } from '../types';
import {
  correctedRetention,
  mergeCalibration,
  type CalibratedParam,
  type LearnInput,
  type LearnReply,
  type RoutingSnapshot,
  type RoutingStateStore,
} from './routing-state';

export interface InMemoryRoutingStateOptions {
  /** Most prefix blocks remembered per backend; least recently recorded evicted first. */
  readonly maxBlocksPerBackend: number;
  /** A block not recorded again within this many ms is forgotten (engines evict too). 0 = never. */
  readonly blockIdleTtlMs: number;
  /** Re-recording a block more recent than this does not move it in the LRU (default 1000 ms). */
  readonly refreshGranularityMs?: number;
  /** Corrections (`learn`): an entry younger than this is no evidence of an eviction (default 1000 ms). */
  readonly minEvidenceAgeMs?: number;
  /** Corrections: the longest retention learned (default: the idle TTL, or a day without one). */
  readonly maxRetentionMs?: number;
  readonly nowMs: () => number;
}

/** Defaults of the correction bounds, shared with the Redis store. */
export const DEFAULT_MIN_EVIDENCE_AGE_MS = 1000;
export const DEFAULT_MAX_RETENTION_MS = 24 * 3600 * 1000;

/**
 * Routing state of a single router replica, in memory. It has no `routeAtomically`: `decide` snapshots,
 * chooses and reserves, and nothing else runs in between in one process but other requests' awaits,
 * which the conditional reserve covers.
 *
 * Prefix index: per pool and backend, the blocks it holds (block hash → when last recorded) in an
 * insertion-ordered Map used as an LRU (re-recording moves a block to the end; over the cap the
 * oldest is evicted). There is no reverse index (hash → backends): a lookup asks each candidate
 * backend, which the binary search below makes cheap, and recording touches one Map per block.
 *
 * Invariant (prefix closure): if a backend holds block i of a chain it holds blocks 0..i−1. Recording
 * always covers a whole prefix and inserts it deepest block first, and a block is never recorded newer
 * than the block before it (a kept block's time caps the blocks written after it), so within a chain
 * shallower blocks are never older than deeper ones: LRU, idle-TTL and retention ageing remove a chain
 * from its tail, as vLLM frees blocks in reverse. Hence a backend's match depth is found by binary
 * search over the request's blocks: O(log n) lookups per backend instead of a walk over every block.
 *
 * Eviction runs in batches (see record); the cap is a high-water mark.
 * Recency is kept to `refreshGranularityMs` (or half the backend's learned retention, when shorter): a
 * block recorded again within that time is not moved in the LRU (the common case, a conversation's
 * next turn re-recording its earlier blocks, then costs one Map read per block).
 *
 * In-flight: per backend, lease id → prefill tokens still pending (0 once the first token came), so
 * release is idempotent; the prefill backlog is kept as a running sum (a snapshot reads it, never sums). A lease is refused when
 * the backend already holds `maxInflight` of them. Leases do not expire here (`renew` only reports
 * whether one exists); they count per backend across pools (the Redis store counts per pool).
 * Memory: ~60 bytes per (block, backend) entry (one Map entry: a number key and a number).
 */
export class InMemoryRoutingState implements RoutingStateStore {
  private readonly pools = new Map<string, PoolIndex>();
  private readonly leases = new Map<BackendId, BackendLeases>();

  constructor(private readonly options: InMemoryRoutingStateOptions) {}

  async snapshot(
    pool: string,
    backends: readonly BackendId[],
    blockHashes: readonly BlockHash[],
  ): Promise<RoutingSnapshot> {
    const inflight = new Map<BackendId, number>();
    const pendingPrefillTokens = new Map<BackendId, number>();
    for (const backend of backends) {
      const leases = this.leases.get(backend);
      inflight.set(backend, leases?.tokens.size ?? 0);
      pendingPrefillTokens.set(backend, leases?.pendingTokens ?? 0);
    }
    const matchBlocks = new Map<BackendId, number>();
    const matchRecordedAtMs = new Map<BackendId, number>();
    if (blockHashes.length > 0) this.match(pool, backends, blockHashes, matchBlocks, matchRecordedAtMs);
    return { matchBlocks, matchRecordedAtMs, inflight, pendingPrefillTokens };
  }

  async reserve(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    blockHashes: readonly BlockHash[],
    prefillTokens: number,
    maxInflight = 0,
  ): Promise<boolean> {
    let backendLeases = this.leases.get(backendId);
    if (!backendLeases) {
      backendLeases = new BackendLeases();
      this.leases.set(backendId, backendLeases);
    }
    if (maxInflight > 0 && backendLeases.tokens.size >= maxInflight) return false;
    backendLeases.set(leaseId, prefillTokens);
    if (blockHashes.length > 0) this.record(pool, backendId, blockHashes);
    return true;
  }

  /** Leases here never expire (one process takes and releases them), so renewing only reports whether it exists. */
  async renew(_pool: string, backendId: BackendId, leaseId: string): Promise<boolean> {
    return this.leases.get(backendId)?.tokens.has(leaseId) ?? false;
  }

  async prefillDone(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    heldBlocks: readonly BlockHash[] = [],
  ): Promise<void> {
    const backendLeases = this.leases.get(backendId);
    if (backendLeases?.tokens.has(leaseId)) backendLeases.set(leaseId, 0);
    if (heldBlocks.length > 0) this.record(pool, backendId, heldBlocks);
  }

  async clearBacklog(pool: string, backendId: BackendId, leaseId: string): Promise<void> {
    await this.prefillDone(pool, backendId, leaseId);
  }

  async release(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    heldBlocks: readonly BlockHash[] = [],
  ): Promise<void> {
    const backendLeases = this.leases.get(backendId);
    if (backendLeases) {
      backendLeases.delete(leaseId);
      // The last lease of a forgotten backend: its book goes (see forgetBackend).
      if (backendLeases.forgotten && backendLeases.tokens.size === 0) this.leases.delete(backendId);
    }
    if (heldBlocks.length > 0) this.record(pool, backendId, heldBlocks);
  }

  async forgetBackend(pool: string, backendId: BackendId): Promise<void> {
    // Its lease book goes too, now or when its last lease is released: discovered pods come and go,
    // each under a new id, and would otherwise each leave one behind. (A backend forgotten on an engine
    // restart gets a new book at its next reserve.)
    const backendLeases = this.leases.get(backendId);
    if (backendLeases?.tokens.size === 0) this.leases.delete(backendId);
    else if (backendLeases) backendLeases.forgotten = true;
    const index = this.pools.get(pool);
    if (!index) return;
    index.blocksByBackend.delete(backendId);
    index.lastIdleSweepMs.delete(backendId);
    index.forgottenAtMs.set(backendId, this.options.nowMs());
  }

  async learn(pool: string, input: LearnInput): Promise<LearnReply> {
    const index = this.poolIndex(pool);
    let retentionMs: number | null = null;
    const correction = input.correction;
    if (correction !== null) {
      const previous = index.retentionMs.get(correction.backendId) ?? null;
      // The entry time read at routing (the snapshot's): the request's own recording, at routing or at
      // its first output, has refreshed the entry since if it was older than the refresh granularity
      // or half the retention, so reading it now would find no evidence. Evidence from before the
      // backend was last forgotten (a restart) teaches nothing, as in the Redis store.
      const recordedAt = correction.matchRecordedAtMs;
      const evidenceAgeMs =
        recordedAt === null || recordedAt <= (index.forgottenAtMs.get(correction.backendId) ?? -Infinity)
          ? null
          : correction.routedAtMs - recordedAt;
      retentionMs = correctedRetention(previous, correction.outcome, evidenceAgeMs, this.retentionBounds());
      if (retentionMs !== null && retentionMs !== previous) {
        index.retentionMs.set(correction.backendId, retentionMs);
        // The engine computed this chain for the request: it holds it now, whatever the shorter retention hides.
        if (correction.outcome === 'overpredicted' && correction.blockHashes.length > 0)
          this.record(pool, correction.backendId, correction.blockHashes, true);
      }
    }
    for (const [name, batch] of Object.entries(input.calibration ?? {}) as [
      CalibratedParam,
      { samples: number; sum: number },
    ][]) {
      if (batch.samples > 0) index.calibration[name] = mergeCalibration(index.calibration[name], batch);
    }
    return { retentionMs, calibration: { ...index.calibration } };
  }

  private retentionBounds(): { minMs: number; maxMs: number } {
    const minMs = this.options.minEvidenceAgeMs ?? DEFAULT_MIN_EVIDENCE_AGE_MS;
    return {
      minMs,
      maxMs:
        this.options.maxRetentionMs ??
        (this.options.blockIdleTtlMs > 0 ? this.options.blockIdleTtlMs : DEFAULT_MAX_RETENTION_MS),
    };
  }

  inflightCounts(): ReadonlyMap<BackendId, number> {
    const counts = new Map<BackendId, number>();
    for (const [backend, leases] of this.leases) counts.set(backend, leases.tokens.size);
    return counts;
  }

  /** Blocks remembered for a backend (for tests and metrics). */
  blockCount(pool: string, backendId: BackendId): number {
    return this.pools.get(pool)?.blocksByBackend.get(backendId)?.size ?? 0;
  }

  /**
   * Fills `depths` with each backend's match depth (absent = 0) and `recordedAtMs` with when its
   * deepest matched block was recorded: the oldest entry of the matched prefix (see the invariant).
   */
  private match(
    pool: string,
    backends: readonly BackendId[],
    blockHashes: readonly BlockHash[],
    depths: Map<BackendId, number>,
    recordedAtMs: Map<BackendId, number>,
  ): void {
    const index = this.pools.get(pool);
    if (!index) return;
    const now = this.options.nowMs();
    const idleFresh = this.options.blockIdleTtlMs > 0 ? now - this.options.blockIdleTtlMs : -Infinity;
    for (const backend of backends) {
      const blocks = index.blocksByBackend.get(backend);
      if (!blocks) continue;
      // A learned retention hides what its engine has most likely evicted (see `learn`).
      const retention = index.retentionMs.get(backend);
      // An entry exactly `retention` old no longer counts (as in the Redis store's `t > threshold`).
      const oldestFresh = retention === undefined ? idleFresh : Math.max(idleFresh, now - retention + 1);
      const holds = (block: number): boolean => {
        const recordedAt = blocks.get(blockHashes[block] as BlockHash);
        return recordedAt !== undefined && recordedAt >= oldestFresh;
      };
      // Largest k such that the backend holds blocks 0..k−1 (prefix closure makes `holds` monotone).
      let low = 0;
      let high = blockHashes.length;
      while (low < high) {
        const middle = (low + high + 1) >>> 1;
        if (holds(middle - 1)) low = middle;
        else high = middle - 1;
      }
      if (low > 0) {
        depths.set(backend, low);
        recordedAtMs.set(backend, blocks.get(blockHashes[low - 1] as BlockHash) as number);
      }
    }
  }

  private poolIndex(pool: string): PoolIndex {
    let index = this.pools.get(pool);
    if (!index) {
      index = new PoolIndex();
      this.pools.set(pool, index);
    }
    return index;
  }

  /** `refreshAll`: every block gets the current time (a correction), not only those older than the refresh granularity. */
  private record(pool: string, backendId: BackendId, blockHashes: readonly BlockHash[], refreshAll = false): void {
    const index = this.poolIndex(pool);
    let blocks = index.blocksByBackend.get(backendId);
    if (!blocks) {
      blocks = new Map();
      index.blocksByBackend.set(backendId, blocks);
    }
    const now = this.options.nowMs();
    // A learned retention hides entries older than it: one older than half of it is refreshed, so a
    // chain in steady use never ages out between uses (as in the Redis store).
    const retention = index.retentionMs.get(backendId);
    const granularity = Math.min(
      this.options.refreshGranularityMs ?? 1000,
      retention === undefined ? Infinity : Math.floor(retention / 2),
    );
    const refreshBefore = refreshAll ? Infinity : now - granularity;
    // Shallowest first, the time each block gets (undefined: kept as it is): a kept block keeps its
    // time, a written one gets the time of the block before it when that is older than now, so times
    // never increase along a chain and ageing by time hides only suffixes of it (see the invariant).
    const stamps: (number | undefined)[] = new Array(blockHashes.length);
    let ceiling = now;
    for (let block = 0; block < blockHashes.length; block++) {
      const recordedAt = blocks.get(blockHashes[block] as BlockHash);
      if (recordedAt !== undefined && recordedAt >= refreshBefore && recordedAt <= ceiling) {
        ceiling = recordedAt;
      } else {
        stamps[block] = ceiling;
      }
    }
    // Written deepest block first, so that within a chain shallower blocks are the more recent in the LRU too.
    for (let block = blockHashes.length - 1; block >= 0; block--) {
      const stamp = stamps[block];
      if (stamp === undefined) continue;
      const hash = blockHashes[block] as BlockHash;
      blocks.delete(hash);
      blocks.set(hash, stamp);
    }
    // Evict from the head (least recently recorded) in batches: over the cap, down to 15/16 of it;
    // idle blocks at most once a second. Each sweep starts a Map iterator, which in V8 walks over
    // the holes earlier deletions left at the head until the table is compacted, so sweeping on
    // every record would cost time quadratic in the evictions.
    const cap = this.options.maxBlocksPerBackend;
    const overCap = blocks.size > cap;
    const idleSweepDue =
      this.options.blockIdleTtlMs > 0 && now - (index.lastIdleSweepMs.get(backendId) ?? -Infinity) >= 1000;
    if (!overCap && !idleSweepDue) return;
    if (idleSweepDue) index.lastIdleSweepMs.set(backendId, now);
    const target = overCap ? cap - Math.floor(cap / 16) : cap;
    const oldestFresh = this.options.blockIdleTtlMs > 0 ? now - this.options.blockIdleTtlMs : -Infinity;
    for (const [hash, recordedAt] of blocks) {
      if (blocks.size <= target && recordedAt >= oldestFresh) break;
      blocks.delete(hash);
    }
  }
}

/** One backend's leases (lease id → prefill tokens still pending) and their running sum, so a snapshot reads it in O(1). */
class BackendLeases {
  readonly tokens = new Map<string, number>();
  pendingTokens = 0;
  /** forgetBackend ran while leases were held: the book goes with the last of them. */
  forgotten = false;

  set(leaseId: string, pending: number): void {
    this.pendingTokens += pending - (this.tokens.get(leaseId) ?? 0);
    this.tokens.set(leaseId, pending);
  }

  delete(leaseId: string): void {
    this.pendingTokens -= this.tokens.get(leaseId) ?? 0;
    this.tokens.delete(leaseId);
  }
}

class PoolIndex {
  /** Backend → its blocks (hash → last recorded, ms) in recording order (LRU: oldest first). */
  readonly blocksByBackend = new Map<BackendId, Map<BlockHash, number>>();
  /** Backend → when its idle blocks were last swept (ms). */
  readonly lastIdleSweepMs = new Map<BackendId, number>();
  /** Backend → when it was last forgotten, ms (`forgetBackend`): a correction's evidence from before then is none. */
  readonly forgottenAtMs = new Map<BackendId, number>();
  /** Backend → its learned retention, ms (`learn`): its entries older than that do not count. */
  readonly retentionMs = new Map<BackendId, number>();
  /** The pool's learned cost-model figures (`learn`). */
  readonly calibration: Partial<Record<CalibratedParam, { value: number; samples: number }>> = {};
}
