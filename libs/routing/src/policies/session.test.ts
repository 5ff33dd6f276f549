import { describe, expect, it } from 'vitest';
import type { Candidate, RoutingDecision } from '../types';
import { aCandidate, aContext, aRequest, someCandidates } from '../test-support/builders';
import { createSessionPolicy } from './session';

const sessionKeys = Array.from({ length: 1000 }, (_v, i) => `session-${i}`);
const backendOf = (decision: RoutingDecision): string => (decision.kind === 'routed' ? decision.backendId : 'rejected');

describe('session', () => {
  const policy = createSessionPolicy();
  const route = (sessionKey: string | null, candidates: readonly Candidate[]) =>
    policy.choose(aRequest({ sessionKey }), candidates, aContext());

  it('sends every request of a session to the same backend, whatever the candidate order', () => {
    const candidates = someCandidates(4);
    for (const key of sessionKeys.slice(0, 200)) {
      const first = route(key, candidates);
      expect(first).toMatchObject({ reason: 'session-affinity' });
      expect(backendOf(route(key, candidates))).toBe(backendOf(first));
      expect(backendOf(route(key, [...candidates].reverse()))).toBe(backendOf(first));
    }
  });

  it('spreads sessions over the backends', () => {
    const counts = new Map<string, number>();
    for (const key of sessionKeys) {
      const id = backendOf(route(key, someCandidates(4)));
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    for (const id of ['b0', 'b1', 'b2', 'b3']) expect(counts.get(id)).toBeGreaterThan(180);
  });

  it('moves only the sessions of a removed backend', () => {
    const all = someCandidates(4);
    const without = all.filter((candidate) => candidate.backend.id !== 'b1');
    for (const key of sessionKeys) {
      const before = backendOf(route(key, all));
      if (before !== 'b1') expect(backendOf(route(key, without))).toBe(before);
    }
  });

  it('spills to the next preference when the home backend is over its bound, the same way every time', () => {
    const key = 'session-42';
    const home = backendOf(route(key, someCandidates(3)));
    // 6 in flight on home: bound = ceil(1.25 · 7 / 3) = 3.
    const loaded = someCandidates(3).map((candidate) =>
      candidate.backend.id === home ? aCandidate(home, { inflight: 6 }) : candidate,
    );
    const spilled = route(key, loaded);
    expect(spilled).toMatchObject({ kind: 'routed', reason: 'session-spilled' });
    expect(backendOf(spilled)).not.toBe(home);
    expect(backendOf(route(key, loaded))).toBe(backendOf(spilled));
    expect(spilled.kind === 'routed' && spilled.scores.find((score) => score.backendId === home)).toMatchObject({
      score: 0,
      excluded: 'over-load-bound',
      parts: { bound: 3 },
    });
  });

  it('keeps the home backend while it is within its bound', () => {
    const key = 'session-42';
    const home = backendOf(route(key, someCandidates(3)));
    const loaded = someCandidates(3).map((candidate) =>
      candidate.backend.id === home ? aCandidate(home, { inflight: 3 }) : candidate,
    );
    // bound = ceil(1.25 · 4 / 3) = 2 < 3 → spills; with loadFactor 2: ceil(2 · 4 / 3) = 3 → stays.
    expect(route(key, loaded)).toMatchObject({ reason: 'session-spilled' });
    expect(
      createSessionPolicy({ loadFactor: 2 }).choose(aRequest({ sessionKey: key }), loaded, aContext()),
    ).toMatchObject({ backendId: home, reason: 'session-affinity' });
  });

  it('sends requests without a session key to the least-loaded backend', () => {
    const candidates = [aCandidate('a', { inflight: 2 }), aCandidate('b', { inflight: 1 })];
    expect(route(null, candidates)).toMatchObject({ backendId: 'b', reason: 'least-loaded' });
  });

  it('rejects a load factor below 1', () => {
    expect(() => createSessionPolicy({ loadFactor: 0.9 })).toThrow(/loadFactor/);
  });
});
