/**
 * `cacheaware` — the default policy: send each request where it is expected to start soonest,
 * counting both the prefill a backend can skip (it holds the prefix) and the queue it adds.
 *
 * Cost of sending the request to candidate c, in milliseconds (lower is better):
 *
 *   prefillMs(c) = max(0, textBytes − matchBlocks(c) · blockSizeBytes) / bytesPerToken · prefillMsPerToken
 *   backlogMs(c) = pendingPrefillTokens(c) · prefillMsPerToken      (prefills sent there, not yet started)
 *   queueMs(c)   = inflight(c) · queueMsPerRequest                 (decode interference of running requests)
 *   cost(c)      = prefillMs(c) + queueMs(c) + max(backlogMs(c), waitingMs(c)) + kvMs(c)
 *
 * With the engine's own figures fresh (health poller; `Candidate.engine`), two more terms:
 *   waitingMs(c) = engine.waiting(c) · engineWaitingMs      (its queue as the engine sees it: taken as
 *                  the larger of the two estimates of the same queue, never added to the backlog)
 *   kvMs(c)      = kvFullMs when the request's KV demand (its uncached prompt tokens + max_tokens)
 *                  exceeds the engine's free KV (`engineFreeTokens`), else 0: it would wait for KV or
 *                  preempt. So a warm backend whose queue or KV pressure costs more than the prefill
 *                  it saves loses. Unknown engine state adds nothing (it is not read as idle either).
 *
 * Why one cost in milliseconds rather than a hit bonus (kvrouter) or "longest match unless
 * saturated" (prefixaware): a cached prefix is worth exactly the prefill time it saves, so affinity
 * scales with the prompt, and a queue is worth the prefill work in it. The backlog term is what keeps
 * a shared system prompt from pulling every new conversation onto one backend (the hot-spot of
 * sglang#14305): a backend already prefilling three 5k-token documents is ~1 s away from starting,
 * which outweighs the 40 ms its cached system prompt saves, so the next new conversation goes
 * elsewhere, while follow-up turns (short prefills, big savings) stay home. With the defaults a
 * decoding request in flight (5 ms) is worth ≈ 70 tokens of prefill. Same shape as Dynamo's
 * `w · prefill_blocks + decode_blocks` and SMG's `(queued + inflight tokens) / throughput`, in time
 * units so each term reads on its own.
 *
 * Decision, in order:
 * 1. Saturation valve (off by default): candidates with inflight ≥ saturationInflight are excluded
 *    (`saturated`) — a hard per-backend cap for engines with a small batch.
 * 2. Load-spread guard (against hot-spotting, the field's most reported failure: sglang#14305,
 *    smg#1621): with m = min inflight over the remaining candidates, exclude those with
 *    inflight > max(m + spreadAbs, m · spreadRel) (`load-spread`). This is SGLang's imbalance test
 *    (`max − min > abs ∧ max > rel · min`) applied per candidate: only the hot backend leaves,
 *    affinity continues among the rest. In-flight counts are fleet-wide, so the thresholds do not
 *    depend on the number of router replicas. The least-loaded candidate always survives.
 * 3. If the valve would exclude every candidate, it is lifted for this request (no in-flight cap is
 *    promised) and the steps below run over all of them: when every backend is full the request
 *    waits somewhere, and the cost still tells where it waits least — its prefix saved, its queue —
 *    where the seed's fallback (least-loaded) throws the cache away exactly when the fleet is busiest.
 * 4. Cold prompt (only with minMatchBlocks ≥ 1) — no candidate holds ≥ minMatchBlocks blocks: bounded-load rendezvous hashing of
 *    `headHash` over the remaining candidates (`bounded-load-hash.ts`, coldLoadFactor), `cold-hash`.
 *    Siblings of a cold prompt (same first block) meet on one backend, and every router replica
 *    agrees on which without talking to the others; unrelated prompts spread by hash, not all onto
 *    the momentarily least-loaded backend.
 * 5. Otherwise the cheapest remaining candidate; equal costs are broken by rendezvous weight of
 *    `headHash` (deterministic across replicas, spread across heads). Reason: `load-guard` when the
 *    cheapest candidate overall (among those the valve kept) was excluded by the load-spread guard;
 *    else `spilled-from-saturated` when a warmer eligible candidate existed but its backlog and queue
 *    cost more than the prefill it would save (the request spills, as in the seed's valve, but
 *    by cost rather than by a fixed count); else `prefix-affinity` when the chosen candidate holds
 *    ≥ max(1, minMatchBlocks) blocks; else `least-loaded` (a cold backend won on queue cost).
 *
 * Parameters (default, range):
 * - bytesPerToken       4,    > 0 (0.5 … 16 sensible): routing-text bytes per engine token.
 * - prefillMsPerToken   0.07, ≥ 0: prefill time per uncached token (0.07 ≈ 14 k tokens/s).
 * - queueMsPerRequest   5,    ≥ 0: start delay added by each request already in flight (beyond its
 *                             prefill backlog, which is counted in tokens).
 * - minMatchBlocks      0,    integer ≥ 0: with ≥ 1, a prompt no backend holds that many blocks of
 *                             is placed by bounded-load hashing (step 4); 0 (default) sends every
 *                             prompt by cost, which balances cold prompts by their prefill backlog
 *                             in tokens (measured better on traces without shared prefixes:
 *                             docs/results.md) while ties still follow the head hash.
 * - saturationInflight  0,    integer ≥ 0: hard in-flight cap per backend; 0 = valve off.
 * - spreadAbs           8,    ≥ 0: allowed in-flight excess over the least-loaded backend; 0 = guard off.
 * - spreadRel           2.0,  ≥ 1: allowed in-flight ratio to the least-loaded backend.
 * - coldLoadFactor      1.25, ≥ 1: bound of the cold placement (see bounded-load-hash.ts).
 * - engineWaitingMs     40,   ≥ 0: start delay per request waiting in the engine's own queue.
 * - kvFullMs            250,  ≥ 0: cost of sending a request to an engine short of free KV for it.
 * - ownershipAtFirstToken true: a backend counts as holding a request's prefix from its first token
 *                             (the prefix is computed then), not from the moment it was routed there
 *                             (false, the seed routers' speculative recording). See
 *                             `RoutingPolicy.recordsOwnershipAtFirstToken` and docs/results.md.
 * Score: cost in ms, lower is better, [0, ∞). parts: { prefillMs, backlogMs, queueMs, waitingMs, kvMs } (+ { hashRank, bound } for cold placement).
 * Reasons: `prefix-affinity`, `spilled-from-saturated`, `least-loaded`, `load-guard`, `cold-hash`.
 */

