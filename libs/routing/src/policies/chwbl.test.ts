import { describe, expect, it } from 'vitest';
import type { Candidate, RoutingDecision } from '../types';
import { aCandidate, aContext, aRequest, someCandidates } from '../test-support/builders';
import { createChwblPolicy } from './chwbl';

const heads = Array.from({ length: 1000 }, (_v, i) => i * 9_007_199_254_741 + 3);
const backendOf = (decision: RoutingDecision): string => (decision.kind === 'routed' ? decision.backendId : 'rejected');

describe('chwbl', () => {
  const policy = createChwblPolicy();
  const route = (headHash: number, candidates: readonly Candidate[]) =>
    policy.choose(aRequest({ headHash }), candidates, aContext());

  it('sends equal heads to the same backend, also from another instance (another replica)', () => {
    const other = createChwblPolicy();
    for (const head of heads.slice(0, 200)) {
      const decision = route(head, someCandidates(4));
      expect(decision).toMatchObject({ reason: 'consistent-hash' });
      expect(backendOf(route(head, someCandidates(4)))).toBe(backendOf(decision));
      expect(backendOf(other.choose(aRequest({ headHash: head }), someCandidates(4), aContext()))).toBe(
        backendOf(decision),
      );
    }
  });

  it('spreads heads over the backends', () => {
    const counts = new Map<string, number>();
    for (const head of heads) {
      const id = backendOf(route(head, someCandidates(4)));
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    for (const id of ['b0', 'b1', 'b2', 'b3']) expect(counts.get(id)).toBeGreaterThan(170);
  });

  it('moves only the heads of a removed backend', () => {
    const all = someCandidates(5);
    const without = all.filter((candidate) => candidate.backend.id !== 'b3');
    for (const head of heads) {
      const before = backendOf(route(head, all));
      if (before !== 'b3') expect(backendOf(route(head, without))).toBe(before);
    }
  });

  it('spills to the next backend on the ring when the owner is over its bound', () => {
    const head = heads[5] ?? 0;
    const owner = backendOf(route(head, someCandidates(3)));
    const loaded = someCandidates(3).map((candidate) =>
      candidate.backend.id === owner ? aCandidate(owner, { inflight: 4 }) : candidate,
    );
    // bound = ceil(1.25 · 5 / 3) = 3 < 4.
    const spilled = route(head, loaded);
    expect(spilled).toMatchObject({ reason: 'consistent-hash-spilled' });
    expect(backendOf(spilled)).not.toBe(owner);
    expect(spilled.kind === 'routed' && spilled.scores.find((score) => score.backendId === owner)).toMatchObject({
      score: 0,
      excluded: 'over-load-bound',
    });
  });

  it('gives heavier backends more heads', () => {
    const candidates = [aCandidate('small', { weight: 1 }), aCandidate('big', { weight: 3 })];
    const big = heads.filter((head) => backendOf(route(head, candidates)) === 'big').length / heads.length;
    expect(big).toBeGreaterThan(0.65);
    expect(big).toBeLessThan(0.85);
  });

  it('rejects out-of-range parameters', () => {
    expect(() => createChwblPolicy({ vnodesPerWeight: 0 })).toThrow(/vnodesPerWeight/);
    expect(() => createChwblPolicy({ loadFactor: 0.5 })).toThrow(/loadFactor/);
  });
});
