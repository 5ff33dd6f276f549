import type { BackendId, BlockHash } from '../types';
import type { RoutingSnapshot, RoutingStateStore } from './routing-state';

export interface InMemoryRoutingStateOptions {
  /** Most prefix blocks remembered per backend; least recently recorded evicted first. */
  readonly maxBlocksPerBackend: number;
  /** A block not recorded again within this many ms is forgotten (engines evict too). 0 = never. */
  readonly blockIdleTtlMs: number;
  /** Re-recording a block more recent than this does not move it in the LRU (default 1000 ms). */
  readonly refreshGranularityMs?: number;
  readonly nowMs: () => number;
}

/**
 * Routing state of a single router replica, in memory.
 *
 * Prefix index: per pool, block hash → backends holding it (with when each last recorded it), and
 * each backend's blocks in an insertion-ordered Map used as an LRU (re-recording moves a block to the
 * end; over the cap the oldest is evicted).
 *
 * Invariant (prefix closure): if a backend holds block i of a chain it holds blocks 0..i−1. Recording
 * always covers a whole prefix and inserts it deepest block first, so within a chain shallower blocks
 * are never older than deeper ones: LRU and idle-TTL eviction remove a chain from its tail, as vLLM
 * frees blocks in reverse. Hence a backend's match depth is found by binary search over the request's
 * blocks: O(log n) lookups per backend instead of a walk over every block.
 *
 * Recency is kept to `refreshGranularityMs`: a block recorded again within that time is not moved in
 * the LRU (the common case, a conversation's next turn re-recording its earlier blocks, then costs one
 * Map read per block).
 *
 * In-flight: per backend, lease id → prefill tokens still pending (0 once the first token came), so
 * release is idempotent and the prefill backlog is the sum over the leases.
 * Memory: ~120 bytes per (block, backend) entry (two Map entries and a number).
 */
export class InMemoryRoutingState implements RoutingStateStore {
  private readonly pools = new Map<string, PoolIndex>();
  private readonly leases = new Map<BackendId, Map<string, number>>();

  constructor(private readonly options: InMemoryRoutingStateOptions) {}

  async snapshot(pool: string, backends: readonly BackendId[], blockHashes: readonly BlockHash[]): Promise<RoutingSnapshot> {
    const inflight = new Map<BackendId, number>();
    const pendingPrefillTokens = new Map<BackendId, number>();
    for (const backend of backends) {
      const leases = this.leases.get(backend);
      inflight.set(backend, leases?.size ?? 0);
      let pending = 0;
      if (leases) for (const tokens of leases.values()) pending += tokens;
      pendingPrefillTokens.set(backend, pending);
    }
    const matchBlocks = blockHashes.length === 0 ? new Map<BackendId, number>() : this.match(pool, backends, blockHashes);
    return { matchBlocks, inflight, pendingPrefillTokens };
  }

  async reserve(pool: string, backendId: BackendId, leaseId: string, blockHashes: readonly BlockHash[], prefillTokens: number): Promise<void> {
    let backendLeases = this.leases.get(backendId);
    if (!backendLeases) {
      backendLeases = new Map();
      this.leases.set(backendId, backendLeases);
    }
    backendLeases.set(leaseId, prefillTokens);
    if (blockHashes.length > 0) this.record(pool, backendId, blockHashes);
  }

  async prefillDone(_pool: string, backendId: BackendId, leaseId: string): Promise<void> {
    const backendLeases = this.leases.get(backendId);
    if (backendLeases?.has(leaseId)) backendLeases.set(leaseId, 0);
  }

  async release(_pool: string, backendId: BackendId, leaseId: string): Promise<void> {
    this.leases.get(backendId)?.delete(leaseId);
  }

  async forgetBackend(pool: string, backendId: BackendId): Promise<void> {
    const index = this.pools.get(pool);
    const blocks = index?.blocksByBackend.get(backendId);
    if (!index || !blocks) return;
    for (const hash of blocks.keys()) index.removeOwner(hash, backendId);
    index.blocksByBackend.delete(backendId);
  }

  inflightCounts(): ReadonlyMap<BackendId, number> {
    const counts = new Map<BackendId, number>();
    for (const [backend, leases] of this.leases) counts.set(backend, leases.size);
    return counts;
  }

  /** Blocks remembered for a backend (for tests and metrics). */
  blockCount(pool: string, backendId: BackendId): number {
    return this.pools.get(pool)?.blocksByBackend.get(backendId)?.size ?? 0;
  }

  private match(pool: string, backends: readonly BackendId[], blockHashes: readonly BlockHash[]): Map<BackendId, number> {
    const result = new Map<BackendId, number>();
    const index = this.pools.get(pool);
    if (!index) return result;
    const oldestFresh = this.options.blockIdleTtlMs > 0 ? this.options.nowMs() - this.options.blockIdleTtlMs : -Infinity;
    const holds = (backend: BackendId, block: number): boolean => {
      const recordedAt = index.owners.get(blockHashes[block] as BlockHash)?.get(backend);
      return recordedAt !== undefined && recordedAt >= oldestFresh;
    };
    for (const backend of backends) {
      // Largest k such that the backend holds blocks 0..k−1 (prefix closure makes `holds` monotone).
      let low = 0;
      let high = blockHashes.length;
      while (low < high) {
        const middle = (low + high + 1) >>> 1;
        if (holds(backend, middle - 1)) low = middle;
        else high = middle - 1;
      }
      if (low > 0) result.set(backend, low);
    }
    return result;
  }

  private record(pool: string, backendId: BackendId, blockHashes: readonly BlockHash[]): void {
    let index = this.pools.get(pool);
    if (!index) {
      index = new PoolIndex();
      this.pools.set(pool, index);
    }
    let blocks = index.blocksByBackend.get(backendId);
    if (!blocks) {
      blocks = new Map();
      index.blocksByBackend.set(backendId, blocks);
    }
    const now = this.options.nowMs();
    const refreshBefore = now - (this.options.refreshGranularityMs ?? 1000);
    // Deepest block first, so that within a chain shallower blocks are the more recent (see the invariant).
    for (let block = blockHashes.length - 1; block >= 0; block--) {
      const hash = blockHashes[block] as BlockHash;
      const recordedAt = blocks.get(hash);
      if (recordedAt !== undefined && recordedAt >= refreshBefore) continue;
      blocks.delete(hash);
      blocks.set(hash, now);
      let owners = index.owners.get(hash);
      if (!owners) {
        owners = new Map();
        index.owners.set(hash, owners);
      }
      owners.set(backendId, now);
    }
    // Evict least recently recorded blocks over the cap, and idle ones from the head.
    const oldestFresh = this.options.blockIdleTtlMs > 0 ? now - this.options.blockIdleTtlMs : -Infinity;
    for (const [hash, recordedAt] of blocks) {
      if (blocks.size <= this.options.maxBlocksPerBackend && recordedAt >= oldestFresh) break;
      blocks.delete(hash);
      index.removeOwner(hash, backendId);
    }
  }
}

class PoolIndex {
  /** Block hash → backend → last recorded (ms). */
  readonly owners = new Map<BlockHash, Map<BackendId, number>>();
  /** Backend → its blocks in recording order (LRU: oldest first). */
  readonly blocksByBackend = new Map<BackendId, Map<BlockHash, number>>();

  removeOwner(hash: BlockHash, backendId: BackendId): void {
    const owners = this.owners.get(hash);
    if (!owners) return;
    owners.delete(backendId);
    if (owners.size === 0) this.owners.delete(hash);
  }
}