import type { Candidate, CandidateScore, DecisionReason, EngineLoad, RoutingDecision, RoutingPolicy, RoutingRequest } from '../types';
import { chooseByBoundedLoadHash, rendezvousWeight } from './bounded-load-hash';
import { estimatePrefillTokens } from '../prefix/prefill-estimate';
import { candidateScore } from './candidate-score';
import { indexOfLeastLoaded } from './least-loaded';
import { checkParamRange, withDefaults } from './policy-params';

export interface CacheAwareParams {
  readonly bytesPerToken: number;
  readonly prefillMsPerToken: number;
  readonly queueMsPerRequest: number;
  readonly minMatchBlocks: number;
  readonly saturationInflight: number;
  readonly spreadAbs: number;
  readonly spreadRel: number;
  readonly coldLoadFactor: number;
  readonly engineWaitingMs: number;
  readonly kvFullMs: number;
  readonly ownershipAtFirstToken: boolean;
}

export const DEFAULT_CACHE_AWARE_PARAMS: CacheAwareParams = {
  bytesPerToken: 4,
  prefillMsPerToken: 0.07,
  queueMsPerRequest: 5,
  minMatchBlocks: 0,
  saturationInflight: 0,
  spreadAbs: 8,
  spreadRel: 2,
  coldLoadFactor: 1.25,
  engineWaitingMs: 40,
  kvFullMs: 250,
  ownershipAtFirstToken: true,
};

