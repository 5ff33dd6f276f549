import type { FastifyBaseLogger } from 'fastify';
import {
  CalibrationSamples,
  calibrationSamplesOf,
  checkPrediction,
  type CalibrationBatch,
  type LearnedCalibration,
  type LearnInput,
  type OwnershipCorrection,
  type PredictionCheck,
  type RoutingStateStore,
} from '@kvroute/routing';
import type { ResponseUsage } from '@kvroute/protocols';
import type { ResponseTail } from '../proxy/response-tail';
import type { RouterMetrics } from '../router-metrics';
import type { Ticket } from './route';

/**
 * Stage 7 of the request path, **learn**: what a response tells the router about its backend.
 * - The first output: the request's time to first token, the end of its prefill (it leaves the
 *   backend's backlog), and, for policies that record ownership at first output, that the backend now
 *   holds the request's prefix (the blocks `decide` handed to the lease).
 * - The end of a successful response: its usage (`usage.prompt_tokens_details.cached_tokens`) against
 *   the prefix the decision believed the backend held:
 *   1. the prediction accuracy metrics (`kvroute_router_prefix_*`);
 *   2. a correction when the engine held less (an eviction: the backend's retention is learned, and
 *      its entries older than that stop counting) or more (a learned retention grows) than predicted.
 *      The eviction's evidence is the age, when the request was routed, of the deepest block the
 *      decision matched (`routed.matchRecordedAtMs`, read by the routing call): the index cannot tell
 *      it any more by now, since the request's own recording (at routing or at its first output)
 *      refreshed that entry;
 *   3. calibration samples of the cost model (bytes per token, prefill ms per token, queue ms per
 *      request), gathered per pool and sent at most once per `calibrationFlushMs`.
 *   Corrections and the due batch go in one `state.learn` call (one Redis script), so every replica
 *   learns what one saw; a response that confirms the prediction with no batch due makes no call.
 *   The call runs after the response, never in its way; a failure is counted and forgotten.
 */
export interface Learner {
  /** The ticket's first output reached the client; `streamed`: a stream's first event (a non-streaming body's headers are no TTFT). Once per try at most. */
  firstOutput(ticket: Ticket, arrivedAtMs: number, streamed: boolean): void;
  /**
   * The ticket's try ended; `tail` holds a successful response's last bytes (null otherwise). `disaggregated`: the
   * decode leg of a split request, whose engine counts the pulled prompt as cached and whose TTFT includes the
   * prefill leg: its usage is recorded, but it neither checks the prediction nor corrects or calibrates anything.
   */
  responseEnded(ticket: Ticket, tail: ResponseTail | null, disaggregated?: boolean): void;
  /** The retention last learned for a backend (ms; null: none), as this replica heard it. */
  retentionMs(backendId: string): number | null;
  /** Whether the backend's responses have carried cached tokens (closed loop) on this replica. */
  reportsCachedTokens(backendId: string): boolean;
}

export interface LearnDeps {
  readonly metrics: RouterMetrics;
  readonly state: RoutingStateStore;
  readonly logger: FastifyBaseLogger;
  /** Monotonic ms (performance.now-like): the flush interval. */
  readonly clockMs: () => number;
  /** Correct the index from cached-token reports (router config `learnFromResponses`). */
  readonly correctOwnership: boolean;
  /** Gather calibration samples (router config `calibrateCostModel`). */
  readonly calibrate: boolean;
  /** Least time between two calibration batches of one pool from this replica, ms. */
  readonly calibrationFlushMs: number;
  /** The prefill rate routing uses in a pool now (learned or configured), for the queue samples. */
  readonly prefillMsPerToken: (pool: string) => number;
  /** A `learn` reply brought a pool's learned figures. */
  readonly onLearned: (pool: string, learned: LearnedCalibration) => void;
  /** When a backend's engine last restarted (wall ms, the health poller's; null: none known). */
  readonly lastRestartMs: (backendId: string) => number | null;
}

/** A learn reply said the backend has no retention (kept apart from "never asked"). */
const NO_RETENTION = -1;

interface PoolSamples {
  readonly samples: CalibrationSamples;
  lastFlushMs: number;
}

export function createLearner(deps: LearnDeps): Learner {
  return new ResponseLearner(deps);
}

/** The learner of one replica: what it has heard of each backend, and each pool's samples not yet sent. */
class ResponseLearner implements Learner {
  /**
   * Backends seen reporting cached tokens. vLLM leaves `prompt_tokens_details` out when it found
   * nothing in its cache (`if enable_prompt_tokens_details and num_cached_tokens:` in its serving code),
   * so an absent figure means 0 from a backend that has reported one before, and "does not say" from
   * one that never has (llama.cpp, SGLang or vLLM without the flag).
   */
  private readonly reporting = new Set<string>();
  /** Streams' TTFT, ms, until their response ends. */
  private readonly ttftMs = new WeakMap<Ticket, number>();
  private readonly pools = new Map<string, PoolSamples>();
  /** Per backend, the retention its last learn reply said (ms), or NO_RETENTION. */
  private readonly retention = new Map<string, number>();

  constructor(private readonly deps: LearnDeps) {}

  firstOutput(ticket: Ticket, arrivedAtMs: number, streamed: boolean): void {
    // A non-streaming response's headers come with its end: prefill-done rides on the release.
    ticket.lease.markPrefillDone(!streamed);
    if (!streamed) return;
    const seconds = (performance.now() - arrivedAtMs) / 1000;
    this.deps.metrics.recordStreamTtft(ticket.backend.id, ticket.routed.pool, seconds);
    this.ttftMs.set(ticket, seconds * 1000);
  }

