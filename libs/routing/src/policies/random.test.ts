import { describe, expect, it } from 'vitest';
import { aContext, aRequest, scriptedContext, someCandidates } from '../test-support/builders';
import { createRandomPolicy } from './random';

describe('random', () => {
  it.each([
    [0, 'b0'],
    [0.34, 'b1'],
    [0.99, 'b2'],
  ])('maps random() = %f onto %s', (value, expected) => {
    expect(createRandomPolicy().choose(aRequest(), someCandidates(3), scriptedContext([value]))).toMatchObject({
      backendId: expected,
      reason: 'random',
    });
  });

  it('reaches every candidate over many draws from a seeded source', () => {
    const policy = createRandomPolicy();
    const context = aContext(42);
    const seen = new Set<string>();
    for (let i = 0; i < 100; i++) {
      const decision = policy.choose(aRequest(), someCandidates(4), context);
      if (decision.kind === 'routed') seen.add(decision.backendId);
    }
    expect(seen.size).toBe(4);
  });
});
