/**
 * `cacheaware` — the default policy: send each request where it is expected to start soonest,
 * counting both the prefill a backend can skip (it holds the prefix) and the queue it adds.
 *
 * Cost of sending the request to candidate c, in milliseconds (lower is better):
 *
 *   prefillMs(c) = max(0, textBytes − matchBlocks(c) · blockSizeBytes) / bytesPerToken · prefillMsPerToken
 *   backlogMs(c) = pendingPrefillTokens(c) · prefillMsPerToken      (prefills sent there, not yet started)
 *   queueMs(c)   = inflight(c) · queueMsPerRequest                 (decode interference of running requests)
 *   workMs(c)    = prefillMs(c) · prefillWorkWeight                (what that prefill costs the others: below)
 *   cost(c)      = prefillMs(c) + workMs(c) + queueMs(c) + max(backlogMs(c), waitingMs(c)) + kvMs(c) + adapterMs(c)
 *   adapterMs(c) = the wait a LoRA adapter request's adapter adds there (a load, a slot): RoutingRequest.adapterWaitMs
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
 * Why workMs: the other terms price the request's own start, and a rule that minimises only that is
 * greedy. It spills a long document to an idle cold backend as soon as the holder's backlog exceeds
 * the prefill the cache saves, but that prefill is then work the requests arriving behind it wait out
 * too, and under KV pressure a second copy of the document that evicts some other prefix there (whose
 * next request then misses). Both grow with the uncached tokens, so they are priced as a multiple of
 * the prefill: at weight w a warm backend keeps a request while its backlog is below (1 + w) times
 * the prefill it saves. Measured in docs/results.md (issue 13, long-context-mix).
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
 * Parameters: the table CACHE_AWARE_PARAMS below (default, unit, range, doc, router config key).
 * On minMatchBlocks: 0 (default) sends every prompt by cost, which balances cold prompts by their
 * prefill backlog in tokens (measured better on traces without shared prefixes: docs/results.md)
 * while ties still follow the head hash. On ownershipAt: see `RoutingPolicy.recordsOwnership`,
 * docs/adr/0005-ownership-at-first-token.md and docs/results.md.
 *
 * The rule runs in two places, with one result: here (`evaluateCost`, for `choose`) and next to the
 * Redis state (libs/redis-store; the atomic rule `cost`, rules/cost.ts and its Lua twin rules/cost.lua); both produce a
 * CostOutcome, which `explainCostOutcome` turns into the decision, so a decision reads the same
 * whichever side evaluated it (libs/redis-store's rule-parity test compares them).
 *
 * Score: cost in ms, lower is better, [0, ∞). parts: { prefillMs, workMs, backlogMs, queueMs, waitingMs, kvMs,
 * adapterMs } (+ { hashRank, bound } for cold placement).
 * Reasons: `prefix-affinity`, `spilled-from-saturated`, `least-loaded`, `load-guard`, `cold-hash`.
 */

import type {
  CostOutcome,
  Candidate,
  CostLine,
  CostReason,
  RoutingDecision,
  RoutingPolicy,
  RoutingRequest,
} from '../types';
import { chooseByBoundedLoadHash, rendezvousWeight } from './bounded-load-hash';
import { estimatePrefillTokens } from '../prefix/prefill-estimate';
import { engineReportedFreeTokens, engineWaiting } from '../state/engine-figures';
import { costRule } from '../rules/cost';
import { candidateScore } from './candidate-score';
import { indexOfLeastLoaded } from './least-loaded';
import { resolveParams, type ParamsOf, type ParamTable } from './policy-params';

