/**
 * `random` — a uniformly random candidate, drawn from `context.random` (seedable in tests).
 *
 * Parameters: none.
 * Score: none — random does not score; every score is 0.
 * Reasons: `random`.
 */

import type { RoutingPolicy } from '../types';
import { candidateScore } from './candidate-score';
import { resolveParams, type ParamsOf, type ParamTable } from './policy-params';

export const RANDOM_PARAMS = {} as const satisfies ParamTable;
export type RandomParams = ParamsOf<typeof RANDOM_PARAMS>;

export function createRandomPolicy(params: Partial<RandomParams> = {}): RoutingPolicy {
  resolveParams(RANDOM_PARAMS, params);
  return {
    name: 'random',
    scoreDirection: 'none: every score is 0',
    usesPrefixMatch: false,
    recordsOwnership: 'at-routing',
    choose(_request, candidates, context) {
      // min() guards a random() that returns exactly 1 despite its contract.
      const index = Math.min(Math.floor(context.random() * candidates.length), candidates.length - 1);
      const chosen = candidates[index];
      if (chosen === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
      return {
        kind: 'routed',
        backendId: chosen.backend.id,
        reason: 'random',
        scores: candidates.map((candidate) => candidateScore(candidate, 0)),
      };
    },
  };
}
