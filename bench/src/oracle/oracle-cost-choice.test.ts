import { CACHE_AWARE_PARAMS, resolveParams } from '@kvroute/routing';
import { describe, expect, it } from 'vitest';
import { chooseOracleBackend, type OracleCandidate } from './oracle-choice';
import { chooseOracleCostBackend, oracleCostInputs, type OracleCostRequest } from './oracle-cost-choice';

const DEFAULTS = resolveParams(CACHE_AWARE_PARAMS);

function aCandidate(backendId: string, overrides: Partial<Omit<OracleCandidate, 'backendId'>> = {}): OracleCandidate {
  return { backendId, trueMatchTokens: 0, inflight: 0, pendingPrefillTokens: 0, ...overrides };
}

const REQUEST: OracleCostRequest = {
  model: 'm',
  promptTokens: 5000,
  headHash: 12345,
  maxTokens: 64,
  blockSizeBytes: 256,
};

describe('oracle-cost', () => {
  // The uncached prefill counts 1 + prefillWorkWeight times (its own wait, and the work others wait behind).
  const weighted = 1 + DEFAULTS.prefillWorkWeight;

  it(
    "feeds cacheaware's rule the true uncached tokens: cost = (prompt − cached) × prefillMsPerToken " +
      '× (1 + prefillWorkWeight) + in flight × queueMsPerRequest + backlog',
    () => {
      const choice = chooseOracleCostBackend(
        REQUEST,
        [aCandidate('warm', { trueMatchTokens: 4000, inflight: 1 }), aCandidate('cold')],
        DEFAULTS,
      );
      expect(choice?.backendId).toBe('warm');
      expect(choice?.reason).toBe('prefix-affinity');
      // warm: 1000 uncached tokens × 0.07 ms (weighted) + 1 in flight × 5 ms; cold: 5000 × 0.07 ms (weighted).
      expect(choice?.scores[0]).toBeCloseTo(1000 * 0.07 * weighted + 5, 9);
      expect(choice?.scores[1]).toBeCloseTo(5000 * 0.07 * weighted, 9);
    },
  );

  it('leaves a warm backend whose prefill backlog costs more than the hit saves, where the oracle stays', () => {
    // warm: 1000 × 0.07 × 3 + 3 × 5 + 20000 backlog tokens × 0.07 = 1625 ms; cold: 5000 × 0.07 × 3 = 1050 ms.
    const candidates = [
      aCandidate('warm', { trueMatchTokens: 4000, inflight: 3, pendingPrefillTokens: 20_000 }),
      aCandidate('cold'),
    ];
    const choice = chooseOracleCostBackend(REQUEST, candidates, DEFAULTS);
    expect(choice).toMatchObject({ backendId: 'cold', reason: 'spilled-from-saturated' });
    expect(choice?.scores[0]).toBeCloseTo(70 * weighted + 15 + 1400, 9);
    expect(chooseOracleBackend(candidates)?.backendId).toBe('warm');
  });

  it("keeps cacheaware's load-spread guard: a backend far above the least loaded is excluded however warm", () => {
    const choice = chooseOracleCostBackend(
      REQUEST,
      [aCandidate('hot', { trueMatchTokens: 4992, inflight: 20 }), aCandidate('idle')],
      DEFAULTS,
    );
    expect(choice).toMatchObject({ backendId: 'idle', reason: 'load-guard' });
  });

  it("reads minMatchBlocks in the router's routing blocks (256 bytes = 64 tokens at 4 bytes per token)", () => {
    const params = resolveParams(CACHE_AWARE_PARAMS, { minMatchBlocks: 2 });
    // 64 cached tokens = 1 routing block < 2: a cold prompt, placed by the head hash within the load bound.
    expect(
      chooseOracleCostBackend(REQUEST, [aCandidate('a', { trueMatchTokens: 64 }), aCandidate('b')], params)?.reason,
    ).toBe('cold-hash');
    // 128 cached tokens = 2 routing blocks: warm, by cost.
    expect(
      chooseOracleCostBackend(REQUEST, [aCandidate('a', { trueMatchTokens: 128 }), aCandidate('b')], params),
    ).toMatchObject({ backendId: 'a', reason: 'prefix-affinity' });
    const inputs = oracleCostInputs(REQUEST, [aCandidate('a', { trueMatchTokens: 128 })], params);
    expect(inputs.candidates[0]?.matchBlocks).toBe(2);
    expect(inputs.request.textBytes).toBe(20_000);
  });

  it('counts a backend that did not answer as holding nothing, and caps a match at the prompt', () => {
    const inputs = oracleCostInputs(
      REQUEST,
      [aCandidate('silent', { trueMatchTokens: null }), aCandidate('over', { trueMatchTokens: 9000 })],
      DEFAULTS,
    );
    expect(inputs.candidates.map((candidate) => candidate.matchBlocks)).toEqual([0, (5000 * 4) / 256]);
    expect(
      chooseOracleCostBackend(
        REQUEST,
        [aCandidate('silent', { trueMatchTokens: null }), aCandidate('over', { trueMatchTokens: 9000 })],
        DEFAULTS,
      )?.scores[1],
    ).toBe(0);
    expect(chooseOracleCostBackend(REQUEST, [], DEFAULTS)).toBeUndefined();
  });

  it("breaks a tie between equal costs by the head hash's rendezvous order, deterministically", () => {
    const candidates = ['a', 'b', 'c', 'd'].map((id) => aCandidate(id));
    const picks = new Set<string>();
    for (let headHash = 1; headHash <= 40; headHash++) {
      const first = chooseOracleCostBackend({ ...REQUEST, headHash }, candidates, DEFAULTS)?.backendId;
      expect(chooseOracleCostBackend({ ...REQUEST, headHash }, candidates, DEFAULTS)?.backendId).toBe(first);
      picks.add(first as string);
    }
    expect(picks.size).toBeGreaterThan(1);
  });
});
