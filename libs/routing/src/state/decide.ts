import { estimatePrefillTokens } from '../prefix/prefill-estimate';
import type { BackendId, BlockHash, Candidate, RoutingDecision } from '../types';
import type { DecideInput, DecideResult, RoutingSnapshot, RoutingStateStore } from './routing-state';

/**
 * How many times a decision is made again after its lease was refused (the backend filled up between
 * the snapshot and the reservation). Past that, the last decision's lease is taken without its cap:
 * a backend over its valve by one beats failing a request under heavy contention.
 */
export const MAX_RESERVE_CONFLICTS = 8;

/** The figures of a snapshot as candidates, in the order of `input.backends`. */
export function candidatesOf(input: DecideInput, snapshot: RoutingSnapshot): Candidate[] {
  return input.backends.map((backend) => ({
    backend,
    inflight: snapshot.inflight.get(backend.id) ?? 0,
    matchBlocks: snapshot.matchBlocks.get(backend.id) ?? 0,
    matchRecordedAtMs: snapshot.matchRecordedAtMs?.get(backend.id) ?? null,
    pendingPrefillTokens: snapshot.pendingPrefillTokens.get(backend.id) ?? 0,
    engine: input.engine?.get(backend.id) ?? null,
  }));
}

/**
 * Routes one request: the policy is evaluated once, the lease is taken on the chosen backend, and
 * its ownership of the request's prefix is recorded (now, or at the first output token: see
 * `blocksAtFirstOutput`). With `explainDecision`, the only place that reads what a policy asks of its callers
 * (`usesPrefixMatch`, `recordsOwnership`, `atomicRule`).
 *
 * - The policy has an atomic rule and the store can evaluate it (`routeAtomically`): one call, in
 *   which the store reads the figures, evaluates the rule, takes the lease and records; the decision
 *   is the rule's own outcome explained by the policy (`atomicRule.explain`); `choose` does not run.
 * - Otherwise (or when the store answers null: a failover store while degraded): snapshot, `choose`
 *   once, then reserve with the decision's in-flight cap. The race between the two steps is harmless:
 *   the only figure a lease can invalidate is a cap, which the reservation checks atomically (a
 *   refusal means "decide again on fresh figures", up to MAX_RESERVE_CONFLICTS times); ownership
 *   written by a concurrent request only makes the next snapshot warmer.
 */
export async function decide(store: RoutingStateStore, input: DecideInput): Promise<DecideResult> {
  const { pool, request, policy, leaseId } = input;
  const blockHashes: readonly BlockHash[] = policy.usesPrefixMatch ? request.blockHashes : [];
  const recordAtRouting = policy.recordsOwnership === 'at-routing';
  const blocksAtFirstOutput: readonly BlockHash[] = recordAtRouting ? [] : blockHashes;

  const rule = policy.atomicRule;
  if (rule !== undefined && store.routeAtomically !== undefined) {
    const outcome = await store.routeAtomically({
      pool,
      request,
      backends: input.backends,
      ...(input.engine === undefined ? {} : { engine: input.engine }),
      rule,
      leaseId,
      blockHashes,
      recordOwnership: recordAtRouting && blockHashes.length > 0,
    });
    if (outcome !== null) {
      const decision = rule.explain(outcome);
      return {
        decision,
        candidates: outcome.candidates,
        conflicts: [],
        blocksAtFirstOutput: decision.kind === 'routed' ? blocksAtFirstOutput : [],
      };
    }
  }

  const conflicts: BackendId[] = [];
  const recorded = recordAtRouting ? blockHashes : [];
  for (;;) {
    const snapshot = await store.snapshot(
      pool,
      input.backends.map((backend) => backend.id),
      blockHashes,
    );
    const candidates = candidatesOf(input, snapshot);
    const decision = policy.choose(request, candidates, input.context);
    if (decision.kind === 'rejected') return { decision, candidates, conflicts, blocksAtFirstOutput: [] };
    const chosen = candidates.find((candidate) => candidate.backend.id === decision.backendId);
    const cap = conflicts.length < MAX_RESERVE_CONFLICTS ? (decision.inflightCap ?? 0) : 0;
    const taken = await store.reserve(
      pool,
      decision.backendId,
      leaseId,
      recorded,
      estimatePrefillTokens(request, chosen?.matchBlocks ?? 0),
      cap,
    );
    if (taken) return { decision, candidates, conflicts, blocksAtFirstOutput };
    conflicts.push(decision.backendId);
  }
}

/**
 * What `decide` would choose for `input` on the state as it is now, taking no lease and recording
 * nothing: one snapshot, `choose` once. The dry run behind the router's `/debug/route`.
 */
export async function explainDecision(store: RoutingStateStore, input: DecideInput): Promise<RoutingDecision> {
  const snapshot = await store.snapshot(
    input.pool,
    input.backends.map((backend) => backend.id),
    input.policy.usesPrefixMatch ? input.request.blockHashes : [],
  );
  return input.policy.choose(input.request, candidatesOf(input, snapshot), input.context);
}
