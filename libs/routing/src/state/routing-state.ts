import type { BackendId, BackendInfo, BlockHash, Candidate, EngineLoad, PolicyContext, RoutingDecision, RoutingPolicy, RoutingRequest } from '../types';

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

/** One request to route: what `RoutingStateStore.decide` needs. */
export interface DecideInput {
  readonly pool: string;
  readonly request: RoutingRequest;
  /** The eligible backends (healthy, breaker closed, serving the model), in configuration order; not empty. */
  readonly backends: readonly BackendInfo[];
  readonly policy: RoutingPolicy;
  readonly context: PolicyContext;
  /** The lease to take on the chosen backend. */
  readonly leaseId: string;
  /** Each backend's own reported load, where known and fresh (from the health poller); absent = unknown. */
  readonly engine?: ReadonlyMap<BackendId, EngineLoad>;
  /**
   * What each backend says it would serve from its cache for this request, in prompt tokens (null = it
   * did not answer); given only for policies with `needsTrueMatch`. Copied onto the candidates.
   */
  readonly trueMatchTokens?: ReadonlyMap<BackendId, number | null>;
}

export interface DecideResult {
  /** Routed: the lease `leaseId` is held on `backendId`. Rejected: nothing was taken. */
  readonly decision: RoutingDecision;
  /** The figures the decision was made on, in the order of `DecideInput.backends`. */
  readonly candidates: readonly Candidate[];
  /**
   * Backends whose lease was refused, one entry per refusal: the decision was made on a snapshot and
   * another request (maybe on another replica) took the backend's last slot first; the store decided
   * again on fresh figures. Always empty when the policy's atomic rule decided.
   */
  readonly conflicts: readonly BackendId[];
  /**
   * The store's atomic rule chose another backend than `policy.choose` on the same figures: a parity
   * bug (the store's choice stands, the lease is there). Always false without an atomic rule.
   */
  readonly ruleMismatch: boolean;
}

export interface RoutingStateStore {
  /**
   * Routes one request: reads the figures of every candidate, lets the policy choose, takes the lease
   * on the chosen backend and (for policies that read prefix matches) records that it now holds the
   * request's blocks. A store that can evaluate `policy.atomicRule` does it all in one atomic step;
   * otherwise snapshot → choose → conditional reserve (`decideWithSnapshot`).
   */
  decide(input: DecideInput): Promise<DecideResult>;
  /**
   * Match depth and in-flight count of each of `backends` for one request, in one read.
   * `blockHashes` may be empty (no prefix lookup needed).
   */
  snapshot(pool: string, backends: readonly BackendId[], blockHashes: readonly BlockHash[]): Promise<RoutingSnapshot>;
  /**
   * Takes an in-flight lease for `leaseId` on `backendId` carrying `prefillTokens` (the uncached
   * prompt tokens the backend must prefill for it), and records, speculatively and before the
   * response, that the backend now holds `blockHashes` (none: nothing recorded; see
   * `RoutingPolicy.recordsOwnershipAtFirstToken`).
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
  /**
   * The lease's request produced its first token: its prefill no longer counts as backlog (idempotent),
   * and, when `heldBlocks` are given (policies with `recordsOwnershipAtFirstToken`), the backend is
   * recorded as holding them: it has computed that prefix now. Recorded even if the lease is gone.
   */
  prefillDone(pool: string, backendId: BackendId, leaseId: string, heldBlocks?: readonly BlockHash[]): Promise<void>;
  /** Releases a lease. Idempotent: releasing twice, or a lease never taken, is a no-op. */
  release(pool: string, backendId: BackendId, leaseId: string): Promise<void>;
  /** Forgets what a backend is believed to hold (it was removed, restarted or its cache reset). */
  forgetBackend(pool: string, backendId: BackendId): Promise<void>;
  /** In-flight counts of every backend with leases, for metrics. */
  inflightCounts(): ReadonlyMap<BackendId, number>;
}
