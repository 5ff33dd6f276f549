import { describe, expect, it } from 'vitest';
import {
  CACHE_AWARE_PARAMS,
  createCacheAwarePolicy,
  evaluateCost,
  type CacheAwareParams,
} from '../policies/cache-aware';
import { resolveParams } from '../policies/policy-params';
import { createLeastLoadedPolicy } from '../policies/least-loaded';
import { createPrefixAwarePolicy } from '../policies/prefix-aware';
import { aRequest } from '../test-support/builders';
import type { RoutingPolicy } from '../types';
import { decide } from './decide';
import { InMemoryRoutingState } from './in-memory-routing-state';
import type { AtomicRouteInput, DecideInput, RoutingStateStore } from './routing-state';

/** The policy with its `choose` calls counted (everything else, the atomic rule included, as it is). */
function counted(policy: RoutingPolicy): { policy: RoutingPolicy; calls: () => number } {
  let calls = 0;
  return {
    policy: {
      ...policy,
      choose: (...args) => {
        calls++;
        return policy.choose(...args);
      },
    },
    calls: () => calls,
  };
}

const request = aRequest({ blocks: 8, blockSizeBytes: 256 });
const inputOf = (policy: RoutingPolicy, leaseId: string): DecideInput => ({
  pool: 'm',
  request,
  backends: [
    { id: 'a', weight: 1 },
    { id: 'b', weight: 1 },
    { id: 'c', weight: 1 },
  ],
  policy,
  context: { nowMs: 0, random: () => 0.5 },
  leaseId,
});
const inMemory = () => new InMemoryRoutingState({ maxBlocksPerBackend: 1000, blockIdleTtlMs: 0, nowMs: () => 1000 });

/** An in-memory store that also evaluates atomic rules itself (as the Redis store does in Lua), counting its calls. */
function atomicStore(answer: 'evaluate' | 'unavailable', params: Partial<CacheAwareParams> = {}) {
  const inner = inMemory();
  const calls = { routeAtomically: 0, snapshot: 0, reserve: 0 };
  const store: RoutingStateStore = {
    async routeAtomically(input: AtomicRouteInput) {
      calls.routeAtomically++;
      if (answer === 'unavailable' || input.rule.name !== 'cost') return null;
      const snapshot = await inner.snapshot(
        input.pool,
        input.backends.map((backend) => backend.id),
        input.blockHashes,
      );
      const candidates = input.backends.map((backend) => ({
        backend,
        inflight: snapshot.inflight.get(backend.id) ?? 0,
        matchBlocks: snapshot.matchBlocks.get(backend.id) ?? 0,
        pendingPrefillTokens: snapshot.pendingPrefillTokens.get(backend.id) ?? 0,
        engine: null,
      }));
      const outcome = evaluateCost(input.request, candidates, resolveParams(CACHE_AWARE_PARAMS, params));
      const chosen = candidates[outcome.chosen];
      if (chosen)
        await inner.reserve(
          input.pool,
          chosen.backend.id,
          input.leaseId,
          input.recordOwnership ? input.blockHashes : [],
          0,
        );
      return outcome;
    },
    snapshot: (...args) => {
      calls.snapshot++;
      return inner.snapshot(...args);
    },
    reserve: (...args) => {
      calls.reserve++;
      return inner.reserve(...args);
    },
    renew: (...args) => inner.renew(...args),
    prefillDone: (...args) => inner.prefillDone(...args),
    clearBacklog: (...args) => inner.clearBacklog(...args),
    release: (...args) => inner.release(...args),
    forgetBackend: (...args) => inner.forgetBackend(...args),
    learn: (...args) => inner.learn(...args),
    inflightCounts: () => inner.inflightCounts(),
  };
  return { store, calls, inner };
}