/** Usage at or above which an engine that reports no KV capacity counts as full. */
const KV_FULL_USAGE = 0.98;

/**
 * The engine's free KV in tokens as it reports it, an integer: -1 = no limit known (no fresh engine
 * state, no usage reported, or no capacity reported and usage below KV_FULL_USAGE), 0 = full. The Redis store passes this
 * same number to its Lua rule, so both decide on one figure.
 */
export function engineReportedFreeTokens(engine: EngineLoad | null | undefined): number {
  if (engine === undefined || engine === null || engine.kvUsage === null) return -1;
  if (engine.kvCapacityTokens === null) return engine.kvUsage >= KV_FULL_USAGE ? 0 : -1;
  return Math.max(0, Math.floor(engine.kvCapacityTokens * (1 - Math.min(1, Math.max(0, engine.kvUsage)))));
}

/**
 * Free KV for cacheaware's KV term: the reported free tokens minus the prefills sent there and not
 * started (not in the engine's usage yet); -1 = no limit known.
 */
function engineFreeTokens(candidate: Candidate): number {
  const reported = engineReportedFreeTokens(candidate.engine);
  return reported < 0 ? -1 : Math.max(0, reported - candidate.pendingPrefillTokens);
}

/** Requests waiting in the engine's own queue; 0 when unknown. */
export function engineWaiting(engine: EngineLoad | null | undefined): number {
  return engine?.waiting ?? 0;
}

/** Costs closer than this (ms) are equal: float noise must not decide between two backends. */
const COST_EPSILON_MS = 1e-9;

type Exclusion = 'saturated' | 'load-spread' | undefined;

/** Per-candidate cost terms, in candidate order. */
interface Costs {
  readonly prefillMs: readonly number[];
  readonly queueMs: readonly number[];
  readonly backlogMs: readonly number[];
  readonly waitingMs: readonly number[];
  readonly kvMs: readonly number[];
  readonly totalMs: readonly number[];
}

function estimateCosts(request: RoutingRequest, candidates: readonly Candidate[], p: CacheAwareParams): Costs {
  const prefillMs = candidates.map((c) => estimatePrefillTokens(request, c.matchBlocks, p.bytesPerToken) * p.prefillMsPerToken);
  const queueMs = candidates.map((c) => c.inflight * p.queueMsPerRequest);
  const backlogMs = candidates.map((c) => c.pendingPrefillTokens * p.prefillMsPerToken);
  const waitingMs = candidates.map((c) => engineWaiting(c.engine) * p.engineWaitingMs);
  const generation = request.maxTokens ?? 0;
  const kvMs = candidates.map((c) => {
    const free = engineFreeTokens(c);
    return free >= 0 && free < estimatePrefillTokens(request, c.matchBlocks, p.bytesPerToken) + generation ? p.kvFullMs : 0;
  });
  // Summed in this order in lib/choose-backend.lua too: float addition is not associative.
  const totalMs = prefillMs.map((prefill, index) => prefill + (queueMs[index] ?? 0) + Math.max(backlogMs[index] ?? 0, waitingMs[index] ?? 0) + (kvMs[index] ?? 0));
  return { prefillMs, queueMs, backlogMs, waitingMs, kvMs, totalMs };
}

/**
 * Valve, then load-spread guard; the guard's minimum is taken over what the valve kept. A valve that
 * would exclude every candidate is lifted (`valveLifted`): the request waits somewhere anyway, and the
 * cost rule still knows where it waits least (its prefill saved, its queue) where least-loaded would not.
 */
