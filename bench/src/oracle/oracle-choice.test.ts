import { describe, expect, it } from 'vitest';
import { chooseOracleBackend, type OracleCandidate } from './oracle-choice';

function aCandidate(backendId: string, overrides: Partial<Omit<OracleCandidate, 'backendId'>> = {}): OracleCandidate {
  return { backendId, trueMatchTokens: 0, inflight: 0, pendingPrefillTokens: 0, ...overrides };
}

describe('oracle', () => {
  it('picks the largest true hit, however loaded', () => {
    const choice = chooseOracleBackend([
      aCandidate('cold', { trueMatchTokens: 0 }),
      aCandidate('small-hit', { trueMatchTokens: 64 }),
      aCandidate('big-hit', { inflight: 9, pendingPrefillTokens: 5000, trueMatchTokens: 512 }),
    ]);
    expect(choice).toMatchObject({ backendId: 'big-hit', reason: 'cache-hit' });
    expect(choice?.scores).toEqual([0, 64, 512]);
  });

  it.each<[string, OracleCandidate[], string]>([
    [
      'fewest in flight',
      [aCandidate('a', { inflight: 2, trueMatchTokens: 128 }), aCandidate('b', { inflight: 1, trueMatchTokens: 128 })],
      'b',
    ],
    [
      'then the smallest prefill backlog',
      [
        aCandidate('a', { inflight: 1, pendingPrefillTokens: 900, trueMatchTokens: 128 }),
        aCandidate('b', { inflight: 1, pendingPrefillTokens: 100, trueMatchTokens: 128 }),
      ],
      'b',
    ],
    [
      'then the earlier backend',
      [
        aCandidate('a', { inflight: 1, pendingPrefillTokens: 100, trueMatchTokens: 128 }),
        aCandidate('b', { inflight: 1, pendingPrefillTokens: 100, trueMatchTokens: 128 }),
      ],
      'a',
    ],
  ])('breaks ties between equal hits by %s', (_label, candidates, expected) => {
    expect(chooseOracleBackend(candidates)).toMatchObject({ backendId: expected, reason: 'cache-hit' });
  });

  it('places a prompt nobody holds on the least loaded, as least-loaded', () => {
    const choice = chooseOracleBackend([
      aCandidate('a', { inflight: 3 }),
      aCandidate('b', { inflight: 1 }),
      aCandidate('c', { inflight: 1, pendingPrefillTokens: 10 }),
    ]);
    expect(choice).toMatchObject({ backendId: 'b', reason: 'least-loaded' });
  });

  it('counts a backend that did not answer as holding nothing, and routes least-loaded when none answered', () => {
    const partly = chooseOracleBackend([
      aCandidate('silent', { trueMatchTokens: null }),
      aCandidate('answered', { inflight: 4, trueMatchTokens: 32 }),
    ]);
    expect(partly).toMatchObject({ backendId: 'answered', reason: 'cache-hit' });
    expect(partly?.scores).toEqual([0, 32]);
    const none = chooseOracleBackend([
      aCandidate('a', { inflight: 2, trueMatchTokens: null }),
      aCandidate('b', { trueMatchTokens: null }),
    ]);
    expect(none).toMatchObject({ backendId: 'b', reason: 'least-loaded' });
  });

  it('has no choice without candidates', () => {
    expect(chooseOracleBackend([])).toBeUndefined();
  });
});
