import type {
  AtomicOutcomeBase,
  AtomicRule,
  BackendId,
  BackendInfo,
  BlockHash,
  Candidate,
  EngineLoad,
  PolicyContext,
  RoutingDecision,
  RoutingPolicy,
  RoutingRequest,
} from '../types';

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
  /**
   * When each matching backend's deepest matched block was recorded, ms (`Candidate.matchRecordedAtMs`;
   * absent = no match, or a store that does not say).
   */
  readonly matchRecordedAtMs?: ReadonlyMap<BackendId, number>;
  /** Requests in flight per backend (absent = 0). */
  readonly inflight: ReadonlyMap<BackendId, number>;
  /** Estimated prompt tokens sent to each backend that have not produced a first token yet (absent = 0). */
  readonly pendingPrefillTokens: ReadonlyMap<BackendId, number>;
}

/** `RoutingStateStore.decisionScope`'s answer. */
export interface DecisionScope {
  readonly backends: readonly BackendInfo[];
  /** The cell of a pool split into cells (libs/redis-store pool-cells.ts); null: the whole pool. */
  readonly cell: number | null;
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
  /** The figures the decision was made on, in the order of `DecideInput.backends` (a big pool on the Redis store: only the shortlist that took part). */
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
  routeAtomically?(input: AtomicRouteInput): Promise<AtomicOutcomeBase | null>;
  /**
   * The backends a decision for `request` runs over, of the eligible `backends` given, and the pool's
   * cell they are in (null: the whole pool). Optional: a store without it decides over every backend.
   * For dry runs (`/debug/route`), which must explain the decision the store would make.
   */
  decisionScope?(pool: string, request: RoutingRequest, backends: readonly BackendInfo[]): DecisionScope;
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
  /**
   * The lease's prefill leaves its backend's backlog, with no ownership recorded: a non-streaming request's
   * estimated end of prefill has passed (its response's first byte is its end). Idempotent; nothing once the lease
   * is gone. Only later decisions read it, so a shared store may apply it a little later (the Redis store: with this
   * replica's next decision in the pool, or within ~50 ms) rather than in a call of its own.
   */
  clearBacklog(pool: string, backendId: BackendId, leaseId: string): Promise<void>;
  /**
   * Releases a lease. Idempotent: releasing twice, or a lease never taken, is a no-op. `heldBlocks`
   * (optional): the request's first output came with its end (a non-streaming response), so the backend
   * is recorded as holding them here, as `prefillDone` would have: one call after a response, not two.
   * Recorded even if the lease is gone.
   */
  release(pool: string, backendId: BackendId, leaseId: string, heldBlocks?: readonly BlockHash[]): Promise<void>;
  /** Forgets what a backend is believed to hold (it was removed, restarted or its cache reset). */
  forgetBackend(pool: string, backendId: BackendId): Promise<void>;
  /**
   * What responses told a router (the learn stage), in one step: a correction of one backend's
   * retention from a response whose engine reported another cached prefix than predicted, and a batch
   * of cost-model samples merged into the pool's learned values. Answers the backend's retention and
   * the pool's learned values after the change, which every replica's calls read alike.
   */
  learn(pool: string, input: LearnInput): Promise<LearnReply>;
  /** In-flight counts of every backend with leases, for metrics. */
  inflightCounts(): ReadonlyMap<BackendId, number>;
}

/**
 * A response whose engine's cached prefix differed from the index's prediction beyond the granularity
 * either side sees (`checkPrediction`'s overpredicted / underpredicted).
 *
 * - overpredicted: the engine no longer held the chain's deepest predicted block (vLLM evicts LRU and
 *   frees a request's blocks tail-first, so that one goes first). Under the engine's LRU, entries less
 *   recently used than it are gone too: the backend's retention (how long an entry stays believed)
 *   moves towards that entry's age when the request was routed (`routedAtMs - matchRecordedAtMs`, both
 *   read at routing: by the response, the request's own recording has rewritten the entry), and older
 *   entries stop counting for it. The request's own chain stays held (the engine just computed it).
 *   Entries younger than `minEvidenceAgeMs` are no evidence (a sibling's prefill still running), nor
 *   those recorded before the backend was last forgotten (a restart since).
 * - underpredicted: the engine held more than the index believed; a learned retention grows (by 1/4).
 */
