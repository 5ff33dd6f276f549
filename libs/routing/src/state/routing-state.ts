import type { AtomicOutcome, AtomicRule, BackendId, BackendInfo, BlockHash, Candidate, EngineLoad, PolicyContext, RoutingDecision, RoutingPolicy, RoutingRequest } from '../types';

/**
 * Where routing state lives: which backend holds which prefix blocks, and how many requests each
 * backend has in flight. One instance serves every pool (a pool = the backends of one model).
 * The in-memory implementation serves one router replica; the Redis one (libs/redis-store) serves a
 * fleet of replicas that must route as one.
 */

/** The figures of one request's candidates, read in one step without changing anything. */
export interface RoutingSnapshot {
  /** Leading blocks of the request each backend is believed to hold (absent = 0). */
  readonly matchBlocks: ReadonlyMap<BackendId, number>;
  /** Requests in flight per backend (absent = 0). */
  readonly inflight: ReadonlyMap<BackendId, number>;
  /** Estimated prompt tokens sent to each backend that have not produced a first token yet (absent = 0). */
  readonly pendingPrefillTokens: ReadonlyMap<BackendId, number>;
}

/** One request to route: what `decide` (state/decide.ts) needs. */
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
}

export interface DecideResult {
  /** Routed: the lease `leaseId` is held on `backendId`. Rejected: nothing was taken. */
  readonly decision: RoutingDecision;
  /** The figures the decision was made on, in the order of `DecideInput.backends`. */
  readonly candidates: readonly Candidate[];
  /**
   * Backends whose lease was refused, one entry per refusal: the decision was made on a snapshot and
   * another request (maybe on another replica) took the backend's last slot first; the store decided
   * again on fresh figures. Always empty when the store evaluated the policy's atomic rule.
   */
  readonly conflicts: readonly BackendId[];
  /**
   * The request's blocks the caller records as held by the chosen backend when the request's first
   * output token arrives (`prefillDone(pool, backend, leaseId, blocksAtFirstOutput)`); empty when the
   * policy records at routing (done with the lease) or reads no prefix.
   */
  readonly blocksAtFirstOutput: readonly BlockHash[];
}

/** One atomic routing step: what `RoutingStateStore.routeAtomically` needs. */
export interface AtomicRouteInput {
  readonly pool: string;
  readonly request: RoutingRequest;
  /** The eligible backends, in configuration order; not empty. */
  readonly backends: readonly BackendInfo[];
  /** Each backend's own reported load, where known and fresh; absent = unknown. */
  readonly engine?: ReadonlyMap<BackendId, EngineLoad>;
  /** The rule to evaluate (the policy's `atomicRule`). */
  readonly rule: AtomicRule;
  /** The lease to take on the chosen backend. */
  readonly leaseId: string;
  /** The request's blocks whose match depths the rule reads (empty: none, every depth 0). */
  readonly blockHashes: readonly BlockHash[];
  /** Record the chosen backend as holding `blockHashes` in the same step (policies that record at routing). */
  readonly recordOwnership: boolean;
}

/**
 * Where routing state lives. A store remembers (prefix ownership, leases) and reserves; it never runs
 * a policy: `decide` (state/decide.ts) does, once per decision.
 */
export interface RoutingStateStore {
  /**
   * For stores that can evaluate a policy's atomic rule next to their state: reads every candidate's
   * figures, evaluates `input.rule`, takes the lease on the chosen backend and, with
   * `recordOwnership`, records its ownership of `input.blockHashes`, in one atomic step, and returns
   * what the rule read and chose (the rule's explanation included). Null: not available right now
   * (a failover store while degraded); the caller then decides on a snapshot. Optional: a store
   * without it (the in-memory one: snapshot + reserve is already atomic in one process) is always
   * decided on by snapshot.
   */
  routeAtomically?(input: AtomicRouteInput): Promise<AtomicOutcome | null>;
  /**
   * Match depth and in-flight count of each of `backends` for one request, in one read.
   * `blockHashes` may be empty (no prefix lookup needed).
   */
  snapshot(pool: string, backends: readonly BackendId[], blockHashes: readonly BlockHash[]): Promise<RoutingSnapshot>;
  /**
   * Takes an in-flight lease for `leaseId` on `backendId` carrying `prefillTokens` (the uncached
   * prompt tokens the backend must prefill for it), and records, speculatively and before the
   * response, that the backend now holds `blockHashes` (none: nothing recorded; see
   * `RoutingPolicy.recordsOwnership`).
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
   * and, when `heldBlocks` are given (`DecideResult.blocksAtFirstOutput`), the backend is
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
