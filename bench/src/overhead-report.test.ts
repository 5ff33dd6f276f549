import { describe, expect, it } from 'vitest';
import {
  addedLatency,
  baselineTable,
  combinePacedRounds,
  median,
  ratio,
  resultsTable,
  summarize,
  targetsTable,
  type PacedMeasurement,
  type PacedRound,
  type PathResult,
  type WorkloadResult,
} from './overhead-report';
import type { WrkResult } from './wrk';

function paced(p50Ms: number, p99Ms: number, extra: Partial<PacedMeasurement> = {}): PacedMeasurement {
  return {
    rounds: 1,
    requests: 1500,
    achievedRate: 495,
    p50Ms,
    p90Ms: p50Ms,
    p99Ms,
    p999Ms: p99Ms,
    meanMs: p50Ms,
    maxMs: p99Ms,
    errors: 0,
    simCpuUsPerRequest: 200,
    sharedCoreBusy: 0.3,
    roundP50sMs: [p50Ms],
    roundP99sMs: [p99Ms],
    roundProxyCpuUsPerRequest: [],
    ...extra,
  };
}

function path(id: PathResult['path'], p50Ms: number, p99Ms: number, maxRate: number): PathResult {
  return {
    path: id,
    paced: paced(p50Ms, p99Ms, id === 'direct' ? {} : { proxyCpuUsPerRequest: 100 }),
    max: { rate: maxRate, p50Ms: 5, p99Ms: 9, errors: 0 },
  };
}

const workload = { id: 'small-json', promptBytes: 100, stream: false };

describe('addedLatency and ratio', () => {
  it('subtracts the direct percentiles', () => {
    expect(addedLatency(paced(1.5, 3), paced(1.0, 2.5))).toEqual({ p50Ms: 0.5, p99Ms: 0.5 });
    expect(addedLatency(undefined, paced(1, 2))).toBeUndefined();
  });

  it('refuses to divide by nothing or by noise', () => {
    expect(ratio(3, 2)).toBe(1.5);
    expect(ratio(3, 0)).toBeUndefined();
    expect(ratio(3, -0.1)).toBeUndefined();
    expect(ratio(0.3, 0.005, 0.01)).toBeUndefined();
    expect(ratio(undefined, 2)).toBeUndefined();
  });
});

describe('summarize', () => {
  it('compares kvroute with the bare proxy and checks the targets', () => {
    const result: WorkloadResult = {
      workload,
      paths: [
        path('direct', 1.0, 2.0, 8000),
        path('bare', 1.2, 2.6, 4000),
        path('kvroute', 1.25, 3.0, 3200),
        path('haproxy', 1.05, 2.1, 7000),
      ],
    };
    const summary = summarize(result);
    expect(summary.added.bare?.p50Ms).toBeCloseTo(0.2);
    expect(summary.kvrouteAddedP50VsBare).toBeCloseTo(1.25);
    expect(summary.kvrouteAddedP99Ms).toBeCloseTo(1.0);
    expect(summary.kvrouteMaxRateVsBare).toBeCloseTo(0.8);
    expect(summary.haproxyAddedP50VsBare).toBeCloseTo(0.25);
    expect(summary.haproxyMaxRateVsBare).toBeCloseTo(1.75);
    expect(summary.meets).toEqual({ addedP50: true, addedP99: true, maxRate: true, redisAddedP50: undefined });
    expect(summary.kvrouteRedisAddedP50Ms).toBeUndefined();
    expect(summary.kvrouteRedisVsKvroute).toBeUndefined();
  });

  it('compares kvroute with Redis state with direct and with kvroute on local state', () => {
    const withRedis: PathResult = {
      path: 'kvroute-redis',
      paced: paced(1.4, 3.5, { proxyCpuUsPerRequest: 180, redisCpuUsPerRequest: 45 }),
      max: { rate: 2500, p50Ms: 6, p99Ms: 11, errors: 0 },
    };
    const result: WorkloadResult = {
      workload,
      paths: [
        path('direct', 1.0, 2.0, 8000),
        path('bare', 1.2, 2.6, 4000),
        path('kvroute', 1.25, 3.0, 3200),
        withRedis,
      ],
    };
    const summary = summarize(result);
    expect(summary.kvrouteRedisAddedP50Ms).toBeCloseTo(0.4);
    expect(summary.kvrouteRedisAddedP99Ms).toBeCloseTo(1.5);
    expect(summary.kvrouteRedisVsKvroute?.p50Ms).toBeCloseTo(0.15);
    expect(summary.kvrouteRedisVsKvroute?.p99Ms).toBeCloseTo(0.5);
    expect(summary.redisCpuUsPerRequest).toBe(45);
    expect(summary.meets.redisAddedP50).toBe(true);
    // Over 0.5 ms p50 misses the target; without kvroute on local state there is nothing to compare it with.
    const slow = summarize({
      workload,
      paths: [path('direct', 1.0, 2.0, 8000), { ...withRedis, paced: paced(1.6, 3.5, { redisCpuUsPerRequest: 45 }) }],
    });
    expect(slow.meets.redisAddedP50).toBe(false);
    expect(slow.kvrouteRedisAddedP50Ms).toBeCloseTo(0.6);
    expect(slow.kvrouteRedisVsKvroute).toBeUndefined();
  });

  it('fails a target that is missed and leaves out what was not measured', () => {
    const result: WorkloadResult = {
      workload,
      paths: [
        path('direct', 1.0, 2.0, 8000),
        path('bare', 1.2, 2.6, 4000),
        path('kvroute', 1.5, 4.0, 2000),
        { path: 'haproxy', skipped: 'not installed' },
      ],
    };
    const summary = summarize(result);
    expect(summary.meets).toEqual({ addedP50: false, addedP99: false, maxRate: false });
    expect(summary.haproxyMaxRateVsBare).toBeUndefined();
    expect(summary.added.haproxy).toBeUndefined();
  });
});

