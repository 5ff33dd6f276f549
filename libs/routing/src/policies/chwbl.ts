/**
 * `chwbl` — consistent hashing with bounded loads on the request's head (KubeAI `PrefixHash`,
 * Vimeo/HAProxy): requests whose routing text starts with the same first block (same model, salt,
 * tools and opening of the system prompt) go to the same backend while it is within its load bound.
 *
 * 1. Ring: each backend owns `round(vnodesPerWeight · weight)` (≥ 1) points
 *    `hash(backend id, i)`; built once per backend set (ids, weights, order) and cached.
 * 2. Walk clockwise from `request.headHash`; the order in which backends are first met is the
 *    request's preference order (equal on every replica: it depends only on ids and weights).
 * 3. Take the first backend with in-flight ≤ `ceil(loadFactor · (totalInflight + 1) · weight /
 *    totalWeight)`; removing a backend moves only the heads it owned.
 *
 * Blind to anything after the first block: two conversations sharing a system prompt longer than a
 * block always co-locate, which is the point, until the bound spreads them.
 *
 * Parameters: CHWBL_PARAMS below.
 * Score: the candidate's rank in the ring walk, lower is better, [0, n−1]. parts: { bound }.
 * Reasons: `consistent-hash` (first backend met), `consistent-hash-spilled` (a later one).
 */

import type { Candidate, RoutingPolicy } from '../types';
import { combineHash53, hashString53 } from '../hash/hash53';
import { boundedLoadDecision, chooseWithBoundedLoad } from './bounded-load-hash';
import { resolveParams, type ParamsOf, type ParamTable } from './policy-params';

export const CHWBL_PARAMS = {
  loadFactor: {
    default: 1.25,
    min: 1,
    unit: '',
    doc: 'how far above its fair share a backend keeps its heads (bounded load)',
    configKey: 'loadFactor',
  },
  vnodesPerWeight: {
    default: 160,
    min: 1,
    max: 10_000,
    integer: true,
    unit: '',
    doc: 'virtual nodes per unit weight on the ring (more = smoother key split, bigger ring)',
    configKey: 'chwblVirtualNodes',
  },
} as const satisfies ParamTable;

export type ChwblParams = ParamsOf<typeof CHWBL_PARAMS>;

/** Rings kept per policy instance; backend sets change rarely (health flips), so a few suffice. */
const MAX_CACHED_RINGS = 16;

interface HashRing {
  /** Ring points, ascending. */
  readonly points: Float64Array;
  /** owners[i] = candidate index that owns points[i]. */
  readonly owners: Int32Array;
}

function ringKey(candidates: readonly Candidate[]): string {
  let key = '';
  for (const candidate of candidates) key += `${candidate.backend.id}\u0000${candidate.backend.weight}\u0001`;
  return key;
}

function buildRing(candidates: readonly Candidate[], vnodesPerWeight: number): HashRing {
  const entries: { point: number; owner: number; id: string }[] = [];
  for (const [owner, candidate] of candidates.entries()) {
    const idHash = hashString53(candidate.backend.id);
    const count = Math.max(1, Math.round(vnodesPerWeight * candidate.backend.weight));
    for (let vnode = 0; vnode < count; vnode++)
      entries.push({ point: combineHash53(idHash, vnode), owner, id: candidate.backend.id });
  }
  // Equal points (practically impossible) are ordered by id, never by candidate order.
  entries.sort((a, b) => a.point - b.point || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return {
    points: Float64Array.from(entries, (entry) => entry.point),
    owners: Int32Array.from(entries, (entry) => entry.owner),
  };
}

/** Index of the first point ≥ key (points.length when none: the walk wraps to 0). */
function firstPointAtOrAfter(points: Float64Array, key: number): number {
  let low = 0;
  let high = points.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if ((points[mid] ?? 0) < key) low = mid + 1;
    else high = mid;
  }
  return low;
}

/** Candidate indices in the order a clockwise walk from `key` first meets them. */
function ringOrder(ring: HashRing, key: number, candidateCount: number): number[] {
  const order: number[] = [];
  const seen = new Uint8Array(candidateCount);
  const size = ring.points.length;
  const start = firstPointAtOrAfter(ring.points, key);
  for (let step = 0; step < size && order.length < candidateCount; step++) {
    const owner = ring.owners[(start + step) % size] ?? 0;
    if (seen[owner] === 0) {
      seen[owner] = 1;
      order.push(owner);
    }
  }
  return order;
}

export function createChwblPolicy(params: Partial<ChwblParams> = {}): RoutingPolicy {
  const { loadFactor, vnodesPerWeight } = resolveParams(CHWBL_PARAMS, params);
  const rings = new Map<string, HashRing>();

  function ringFor(candidates: readonly Candidate[]): HashRing {
    const key = ringKey(candidates);
    let ring = rings.get(key);
    if (ring === undefined) {
      ring = buildRing(candidates, vnodesPerWeight);
      if (rings.size >= MAX_CACHED_RINGS) {
        const oldest = rings.keys().next();
        if (oldest.done !== true) rings.delete(oldest.value);
      }
      rings.set(key, ring);
    }
    return ring;
  }

  return {
    name: 'chwbl',
    scoreDirection: 'lower is better: rank in the ring walk from the head hash, [0, n−1]',
    usesPrefixMatch: false,
    recordsOwnership: 'at-routing',
    choose(request, candidates) {
      const order = ringOrder(ringFor(candidates), request.headHash, candidates.length);
      const choice = chooseWithBoundedLoad(order, candidates, loadFactor);
      return boundedLoadDecision(choice, candidates, { first: 'consistent-hash', spilled: 'consistent-hash-spilled' });
    },
  };
}