function findExclusions(candidates: readonly Candidate[], p: CacheAwareParams): { excluded: Exclusion[]; valveLifted: boolean } {
  let result: Exclusion[] = candidates.map((c) => (p.saturationInflight > 0 && c.inflight >= p.saturationInflight ? 'saturated' : undefined));
  const valveLifted = result.length > 0 && result.every((exclusion) => exclusion === 'saturated');
  if (valveLifted) result = candidates.map(() => undefined);
  if (p.spreadAbs === 0) return { excluded: result, valveLifted };
  let minInflight = Number.POSITIVE_INFINITY;
  for (const [index, c] of candidates.entries()) if (result[index] === undefined) minInflight = Math.min(minInflight, c.inflight);
  const limit = Math.max(minInflight + p.spreadAbs, minInflight * p.spreadRel);
  for (const [index, c] of candidates.entries()) if (result[index] === undefined && c.inflight > limit) result[index] = 'load-spread';
  return { excluded: result, valveLifted };
}

/**
 * The cheapest of `indices` (candidate indices); costs within COST_EPSILON_MS tie, and ties go to
 * the highest rendezvous weight for `key`. -1 when `indices` is empty.
 */
function indexOfCheapest(indices: readonly number[], totalMs: readonly number[], candidates: readonly Candidate[], key: number): number {
  let best = -1;
  let bestCost = Number.POSITIVE_INFINITY;
  let bestWeight: number | undefined;
  for (const index of indices) {
    const candidate = candidates[index];
    const cost = totalMs[index];
    if (candidate === undefined || cost === undefined || cost > bestCost + COST_EPSILON_MS) continue;
    const bestCandidate = candidates[best];
    if (cost < bestCost - COST_EPSILON_MS || bestCandidate === undefined) {
      best = index;
      bestCost = cost;
      bestWeight = undefined; // computed only if a tie shows up
      continue;
    }
    bestWeight ??= rendezvousWeight(key, bestCandidate);
    const weight = rendezvousWeight(key, candidate);
    if (weight > bestWeight) {
      best = index;
      bestWeight = weight;
    }
  }
  return best;
}

function indicesWhere(count: number, keep: (index: number) => boolean): number[] {
  const indices: number[] = [];
  for (let index = 0; index < count; index++) if (keep(index)) indices.push(index);
  return indices;
}

