/**
 * `prefixaware` — the seed llm-router (zxuhan/llm-router `internal/router/prefixaware.go`) rule,
 * kept exactly so benchmarks compare against the original:
 *
 * 1. Shuffle the candidates (Fisher–Yates from the end, driven by `context.random`), then stable
 *    sort by matchBlocks descending, in-flight ascending. The shuffle randomises ties: without it
 *    every cold first turn lands on the first backend (the seed measured 18 % slower than
 *    round-robin before adding it).
 * 2. If the best match < minMatchBlocks → least-loaded over all candidates, `fallback-leastloaded`.
 * 3. Else, if the valve is on (saturationInflight > 0) and the best has in-flight ≥
 *    saturationInflight → the next candidate in sorted order with match ≥ minMatchBlocks and
 *    in-flight < saturationInflight, `spilled-from-saturated`; if there is none → least-loaded over
 *    all candidates, `spilled-fallback-leastloaded`.
 * 4. Else the best, `longest-prefix`.
 *
 * Known weaknesses (why `cacheaware` exists): no load guard below the valve, so a warm backend keeps
 * winning until it holds `saturationInflight` requests whatever the prompt length; misses go to
 * least-loaded, so siblings of a cold prompt scatter and every replica places them differently.
 *
 * Parameters: PREFIX_AWARE_PARAMS below. Ownership is recorded at routing, as the seed does.
 * Score: matchBlocks, higher is better, [0, request.blockHashes.length].
 * Reasons: `longest-prefix`, `fallback-leastloaded`, `spilled-from-saturated`, `spilled-fallback-leastloaded`.
 */

import type { Candidate, CandidateScore, RoutingDecision, RoutingPolicy } from '../types';
import { candidateScore } from './candidate-score';
import { indexOfLeastLoaded } from './least-loaded';
import { resolveParams, type ParamsOf, type ParamTable } from './policy-params';

export const PREFIX_AWARE_PARAMS = {
  minMatchBlocks: {
    default: 2,
    min: 0,
    integer: true,
    unit: 'blocks',
    doc: 'matched blocks needed to pin (0 always pins)',
    configKey: 'minMatchBlocks',
  },
  saturationInflight: {
    default: 8,
    min: 0,
    integer: true,
    unit: 'requests',
    doc: 'in-flight at which the best backend counts as saturated (the valve); 0 = off',
    configKey: 'saturationInflight',
  },
} as const satisfies ParamTable;

export type PrefixAwareParams = ParamsOf<typeof PREFIX_AWARE_PARAMS>;

/** Candidate indices shuffled by `random` (Fisher–Yates from the end, as Go's rand.Shuffle). */
function shuffledIndices(count: number, random: () => number): number[] {
  const indices = Array.from({ length: count }, (_value, index) => index);
  for (let i = count - 1; i > 0; i--) {
    const j = Math.min(Math.floor(random() * (i + 1)), i);
    // i and j are in [0, count): the casts only restate what the loop bounds guarantee.
    const swap = indices[i] as number;
    indices[i] = indices[j] as number;
    indices[j] = swap;
  }
  return indices;
}

export function createPrefixAwarePolicy(params: Partial<PrefixAwareParams> = {}): RoutingPolicy {
  const { minMatchBlocks, saturationInflight } = resolveParams(PREFIX_AWARE_PARAMS, params);
  const valveOn = saturationInflight > 0;

  function routed(
    chosen: Candidate,
    reason: 'longest-prefix' | 'fallback-leastloaded' | 'spilled-from-saturated' | 'spilled-fallback-leastloaded',
    scores: readonly CandidateScore[],
  ): RoutingDecision {
    // The valve's promise ("below saturationInflight") holds for the warm choices; the fallbacks make none.
    const capped = valveOn && (reason === 'longest-prefix' || reason === 'spilled-from-saturated');
    return {
      kind: 'routed',
      backendId: chosen.backend.id,
      reason,
      scores,
      ...(capped ? { inflightCap: saturationInflight } : {}),
    };
  }

  return {
    name: 'prefixaware',
    scoreDirection: 'higher is better: matched prefix blocks, [0, blockHashes.length]',
    usesPrefixMatch: true,
    recordsOwnership: 'at-routing',
    choose(_request, candidates, context) {
      // Stable sort (Array.prototype.sort is stable) over the shuffled order keeps ties random.
      // Indices come from [0, candidates.length), so the cast below cannot hide an undefined.
      const sorted = shuffledIndices(candidates.length, context.random)
        .map((index) => candidates[index] as Candidate)
        .sort((a, b) => b.matchBlocks - a.matchBlocks || a.inflight - b.inflight);
      const best = sorted[0];
      if (best === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
      const plainScores = (): CandidateScore[] =>
        candidates.map((candidate) => candidateScore(candidate, candidate.matchBlocks));
      const leastLoaded = (): Candidate => candidates[indexOfLeastLoaded(candidates)] ?? best;

      if (best.matchBlocks < minMatchBlocks) return routed(leastLoaded(), 'fallback-leastloaded', plainScores());

      if (valveOn && best.inflight >= saturationInflight) {
        const scores = candidates.map((candidate) =>
          candidateScore(candidate, candidate.matchBlocks, {
            excluded:
              candidate.inflight >= saturationInflight
                ? 'saturated'
                : candidate.matchBlocks < minMatchBlocks
                  ? 'below-min-match'
                  : undefined,
          }),
        );
        for (const next of sorted.slice(1)) {
          if (next.matchBlocks < minMatchBlocks) break; // sorted: every later match is shorter
          if (next.inflight < saturationInflight) return routed(next, 'spilled-from-saturated', scores);
        }
        return routed(leastLoaded(), 'spilled-fallback-leastloaded', scores);
      }

      return routed(best, 'longest-prefix', plainScores());
    },
  };
}