describe('decide evaluates the policy once', () => {
  it.each<[string, () => RoutingPolicy]>([
    ['cacheaware', () => createCacheAwarePolicy()],
    ['leastloaded', () => createLeastLoadedPolicy()],
    ['prefixaware', () => createPrefixAwarePolicy()],
  ])(
    '%s on a store without routeAtomically: one snapshot, one choose, one reserve per decision',
    async (_name, make) => {
      const { policy, calls } = counted(make());
      const state = inMemory();
      for (let k = 1; k <= 5; k++) {
        const result = await decide(state, inputOf(policy, `l${k}`));
        expect(result.decision.kind).toBe('routed');
        expect(calls()).toBe(k);
      }
    },
  );

  it('with a store that evaluates the atomic rule: choose never runs, and the decision is the store’s outcome', async () => {
    const { policy, calls } = counted(createCacheAwarePolicy({ saturationInflight: 4 }));
    const { store, calls: storeCalls, inner } = atomicStore('evaluate', { saturationInflight: 4 });
    await inner.reserve('m', 'a', 'busy', request.blockHashes, 900);
    const result = await decide(store, inputOf(policy, 'l1'));
    expect(calls()).toBe(0);
    expect(storeCalls).toEqual({ routeAtomically: 1, snapshot: 0, reserve: 0 });
    // The decision names the backend the store took the lease on (its outcome, explained), not one of decide's own.
    const leased = [...inner.inflightCounts()]
      .filter(([backend, count]) => count > (backend === 'a' ? 1 : 0))
      .map(([backend]) => backend);
    expect(leased).toHaveLength(1);
    expect(result.decision).toMatchObject({ kind: 'routed', backendId: leased[0], inflightCap: 4 });
  });

  it('falls back to the snapshot path, choosing once, when the store answers null', async () => {
    const { policy, calls } = counted(createCacheAwarePolicy());
    const { store, calls: storeCalls } = atomicStore('unavailable');
    const result = await decide(store, inputOf(policy, 'l1'));
    expect(result.decision.kind).toBe('routed');
    expect(calls()).toBe(1);
    expect(storeCalls).toEqual({ routeAtomically: 1, snapshot: 1, reserve: 1 });
  });
});

describe('decide: what is recorded when', () => {
  it('hands back the blocks to record at the first output for cacheaware (default), and records nothing now', async () => {
    const state = inMemory();
    const result = await decide(state, inputOf(createCacheAwarePolicy(), 'l1'));
    expect(result.blocksAtFirstOutput).toEqual(request.blockHashes);
    const chosen = result.decision.kind === 'routed' ? result.decision.backendId : '';
    expect((await state.snapshot('m', [chosen], request.blockHashes)).matchBlocks.get(chosen)).toBeUndefined();
  });

  it.each<[string, () => RoutingPolicy, number]>([
    ['cacheaware with ownershipAt routing', () => createCacheAwarePolicy({ ownershipAt: 'routing' }), 8],
    ['prefixaware (the seed)', () => createPrefixAwarePolicy(), 8],
    ['leastloaded (reads no prefix)', () => createLeastLoadedPolicy(), 0],
  ])('%s: records at routing, nothing left for the first output', async (_label, make, recorded) => {
    const state = inMemory();
    const result = await decide(state, inputOf(make(), 'l1'));
    expect(result.blocksAtFirstOutput).toEqual([]);
    const chosen = result.decision.kind === 'routed' ? result.decision.backendId : '';
    expect((await state.snapshot('m', [chosen], request.blockHashes)).matchBlocks.get(chosen) ?? 0).toBe(recorded);
  });

  it('passes the atomic store what to record: nothing for at-first-output, the blocks for at-routing', async () => {
    const seen: AtomicRouteInput[] = [];
    const { store } = atomicStore('evaluate');
    const spy: RoutingStateStore = {
      ...store,
      routeAtomically: (input) => (seen.push(input), store.routeAtomically?.(input) ?? Promise.resolve(null)),
    };
    await decide(spy, inputOf(createCacheAwarePolicy(), 'l1'));
    await decide(spy, inputOf(createCacheAwarePolicy({ ownershipAt: 'routing' }), 'l2'));
    expect(seen.map((input) => [input.blockHashes.length, input.recordOwnership])).toEqual([
      [8, false],
      [8, true],
    ]);
  });
});
