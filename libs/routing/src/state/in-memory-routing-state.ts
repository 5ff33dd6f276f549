import type { BackendId, BlockHash } from '../types';
import type { RoutingSnapshot, RoutingStateStore } from './routing-state';

export interface InMemoryRoutingStateOptions {
  /** Most prefix blocks remembered per backend; least recently recorded evicted first. */
  readonly maxBlocksPerBackend: number;
  /** A block not recorded again within this many ms is forgotten (engines evict too). 0 = never. */
  readonly blockIdleTtlMs: number;
  readonly nowMs: () => number;
}

/**
 * Routing state of a single router replica, in memory.
 *
 * Prefix index: per pool, block hash → backends holding it, with each backend's blocks in an
 * insertion-ordered Map used as an LRU (re-recording moves a block to the end; over the cap the oldest
 * is evicted). Because hashes are chained, a lookup walks the request's blocks in order and stops at the
 * first block that no candidate holds. In-flight: a set of lease ids per backend, so release is idempotent.
 *
 * Memory: ~120 bytes per (block, backend) entry (two Map entries and a number).
 */
export class InMemoryRoutingState implements RoutingStateStore {
  private readonly pools = new Map<string, PoolIndex>();
  private readonly leases = new Map<BackendId, Set<string>>();

  constructor(private readonly options: InMemoryRoutingStateOptions) {}

  async snapshot(pool: string, backends: readonly BackendId[], blockHashes: readonly BlockHash[]): Promise<RoutingSnapshot> {
    const inflight = new Map<BackendId, number>();
    for (const backend of backends) inflight.set(backend, this.leases.get(backend)?.size ?? 0);
    const matchBlocks = blockHashes.length === 0 ? new Map<BackendId, number>() : this.match(pool, backends, blockHashes);
    return { matchBlocks, inflight };
  }

  async reserve(pool: string, backendId: BackendId, leaseId: string, blockHashes: readonly BlockHash[]): Promise<void> {
    let backendLeases = this.leases.get(backendId);
    if (!backendLeases) {
      backendLeases = new Set();
      this.leases.set(backendId, backendLeases);
    }
    backendLeases.add(leaseId);
    if (blockHashes.length > 0) this.record(pool, backendId, blockHashes);
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
    let stillMatching: BackendId[] = backends.slice();
    for (let block = 0; block < blockHashes.length && stillMatching.length > 0; block++) {
      const owners = index.owners.get(blockHashes[block] as BlockHash);
      if (!owners) break;
      const next: BackendId[] = [];
      for (const backend of stillMatching) {
        const recordedAt = owners.get(backend);
        if (recordedAt !== undefined && recordedAt >= oldestFresh) {
          result.set(backend, block + 1);
          next.push(backend);
        }
      }
      stillMatching = next;
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
    for (const hash of blockHashes) {
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
