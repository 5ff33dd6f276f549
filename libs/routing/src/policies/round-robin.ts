/**
 * `roundrobin` — the k-th request of this policy instance goes to candidate `k mod n` (n = number
 * of candidates at decision time). The counter lives in the instance (one per pool) and is not
 * shared between router replicas: each replica rotates on its own.
 *
 * Parameters: none.
 * Score: none — round-robin does not score; every score is 0.
 * Reasons: `round-robin`.
 */

import type { RoutingPolicy } from '../types';
import { candidateScore } from './candidate-score';
import { resolveParams, type ParamsOf, type ParamTable } from './policy-params';

export const ROUND_ROBIN_PARAMS = {} as const satisfies ParamTable;
export type RoundRobinParams = ParamsOf<typeof ROUND_ROBIN_PARAMS>;

export function createRoundRobinPolicy(params: Partial<RoundRobinParams> = {}): RoutingPolicy {
  resolveParams(ROUND_ROBIN_PARAMS, params);
  let counter = 0;
  return {
    name: 'roundrobin',
    scoreDirection: 'none: every score is 0',
    usesPrefixMatch: false,
    recordsOwnership: 'at-routing',
    choose(_request, candidates) {
      const chosen = candidates[counter % candidates.length];
      // Wrap well before 2^53 so the modulo stays exact forever.
      counter = (counter + 1) % 0x40000000;
      if (chosen === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
      return {
        kind: 'routed',
        backendId: chosen.backend.id,
        reason: 'round-robin',
        scores: candidates.map((candidate) => candidateScore(candidate, 0)),
      };
    },
  };
}
