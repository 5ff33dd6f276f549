import type { BackendId, BlockHash } from '../types';

/**
 * Where routing state lives: which backend holds which prefix blocks, and how many requests each
 * backend has in flight. One instance serves every pool (a pool = the backends of one model).
 * The in-memory implementation serves one router replica; the Redis one (libs/redis-store) serves a
 * fleet of replicas that must route as one.
 */
export interface RoutingSnapshot {
  /** Leading blocks of the request each backend is believed to hold (absent = 0). */
  readonly matchBlocks: ReadonlyMap<BackendId, number>;
  /** Requests in flight per backend (absent = 0). */
  readonly inflight: ReadonlyMap<BackendId, number>;
  /** Estimated prompt tokens sent to each backend that have not produced a first token yet (absent = 0). */
  readonly pendingPrefillTokens: ReadonlyMap<BackendId, number>;
}

export interface RoutingStateStore {
  /**
   * Match depth and in-flight count of each of `backends` for one request, in one read.
   * `blockHashes` may be empty (no prefix lookup needed).
   */
  snapshot(pool: string, backends: readonly BackendId[], blockHashes: readonly BlockHash[]): Promise<RoutingSnapshot>;
  /**
   * Takes an in-flight lease for `leaseId` on `backendId` carrying `prefillTokens` (the uncached
   * prompt tokens the backend must prefill for it), and records, speculatively and before the
   * response, that the backend now holds `blockHashes`: a burst of siblings then follows the first.
   *
   * `maxInflight` (optional, 0 or absent = no limit): if the backend already has that many leases,
   * nothing is taken or recorded and the result is false, a conflict: the snapshot the decision was
   * made on is stale (another request, possibly on another router replica, took the last slot) and
   * the caller decides again. Checked and taken atomically, so a saturation valve holds under a burst.
   * True when the lease was taken.
   */
  reserve(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    blockHashes: readonly BlockHash[],
    prefillTokens: number,
    maxInflight?: number,
  ): Promise<boolean>;
  /**
   * Keeps a lease of a long-running request alive (stores whose leases expire call this
   * periodically while the response streams). False if the lease is gone (released, expired or never
   * taken): it no longer counts, and the caller may reserve again.
   */
  renew(pool: string, backendId: BackendId, leaseId: string): Promise<boolean>;
  /** The lease's request produced its first token: its prefill no longer counts as backlog. Idempotent. */
  prefillDone(pool: string, backendId: BackendId, leaseId: string): Promise<void>;
  /** Releases a lease. Idempotent: releasing twice, or a lease never taken, is a no-op. */
  release(pool: string, backendId: BackendId, leaseId: string): Promise<void>;
  /** Forgets what a backend is believed to hold (it was removed, restarted or its cache reset). */
  forgetBackend(pool: string, backendId: BackendId): Promise<void>;
  /** In-flight counts of every backend with leases, for metrics. */
  inflightCounts(): ReadonlyMap<BackendId, number>;
}
