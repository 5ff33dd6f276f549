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

import { leastLoadedRule } from '../rules/least-loaded';
import type { Candidate, LeastLoadedOutcome, RoutingDecision, RoutingPolicy } from '../types';
import { candidateScore } from './candidate-score';
import { resolveParams, type ParamsOf, type ParamTable } from './policy-params';

export const LEAST_LOADED_PARAMS = {} as const satisfies ParamTable;
export type LeastLoadedParams = ParamsOf<typeof LEAST_LOADED_PARAMS>;

/**
 * Index of the least-loaded candidate, considering only indices for which `isEligible` holds
 * (all by default). -1 when none is eligible.
 */
export function indexOfLeastLoaded(
  candidates: readonly Candidate[],
  isEligible: (index: number) => boolean = () => true,
): number {
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

export function createLeastLoadedPolicy(params: Partial<LeastLoadedParams> = {}): RoutingPolicy {
  resolveParams(LEAST_LOADED_PARAMS, params);
  return {
    name: 'leastloaded',
    scoreDirection: 'lower is better: in-flight requests, [0, ∞)',
    usesPrefixMatch: false,
    recordsOwnership: 'at-routing',
    atomicRule: leastLoadedRule(explainLeastLoadedOutcome),
    choose: (_request, candidates) => leastLoadedDecision(candidates),
  };
}

/** The decision of a least-loaded outcome, whoever evaluated the rule: every candidate scored by its in-flight count. */
export function explainLeastLoadedOutcome(outcome: LeastLoadedOutcome): RoutingDecision {
  const chosen = outcome.candidates[outcome.chosen];
  if (chosen === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
  return {
    kind: 'routed',
    backendId: chosen.backend.id,
    reason: outcome.reason,
    scores: outcome.candidates.map((candidate) => candidateScore(candidate, candidate.inflight)),
  };
}

/** The least-loaded candidate as a decision (score = in-flight), shared by policies that fall back to it. */
export function leastLoadedDecision(candidates: readonly Candidate[]): RoutingDecision {
  return explainLeastLoadedOutcome({
    kind: 'least-loaded',
    candidates,
    chosen: indexOfLeastLoaded(candidates),
    reason: 'least-loaded',
  });
}
