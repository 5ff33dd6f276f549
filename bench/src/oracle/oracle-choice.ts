/**
 * `oracle` — benchmarks only (vllm-sim backends): the backend that would serve the most prompt tokens
 * from its cache, by its own word. Before deciding, the oracle router (oracle-router.ts) asks every
 * backend's `POST /sim/match` what it would serve from its prefix cache for this very request
 * (`trueMatchTokens`), so each choice takes the largest hit available right now, not an estimate.
 *
 * It is greedy and load-blind, so it is a reference, not an upper bound: taking the largest hit now
 * can pile conversations that share a system prompt onto one backend, whose cache then evicts what
 * later turns needed; a policy that spreads them can end with more hits (prefixaware beat it on
 * seed-cloud at 4 and 8 sessions, 107 % and 103 % of its hit rate). The most any placement can reach
 * is the compulsory-miss bound the bench reports beside it (runner/compulsory-bound.ts).
 *
 * Rule: the largest true match; ties (a cold prompt: everyone 0) go to the fewest in flight, then the
 * smallest prefill backlog, then the earlier backend in configuration order. A backend that did not
 * answer counts as holding nothing (it still wins on load when nobody holds anything); when none
 * answered, the rule is plain least-loaded.
 *
 * Parameters: none.
 * Score: higher is better: prompt tokens the backend says it would serve from its cache, [0, ∞)
 *        (0 when it did not answer).
 * Reasons: `cache-hit` when the chosen backend would serve at least one token from its cache, else
 *          `least-loaded`.
 */

/** One backend as the oracle sees it for one request. */
export interface OracleCandidate {
  /** What `X-Router-Backend` shows: the backend URL's `host:port`. */
  readonly backendId: string;
  /** Prompt tokens the backend says it would serve from its cache (its /sim/match); null = it did not answer. */
  readonly trueMatchTokens: number | null;
  /** Requests the oracle router has in flight on the backend. */
  readonly inflight: number;
  /** Uncached prompt tokens the oracle sent the backend that have not produced a response byte yet. */
  readonly pendingPrefillTokens: number;
}

export type OracleReason = 'cache-hit' | 'least-loaded';

export interface OracleChoice {
  readonly backendId: string;
  readonly reason: OracleReason;
  /** Per candidate, in input order: the true match it was ranked by (0 when it did not answer). */
  readonly scores: readonly number[];
}

/** The oracle's pick among `candidates`, or undefined when there are none. */
export function chooseOracleBackend(candidates: readonly OracleCandidate[]): OracleChoice | undefined {
  let best: OracleCandidate | undefined;
  for (const candidate of candidates) {
    if (best === undefined || ranksAbove(candidate, best)) best = candidate;
  }
  if (best === undefined) return undefined;
  return {
    backendId: best.backendId,
    reason: trueMatchOf(best) > 0 ? 'cache-hit' : 'least-loaded',
    scores: candidates.map(trueMatchOf),
  };
}

/** Tokens the backend said it would serve from its cache; 0 when it did not say. */
function trueMatchOf(candidate: OracleCandidate): number {
  return candidate.trueMatchTokens ?? 0;
}

/** Strictly better than `other`: larger true match, then fewer in flight, then less prefill backlog (equal → the earlier stays). */
function ranksAbove(candidate: OracleCandidate, other: OracleCandidate): boolean {
  const match = trueMatchOf(candidate) - trueMatchOf(other);
  if (match !== 0) return match > 0;
  if (candidate.inflight !== other.inflight) return candidate.inflight < other.inflight;
  return candidate.pendingPrefillTokens < other.pendingPrefillTokens;
}