export function createCacheAwarePolicy(params: Partial<CacheAwareParams> = {}): RoutingPolicy {
  const p = withDefaults(DEFAULT_CACHE_AWARE_PARAMS, params);
  checkParamRange('bytesPerToken', p.bytesPerToken, { min: Number.MIN_VALUE });
  checkParamRange('prefillMsPerToken', p.prefillMsPerToken, { min: 0 });
  checkParamRange('queueMsPerRequest', p.queueMsPerRequest, { min: 0 });
  checkParamRange('minMatchBlocks', p.minMatchBlocks, { min: 0, integer: true });
  checkParamRange('saturationInflight', p.saturationInflight, { min: 0, integer: true });
  checkParamRange('spreadAbs', p.spreadAbs, { min: 0 });
  checkParamRange('spreadRel', p.spreadRel, { min: 1 });
  checkParamRange('coldLoadFactor', p.coldLoadFactor, { min: 1 });
  checkParamRange('engineWaitingMs', p.engineWaitingMs, { min: 0 });
  checkParamRange('kvFullMs', p.kvFullMs, { min: 0 });
  const isWarm = (c: Candidate): boolean => c.matchBlocks >= p.minMatchBlocks;

  return {
    name: 'cacheaware',
    scoreDirection: 'lower is better: estimated start cost in ms (prefill of unmatched tokens + queue), [0, ∞)',
    usesPrefixMatch: true,
    recordsOwnershipAtFirstToken: p.ownershipAtFirstToken,
    atomicRule: { kind: 'cost', params: p },
    choose(request, candidates) {
      const costs = estimateCosts(request, candidates, p);
      const { excluded, valveLifted } = findExclusions(candidates, p);
      const eligible = indicesWhere(candidates.length, (index) => excluded[index] === undefined);
      /** Explanation lines; `extra` adds cold-placement figures for the candidates it knows. */
      const explain = (extra?: (index: number) => { parts: Record<string, number>; excluded?: string } | undefined): CandidateScore[] =>
        candidates.map((c, index) => {
          const more = extra?.(index);
          return candidateScore(c, costs.totalMs[index] ?? 0, {
            parts: {
              prefillMs: costs.prefillMs[index] ?? 0,
              backlogMs: costs.backlogMs[index] ?? 0,
              queueMs: costs.queueMs[index] ?? 0,
              waitingMs: costs.waitingMs[index] ?? 0,
              kvMs: costs.kvMs[index] ?? 0,
              ...more?.parts,
            },
            excluded: excluded[index] ?? more?.excluded,
          });
        });
      const routed = (index: number, reason: DecisionReason, scores: readonly CandidateScore[]): RoutingDecision => {
        const chosen = candidates[index];
        if (chosen === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
        // Choices made among valve-kept candidates promise to stay below the valve; see types.ts.
        const capped = p.saturationInflight > 0 && !valveLifted && excluded[index] === undefined;
        return { kind: 'routed', backendId: chosen.backend.id, reason, scores, ...(capped ? { inflightCap: p.saturationInflight } : {}) };
      };

      // 3. Nothing left (cannot happen with the guard keeping the least-loaded): still serve.
      if (eligible.length === 0) return routed(indexOfLeastLoaded(candidates), 'least-loaded', explain());

      // 4. Cold prompt: agree on a backend by hashing the head, within a load bound.
      if (p.minMatchBlocks > 0 && !candidates.some(isWarm)) {
        const pool = eligible.flatMap((index) => candidates[index] ?? []);
        const choice = chooseByBoundedLoadHash(request.headHash, pool, p.coldLoadFactor);
        const positionOf = new Map(eligible.map((index, position) => [index, position]));
        const scores = explain((index) => {
          const position = positionOf.get(index);
          const bound = position === undefined ? undefined : choice.bounds[position];
          if (position === undefined || bound === undefined) return undefined;
          const overBound = (candidates[index]?.inflight ?? 0) > bound;
          return { parts: { hashRank: choice.ranks[position] ?? 0, bound }, ...(overBound ? { excluded: 'over-load-bound' } : {}) };
        });
        return routed(eligible[choice.index] ?? -1, 'cold-hash', scores);
      }

      // 5. Cheapest eligible candidate, and whether the guard overruled a cheaper hot one.
      const chosen = indexOfCheapest(eligible, costs.totalMs, candidates, request.headHash);
      const keptByValve = indicesWhere(candidates.length, (index) => excluded[index] !== 'saturated');
      const cheapestUnguarded = indexOfCheapest(keptByValve, costs.totalMs, candidates, request.headHash);
      const chosenCandidate = candidates[chosen];
      // The warmest backend the valve kept: if the request does not go there, say why it left.
      const deepestMatch = Math.max(...keptByValve.map((index) => candidates[index]?.matchBlocks ?? 0));
      const deepestGuarded = keptByValve.some((index) => candidates[index]?.matchBlocks === deepestMatch && excluded[index] === 'load-spread');
      let reason: DecisionReason = 'least-loaded';
      if (chosenCandidate !== undefined && chosenCandidate.matchBlocks < deepestMatch) reason = deepestGuarded ? 'load-guard' : 'spilled-from-saturated';
      else if (excluded[cheapestUnguarded] === 'load-spread') reason = 'load-guard';
      else if (chosenCandidate !== undefined && chosenCandidate.matchBlocks >= Math.max(1, p.minMatchBlocks)) reason = 'prefix-affinity';
      return routed(chosen, reason, explain());
    },
  };
}
