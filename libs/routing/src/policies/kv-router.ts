/**
 * `kvrouter` — the seed sanketsultan/kv-router rule (`router/routing.py`), kept for comparison:
 *
 *   score(c) = cacheHitBonus · cached(c) − loadWeight · inflight(c);  max wins, random tie-break.
 *
 * cached(c) is 1 when the backend holds the request's whole context — everything before the last
 * message, the seed's key "all messages except the final one" — i.e. request.contextBlocks > 0 and
 * matchBlocks ≥ contextBlocks; else 0. Single-message chats and completions have no context and
 * are never cached. The seed matched that key exactly; a block-prefix match of at least the
 * context is the same test on our index. With the defaults a warm backend wins until it has more
 * than 10 requests in flight above the coldest one, whatever the prompt length.
 *
 * Parameters: KV_ROUTER_PARAMS below. Ownership is recorded at routing, as the seed does.
 * Score: higher is better, range (−∞, cacheHitBonus]. parts: { cacheBonus, loadPenalty }.
 * Reasons: `cache-hit` when the chosen backend holds the context, else `cache-miss`.
 */

import type { RoutingPolicy } from '../types';
import { candidateScore } from './candidate-score';
import { resolveParams, type ParamsOf, type ParamTable } from './policy-params';

export const KV_ROUTER_PARAMS = {
  cacheHitBonus: {
    default: 100,
    min: 0,
    unit: '',
    doc: 'score bonus of a backend holding the conversation',
    configKey: 'kvrouterCacheHitBonus',
  },
  loadWeight: {
    default: 10,
    min: 0,
    unit: '',
    doc: 'score penalty per in-flight request',
    configKey: 'kvrouterLoadWeight',
  },
} as const satisfies ParamTable;

export type KvRouterParams = ParamsOf<typeof KV_ROUTER_PARAMS>;

export function createKvRouterPolicy(params: Partial<KvRouterParams> = {}): RoutingPolicy {
  const { cacheHitBonus, loadWeight } = resolveParams(KV_ROUTER_PARAMS, params);

  return {
    name: 'kvrouter',
    scoreDirection: 'higher is better: cacheHitBonus·cached − loadWeight·inflight, (−∞, cacheHitBonus]',
    usesPrefixMatch: true,
    recordsOwnership: 'at-routing',
    choose(request, candidates, context) {
      const isCached = candidates.map(
        (candidate) => request.contextBlocks > 0 && candidate.matchBlocks >= request.contextBlocks,
      );
      const scores = candidates.map((candidate, index) => {
        const cacheBonus = isCached[index] === true ? cacheHitBonus : 0;
        const loadPenalty = loadWeight * candidate.inflight;
        return candidateScore(candidate, cacheBonus - loadPenalty, { parts: { cacheBonus, loadPenalty } });
      });
      let bestScore = Number.NEGATIVE_INFINITY;
      let tied: number[] = [];
      for (const [index, score] of scores.entries()) {
        if (score.score > bestScore) {
          bestScore = score.score;
          tied = [index];
        } else if (score.score === bestScore) {
          tied.push(index);
        }
      }
      const pick = tied[Math.min(Math.floor(context.random() * tied.length), tied.length - 1)];
      const chosen = pick === undefined ? undefined : candidates[pick];
      if (pick === undefined || chosen === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
      return {
        kind: 'routed',
        backendId: chosen.backend.id,
        reason: isCached[pick] === true ? 'cache-hit' : 'cache-miss',
        scores,
      };
    },
  };
}
