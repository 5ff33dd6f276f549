import { describe, expect, it } from 'vitest';
import { bound, FIXTURE, prediction, req, run } from './test-fixture';
import { boundPct, ratio, seedFigures, slope, stat, summarize } from './summary';

describe('seedFigures', () => {
  it('computes hit %, nearest-rank percentiles, RPS and errors of one run', () => {
    const figures = seedFigures(FIXTURE.points[0]!.policies[0]!.runs[0]!);
    expect(figures.kvHitPct).toBe(25);
    expect(figures.ttftP50Ms).toBe(20);
    expect(figures.ttftP95Ms).toBe(40);
    expect(figures.ttftP99Ms).toBe(40);
    expect(figures.e2eP50Ms).toBe(200);
    expect(figures.rps).toBe(2);
    expect(figures.errors).toBe(0);
    expect(figures.backendHitPct).toBeUndefined();
  });

  it('leaves failed requests out of latency and RPS, counts them as errors', () => {
    const figures = seedFigures(FIXTURE.points[0]!.policies[1]!.runs[0]!);
    expect(figures.errors).toBe(1);
    expect(figures.requests).toBe(5);
    expect(figures.rps).toBe(2);
    expect(figures.ttftP50Ms).toBe(15);
    expect(figures.kvHitPct).toBe(0);
  });

  it('reads the backend counters when present, and handles an empty run', () => {
    expect(seedFigures(FIXTURE.points[0]!.policies[2]!.runs[0]!).backendHitPct).toBe(75);
    const empty = seedFigures({ seed: 1, wallMs: 0, requests: [] });
    expect(empty).toMatchObject({ rps: 0, errors: 0, requests: 0 });
    expect(empty.ttftP50Ms).toBeUndefined();
    expect(empty.kvHitPct).toBeUndefined();
  });

  it('counts a request without cached tokens as a miss when others report them (vLLM omits a zero), and has no hit % when none do', () => {
    const { cachedTokens: _omit, ...noCached } = req(10, 0);
    // req(10, 50): 100 prompt tokens, 50 cached (see the fixture); noCached: 100 prompt tokens, field absent.
    expect(seedFigures({ seed: 1, wallMs: 1000, requests: [req(10, 50), noCached] }).kvHitPct).toBe(25);
    expect(seedFigures({ seed: 1, wallMs: 1000, requests: [noCached, noCached] }).kvHitPct).toBeUndefined();
  });
});

describe('stat, ratio, slope', () => {
  it('mean and sample stddev over the defined values', () => {
    const value = stat([25, 37.5, undefined]);
    expect(value?.mean).toBe(31.25);
    expect(value?.stddev).toBeCloseTo(Math.sqrt(78.125), 10);
    expect(value?.n).toBe(2);
    expect(stat([7])).toEqual({ mean: 7, stddev: 0, n: 1 });
    expect(stat([undefined])).toBeUndefined();
  });

  it('refuses to divide by nothing', () => {
    expect(ratio(3, 2)).toBe(1.5);
    expect(ratio(3, 0)).toBeUndefined();
    expect(ratio(undefined, 2)).toBeUndefined();
    expect(slope({ value: 4, y: 10 }, { value: 4, y: 20 })).toBeUndefined();
    expect(slope({ value: 4, y: 10 }, { value: 24, y: 50 })).toBe(2);
  });
});

