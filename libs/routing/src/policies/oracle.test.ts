import { describe, expect, it } from 'vitest';
import { candidatesOf } from '../state/decide-with-snapshot';
import { aCandidate, aContext, aRequest } from '../test-support/builders';
import type { Candidate } from '../types';
import { createOraclePolicy } from './oracle';

function choose(candidates: readonly Candidate[]) {
  return createOraclePolicy().choose(aRequest(), candidates, aContext());
}

describe('oracle', () => {
  it('asks for true matches and reads no prefix index', () => {
    const policy = createOraclePolicy();
    expect(policy.needsTrueMatch).toBe(true);
    expect(policy.usesPrefixMatch).toBe(false);
    expect(policy.atomicRule).toBeUndefined();
  });

  it('picks the largest true hit, however loaded, and whatever the prefix index believes', () => {
    const decision = choose([
      aCandidate('believed-warm', { matchBlocks: 16, trueMatchTokens: 0 }),
      aCandidate('small-hit', { trueMatchTokens: 64 }),
      aCandidate('big-hit', { inflight: 9, pendingPrefillTokens: 5000, trueMatchTokens: 512 }),
    ]);
    expect(decision).toMatchObject({ kind: 'routed', backendId: 'big-hit', reason: 'cache-hit' });
    expect(decision.kind === 'routed' && decision.scores.map((score) => score.score)).toEqual([0, 64, 512]);
  });

  it.each<[string, Candidate[], string]>([
    ['fewest in flight', [aCandidate('a', { inflight: 2, trueMatchTokens: 128 }), aCandidate('b', { inflight: 1, trueMatchTokens: 128 })], 'b'],
    ['then the smallest prefill backlog', [aCandidate('a', { inflight: 1, pendingPrefillTokens: 900, trueMatchTokens: 128 }), aCandidate('b', { inflight: 1, pendingPrefillTokens: 100, trueMatchTokens: 128 })], 'b'],
    ['then the earlier backend', [aCandidate('a', { inflight: 1, pendingPrefillTokens: 100, trueMatchTokens: 128 }), aCandidate('b', { inflight: 1, pendingPrefillTokens: 100, trueMatchTokens: 128 })], 'a'],
  ])('breaks ties between equal hits by %s', (_label, candidates, expected) => {
    expect(choose(candidates)).toMatchObject({ kind: 'routed', backendId: expected, reason: 'cache-hit' });
  });

  it('places a prompt nobody holds on the least loaded, as least-loaded', () => {
    const decision = choose([aCandidate('a', { inflight: 3, trueMatchTokens: 0 }), aCandidate('b', { inflight: 1, trueMatchTokens: 0 }), aCandidate('c', { inflight: 1, pendingPrefillTokens: 10, trueMatchTokens: 0 })]);
    expect(decision).toMatchObject({ kind: 'routed', backendId: 'b', reason: 'least-loaded' });
  });

  it('counts a backend that did not answer as holding nothing, and routes least-loaded when none answered', () => {
    const partly = choose([aCandidate('silent', { trueMatchTokens: null }), aCandidate('answered', { inflight: 4, trueMatchTokens: 32 })]);
    expect(partly).toMatchObject({ backendId: 'answered', reason: 'cache-hit' });
    expect(partly.kind === 'routed' && partly.scores.map((score) => score.parts?.answered)).toEqual([0, 1]);
    const none = choose([aCandidate('a', { inflight: 2, trueMatchTokens: null }), aCandidate('b', { inflight: 0 })]);
    expect(none).toMatchObject({ kind: 'routed', backendId: 'b', reason: 'least-loaded' });
  });

  it('rejects an empty candidate list', () => {
    expect(choose([])).toEqual({ kind: 'rejected', reason: 'no-eligible-backend' });
  });

  it('gets the true matches of the decide input on its candidates (null = did not answer; absent when not asked)', () => {
    const backends = [{ id: 'a', weight: 1 }, { id: 'b', weight: 1 }, { id: 'c', weight: 1 }];
    const snapshot = { matchBlocks: new Map(), inflight: new Map([['a', 2]]), pendingPrefillTokens: new Map() };
    const input = { pool: 'm', request: aRequest(), backends, policy: createOraclePolicy(), context: aContext(), leaseId: 'l' };
    const asked = candidatesOf({ ...input, trueMatchTokens: new Map([['a', 96], ['b', null]]) }, snapshot);
    expect(asked.map((candidate) => candidate.trueMatchTokens)).toEqual([96, null, null]);
    expect(asked[0]?.inflight).toBe(2);
    expect(candidatesOf(input, snapshot).every((candidate) => !('trueMatchTokens' in candidate))).toBe(true);
  });
});