export const CACHE_AWARE_PARAMS = {
  bytesPerToken: {
    default: 4,
    min: 0,
    exclusiveMin: true,
    unit: 'bytes',
    doc: 'routing-text bytes per engine token (0.5 … 16 sensible)',
  },
  prefillMsPerToken: {
    default: 0.07,
    min: 0,
    unit: 'ms',
    doc: 'prefill cost of one uncached token (0.07 ≈ 14 k tokens/s)',
    configKey: 'prefillMsPerToken',
  },
  prefillWorkWeight: {
    default: 2,
    min: 0,
    unit: '',
    doc:
      "weight of a request's own uncached prefill beyond its wait: the requests after it on that " +
      'backend wait for it too, and it evicts cached prefixes there (0 = only its own wait)',
    configKey: 'prefillWorkWeight',
  },
  queueMsPerRequest: {
    default: 5,
    min: 0,
    unit: 'ms',
    doc: 'cost of one request already in flight beyond its prefill backlog',
    configKey: 'queueMsPerRequest',
  },
  minMatchBlocks: {
    default: 0,
    min: 0,
    integer: true,
    unit: 'blocks',
    doc: 'blocks a backend must hold to count as warm: 0 = every prompt by cost, ≥ 1 places colder prompts by bounded-load hashing',
    configKey: 'minMatchBlocks',
  },
  saturationInflight: {
    default: 0,
    min: 0,
    integer: true,
    unit: 'requests',
    doc: 'in-flight at which a backend is skipped (a hard cap per backend); 0 = off',
    configKey: 'saturationInflight',
  },
  spreadAbs: {
    default: 8,
    min: 0,
    unit: 'requests',
    doc: 'load-spread guard: in-flight above min + this … (0 = guard off)',
    configKey: 'spreadAbs',
  },
  spreadRel: { default: 2, min: 1, unit: '', doc: '… and above min × this is excluded', configKey: 'spreadRel' },
  coldLoadFactor: {
    default: 1.25,
    min: 1,
    unit: '',
    doc: 'bounded-load factor of cold placement (with minMatchBlocks ≥ 1)',
    configKey: 'loadFactor',
  },
  engineWaitingMs: {
    default: 40,
    min: 0,
    unit: 'ms',
    doc: "start delay per request waiting in a backend engine's own queue, when the health poller reports it",
    configKey: 'engineWaitingMs',
  },
  kvFullMs: {
    default: 250,
    min: 0,
    unit: 'ms',
    doc: 'cost of a backend whose engine has too little free KV for the request',
    configKey: 'kvFullMs',
  },
  ownershipAt: {
    default: 'first-token',
    values: ['first-token', 'routing'],
    doc:
      "when a backend starts to count as holding a request's prefix: at its first token (the prefix " +
      'is computed; siblings arriving before are placed by load) or at routing (speculative, the ' +
      "seed routers' way)",
    configKey: 'ownershipAt',
  },
} as const satisfies ParamTable;

export type CacheAwareParams = ParamsOf<typeof CACHE_AWARE_PARAMS>;

/**
 * Free KV for cacheaware's KV term: the reported free tokens minus the prefills sent there and not
 * started (not in the engine's usage yet); -1 = no limit known.
 */
function engineFreeTokens(candidate: Candidate): number {
  const reported = engineReportedFreeTokens(candidate.engine);
  return reported < 0 ? -1 : Math.max(0, reported - candidate.pendingPrefillTokens);
}

/** Costs closer than this (ms) are equal: float noise must not decide between two backends. */
const COST_EPSILON_MS = 1e-9;

type Exclusion = CostLine['excluded'];

/** Each candidate's cost terms, in candidate order (excluded candidates too: the explanation shows them). */
function costLines(request: RoutingRequest, candidates: readonly Candidate[], p: CacheAwareParams): CostLine[] {
  const generation = request.maxTokens ?? 0;
  return candidates.map((c) => {
    const prefillTokens = estimatePrefillTokens(request, c.matchBlocks, p.bytesPerToken);
    const prefillMs = prefillTokens * p.prefillMsPerToken;
    const workMs = prefillMs * p.prefillWorkWeight;
    const backlogMs = c.pendingPrefillTokens * p.prefillMsPerToken;
    const queueMs = c.inflight * p.queueMsPerRequest;
    const waitingMs = engineWaiting(c.engine) * p.engineWaitingMs;
    const free = engineFreeTokens(c);
    const kvMs = free >= 0 && free < prefillTokens + generation ? p.kvFullMs : 0;
    const adapterMs = request.adapterWaitMs?.get(c.backend.id) ?? 0;
    // Summed in this order in rules/cost.lua too: float addition is not associative.
    const totalMs = prefillMs + workMs + queueMs + Math.max(backlogMs, waitingMs) + kvMs + adapterMs;
    return { prefillMs, backlogMs, queueMs, waitingMs, kvMs, adapterMs, totalMs };
  });
}