export interface OwnershipCorrection {
  readonly backendId: BackendId;
  readonly outcome: 'overpredicted' | 'underpredicted';
  /** The request's chain (shallowest first). */
  readonly blockHashes: readonly BlockHash[];
  /** Wall-clock ms the request was routed (the store's clock). */
  readonly routedAtMs: number;
  /**
   * When the backend's deepest predicted block was recorded, as the routing call read it (the chosen
   * candidate's `matchRecordedAtMs`), ms; null when none was predicted or the store did not say (then
   * an overprediction teaches no retention).
   */
  readonly matchRecordedAtMs: number | null;
}

/** The cost-model figures learned from responses (cacheaware's parameters of the same names). */
export type CalibratedParam = 'bytesPerToken' | 'prefillMsPerToken' | 'queueMsPerRequest';
export const CALIBRATED_PARAMS: readonly CalibratedParam[] = [
  'bytesPerToken',
  'prefillMsPerToken',
  'queueMsPerRequest',
];

/** Samples of some calibrated figures: how many, and their sum (their mean is what is merged). */
export type CalibrationBatch = Readonly<
  Partial<Record<CalibratedParam, { readonly samples: number; readonly sum: number }>>
>;

/** A pool's learned figures: each value and how many samples it was learned from. */
export type LearnedCalibration = Readonly<
  Partial<Record<CalibratedParam, { readonly value: number; readonly samples: number }>>
>;

export interface LearnInput {
  readonly correction: OwnershipCorrection | null;
  readonly calibration: CalibrationBatch | null;
}

export interface LearnReply {
  /** The corrected backend's retention, ms, after the call (null: none learned, or no correction given). */
  readonly retentionMs: number | null;
  readonly calibration: LearnedCalibration;
}

/**
 * How a batch moves a learned value (the Redis store's learn.lua does the same): the running mean of
 * the samples until CALIBRATION_WINDOW of them, then an exponentially weighted mean over about that
 * many, so a figure follows an engine that changed (load, version) within a few hundred responses.
 */
export const CALIBRATION_WINDOW = 200;

export function mergeCalibration(
  current: { readonly value: number; readonly samples: number } | undefined,
  batch: { readonly samples: number; readonly sum: number },
): { value: number; samples: number } {
  const mean = batch.sum / batch.samples;
  if (current === undefined || current.samples === 0) return { value: mean, samples: batch.samples };
  // At most the whole step: a batch larger than the window (a busy replica's second) replaces the value, never overshoots it.
  const weight = Math.min(1, batch.samples / Math.min(current.samples + batch.samples, CALIBRATION_WINDOW));
  return { value: current.value + (mean - current.value) * weight, samples: current.samples + batch.samples };
}

/** Retention learning's constants (learn.lua has the same): evidence weight, growth on underprediction. */
export const RETENTION_EVIDENCE_WEIGHT = 0.3;
export const RETENTION_GROWTH = 1.25;

/** The retention after one correction (null: none learned yet and this is no evidence). */
export function correctedRetention(
  retentionMs: number | null,
  outcome: OwnershipCorrection['outcome'],
  evidenceAgeMs: number | null,
  bounds: { readonly minMs: number; readonly maxMs: number },
): number | null {
  let learned = retentionMs;
  if (outcome === 'overpredicted' && evidenceAgeMs !== null && evidenceAgeMs >= bounds.minMs) {
    learned =
      retentionMs === null
        ? evidenceAgeMs
        : Math.floor((1 - RETENTION_EVIDENCE_WEIGHT) * retentionMs + RETENTION_EVIDENCE_WEIGHT * evidenceAgeMs);
  } else if (outcome === 'underpredicted' && retentionMs !== null) {
    learned = Math.floor(retentionMs * RETENTION_GROWTH);
  }
  return learned === null ? null : Math.max(bounds.minMs, Math.min(bounds.maxMs, learned));
}
