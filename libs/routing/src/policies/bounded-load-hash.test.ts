import { describe, expect, it } from 'vitest';
import { aCandidate, someCandidates } from '../test-support/builders';
import { chooseByBoundedLoadHash, chooseWithBoundedLoad, loadBound, rendezvousOrder } from './bounded-load-hash';

const keys = Array.from({ length: 2000 }, (_v, i) => i * 7_919_113 + 17);

describe('loadBound', () => {
  it.each([
    // loadFactor, totalInflight, weight, totalWeight, bound
    [1.25, 0, 1, 2, 1],
    [1.25, 3, 1, 2, 3], // 1.25 · 4 / 2 = 2.5 → 3
    [1.25, 7, 1, 4, 3], // 1.25 · 8 / 4 = 2.5 → 3
    [1.1, 9, 1, 1, 11], // 1.1 · 10 = 11.000000000000002 must not round up to 12
    [1.25, 9, 3, 4, 10], // 1.25 · 10 · 3 / 4 = 9.375 → 10
  ])('ceil(%f · (%i + 1) · %i / %i) = %i', (loadFactor, total, weight, totalWeight, expected) => {
    expect(loadBound(loadFactor, total, weight, totalWeight)).toBe(expected);
  });
});

describe('rendezvousOrder', () => {
  it('depends on the key and the backend set, not on candidate order', () => {
    const candidates = someCandidates(5);
    const reversed = [...candidates].reverse();
    for (const key of keys.slice(0, 100)) {
      const ids = rendezvousOrder(key, candidates).map((index) => candidates[index]?.backend.id);
      const idsFromReversed = rendezvousOrder(key, reversed).map((index) => reversed[index]?.backend.id);
      expect(idsFromReversed).toEqual(ids);
    }
  });

  it('moves only the keys of a removed backend', () => {
    const all = someCandidates(5);
    const without = all.filter((candidate) => candidate.backend.id !== 'b2');
    let moved = 0;
    for (const key of keys) {
      const before = all[rendezvousOrder(key, all)[0] ?? -1]?.backend.id;
      const after = without[rendezvousOrder(key, without)[0] ?? -1]?.backend.id;
      if (before !== 'b2') expect(after).toBe(before);
      else moved++;
    }
    expect(moved).toBeGreaterThan(keys.length / 5 - 150);
    expect(moved).toBeLessThan(keys.length / 5 + 150);
  });

  it('gives each backend first place in proportion to its weight', () => {
    const candidates = [aCandidate('small', { weight: 1 }), aCandidate('big', { weight: 3 })];
    const bigFirst = keys.filter((key) => rendezvousOrder(key, candidates)[0] === 1).length / keys.length;
    expect(bigFirst).toBeGreaterThan(0.7);
    expect(bigFirst).toBeLessThan(0.8);
  });
});

describe('chooseWithBoundedLoad', () => {
  it('takes the first preference while it is within its bound', () => {
    const candidates = [aCandidate('a', { inflight: 3 }), aCandidate('b', { inflight: 0 })];
    // bound = ceil(1.25 · 4 / 2) = 3: a at 3 may still take it.
    expect(chooseWithBoundedLoad([0, 1], candidates, 1.25)).toMatchObject({
      index: 0,
      isFirstPreference: true,
      bounds: [3, 3],
      ranks: [0, 1],
    });
  });

  it('spills to the next preference once the first is over its bound', () => {
    const candidates = [
      aCandidate('a', { inflight: 5 }),
      aCandidate('b', { inflight: 0 }),
      aCandidate('c', { inflight: 0 }),
    ];
    // bound = ceil(1.25 · 6 / 3) = 3 < 5.
    expect(chooseWithBoundedLoad([0, 2, 1], candidates, 1.25)).toMatchObject({
      index: 2,
      isFirstPreference: false,
      ranks: [0, 2, 1],
    });
  });

  it('is the same choice for the same key on every call', () => {
    const candidates = someCandidates(4);
    for (const key of keys.slice(0, 50)) {
      expect(chooseByBoundedLoadHash(key, candidates, 1.25).index).toBe(
        chooseByBoundedLoadHash(key, candidates, 1.25).index,
      );
    }
  });
});
