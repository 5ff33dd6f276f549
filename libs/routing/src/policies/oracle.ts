/**
 * `oracle` — benchmarks only (vllm-sim backends): the backend that would serve the most prompt tokens
 * from its cache, by its own word. Before deciding, the router asks every eligible backend's
 * `POST /sim/match` what it would serve from its prefix cache for this very request
 * (`Candidate.trueMatchTokens`), so the choice is the best achievable hit, not an estimate: the
 * yardstick other policies' hit rates are measured against.
 *
 * Rule: the largest true match; ties (a cold prompt: everyone 0) go to the fewest in flight, then the
 * smallest prefill backlog, then the earlier backend in configuration order. A backend that did not
 * answer counts as holding nothing (it still wins on load when nobody holds anything); when none
 * answered, the rule is plain least-loaded.
 *
 * Parameters: none.
 * Score: higher is better: prompt tokens the backend says it would serve from its cache, [0, ∞)
 *        (0 when it did not answer). parts: { answered (1 or 0), pendingPrefillTokens }.
 * Reasons: `cache-hit` when the chosen backend would serve at least one token from its cache, else
 *          `least-loaded`.
 */

import type { Candidate, RoutingPolicy } from '../types';
import { candidateScore } from './candidate-score';

export type OracleParams = Readonly<Record<string, never>>;
export const DEFAULT_ORACLE_PARAMS: OracleParams = {};

export function createOraclePolicy(_params: Partial<OracleParams> = {}): RoutingPolicy {
  return {
    name: 'oracle',
    scoreDirection: 'higher is better: prompt tokens the backend says it would serve from its cache (its /sim/match), [0, ∞); 0 when it did not answer',
    usesPrefixMatch: false,
    needsTrueMatch: true,
    choose(_request, candidates) {
      let best: Candidate | undefined;
      for (const candidate of candidates) {
        if (best === undefined || ranksAbove(candidate, best)) best = candidate;
      }
      if (best === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
      return {
        kind: 'routed',
        backendId: best.backend.id,
        reason: trueMatchOf(best) > 0 ? 'cache-hit' : 'least-loaded',
        scores: candidates.map((candidate) =>
          candidateScore(candidate, trueMatchOf(candidate), {
            parts: { answered: typeof candidate.trueMatchTokens === 'number' ? 1 : 0, pendingPrefillTokens: candidate.pendingPrefillTokens },
          }),
        ),
      };
    },
  };
}

/** Tokens the backend said it would serve from its cache; 0 when it did not say. */
function trueMatchOf(candidate: Candidate): number {
  return candidate.trueMatchTokens ?? 0;
}

/** Strictly better than `other`: larger true match, then fewer in flight, then less prefill backlog (equal → the earlier stays). */
function ranksAbove(candidate: Candidate, other: Candidate): boolean {
  const match = trueMatchOf(candidate) - trueMatchOf(other);
  if (match !== 0) return match > 0;
  if (candidate.inflight !== other.inflight) return candidate.inflight < other.inflight;
  return candidate.pendingPrefillTokens < other.pendingPrefillTokens;
}