describe('summarize', () => {
  const summary = summarize(FIXTURE);
  const at = (pointIndex: number, policy: string) =>
    summary.points[pointIndex]!.policies.find((entry) => entry.policy === policy)!;

  it('averages over seeds with stddev', () => {
    const rr = at(0, 'roundrobin');
    expect(rr.seeds).toBe(2);
    expect(rr.kvHitPct?.mean).toBe(31.25);
    expect(rr.kvHitPct?.stddev).toBeCloseTo(8.8388, 4);
    expect(rr.ttftP50Ms).toMatchObject({ mean: 25, n: 2 });
    expect(rr.ttftP50Ms?.stddev).toBeCloseTo(Math.SQRT2 * 5, 10);
    expect(rr.ttftP95Ms?.mean).toBe(45);
    expect(rr.e2eP50Ms?.mean).toBe(250);
    expect(rr.rps?.mean).toBe(1.5);
    expect(rr.rps?.stddev).toBeCloseTo(Math.SQRT1_2, 10);
    expect(rr.errors).toEqual({ mean: 0, stddev: 0, n: 2 });
  });

  it('takes the baseline with the lowest TTFT p50 and divides by it', () => {
    expect(summary.points[0]!.baseline).toBe('leastloaded');
    expect(at(0, 'cacheaware').vsBaseline?.ttftP50).toBeCloseTo(9 / 15, 10);
    expect(at(0, 'cacheaware').vsBaseline?.ttftP99).toBeCloseTo(15 / 35, 10);
    expect(at(0, 'roundrobin').vsBaseline?.ttftP50).toBeCloseTo(25 / 15, 10);
    expect(at(0, 'leastloaded').vsBaseline?.ttftP50).toBe(1);
  });

  it("gives each policy's hit rate as % of the oracle's", () => {
    expect(at(0, 'cacheaware').kvHitPctOfOracle).toBeCloseTo((100 * 80) / 90, 10);
    expect(at(0, 'roundrobin').kvHitPctOfOracle).toBeCloseTo((100 * 31.25) / 90, 10);
    expect(at(0, 'oracle').kvHitPctOfOracle).toBe(100);
    expect(at(0, 'cacheaware').backendHitPctOfOracle).toBeUndefined();
    expect(at(1, 'cacheaware').kvHitPctOfOracle).toBeCloseTo(87.5, 10);
  });

  it('has no baseline ratio or oracle share when those policies did not run', () => {
    const only = summarize({
      scenario: 's',
      sweepVariable: 'sessions',
      points: [{ value: 1, policies: [FIXTURE.points[0]!.policies[2]!] }],
    });
    expect(only.points[0]!.baseline).toBeUndefined();
    expect(only.points[0]!.policies[0]!.vsBaseline).toBeUndefined();
    expect(only.points[0]!.policies[0]!.kvHitPctOfOracle).toBeUndefined();
    expect(only.slopes).toEqual([
      { policy: 'cacheaware', ttftP50MsPerUnit: undefined, ttftP95MsPerUnit: undefined, e2eP50MsPerUnit: undefined },
    ]);
  });

  it('computes the TTFT slope from the first to the last sweep point', () => {
    const bySlope = new Map(summary.slopes.map((entry) => [entry.policy, entry]));
    expect([...bySlope.keys()]).toEqual(['roundrobin', 'leastloaded', 'cacheaware', 'oracle']);
    expect(bySlope.get('roundrobin')?.ttftP50MsPerUnit).toBe((60 - 25) / 4);
    expect(bySlope.get('leastloaded')?.ttftP50MsPerUnit).toBe((40 - 15) / 4);
    expect(bySlope.get('cacheaware')?.ttftP50MsPerUnit).toBe(0.5);
    expect(bySlope.get('cacheaware')?.ttftP95MsPerUnit).toBe(-0.5);
    // The fixture's e2e is 10 × its TTFT: the seed-comparable slope scales with it.
    expect(bySlope.get('roundrobin')?.e2eP50MsPerUnit).toBe((600 - 250) / 4);
  });
});