describe('tables', () => {
  const results: WorkloadResult[] = [
    {
      workload,
      paths: [
        path('direct', 1.0, 2.0, 8000),
        path('bare', 1.2, 2.6, 4000),
        path('kvroute', 1.25, 3.0, 3200),
        { path: 'haproxy', skipped: 'HAProxy is not installed | x' },
      ],
    },
  ];

  it('prints one row per path, skipped ones with their reason', () => {
    const lines = resultsTable(results, 500).split('\n');
    expect(lines).toHaveLength(2 + 4);
    expect(lines[0]).toContain('target 500');
    expect(lines[3]).toBe(
      '| small-json | bare Node proxy | 495 | 1.200 | 2.600 | +0.200 | +0.600 | 4000 | 1.00× | 100 | 200 | – | 30 % | 0 |',
    );
    expect(lines[4]).toContain('| 0.80× |');
    expect(lines[5]).toContain('skipped: HAProxy is not installed \\| x');
    for (const line of lines) expect(line.startsWith('|') && line.endsWith('|')).toBe(true);
  });

  it('marks kvroute against each target', () => {
    const table = targetsTable(results).split('\n');
    expect(table[0]).toContain('kvroute + Redis added p50 ms (≤ 0.5)');
    for (const line of table) expect(line.split('|')).toHaveLength(12 + 2);
    const row = table[2];
    expect(row).toBe('| small-json | 1.25× ✓ | +1.000 ✓ | 0.80× ✓ | – | – | – | – | +0.200 / +0.600 | – | – | – |');
  });
});

describe('tables with kvroute + Redis', () => {
  const withRedis = (p50Ms: number): PathResult => ({
    path: 'kvroute-redis',
    paced: paced(p50Ms, 3.4, { proxyCpuUsPerRequest: 150, redisCpuUsPerRequest: 38.4 }),
    max: { rate: 2800, p50Ms: 6, p99Ms: 10, errors: 0 },
  });
  const results = (p50Ms: number): WorkloadResult[] => [
    {
      workload,
      paths: [
        path('direct', 1.0, 2.0, 8000),
        path('bare', 1.2, 2.6, 4000),
        path('kvroute', 1.25, 3.0, 3200),
        withRedis(p50Ms),
      ],
    },
  ];

  it('prints its Redis CPU in the results table', () => {
    const lines = resultsTable(results(1.3), 500).split('\n');
    expect(lines[5]).toBe(
      '| small-json | kvroute + Redis | 495 | 1.300 | 3.400 | +0.300 | +1.400 | 2800 | 0.70× | 150 | 200 | 38 | 30 % | 0 |',
    );
    expect(lines[4]).toContain('| 100 | 200 | – | 30 % |');
  });

  it('marks its added p50 against the 0.5 ms target, with its cost over local state and Redis CPU beside it', () => {
    expect(targetsTable(results(1.3)).split('\n')[2]).toBe(
      '| small-json | 1.25× ✓ | +1.000 ✓ | 0.80× ✓ | +0.300 ✓ | +1.400 | +0.050 / +0.400 | 38 | +0.200 / +0.600 | – | – | – |',
    );
    expect(targetsTable(results(1.7)).split('\n')[2]).toContain('| +0.700 ✗ | +1.400 | +0.450 / +0.400 | 38 |');
  });

  it("says when rounds ran partly on the router's local state (Redis degraded)", () => {
    const degraded: WorkloadResult[] = [
      {
        workload,
        paths: [
          path('direct', 1.0, 2.0, 8000),
          { ...withRedis(1.3), paced: paced(1.3, 3.4, { rounds: 3, roundsOnLocalState: 1 }) },
        ],
      },
    ];
    expect(targetsTable(degraded).split('\n')[2]).toContain('| +0.300 ✓ (1/3 rounds partly on local state) |');
  });
});

