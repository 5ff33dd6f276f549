import { estimatePrefillTokens } from '../prefix/prefill-estimate';
import type { BackendId, Candidate } from '../types';
import type { DecideInput, DecideResult, RoutingStateStore } from './routing-state';

/**
 * How many times a decision is made again after its lease was refused (the backend filled up between
 * the snapshot and the reservation). Past that, the last decision's lease is taken without its cap:
 * a backend over its valve by one beats failing a request under heavy contention.
 */
export const MAX_RESERVE_CONFLICTS = 8;

/** The figures of a snapshot as candidates, in the order of `input.backends`. */
export function candidatesOf(input: DecideInput, snapshot: Awaited<ReturnType<RoutingStateStore['snapshot']>>): Candidate[] {
  return input.backends.map((backend) => ({
    backend,
    inflight: snapshot.inflight.get(backend.id) ?? 0,
    matchBlocks: snapshot.matchBlocks.get(backend.id) ?? 0,
    pendingPrefillTokens: snapshot.pendingPrefillTokens.get(backend.id) ?? 0,
    engine: input.engine?.get(backend.id) ?? null,
    ...(input.trueMatchTokens === undefined ? {} : { trueMatchTokens: input.trueMatchTokens.get(backend.id) ?? null }),
  }));
}

/**
 * `RoutingStateStore.decide` in two steps, for any policy: snapshot, `choose`, then reserve with the
 * decision's in-flight cap. The race between the two steps is harmless: the only figure a lease can
 * invalidate is a cap, which the reservation checks atomically (a refusal means "decide again on
 * fresh figures"); ownership written by a concurrent request only makes the next snapshot warmer.
 */
export async function decideWithSnapshot(store: RoutingStateStore, input: DecideInput): Promise<DecideResult> {
  const { pool, request, policy, leaseId } = input;
  const conflicts: BackendId[] = [];
  const blockHashes = policy.usesPrefixMatch ? request.blockHashes : [];
  for (;;) {
    const snapshot = await store.snapshot(
      pool,
      input.backends.map((backend) => backend.id),
      blockHashes,
    );
    const candidates = candidatesOf(input, snapshot);
    const decision = policy.choose(request, candidates, input.context);
    if (decision.kind === 'rejected') return { decision, candidates, conflicts, ruleMismatch: false };
    const chosen = candidates.find((candidate) => candidate.backend.id === decision.backendId);
    const cap = conflicts.length < MAX_RESERVE_CONFLICTS ? (decision.inflightCap ?? 0) : 0;
    const recorded = policy.recordsOwnershipAtFirstToken === true ? [] : blockHashes;
    const taken = await store.reserve(pool, decision.backendId, leaseId, recorded, estimatePrefillTokens(request, chosen?.matchBlocks ?? 0), cap);
    if (taken) return { decision, candidates, conflicts, ruleMismatch: false };
    conflicts.push(decision.backendId);
  }
}
