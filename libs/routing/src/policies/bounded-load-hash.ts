/**
 * Hashing with bounded loads (Mirrokni et al., "Consistent Hashing with Bounded Loads"), shared by
 * `session`, `chwbl` and `cacheaware`'s cold placement.
 *
 * 1. Preference order. A key ranks the candidates; `rendezvousOrder` uses weighted rendezvous
 *    (highest random weight) hashing: candidate c scores `−weight_c / ln(u(key, c.id))` with u
 *    uniform in (0,1), so c comes first with probability weight_c / Σ weight. The order depends only
 *    on the key and the backend ids and weights — never on candidate order, time or randomness — so
 *    every router replica computes the same order, and removing a backend only moves the keys it
 *    ranked first. (`chwbl` supplies its own order from a ring.)
 * 2. Bound. A candidate may take the request while its in-flight ≤
 *    `ceil(loadFactor · (totalInflight + 1) · weight / totalWeight)` (totals over the candidates
 *    given). Walk the order and take the first within its bound. With loadFactor ≥ 1 some
 *    candidate always is (the one at or below its weighted mean), so the key's first preference
 *    keeps it until it carries about loadFactor× its fair share, then the overflow goes to the
 *    next preference — the same next one on every replica.
 *
 * loadFactor: [1, ∞); 1.25 is the common default (Vimeo/HAProxy, KubeAI, SMG); larger = stickier.
 */

import type { BackendInfo, Candidate, DecisionReason, RoutingDecision } from '../types';
import { candidateScore } from './candidate-score';
import { combineHash53, hashString53, weightedRendezvousScore } from '../hash/hash53';
import { indexOfLeastLoaded } from './least-loaded';

export interface BoundedLoadChoice {
  /** Index into the candidates of the chosen one. */
  readonly index: number;
  /** True when the chosen one is the key's first preference (nothing spilled). */
  readonly isFirstPreference: boolean;
  /** Preference rank of each candidate, in candidate order: 0 = first preference. */
  readonly ranks: readonly number[];
  /** Load bound of each candidate, in candidate order: it may take the request while in-flight ≤ bound. */
  readonly bounds: readonly number[];
}

/** Keeps float noise (e.g. 1.1 · 10 = 11.000000000000002) from raising a bound by one. */
const BOUND_EPSILON = 1e-9;

/** `ceil(loadFactor · (totalInflight + 1) · weight / totalWeight)`, in requests. */
export function loadBound(loadFactor: number, totalInflight: number, weight: number, totalWeight: number): number {
  return Math.ceil((loadFactor * (totalInflight + 1) * weight) / totalWeight - BOUND_EPSILON);
}

/** hashString53 of each backend id, kept per BackendInfo (they live as long as their backend's entry). */
const idHashes = new WeakMap<BackendInfo, number>();

function idHashOf(backend: BackendInfo): number {
  let hash = idHashes.get(backend);
  if (hash === undefined) {
    hash = hashString53(backend.id);
    idHashes.set(backend, hash);
  }
  return hash;
}

/** Rendezvous weight of one backend for a key; higher = more preferred. Weight must be > 0. */
export function backendRendezvousWeight(key: number, backend: BackendInfo): number {
  return weightedRendezvousScore(combineHash53(key, idHashOf(backend)), backend.weight);
}

/** Rendezvous weight of one candidate's backend for a key (backendRendezvousWeight). */
export function rendezvousWeight(key: number, candidate: Candidate): number {
  return backendRendezvousWeight(key, candidate.backend);
}

/** Backend indices, most preferred first, by weighted rendezvous hashing of `key`. */
export function backendRendezvousOrder(key: number, backends: readonly BackendInfo[]): number[] {
  const weights = backends.map((backend) => backendRendezvousWeight(key, backend));
  const order = backends.map((_backend, index) => index);
  // Ties (practically impossible) fall back to the backend id, never to backend order.
  return order.sort((a, b) => (weights[b] ?? 0) - (weights[a] ?? 0) || compareIds(backends[a], backends[b]));
}

/** Candidate indices, most preferred first, by weighted rendezvous hashing of `key`. */
export function rendezvousOrder(key: number, candidates: readonly Candidate[]): number[] {
  return backendRendezvousOrder(
    key,
    candidates.map((candidate) => candidate.backend),
  );
}

function compareIds(a: BackendInfo | undefined, b: BackendInfo | undefined): number {
  const idA = a?.id ?? '';
  const idB = b?.id ?? '';
  return idA < idB ? -1 : idA > idB ? 1 : 0;
}

/**
 * Walks `order` (candidate indices, most preferred first) and takes the first candidate within its
 * load bound. If none is (only possible with loadFactor < 1 or non-positive weights), takes the
 * least-loaded one.
 */
export function chooseWithBoundedLoad(
  order: readonly number[],
  candidates: readonly Candidate[],
  loadFactor: number,
): BoundedLoadChoice {
  let totalInflight = 0;
  let totalWeight = 0;
  for (const candidate of candidates) {
    totalInflight += candidate.inflight;
    totalWeight += candidate.backend.weight;
  }
  const bounds = candidates.map((candidate) =>
    loadBound(loadFactor, totalInflight, candidate.backend.weight, totalWeight),
  );
  const ranks = new Array<number>(candidates.length).fill(candidates.length);
  for (const [rank, index] of order.entries()) ranks[index] = rank;

  for (const [rank, index] of order.entries()) {
    const candidate = candidates[index];
    const bound = bounds[index];
    if (candidate !== undefined && bound !== undefined && candidate.inflight <= bound) {
      return { index, isFirstPreference: rank === 0, ranks, bounds };
    }
  }
  return { index: indexOfLeastLoaded(candidates), isFirstPreference: false, ranks, bounds };
}

/** Rendezvous order for `key`, then the first candidate within its load bound. */
export function chooseByBoundedLoadHash(
  key: number,
  candidates: readonly Candidate[],
  loadFactor: number,
): BoundedLoadChoice {
  return chooseWithBoundedLoad(rendezvousOrder(key, candidates), candidates, loadFactor);
}

/**
 * The decision for a bounded-load choice: every candidate scored by its preference rank with its
 * bound, `firstReason` when the key's first preference took it, `spilledReason` otherwise.
 */
export function boundedLoadDecision(
  choice: BoundedLoadChoice,
  candidates: readonly Candidate[],
  reasons: { readonly first: DecisionReason; readonly spilled: DecisionReason },
): RoutingDecision {
  const chosen = candidates[choice.index];
  if (chosen === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
  const scores = candidates.map((candidate, index) => {
    const bound = choice.bounds[index] ?? 0;
    return candidateScore(candidate, choice.ranks[index] ?? candidates.length, {
      parts: { bound },
      excluded: candidate.inflight > bound ? 'over-load-bound' : undefined,
    });
  });
  return {
    kind: 'routed',
    backendId: chosen.backend.id,
    reason: choice.isFirstPreference ? reasons.first : reasons.spilled,
    scores,
  };
}
