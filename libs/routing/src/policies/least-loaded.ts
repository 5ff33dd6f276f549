/**
 * `leastloaded` — the backend with the fewest requests in flight; ties go to the earlier backend
 * in configuration order, so equal snapshots give equal decisions.
 *
 * Parameters: none.
 * Score: in-flight requests, lower is better, range [0, ∞).
 * Reasons: `least-loaded`.
 *
 * `indexOfLeastLoaded` is also the fallback of every other policy that "falls back to least-loaded".
 */

import type { Candidate, RoutingDecision, RoutingPolicy } from '../types';
import { candidateScore } from './candidate-score';

export type LeastLoadedParams = Readonly<Record<string, never>>;
export const DEFAULT_LEAST_LOADED_PARAMS: LeastLoadedParams = {};

/**
 * Index of the least-loaded candidate, considering only indices for which `isEligible` holds
 * (all by default). -1 when none is eligible.
 */
export function indexOfLeastLoaded(candidates: readonly Candidate[], isEligible: (index: number) => boolean = () => true): number {
  let best = -1;
  let bestInflight = Number.POSITIVE_INFINITY;
  for (const [index, candidate] of candidates.entries()) {
    if (candidate.inflight < bestInflight && isEligible(index)) {
      best = index;
      bestInflight = candidate.inflight;
    }
  }
  return best;
}

export function createLeastLoadedPolicy(_params: Partial<LeastLoadedParams> = {}): RoutingPolicy {
  return {
    name: 'leastloaded',
    scoreDirection: 'lower is better: in-flight requests, [0, ∞)',
    usesPrefixMatch: false,
    atomicRule: { kind: 'least-loaded' },
    choose: (_request, candidates) => leastLoadedDecision(candidates),
  };
}

/** The least-loaded candidate as a decision (score = in-flight), shared by policies that fall back to it. */
export function leastLoadedDecision(candidates: readonly Candidate[]): RoutingDecision {
  const chosen = candidates[indexOfLeastLoaded(candidates)];
  if (chosen === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
  return {
    kind: 'routed',
    backendId: chosen.backend.id,
    reason: 'least-loaded',
    scores: candidates.map((candidate) => candidateScore(candidate, candidate.inflight)),
  };
}