/**
 * Valve, then load-spread guard; the guard's minimum is taken over what the valve kept. A valve that
 * would exclude every candidate is lifted (`valveLifted`): the request waits somewhere anyway, and the
 * cost rule still knows where it waits least (its prefill saved, its queue) where least-loaded would not.
 */
function findExclusions(
  candidates: readonly Candidate[],
  p: CacheAwareParams,
): { excluded: Exclusion[]; valveLifted: boolean } {
  let result: Exclusion[] = candidates.map((c) =>
    p.saturationInflight > 0 && c.inflight >= p.saturationInflight ? 'saturated' : undefined,
  );
  const valveLifted = result.length > 0 && result.every((exclusion) => exclusion === 'saturated');
  if (valveLifted) result = candidates.map(() => undefined);
  if (p.spreadAbs === 0) return { excluded: result, valveLifted };
  let minInflight = Number.POSITIVE_INFINITY;
  for (const [index, c] of candidates.entries())
    if (result[index] === undefined) minInflight = Math.min(minInflight, c.inflight);
  const limit = Math.max(minInflight + p.spreadAbs, minInflight * p.spreadRel);
  for (const [index, c] of candidates.entries())
    if (result[index] === undefined && c.inflight > limit) result[index] = 'load-spread';
  return { excluded: result, valveLifted };
}

/**
 * The cheapest of `indices` (candidate indices); costs within COST_EPSILON_MS tie, and ties go to
 * the highest rendezvous weight for `key`. -1 when `indices` is empty.
 */
