import { describe, expect, it } from 'vitest';
import { aCandidate, aContext, aRequest } from '../test-support/builders';
import { createLeastLoadedPolicy, indexOfLeastLoaded } from './least-loaded';

describe('leastloaded', () => {
  it.each<[string, number[], string]>([
    ['the minimum', [3, 1, 2], 'b1'],
    ['the earliest on ties', [2, 1, 1], 'b1'],
    ['the first when all are idle', [0, 0, 0], 'b0'],
  ])('picks %s', (_label, loads, expected) => {
    const candidates = loads.map((inflight, index) => aCandidate(`b${index}`, { inflight }));
    const decision = createLeastLoadedPolicy().choose(aRequest(), candidates, aContext());
    expect(decision).toMatchObject({ kind: 'routed', backendId: expected, reason: 'least-loaded' });
    expect(decision.kind === 'routed' && decision.scores.map((score) => score.score)).toEqual(loads);
  });

  it('considers only eligible indices, and reports -1 when none is', () => {
    const candidates = [aCandidate('a', { inflight: 0 }), aCandidate('b', { inflight: 5 })];
    expect(indexOfLeastLoaded(candidates, (index) => index === 1)).toBe(1);
    expect(indexOfLeastLoaded(candidates, () => false)).toBe(-1);
  });
});
