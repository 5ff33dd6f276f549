import { describe, expect, it } from 'vitest';
import { aContext, aRequest, someCandidates } from '../test-support/builders';
import { createRoundRobinPolicy } from './round-robin';

describe('roundrobin', () => {
  it('rotates through the candidates in order', () => {
    const policy = createRoundRobinPolicy();
    const candidates = someCandidates(3);
    const chosen = Array.from({ length: 7 }, () => {
      const decision = policy.choose(aRequest(), candidates, aContext());
      return decision.kind === 'routed' ? `${decision.backendId}/${decision.reason}` : 'rejected';
    });
    expect(chosen).toEqual(['b0', 'b1', 'b2', 'b0', 'b1', 'b2', 'b0'].map((id) => `${id}/round-robin`));
  });

  it('keeps a separate counter per instance and scores every candidate 0', () => {
    const first = createRoundRobinPolicy();
    first.choose(aRequest(), someCandidates(2), aContext());
    const decision = createRoundRobinPolicy().choose(aRequest(), someCandidates(2), aContext());
    expect(decision).toMatchObject({ kind: 'routed', backendId: 'b0' });
    expect(decision.kind === 'routed' && decision.scores.map((score) => score.score)).toEqual([0, 0]);
  });
});
