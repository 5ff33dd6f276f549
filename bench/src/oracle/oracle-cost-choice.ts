/**
 * `oracle-cost` — benchmarks only (vllm-sim backends): cacheaware's cost rule fed the truth. The rule
 * is libs/routing's own (`evaluateCost` with a parameter set resolved from `CACHE_AWARE_PARAMS`),
 * imported, not copied; only its inputs change:
 *
 *   matchBlocks(c)          = the prompt tokens backend c says it would serve from its cache right now
 *                             (its `POST /sim/match`, as the oracle asks), in the router's routing
 *                             blocks: cachedTokens · bytesPerToken / blockSizeBytes (may be fractional);
 *   textBytes               = promptTokens · bytesPerToken, so the rule's prefill estimate,
 *                             ⌈(textBytes − matchBlocks · blockSizeBytes) / bytesPerToken⌉, is exactly
 *                             the engine's uncached tokens, promptTokens − cachedTokens;
 *   inflight(c)             = requests this oracle process has in flight on c;
 *   pendingPrefillTokens(c) = uncached prompt tokens this process sent c that have not produced a
 *                             response byte yet (its own count, as cacheaware's backlog);
 *   engine                  = unknown (no health poller): the waiting and KV terms add nothing.
 *
 * So against `cacheaware` it differs in what is known, not in how it is weighed: cacheaware − oracle-cost
 * is what the router's prefix index (and its byte-based estimates) costs; oracle-cost − oracle is what
 * the cost model trades for load (or loses). Ties and cold placement use the rendezvous order of the
 * request's head hash, which the oracle computes as the router does (`buildRoutingRequest`, same block
 * size), so a tie goes where cacheaware would send it.
 *
 * Parameters: cacheaware's (CACHE_AWARE_PARAMS; the oracle router takes their config keys as flags).
 * Score: cacheaware's cost in ms, lower is better, [0, ∞). A backend that did not answer counts as
 * holding nothing. Reasons: cacheaware's (`prefix-affinity`, `least-loaded`, `spilled-from-saturated`,
 * `load-guard`, `cold-hash`).
 */
import {
  evaluateCost,
  type CacheAwareParams,
  type Candidate,
  type CostReason,
  type RoutingRequest,
} from '@kvroute/routing';
import type { OracleCandidate } from './oracle-choice';

/** The request as oracle-cost weighs it. */
export interface OracleCostRequest {
  readonly model: string;
  /** Prompt tokens as the backends count them (their /sim/match `prompt_tokens`). */
  readonly promptTokens: number;
  /** The router's head hash of the request (ties and cold placement). */
  readonly headHash: number;
  /** The most tokens it may generate (the rule's KV term; unused without engine figures). */
  readonly maxTokens: number | null;
  /** The router's routing block size, bytes: the unit of cacheaware's `minMatchBlocks`. */
  readonly blockSizeBytes: number;
}

export interface OracleCostChoice {
  readonly backendId: string;
  readonly reason: CostReason;
  /** Per candidate, in input order: its cost in ms. */
  readonly scores: readonly number[];
}

/** The candidates and request cacheaware's rule sees when the matches are true (see the header). */
export function oracleCostInputs(
  request: OracleCostRequest,
  candidates: readonly OracleCandidate[],
  params: CacheAwareParams,
): { request: RoutingRequest; candidates: Candidate[] } {
  const bytesPerToken = params.bytesPerToken;
  const routingRequest: RoutingRequest = {
    model: request.model,
    blockHashes: [],
    blockSizeBytes: request.blockSizeBytes,
    textBytes: request.promptTokens * bytesPerToken,
    contextBlocks: 0,
    headHash: request.headHash,
    sessionKey: null,
    maxTokens: request.maxTokens,
  };
  return {
    request: routingRequest,
    candidates: candidates.map((candidate) => ({
      backend: { id: candidate.backendId, weight: 1 },
      inflight: candidate.inflight,
      matchBlocks:
        (Math.min(candidate.trueMatchTokens ?? 0, request.promptTokens) * bytesPerToken) / request.blockSizeBytes,
      pendingPrefillTokens: candidate.pendingPrefillTokens,
      engine: null,
    })),
  };
}

/** oracle-cost's pick among `candidates`, or undefined when there are none. */
export function chooseOracleCostBackend(
  request: OracleCostRequest,
  candidates: readonly OracleCandidate[],
  params: CacheAwareParams,
): OracleCostChoice | undefined {
  if (candidates.length === 0) return undefined;
  const inputs = oracleCostInputs(request, candidates, params);
  const outcome = evaluateCost(inputs.request, inputs.candidates, params);
  const chosen = candidates[outcome.chosen];
  if (chosen === undefined) return undefined;
  return { backendId: chosen.backendId, reason: outcome.reason, scores: outcome.lines.map((line) => line.totalMs) };
}
