import { describe, expect, it } from 'vitest';
import { aCandidate, aContext, aRequest, scriptedContext } from '../test-support/builders';
import { createKvRouterPolicy } from './kv-router';

const request = aRequest({ blocks: 20, contextBlocks: 12 });

describe('kvrouter (seed kv-router score)', () => {
  it.each<[string, number, number, number]>([
    // label, matchBlocks, inflight, score
    ['holds the whole context, idle', 12, 0, 100],
    ['holds more than the context', 20, 3, 70],
    ['holds part of the context only', 11, 0, 0],
    ['cold and loaded', 0, 4, -40],
  ])('scores a backend that %s', (_label, matchBlocks, inflight, score) => {
    const decision = createKvRouterPolicy().choose(request, [aCandidate('a', { matchBlocks, inflight })], aContext());
    expect(decision.kind === 'routed' && decision.scores[0]).toMatchObject({
      score,
      parts: { cacheBonus: score + 10 * inflight, loadPenalty: 10 * inflight },
    });
  });

  it.each<[number, string]>([
    [9, 'warm cache-hit'],
    [11, 'cold cache-miss'],
  ])('keeps the warm backend until it has more than 10 extra in flight (warm at %i)', (warmInflight, expected) => {
    const decision = createKvRouterPolicy().choose(
      request,
      [aCandidate('warm', { matchBlocks: 12, inflight: warmInflight }), aCandidate('cold')],
      aContext(),
    );
    expect(decision.kind === 'routed' && `${decision.backendId} ${decision.reason}`).toBe(expected);
  });

  it('breaks ties at random (warm at exactly +10 ties with an idle cold one)', () => {
    const candidates = [aCandidate('warm', { matchBlocks: 12, inflight: 10 }), aCandidate('cold')];
    expect(createKvRouterPolicy().choose(request, candidates, scriptedContext([0.2]))).toMatchObject({
      backendId: 'warm',
      reason: 'cache-hit',
    });
    expect(createKvRouterPolicy().choose(request, candidates, scriptedContext([0.7]))).toMatchObject({
      backendId: 'cold',
      reason: 'cache-miss',
    });
  });

  it('never counts a request without context as cached', () => {
    const single = aRequest({ blocks: 20, contextBlocks: 0 });
    const decision = createKvRouterPolicy().choose(
      single,
      [aCandidate('a', { matchBlocks: 20 }), aCandidate('b', { inflight: 1 })],
      aContext(),
    );
    expect(decision).toMatchObject({ backendId: 'a', reason: 'cache-miss' });
  });

  it('uses its parameters', () => {
    const policy = createKvRouterPolicy({ cacheHitBonus: 50, loadWeight: 1 });
    const decision = policy.choose(
      request,
      [aCandidate('warm', { matchBlocks: 12, inflight: 40 }), aCandidate('cold')],
      aContext(),
    );
    expect(decision).toMatchObject({ backendId: 'warm', reason: 'cache-hit' });
    expect(() => createKvRouterPolicy({ loadWeight: -1 })).toThrow(RangeError);
  });
});
