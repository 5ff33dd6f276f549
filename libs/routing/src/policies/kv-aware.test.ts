import { describe, expect, it } from 'vitest';
import { aCandidate, aContext, aRequest, anEngine } from '../test-support/builders';
import { createKvAwarePolicy, kvDemandTokens, DEFAULT_KV_AWARE_PARAMS } from './kv-aware';

// 16 blocks × 64 bytes = 1,024 bytes = 256 prompt tokens; + 100 to generate = a demand of 356 tokens.
const request = aRequest({ maxTokens: 100 });

describe('kvaware', () => {
  it('estimates the KV demand from the prompt bytes and the generation budget', () => {
    expect(kvDemandTokens(request, DEFAULT_KV_AWARE_PARAMS)).toBe(356);
    expect(kvDemandTokens(aRequest({ maxTokens: null }), DEFAULT_KV_AWARE_PARAMS)).toBe(256 + 256);
  });

  it('among backends where the request fits, takes the shortest queue, then the tightest fit', () => {
    const candidates = [
      aCandidate('roomy', { engine: anEngine({ kvUsage: 0.1, waiting: 0 }) }), // 9,000 free
      aCandidate('tight', { engine: anEngine({ kvUsage: 0.9, waiting: 0 }) }), // 1,000 free: fits, least left
      aCandidate('queued', { engine: anEngine({ kvUsage: 0.95, waiting: 3 }) }),
    ];
    const decision = createKvAwarePolicy().choose(request, candidates, aContext());
    expect(decision).toMatchObject({ kind: 'routed', backendId: 'tight', reason: 'kv-fit' });
    const queuedFirst = createKvAwarePolicy().choose(
      request,
      [candidates[2]!, aCandidate('busy', { engine: anEngine({ kvUsage: 0.5, waiting: 1 }) })],
      aContext(),
    );
    expect(queuedFirst).toMatchObject({ backendId: 'busy', reason: 'kv-fit' });
  });

  it('counts prefills sent but not started against the free KV', () => {
    const candidates = [
      aCandidate('a', { engine: anEngine({ kvUsage: 0.9 }), pendingPrefillTokens: 800 }), // 200 free: too little
      aCandidate('b', { engine: anEngine({ kvUsage: 0.5 }) }),
    ];
    expect(createKvAwarePolicy().choose(request, candidates, aContext())).toMatchObject({
      backendId: 'b',
      reason: 'kv-fit',
    });
  });

  it('prefers a backend of unknown state to one known to be short of KV, but never to one where it fits', () => {
    const short = aCandidate('short', { engine: anEngine({ kvUsage: 0.99 }) });
    const unknown = aCandidate('unknown', { engine: null, inflight: 2 });
    const unknownIdle = aCandidate('unknown-idle', { inflight: 0 });
    expect(createKvAwarePolicy().choose(request, [short, unknown, unknownIdle], aContext())).toMatchObject({
      backendId: 'unknown-idle',
      reason: 'kv-unknown',
    });
    // An engine that reports its queue but not its KV usage (llama.cpp) counts as unknown.
    const noUsage = aCandidate('no-usage', { engine: anEngine({ kvUsage: null }), inflight: 1 });
    expect(createKvAwarePolicy().choose(request, [short, noUsage], aContext())).toMatchObject({
      backendId: 'no-usage',
      reason: 'kv-unknown',
    });
    const fits = aCandidate('fits', { engine: anEngine({ kvUsage: 0.5, waiting: 5 }), inflight: 9 });
    expect(createKvAwarePolicy().choose(request, [unknownIdle, fits], aContext())).toMatchObject({
      backendId: 'fits',
      reason: 'kv-fit',
    });
  });

  it('when every backend is short of KV, takes the one with the most free, and says so', () => {
    const candidates = [
      aCandidate('a', { engine: anEngine({ kvUsage: 0.99 }) }),
      aCandidate('b', { engine: anEngine({ kvUsage: 0.98, waiting: 4 }) }),
    ];
    const decision = createKvAwarePolicy().choose(request, candidates, aContext());
    expect(decision).toMatchObject({ backendId: 'b', reason: 'kv-pressure' });
    expect(decision.kind === 'routed' && decision.scores.map((score) => score.score)).toEqual([2, 2]);
  });

  it('ranks by usage against an assumed capacity when the engine reports none, and keeps config order on ties', () => {
    const candidates = [
      aCandidate('x', { engine: anEngine({ kvUsage: 0.2, kvCapacityTokens: null }) }),
      aCandidate('y', { engine: anEngine({ kvUsage: 0.2, kvCapacityTokens: null }) }),
    ];
    expect(createKvAwarePolicy().choose(request, candidates, aContext())).toMatchObject({
      backendId: 'x',
      reason: 'kv-fit',
    });
  });

  it('rejects out-of-range parameters at creation', () => {
    expect(() => createKvAwarePolicy({ bytesPerToken: 0 })).toThrow(RangeError);
    expect(() => createKvAwarePolicy({ assumedCapacityTokens: 0.5 })).toThrow(RangeError);
  });
});
