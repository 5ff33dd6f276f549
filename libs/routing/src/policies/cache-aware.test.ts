import { describe, expect, it } from 'vitest';
import type { Candidate, RoutingDecision } from '../types';
import { aCandidate, aContext, anEngine, aRequest, someCandidates } from '../test-support/builders';
import { createCacheAwarePolicy } from './cache-aware';

// Defaults: 64-byte blocks, 4 bytes/token, 0.07 ms/token → 1.12 ms of prefill per block; 15 ms per request in flight.
const LONG = aRequest({ blocks: 400 }); // 6 400 tokens: 448 ms of prefill
const SHORT = aRequest({ blocks: 40 }); // 640 tokens: 44.8 ms of prefill
const routedTo = (decision: RoutingDecision) =>
  decision.kind === 'routed' ? `${decision.backendId} ${decision.reason}` : 'rejected';

describe('cacheaware', () => {
  // The arithmetic in these cases uses 15 ms per request in flight (the pre-backlog default) and no
  // weight on a request's own prefill work, kept explicit.
  const policy = createCacheAwarePolicy({ queueMsPerRequest: 15, prefillWorkWeight: 0 });

  it.each<[string, typeof LONG, number, string]>([
    ['long prompt: warm with 5 in flight (75 ms) beats cold idle (448 ms)', LONG, 5, 'warm prefix-affinity'],
    ['long prompt: warm with 8 in flight (120 ms) still wins', LONG, 8, 'warm prefix-affinity'],
    ['short prompt: warm with 2 in flight (30 ms) beats cold idle (44.8 ms)', SHORT, 2, 'warm prefix-affinity'],
    [
      'short prompt: warm with 3 in flight (45 ms) loses to cold idle (44.8 ms): a spill',
      SHORT,
      3,
      'cold spilled-from-saturated',
    ],
  ])('%s', (_label, request, warmInflight, expected) => {
    const candidates = [
      aCandidate('warm', { matchBlocks: request.blockHashes.length, inflight: warmInflight }),
      aCandidate('cold'),
    ];
    expect(routedTo(policy.choose(request, candidates, aContext()))).toBe(expected);
  });

  it('explains the cost of every candidate in milliseconds', () => {
    const decision = policy.choose(
      SHORT,
      [aCandidate('warm', { matchBlocks: 30, inflight: 1 }), aCandidate('cold', { inflight: 2 })],
      aContext(),
    );
    expect(decision.kind === 'routed' && decision.scores).toEqual([
      {
        backendId: 'warm',
        matchBlocks: 30,
        inflight: 1,
        score: expect.closeTo(11.2 + 15, 6),
        parts: {
          prefillMs: expect.closeTo(11.2, 6),
          workMs: 0,
          backlogMs: 0,
          queueMs: 15,
          waitingMs: 0,
          kvMs: 0,
          adapterMs: 0,
        },
      },
      {
        backendId: 'cold',
        matchBlocks: 0,
        inflight: 2,
        score: expect.closeTo(44.8 + 30, 6),
        parts: {
          prefillMs: expect.closeTo(44.8, 6),
          workMs: 0,
          backlogMs: 0,
          queueMs: 30,
          waitingMs: 0,
          kvMs: 0,
          adapterMs: 0,
        },
      },
    ]);
  });

  describe('prefillWorkWeight: the prefill a request adds to a backend counts beyond its own wait', () => {
    // LONG on 'warm' (holds all 400 blocks; 8 000 tokens of prefill sent there, not started: 560 ms)
    // against 'cold' (idle): 448 ms of own prefill there.
    const candidates = [aCandidate('warm', { matchBlocks: 400, pendingPrefillTokens: 8_000 }), aCandidate('cold')];

    it.each<[number, string]>([
      // 0: warm costs 560 ms of backlog, cold 448 ms of prefill: the request spills (greedy on its own start).
      [0, 'cold spilled-from-saturated'],
      // 0.5: cold 448 + 224 = 672 ms > 560 ms: it waits for the backend that holds its document.
      [0.5, 'warm prefix-affinity'],
    ])('weight %s → %s', (weight, expected) => {
      const weighted = createCacheAwarePolicy({ queueMsPerRequest: 15, prefillWorkWeight: weight });
      expect(routedTo(weighted.choose(LONG, candidates, aContext()))).toBe(expected);
    });

    it('shows the work as its own part, in ms, and counts it in the score', () => {
      const weighted = createCacheAwarePolicy({ queueMsPerRequest: 0, prefillWorkWeight: 2 });
      const decision = weighted.choose(
        SHORT,
        [aCandidate('warm', { matchBlocks: 30 }), aCandidate('cold')],
        aContext(),
      );
      expect(
        decision.kind === 'routed' &&
          decision.scores.map((score) => [score.backendId, score.score, score.parts?.['workMs']]),
      ).toEqual([
        ['warm', expect.closeTo(11.2 * 3, 6), expect.closeTo(22.4, 6)],
        ['cold', expect.closeTo(44.8 * 3, 6), expect.closeTo(89.6, 6)],
      ]);
    });
  });

  describe('engine state (health poller)', () => {
    it('lets a warm backend lose when its own queue costs more than the prefill it saves', () => {
      // LONG: 6 400 tokens. 'warm' holds all but the last block; its engine has 40 requests waiting
      // (1 600 ms at 40 ms each), more than the ~448 ms of prefill it saves counted with its work
      // (× (1 + prefillWorkWeight 2) = 1 344 ms).
      const warm = aCandidate('warm', { matchBlocks: 399, engine: anEngine({ waiting: 40 }) });
      const cold = aCandidate('cold', { engine: anEngine({ waiting: 0 }) });
      expect(routedTo(createCacheAwarePolicy().choose(LONG, [warm, cold], aContext()))).toBe(
        'cold spilled-from-saturated',
      );
      // Without the engine's figures the same backend stays home.
      expect(
        routedTo(
          createCacheAwarePolicy().choose(
            LONG,
            [aCandidate('warm', { matchBlocks: 399 }), aCandidate('cold')],
            aContext(),
          ),
        ),
      ).toBe('warm prefix-affinity');
    });

    it('takes the larger of the router’s backlog and the engine’s queue, never both', () => {
      const candidate = aCandidate('a', {
        matchBlocks: 1,
        pendingPrefillTokens: 1000,
        engine: anEngine({ waiting: 1 }),
      });
      const decision = createCacheAwarePolicy().choose(LONG, [candidate], aContext());
      const parts = decision.kind === 'routed' ? decision.scores[0]?.parts : undefined;
      expect(parts).toMatchObject({ backlogMs: expect.closeTo(70, 6), waitingMs: 40 });
      expect(decision.kind === 'routed' && decision.scores[0]?.score).toBeCloseTo(
        (parts?.prefillMs ?? 0) + (parts?.workMs ?? 0) + 70,
        6,
      );
    });

    it('charges kvFullMs where the request’s KV would not fit, and nothing for an unknown engine', () => {
      const full = aCandidate('full', { matchBlocks: 50, engine: anEngine({ kvUsage: 0.99 }) }); // 100 tokens free
      const unknown = aCandidate('unknown', { matchBlocks: 50, engine: null });
      const decision = createCacheAwarePolicy().choose(LONG, [full, unknown], aContext());
      expect(decision.kind === 'routed' && decision.scores.map((score) => score.parts?.['kvMs'])).toEqual([250, 0]);
      expect(routedTo(decision)).toBe('unknown prefix-affinity');
    });
  });

  describe('prefill backlog', () => {
    it('sends a new conversation away from a backend busy prefilling others, though it holds the shared prompt', () => {
      // LONG: 6 400 tokens (448 ms cold). 'shared' holds its first block (a system prompt) but has
      // 15 000 tokens of prefill queued (1 050 ms); 'idle' holds nothing and has nothing queued.
      const candidates = [
        aCandidate('shared', { matchBlocks: 1, inflight: 3, pendingPrefillTokens: 15_000 }),
        aCandidate('idle'),
      ];
      expect(routedTo(createCacheAwarePolicy().choose(LONG, candidates, aContext()))).toBe(
        'idle spilled-from-saturated',
      );
    });

    it('keeps a follow-up turn home: a short backlog (21 ms) costs less than re-prefilling the conversation (448 ms)', () => {
      const candidates = [
        aCandidate('home', { matchBlocks: 390, inflight: 2, pendingPrefillTokens: 300 }),
        aCandidate('idle'),
      ];
      expect(routedTo(createCacheAwarePolicy().choose(LONG, candidates, aContext()))).toBe('home prefix-affinity');
    });
  });

  describe('load-spread guard', () => {
    const hotAndIdle = (hotInflight: number, idleInflight = 0): Candidate[] => [
      aCandidate('hot', { matchBlocks: 400, inflight: hotInflight }),
      aCandidate('idle', { inflight: idleInflight }),
    ];

    it('overrules the cost when the warm backend runs far ahead of the least-loaded one', () => {
      // Cost alone would pick hot (12 · 15 = 180 ms < 448 ms); 12 > max(0 + 8, 0 · 2) excludes it.
      expect(routedTo(createCacheAwarePolicy({ spreadAbs: 0 }).choose(LONG, hotAndIdle(12), aContext()))).toBe(
        'hot prefix-affinity',
      );
      const decision = policy.choose(LONG, hotAndIdle(12), aContext());
      expect(routedTo(decision)).toBe('idle load-guard');
      expect(decision.kind === 'routed' && decision.scores[0]).toMatchObject({
        backendId: 'hot',
        excluded: 'load-spread',
      });
    });

    it.each<[number, number, string]>([
      [8, 0, 'hot prefix-affinity'], // 8 ≤ max(8, 0)
      [9, 0, 'idle load-guard'],
      [20, 10, 'hot prefix-affinity'], // 20 ≤ max(18, 20): the relative allowance grows with load
      [21, 10, 'idle load-guard'],
    ])('hot at %i, least-loaded at %i → %s', (hot, idle, expected) => {
      expect(routedTo(policy.choose(aRequest({ blocks: 1000 }), hotAndIdle(hot, idle), aContext()))).toBe(expected);
    });
  });

  describe('saturation valve', () => {
    const valve = createCacheAwarePolicy({ saturationInflight: 4 });

    it('excludes backends at the cap', () => {
      const decision = valve.choose(
        LONG,
        [aCandidate('warm', { matchBlocks: 400, inflight: 4 }), aCandidate('cold', { inflight: 3 })],
        aContext(),
      );
      expect(routedTo(decision)).toBe('cold least-loaded');
      expect(decision.kind === 'routed' && decision.scores[0]?.excluded).toBe('saturated');
    });

    it('is lifted when every backend is at the cap: the cost decides among all, and no cap is promised', () => {
      // Warm: 400 blocks held, one more in flight than the cold one; the prefill it saves wins.
      const candidates = [aCandidate('warm', { matchBlocks: 400, inflight: 6 }), aCandidate('cold', { inflight: 5 })];
      const decision = valve.choose(LONG, candidates, aContext());
      expect(routedTo(decision)).toBe('warm prefix-affinity');
      expect(decision).not.toHaveProperty('inflightCap');
      // A backlog on the warm one larger than what it saves sends the request to the cold one.
      const backlogged = [
        aCandidate('warm', { matchBlocks: 400, inflight: 6, pendingPrefillTokens: 40_000 }),
        aCandidate('cold', { inflight: 5 }),
      ];
      expect(routedTo(valve.choose(LONG, backlogged, aContext()))).toBe('cold spilled-from-saturated');
    });
  });

  describe('cold prompts, with cold placement on (minMatchBlocks ≥ 1)', () => {
    const heads = Array.from({ length: 400 }, (_v, i) => 1_000_003 * i + 11);
    const policy = createCacheAwarePolicy({ queueMsPerRequest: 15, minMatchBlocks: 1 });

    it('land on the same backend for the same head, on every replica and in any candidate order', () => {
      const otherReplica = createCacheAwarePolicy({ queueMsPerRequest: 15, minMatchBlocks: 1 });
      for (const headHash of heads.slice(0, 100)) {
        const request = aRequest({ headHash });
        const decision = policy.choose(request, someCandidates(4), aContext());
        expect(decision).toMatchObject({ reason: 'cold-hash' });
        const elsewhere = otherReplica.choose(request, [...someCandidates(4)].reverse(), aContext(99));
        expect(routedTo(elsewhere)).toBe(routedTo(decision));
      }
    });

    it('spread over the backends when their heads differ', () => {
      const counts = new Map<string, number>();
      for (const headHash of heads) {
        const decision = policy.choose(aRequest({ headHash }), someCandidates(4), aContext());
        if (decision.kind === 'routed') counts.set(decision.backendId, (counts.get(decision.backendId) ?? 0) + 1);
      }
      for (const id of ['b0', 'b1', 'b2', 'b3']) expect(counts.get(id)).toBeGreaterThan(60);
    });

    it('move to the next preference when the preferred backend is over its bound', () => {
      const request = aRequest({ headHash: heads[3] ?? 0 });
      const home = routedTo(policy.choose(request, someCandidates(3), aContext())).split(' ')[0] ?? '';
      const loaded = someCandidates(3).map((candidate) =>
        candidate.backend.id === home ? aCandidate(home, { inflight: 5 }) : candidate,
      );
      const decision = policy.choose(request, loaded, aContext());
      expect(decision).toMatchObject({ reason: 'cold-hash' });
      expect(decision.kind === 'routed' && decision.backendId).not.toBe(home);
      expect(decision.kind === 'routed' && decision.scores.find((score) => score.backendId === home)).toMatchObject({
        excluded: 'over-load-bound',
        parts: { hashRank: 0, bound: 3 },
      });
    });
  });

  describe('cold prompts by default (minMatchBlocks 0): placed by cost', () => {
    it('go where the prefill backlog in tokens is smallest, not where fewest requests are, and say least-loaded', () => {
      // 'a' has 1 request in flight but 6 000 tokens of prefill ahead (420 ms); 'b' has 3 short ones (200 tokens, 14 ms + 45 ms queue).
      const candidates = [
        aCandidate('a', { inflight: 1, pendingPrefillTokens: 6_000 }),
        aCandidate('b', { inflight: 3, pendingPrefillTokens: 200 }),
      ];
      expect(routedTo(policy.choose(LONG, candidates, aContext()))).toBe('b least-loaded');
      expect(routedTo(policy.choose(LONG, [...candidates].reverse(), aContext()))).toBe('b least-loaded');
    });

    it('agree across replicas on equal figures (ties follow the head hash) and spread different heads', () => {
      const counts = new Map<string, number>();
      for (let head = 0; head < 200; head++) {
        const request = aRequest({ headHash: 7_919 * head + 3 });
        const here = routedTo(policy.choose(request, someCandidates(4), aContext()));
        expect(routedTo(policy.choose(request, [...someCandidates(4)].reverse(), aContext(5)))).toBe(here);
        counts.set(here, (counts.get(here) ?? 0) + 1);
      }
      expect(counts.size).toBe(4);
    });
  });

  it('breaks cost ties by the head hash, not by candidate order', () => {
    const twins = [
      aCandidate('x', { matchBlocks: 400, inflight: 1 }),
      aCandidate('y', { matchBlocks: 400, inflight: 1 }),
    ];
    const chosen = new Set<string>();
    for (const headHash of [1, 2, 3, 4, 5, 6, 7, 8]) {
      const forward = routedTo(policy.choose(aRequest({ blocks: 400, headHash }), twins, aContext()));
      expect(routedTo(policy.choose(aRequest({ blocks: 400, headHash }), [...twins].reverse(), aContext()))).toBe(
        forward,
      );
      chosen.add(forward);
    }
    expect(chosen.size).toBe(2);
  });

  it('rejects out-of-range parameters', () => {
    expect(() => createCacheAwarePolicy({ bytesPerToken: 0 })).toThrow(/bytesPerToken/);
    expect(() => createCacheAwarePolicy({ spreadRel: 0.5 })).toThrow(/spreadRel/);
    expect(() => createCacheAwarePolicy({ coldLoadFactor: 0.9 })).toThrow(/coldLoadFactor/);
  });
});

describe('cacheaware with a LoRA adapter request', () => {
  it("prices the adapter's wait like any other: a backend running it wins until its queue costs more than a load", () => {
    const policy = createCacheAwarePolicy({ queueMsPerRequest: 50, spreadAbs: 0 });
    const request = { ...aRequest({ blocks: 0 }), adapterWaitMs: new Map([['b', 200]]) };
    const backends = [aCandidate('a', { inflight: 3 }), aCandidate('b')];
    // a runs the adapter with 3 requests (150 ms of queue); b would load it (200 ms): a is cheaper.
    const routed = policy.choose(request, backends, aContext());
    expect(routed.kind === 'routed' && routed.backendId).toBe('a');
    const scoreOfB = routed.kind === 'routed' ? routed.scores.find((score) => score.backendId === 'b') : undefined;
    expect(scoreOfB?.parts?.['adapterMs']).toBe(200);
    // A fifth request on a (250 ms of queue) costs more than the load: it spreads to b.
    const busier = [aCandidate('a', { inflight: 5 }), aCandidate('b')];
    const spread = policy.choose(request, busier, aContext());
    expect(spread.kind === 'routed' && spread.backendId).toBe('b');
  });
});