describe('combinePacedRounds', () => {
  function round(p50Us: number, p99Us: number, requests: number, extra: Partial<PacedRound> = {}): PacedRound {
    const wrk: WrkResult = {
      durationUs: 3_000_000,
      requests,
      bytes: 0,
      errors: { connect: 0, read: 0, write: 0, status: requests === 1000 ? 1 : 0, timeout: 0 },
      latencyUs: { min: 100, mean: p50Us, stdev: 1, max: p99Us * 2, p50: p50Us, p90: p50Us, p99: p99Us, p999: p99Us },
    };
    return { wrk, simCpuSeconds: 0.3, proxyCpuSeconds: 0.15, wallSeconds: 3, ...extra };
  }

  it('takes the median of each percentile and sums counts, CPU and time', () => {
    const combined = combinePacedRounds([round(1000, 9000, 1500), round(1200, 3000, 1500), round(1100, 4000, 1000)]);
    expect(combined.rounds).toBe(3);
    expect(combined.requests).toBe(4000);
    expect(combined.achievedRate).toBeCloseTo(4000 / 9);
    expect(combined.p50Ms).toBeCloseTo(1.1);
    expect(combined.p99Ms).toBeCloseTo(4.0);
    expect(combined.maxMs).toBeCloseTo(18);
    expect(combined.errors).toBe(1);
    expect(combined.meanMs).toBeCloseTo((1.0 * 1500 + 1.2 * 1500 + 1.1 * 1000) / 4000);
    expect(combined.proxyCpuUsPerRequest).toBeCloseTo((0.45 * 1e6) / 4000);
    expect(combined.simCpuUsPerRequest).toBeCloseTo((0.9 * 1e6) / 4000);
    expect(combined.sharedCoreBusy).toBeCloseTo(1.35 / 9);
    expect(combined.roundP99sMs).toEqual([9, 3, 4]);
    expect(combined.roundProxyCpuUsPerRequest.map((value) => Math.round(value))).toEqual([100, 100, 150]);
    expect(combined.redisCpuUsPerRequest).toBeUndefined();
  });

  it('adds up the Redis CPU of kvroute + Redis rounds, outside the shared core', () => {
    const combined = combinePacedRounds([
      round(1000, 2000, 1000, { redisCpuSeconds: 0.05 }),
      round(1000, 2000, 1000, { redisCpuSeconds: 0.03 }),
    ]);
    expect(combined.redisCpuUsPerRequest).toBeCloseTo((0.08 * 1e6) / 2000);
    expect(combined.roundsOnLocalState).toBeUndefined();
    expect(
      combinePacedRounds([
        round(1000, 2000, 1000, { onLocalState: true }),
        round(1000, 2000, 1000, { onLocalState: false }),
      ]).roundsOnLocalState,
    ).toBe(1);
    expect(combined.sharedCoreBusy).toBeCloseTo(0.9 / 6);
  });

  it('has no proxy CPU for the direct path, and refuses rounds without a single request', () => {
    const { proxyCpuSeconds: _, ...direct } = round(1000, 2000, 10);
    const combined = combinePacedRounds([direct]);
    expect(combined.proxyCpuUsPerRequest).toBeUndefined();
    expect(combined.roundProxyCpuUsPerRequest).toEqual([]);
    expect(combined.sharedCoreBusy).toBeCloseTo(0.1);
    expect(() => combinePacedRounds([round(1000, 2000, 0)])).toThrow(/no request/);
  });

  it('median: the middle value, or the mean of the two middle ones', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([])).toBeNaN();
  });
});

describe('baselineTable', () => {
  const withCpu = (id: PathResult['path'], p50Ms: number, rounds: number[]): PathResult => ({
    path: id,
    paced: paced(p50Ms, 2 * p50Ms, {
      proxyCpuUsPerRequest: rounds.reduce((sum, value) => sum + value, 0) / rounds.length,
      roundProxyCpuUsPerRequest: rounds,
    }),
  });

  it('compares each path with its baseline, by totals and by the median of round-by-round ratios', () => {
    const result: WorkloadResult = {
      workload,
      paths: [
        path('direct', 1.0, 2.0, 900),
        withCpu('kvroute', 1.4, [110, 130, 120]),
        withCpu('kvroute-baseline', 1.3, [100, 100, 150]),
        withCpu('kvroute-redis', 1.6, [200]),
      ],
    };
    const table = baselineTable([result]);
    const rows = table.split('\n').slice(2);
    // kvroute + Redis has no baseline measured: no row.
    expect(rows).toHaveLength(1);
    // Totals 120 against 116.7: +2.9 %; rounds +10 %, +30 %, −20 %: median +10 %.
    expect(rows[0]).toBe(
      '| small-json | kvroute | 117 → 120 | +2.9 % | +10.0 % [−20.0 %, +30.0 %] | +0.300 → +0.400 |',
    );
  });
});
