import { describe, expect, it } from 'vitest';
import type { Candidate, RoutingDecision } from '../types';
import { aCandidate, aContext, aRequest, scriptedContext } from '../test-support/builders';
import { createPrefixAwarePolicy } from './prefix-aware';

/** [matchBlocks, inflight] per backend b0, b1, … */
const pool = (...specs: [number, number][]): Candidate[] =>
  specs.map(([matchBlocks, inflight], index) => aCandidate(`b${index}`, { matchBlocks, inflight }));
const routedTo = (decision: RoutingDecision) =>
  decision.kind === 'routed' ? `${decision.backendId} ${decision.reason}` : 'rejected';

describe('prefixaware (seed llm-router rules)', () => {
  it.each<[string, Candidate[], string]>([
    ['longest match wins', pool([2, 0], [6, 3], [4, 0]), 'b1 longest-prefix'],
    ['equal match: fewer in flight wins', pool([6, 5], [6, 2], [1, 0]), 'b1 longest-prefix'],
    ['best match below minMatchBlocks: least-loaded', pool([1, 4], [1, 2], [0, 3]), 'b1 fallback-leastloaded'],
    ['fallback ties go to list order', pool([0, 1], [1, 0], [0, 0]), 'b1 fallback-leastloaded'],
    [
      'saturated best spills to the next warm one below the valve',
      pool([9, 8], [5, 7], [2, 0]),
      'b1 spilled-from-saturated',
    ],
    ['spill skips warm ones that are saturated too', pool([9, 8], [7, 9], [5, 3], [0, 0]), 'b2 spilled-from-saturated'],
    ['no warm one below the valve: least-loaded', pool([9, 8], [1, 0], [5, 10]), 'b1 spilled-fallback-leastloaded'],
    ['below the valve the best keeps it, however loaded', pool([9, 7], [0, 0]), 'b0 longest-prefix'],
  ])('%s', (_rule, candidates, expected) => {
    expect(routedTo(createPrefixAwarePolicy().choose(aRequest(), candidates, aContext()))).toBe(expected);
  });

  it('never spills when the valve is off', () => {
    const policy = createPrefixAwarePolicy({ saturationInflight: 0 });
    expect(routedTo(policy.choose(aRequest(), pool([9, 500], [5, 0]), aContext()))).toBe('b0 longest-prefix');
  });

  it('pins on any match when minMatchBlocks is 0', () => {
    const policy = createPrefixAwarePolicy({ minMatchBlocks: 0 });
    expect(routedTo(policy.choose(aRequest(), pool([0, 3], [0, 1]), aContext()))).toBe('b1 longest-prefix');
  });

  it('breaks ties with a shuffle (Fisher–Yates from the end, as Go’s rand.Shuffle)', () => {
    const tied = pool([4, 1], [4, 1], [4, 1]);
    // random() = 0, 0: swap(2, 0) → [2, 1, 0], swap(1, 0) → [1, 2, 0].
    expect(routedTo(createPrefixAwarePolicy().choose(aRequest(), tied, scriptedContext([0, 0])))).toBe(
      'b1 longest-prefix',
    );
    const counts = new Map<string, number>();
    const policy = createPrefixAwarePolicy();
    const context = aContext(7);
    for (let i = 0; i < 3000; i++) {
      const decision = policy.choose(aRequest(), tied, context);
      if (decision.kind === 'routed') counts.set(decision.backendId, (counts.get(decision.backendId) ?? 0) + 1);
    }
    for (const id of ['b0', 'b1', 'b2']) expect(counts.get(id)).toBeGreaterThan(850);
  });

  it('scores every candidate by match and names the exclusions of a spill', () => {
    const decision = createPrefixAwarePolicy().choose(aRequest(), pool([9, 8], [5, 7], [1, 0]), aContext());
    expect(decision.kind === 'routed' && decision.scores).toEqual([
      { backendId: 'b0', matchBlocks: 9, inflight: 8, score: 9, excluded: 'saturated' },
      { backendId: 'b1', matchBlocks: 5, inflight: 7, score: 5 },
      { backendId: 'b2', matchBlocks: 1, inflight: 0, score: 1, excluded: 'below-min-match' },
    ]);
  });

  it('rejects out-of-range parameters when created', () => {
    expect(() => createPrefixAwarePolicy({ minMatchBlocks: -1 })).toThrow(/minMatchBlocks/);
    expect(() => createPrefixAwarePolicy({ saturationInflight: 2.5 })).toThrow(/saturationInflight/);
  });
});

describe('prefixaware inflight cap', () => {
  it('promises the valve for warm choices only, so the store can hold it across replicas', () => {
    const policy = createPrefixAwarePolicy({ saturationInflight: 4 });
    const request = aRequest({ blocks: 10 });
    const warm = policy.choose(
      request,
      [aCandidate('a', { matchBlocks: 10, inflight: 1 }), aCandidate('b')],
      aContext(),
    );
    expect(warm.kind === 'routed' && warm.reason === 'longest-prefix' && warm.inflightCap).toBe(4);
    const cold = policy.choose(aRequest({ blocks: 10 }), [aCandidate('a'), aCandidate('b')], aContext());
    expect(cold.kind === 'routed' && cold.reason).toBe('fallback-leastloaded');
    expect(cold.kind === 'routed' && cold.inflightCap).toBeUndefined();
  });
});