  responseEnded(ticket: Ticket, tail: ResponseTail | null, disaggregated = false): void {
    if (tail === null) return;
    const { metrics } = this.deps;
    const usage = tail.usage();
    const backendId = ticket.backend.id;
    if (usage !== null) metrics.recordTokens(backendId, ticket.routed.pool, usage);
    if (disaggregated) return;
    if (usage?.cachedTokens != null) this.reporting.add(backendId);
    metrics.recordFeedbackMode(backendId, this.reporting.has(backendId));
    const observed =
      usage !== null && usage.cachedTokens === null && this.reporting.has(backendId)
        ? { ...usage, cachedTokens: 0 }
        : usage;
    const check = checkPrediction(ticket.prediction, observed);
    metrics.recordPrediction(backendId, check);
    if (observed === null) return;
    // "Is the cache hit real?": each miss of the prediction, for whoever runs at debug (no prompt in it).
    if (check.outcome === 'overpredicted' || check.outcome === 'underpredicted')
      this.deps.logger.debug(
        {
          backend: backendId,
          pool: ticket.routed.pool,
          outcome: check.outcome,
          predictedTokens: check.predictedTokens,
          cachedTokens: check.observedTokens,
          promptTokens: observed.promptTokens,
          matchAgeMs:
            ticket.routed.matchRecordedAtMs === null ? null : ticket.routed.atMs - ticket.routed.matchRecordedAtMs,
        },
        'prefix prediction missed',
      );
    const correction = this.correctionFor(ticket, check);
    const batch = this.deps.calibrate ? this.calibrationBatch(ticket, observed) : null;
    if (correction !== null || batch !== null) this.learn(ticket.routed.pool, { correction, calibration: batch });
  }

  retentionMs(backendId: string): number | null {
    const known = this.retention.get(backendId);
    return known === undefined || known === NO_RETENTION ? null : known;
  }

  reportsCachedTokens(backendId: string): boolean {
    return this.reporting.has(backendId);
  }

  /** The correction a checked response calls for, unless it teaches nothing about this backend. */
  private correctionFor(ticket: Ticket, check: PredictionCheck): OwnershipCorrection | null {
    if (!this.deps.correctOwnership) return null;
    const correction = correctionOf(ticket, check);
    const backendId = ticket.backend.id;
    // Underprediction only moves a learned retention; another replica may have learned it, so only
    // a backend no replica has reported a retention for (this one's last reply said none) is skipped.
    if (correction?.outcome === 'underpredicted' && this.retention.get(backendId) === NO_RETENTION) return null;
    // A request routed before its engine's last restart found an empty cache: a restart (the
    // restart handler forgets the backend), no lesson about how long this engine keeps things.
    if (
      correction?.outcome === 'overpredicted' &&
      ticket.routed.atMs <= (this.deps.lastRestartMs(backendId) ?? -Infinity)
    )
      return null;
    return correction;
  }

  /** Adds the response's calibration samples to its pool's; the pool's batch when one is due (null: not yet). */
  private calibrationBatch(ticket: Ticket, observed: ResponseUsage): CalibrationBatch | null {
    const { routed } = ticket;
    const pool = this.poolSamples(routed.pool);
    pool.samples.add(
      calibrationSamplesOf(
        {
          textBytes: ticket.prediction.textBytes,
          unit: ticket.prediction.unit,
          promptTokens: observed.promptTokens,
          cachedTokens: observed.cachedTokens,
          ttftMs: this.ttftMs.get(ticket) ?? null,
          inflightAhead: routed.inflightAhead,
          pendingAheadTokens: routed.pendingAheadTokens,
        },
        this.deps.prefillMsPerToken(routed.pool),
      ),
    );
    const now = this.deps.clockMs();
    if (pool.samples.isEmpty || now - pool.lastFlushMs < this.deps.calibrationFlushMs) return null;
    pool.lastFlushMs = now;
    return pool.samples.take();
  }

  private poolSamples(pool: string): PoolSamples {
    let found = this.pools.get(pool);
    if (!found) {
      found = { samples: new CalibrationSamples(), lastFlushMs: this.deps.clockMs() };
      this.pools.set(pool, found);
    }
    return found;
  }

  /** One learn call, after the response and never in its way: a failure is counted and forgotten. */
  private learn(pool: string, input: LearnInput): void {
    const { metrics } = this.deps;
    this.deps.state.learn(pool, input).then(
      (reply) => {
        metrics.recordLearnCall(true);
        if (input.correction !== null) {
          this.retention.set(input.correction.backendId, reply.retentionMs ?? NO_RETENTION);
          if (reply.retentionMs !== null) metrics.recordRetention(input.correction.backendId, reply.retentionMs);
        }
        if (Object.keys(reply.calibration).length > 0) {
          metrics.recordLearnedCostModel(pool, reply.calibration);
          this.deps.onLearned(pool, reply.calibration);
        }
      },
      (error: unknown) => {
        metrics.recordLearnCall(false);
        this.deps.logger.debug({ err: error, pool }, 'learn call failed');
      },
    );
  }
}

/** The correction a checked response calls for (null: it confirmed the prediction, or said nothing). */
function correctionOf(ticket: Ticket, check: PredictionCheck): OwnershipCorrection | null {
  if (check.outcome !== 'overpredicted' && check.outcome !== 'underpredicted') return null;
  return {
    backendId: ticket.backend.id,
    outcome: check.outcome,
    blockHashes: ticket.routed.blockHashes,
    routedAtMs: ticket.routed.atMs,
    matchRecordedAtMs: ticket.routed.matchRecordedAtMs,
  };
}