describe('the compulsory-miss bound', () => {
  const summary = summarize(FIXTURE);
  const at = (pointIndex: number, policy: string) =>
    summary.points[pointIndex]!.policies.find((entry) => entry.policy === policy)!;

  it('is Σ cached ÷ Σ prompt tokens of the replay, per seed, and bounds nothing when the replay cache evicted', () => {
    expect(boundPct(bound(1, 400, 380))).toBe(95);
    expect(boundPct(bound(1, 400, 380, 1))).toBeUndefined();
    expect(boundPct(bound(1, 0, 0))).toBeUndefined();
  });

  it('is averaged over seeds once per point, whatever the policy', () => {
    expect(summary.points[0]!.bound?.mean).toBe(92.5);
    expect(summary.points[0]!.bound?.stddev).toBeCloseTo(Math.sqrt(12.5), 10);
    expect(summary.points[0]!.bound?.n).toBe(2);
    expect(summary.points[1]!.bound).toBeUndefined();
  });

  it("gives each policy's hit rate as % of the bound (KV hit %, else the backends' counters)", () => {
    expect(at(0, 'cacheaware').hitPctOfBound).toBeCloseTo((100 * 80) / 92.5, 10);
    expect(at(0, 'roundrobin').hitPctOfBound).toBeCloseTo((100 * 31.25) / 92.5, 10);
    expect(at(0, 'oracle').hitPctOfBound).toBeCloseTo((100 * 90) / 92.5, 10);
    expect(at(1, 'cacheaware').hitPctOfBound).toBeUndefined();
    const countersOnly = summarize({
      scenario: 's',
      sweepVariable: 'sessions',
      points: [
        {
          value: 1,
          policies: [
            {
              policy: 'p',
              runs: [
                {
                  seed: 1,
                  wallMs: 1,
                  requests: [],
                  backends: [{ backend: 'b', prefixCacheHitsDelta: 45, prefixCacheQueriesDelta: 100 }],
                },
              ],
            },
          ],
          bound: [bound(1, 100, 90)],
        },
      ],
    });
    expect(countersOnly.points[0]!.policies[0]!.hitPctOfBound).toBe(50);
  });
});

describe('prediction precision and recall', () => {
  const summary = summarize(FIXTURE);
  const at = (pointIndex: number, policy: string) =>
    summary.points[pointIndex]!.policies.find((entry) => entry.policy === policy)!;

  it('is confirmed ÷ predicted and confirmed ÷ observed tokens, token-weighted, and the unverified share of predictions', () => {
    const figures = seedFigures(
      run(1, 1000, [1], [0], {
        prediction: prediction(300, 320, 240, { confirmed: 2, overpredicted: 1, unverified: 1 }),
      }),
    );
    expect(figures.precisionPct).toBe(80);
    expect(figures.recallPct).toBe(75);
    expect(figures.unverifiedPct).toBe(25);
  });

  it('has no precision without predicted tokens, no recall without observed ones, and nothing without counters', () => {
    const none = seedFigures(run(1, 1000, [1], [0], { prediction: prediction(0, 0, 0, { unverified: 3 }) }));
    expect(none.precisionPct).toBeUndefined();
    expect(none.recallPct).toBeUndefined();
    expect(none.unverifiedPct).toBe(100);
    const oracle = seedFigures(FIXTURE.points[0]!.policies[3]!.runs[0]!);
    expect([oracle.precisionPct, oracle.recallPct, oracle.unverifiedPct]).toEqual([undefined, undefined, undefined]);
  });

  it('is averaged over the seeds that have it, with stddev', () => {
    const rr = at(0, 'roundrobin');
    // Seed 1 predicted nothing: precision from seed 2 alone; recall 0 % and 33.3 %.
    expect(rr.precisionPct).toEqual({ mean: 50, stddev: 0, n: 1 });
    expect(rr.recallPct?.mean).toBeCloseTo(50 / 3, 10);
    expect(rr.recallPct?.stddev).toBeCloseTo(Math.SQRT2 * (50 / 3), 10);
    expect(rr.unverifiedPct).toEqual({ mean: 0, stddev: 0, n: 2 });
    expect(at(0, 'cacheaware').precisionPct?.mean).toBe(80);
    expect(at(0, 'oracle').precisionPct).toBeUndefined();
  });
});
