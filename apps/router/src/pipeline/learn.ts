import type { FastifyBaseLogger } from 'fastify';
import {
  CalibrationSamples,
  calibrationSamplesOf,
  checkPrediction,
  type LearnedCalibration,
  type LearnInput,
  type OwnershipCorrection,
  type PredictionCheck,
  type RoutingStateStore,
} from '@kvroute/routing';
import type { ResponseTail } from '../proxy/response-tail';
import type { RouterMetrics } from '../router-metrics';
import type { Ticket } from './route';

/**
 * Stage 6 of the request path, **learn**: what a response tells the router about its backend.
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
  /** The ticket's try ended; `tail` holds a successful response's last bytes (null otherwise). */
  responseEnded(ticket: Ticket, tail: ResponseTail | null): void;
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
  const { metrics } = deps;
  /**
   * Backends seen reporting cached tokens. vLLM leaves `prompt_tokens_details` out when it found
   * nothing in its cache (`if enable_prompt_tokens_details and num_cached_tokens:` in its serving code),
   * so an absent figure means 0 from a backend that has reported one before, and "does not say" from
   * one that never has (llama.cpp, SGLang or vLLM without the flag).
   */
  const reporting = new Set<string>();
  /** Streams' TTFT, ms, until their response ends. */
  const ttftMs = new WeakMap<Ticket, number>();
  const pools = new Map<string, PoolSamples>();
  const retention = new Map<string, number>();

  const poolSamples = (pool: string): PoolSamples => {
    let found = pools.get(pool);
    if (!found) {
      found = { samples: new CalibrationSamples(), lastFlushMs: deps.clockMs() };
      pools.set(pool, found);
    }
    return found;
  };

  const send = (pool: string, input: LearnInput): void => {
    deps.state.learn(pool, input).then(
      (reply) => {
        metrics.recordLearnCall(true);
        if (input.correction !== null) {
          retention.set(input.correction.backendId, reply.retentionMs ?? NO_RETENTION);
          if (reply.retentionMs !== null) metrics.recordRetention(input.correction.backendId, reply.retentionMs);
        }
        if (Object.keys(reply.calibration).length > 0) {
          metrics.recordLearnedCostModel(pool, reply.calibration);
          deps.onLearned(pool, reply.calibration);
        }
      },
      (error: unknown) => {
        metrics.recordLearnCall(false);
        deps.logger.debug({ err: error, pool }, 'learn call failed');
      },
    );
  };

  return {
    firstOutput(ticket, arrivedAtMs, streamed) {
      // A non-streaming response's headers come with its end: prefill-done rides on the release.
      ticket.lease.markPrefillDone(!streamed);
      if (!streamed) return;
      const seconds = (performance.now() - arrivedAtMs) / 1000;
      metrics.recordStreamTtft(ticket.backend.id, ticket.routed.pool, seconds);
      ttftMs.set(ticket, seconds * 1000);
    },
    responseEnded(ticket, tail) {
      if (tail === null) return;
      const usage = tail.usage();
      const backendId = ticket.backend.id;
      if (usage !== null) metrics.recordTokens(backendId, ticket.routed.pool, usage);
      if (usage?.cachedTokens != null) reporting.add(backendId);
      metrics.recordFeedbackMode(backendId, reporting.has(backendId));
      const observed =
        usage !== null && usage.cachedTokens === null && reporting.has(backendId)
          ? { ...usage, cachedTokens: 0 }
          : usage;
      const check = checkPrediction(ticket.prediction, observed);
      metrics.recordPrediction(backendId, check);
      if (observed === null) return;

      const { routed } = ticket;
      let correction = deps.correctOwnership ? correctionOf(ticket, check) : null;
      // Underprediction only moves a learned retention; another replica may have learned it, so only
      // a backend no replica has reported a retention for (this one's last reply said none) is skipped.
      if (correction?.outcome === 'underpredicted' && retention.get(backendId) === NO_RETENTION) correction = null;
      // A request routed before its engine's last restart found an empty cache: a restart (the
      // restart handler forgets the backend), no lesson about how long this engine keeps things.
      if (correction?.outcome === 'overpredicted' && routed.atMs <= (deps.lastRestartMs(backendId) ?? -Infinity))
        correction = null;
      let batch = null;
      if (deps.calibrate) {
        const pool = poolSamples(routed.pool);
        pool.samples.add(
          calibrationSamplesOf(
            {
              textBytes: ticket.prediction.textBytes,
              promptTokens: observed.promptTokens,
              cachedTokens: observed.cachedTokens,
              ttftMs: ttftMs.get(ticket) ?? null,
              inflightAhead: routed.inflightAhead,
              pendingAheadTokens: routed.pendingAheadTokens,
            },
            deps.prefillMsPerToken(routed.pool),
          ),
        );
        const now = deps.clockMs();
        if (!pool.samples.isEmpty && now - pool.lastFlushMs >= deps.calibrationFlushMs) {
          pool.lastFlushMs = now;
          batch = pool.samples.take();
        }
      }
      if (correction !== null || batch !== null) send(routed.pool, { correction, calibration: batch });
    },
    retentionMs(backendId) {
      const known = retention.get(backendId);
      return known === undefined || known === NO_RETENTION ? null : known;
    },
    reportsCachedTokens(backendId) {
      return reporting.has(backendId);
    },
  };
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
