import { hashString53, type BackendId, type BackendInfo } from '@kvroute/routing';
import { DEFAULT_SHORTLIST } from './store-limits';

/** A shortlist as route.lua takes it: `owners` deepest owners wanted, and the caller's picks (0-based). */
export interface Shortlist {
  readonly owners: number;
  readonly picks: readonly number[];
}

/**
 * The caller's part of a shortlist, as indices into `backends`: the rule's first `preferred`, the
 * least loaded by `inflightSeen` (backends not seen yet count as idle), and a few spread by the lease
 * id. O(backends) here, in the router, where it is spread over replicas; O(1) in Redis.
 */
export function shortlistPicks(
  backends: readonly BackendInfo[],
  preferred: readonly number[],
  inflightSeen: ReadonlyMap<BackendId, number> | undefined,
  leaseId: string,
): Shortlist {
  const picks = new Set<number>(preferred.slice(0, DEFAULT_SHORTLIST.preferred));
  const byLoad = backends
    .map((backend, index) => ({ index, inflight: inflightSeen?.get(backend.id) ?? 0 }))
    .sort((a, b) => a.inflight - b.inflight || a.index - b.index);
  let added = 0;
  for (const { index } of byLoad) {
    if (added === DEFAULT_SHORTLIST.leastLoaded) break;
    if (!picks.has(index)) {
      picks.add(index);
      added++;
    }
  }
  // Spread by the lease id (random per request, never the client's): every backend's load is read now and then.
  let spread = hashString53(leaseId);
  for (let count = 0; count < DEFAULT_SHORTLIST.spread; count++) {
    picks.add(spread % backends.length);
    spread = Math.floor(spread / backends.length);
  }
  return { owners: DEFAULT_SHORTLIST.owners, picks: [...picks] };
}