function indexOfCheapest(
  indices: readonly number[],
  lines: readonly CostLine[],
  candidates: readonly Candidate[],
  key: number,
): number {
  let best = -1;
  let bestCost = Number.POSITIVE_INFINITY;
  let bestWeight: number | undefined;
  for (const index of indices) {
    const candidate = candidates[index];
    const cost = lines[index]?.totalMs;
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

/** The cost rule (steps 1–5 of the header) in TypeScript: what `choose` decides on. */
export function evaluateCost(
  request: RoutingRequest,
  candidates: readonly Candidate[],
  p: CacheAwareParams,
): CostOutcome {
  const costs = costLines(request, candidates, p);
  const { excluded, valveLifted } = findExclusions(candidates, p);
  const lines: CostLine[] = costs.map((line, index) => {
    const exclusion = excluded[index];
    return exclusion === undefined ? line : { ...line, excluded: exclusion };
  });
  const eligible = indicesWhere(candidates.length, (index) => excluded[index] === undefined);
  const outcome = (chosen: number, reason: CostReason): CostOutcome => ({
    kind: 'cost',
    candidates,
    chosen,
    reason,
    valveLifted,
    lines,
  });

  // 3. Nothing left (cannot happen with the guard keeping the least-loaded): still serve.
  if (eligible.length === 0) return outcome(indexOfLeastLoaded(candidates), 'least-loaded');

  // 4. Cold prompt: agree on a backend by hashing the head, within a load bound.
  if (p.minMatchBlocks > 0 && !candidates.some((c) => c.matchBlocks >= p.minMatchBlocks)) {
    const pool = eligible.flatMap((index) => candidates[index] ?? []);
    const choice = chooseByBoundedLoadHash(request.headHash, pool, p.coldLoadFactor);
    eligible.forEach((index, position) => {
      const line = lines[index];
      if (line !== undefined)
        lines[index] = {
          ...line,
          cold: { hashRank: choice.ranks[position] ?? 0, bound: choice.bounds[position] ?? 0 },
        };
    });
    return outcome(eligible[choice.index] ?? -1, 'cold-hash');
  }

  // 5. Cheapest eligible candidate, and whether the guard overruled a cheaper hot one.
  const chosen = indexOfCheapest(eligible, lines, candidates, request.headHash);
  const keptByValve = indicesWhere(candidates.length, (index) => excluded[index] !== 'saturated');
  const cheapestUnguarded = indexOfCheapest(keptByValve, lines, candidates, request.headHash);
  const chosenCandidate = candidates[chosen];
  // The warmest backend the valve kept: if the request does not go there, say why it left.
  let deepestMatch = Number.NEGATIVE_INFINITY;
  for (const index of keptByValve) deepestMatch = Math.max(deepestMatch, candidates[index]?.matchBlocks ?? 0);
  const deepestGuarded = keptByValve.some(
    (index) => candidates[index]?.matchBlocks === deepestMatch && excluded[index] === 'load-spread',
  );
  let reason: CostReason = 'least-loaded';
  if (chosenCandidate !== undefined && chosenCandidate.matchBlocks < deepestMatch)
    reason = deepestGuarded ? 'load-guard' : 'spilled-from-saturated';
  else if (excluded[cheapestUnguarded] === 'load-spread') reason = 'load-guard';
  else if (chosenCandidate !== undefined && chosenCandidate.matchBlocks >= Math.max(1, p.minMatchBlocks))
    reason = 'prefix-affinity';
  return outcome(chosen, reason);
}

/**
 * The decision of a cost-rule outcome, whoever evaluated the rule: every candidate scored by its total
 * cost, its terms as parts (plus hashRank and bound where cold placement ran: over its bound =
 * `over-load-bound`), its exclusion; the valve's in-flight cap when the choice was made among the
 * candidates the valve kept.
 */
export function explainCostOutcome(outcome: CostOutcome, p: CacheAwareParams): RoutingDecision {
  const { candidates, lines } = outcome;
  const chosen = candidates[outcome.chosen];
  const chosenLine = lines[outcome.chosen];
  if (chosen === undefined || chosenLine === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
  const scores = candidates.map((candidate, index) => {
    const line = lines[index] as CostLine;
    // workMs is not carried on the line (the Lua rule returns the same five terms): it is prefillMs · weight.
    const parts: Record<string, number> = {
      prefillMs: line.prefillMs,
      workMs: line.prefillMs * p.prefillWorkWeight,
      backlogMs: line.backlogMs,
      queueMs: line.queueMs,
      waitingMs: line.waitingMs,
      kvMs: line.kvMs,
      adapterMs: line.adapterMs,
    };
    if (line.cold !== undefined) {
      parts['hashRank'] = line.cold.hashRank;
      parts['bound'] = line.cold.bound;
    }
    const overBound = line.cold !== undefined && candidate.inflight > line.cold.bound;
    return candidateScore(candidate, line.totalMs, {
      parts,
      excluded: line.excluded ?? (overBound ? 'over-load-bound' : undefined),
    });
  });
  // Choices made among valve-kept candidates promise to stay below the valve; see types.ts.
  const capped = p.saturationInflight > 0 && !outcome.valveLifted && chosenLine.excluded === undefined;
  return {
    kind: 'routed',
    backendId: chosen.backend.id,
    reason: outcome.reason,
    scores,
    ...(capped ? { inflightCap: p.saturationInflight } : {}),
  };
}

/**
 * `options.linesFromStore`: a state store's evaluation returns its own cost lines rather than this side
 * recomputing them from the figures it read (rule-parity compares the two; it costs the store more).
 */
export function createCacheAwarePolicy(
  params: Partial<CacheAwareParams> = {},
  options: { readonly linesFromStore?: boolean } = {},
): RoutingPolicy {
  const p = resolveParams(CACHE_AWARE_PARAMS, params);
  return {
    name: 'cacheaware',
    scoreDirection: 'lower is better: estimated start cost in ms (prefill of unmatched tokens + queue), [0, ∞)',
    usesPrefixMatch: true,
    recordsOwnership: p.ownershipAt === 'first-token' ? 'at-first-output' : 'at-routing',
    atomicRule: costRule(p, {
      evaluate: (request, candidates) => evaluateCost(request, candidates, p),
      explain: (outcome) => explainCostOutcome(outcome, p),
      ...options,
    }),
    choose: (request, candidates) => explainCostOutcome(evaluateCost(request, candidates, p), p),
  };
}
