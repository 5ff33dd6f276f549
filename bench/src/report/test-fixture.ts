import type { PredictionTotals, RequestRecord, ScenarioResults, SeedBound, SeedRun } from './summary';

/** Hand-computable fixture shared by the report tests (prompt 100 tokens, e2e = 10 × TTFT). */
export function req(ttftMs: number, cachedTokens: number, status = 200): RequestRecord {
  return {
    ttftMs,
    e2eMs: 10 * ttftMs,
    itlMs: [1, 2],
    status,
    backend: 'b0',
    reason: 'test',
    promptTokens: 100,
    cachedTokens,
  };
}

export function run(
  seed: number,
  wallMs: number,
  ttfts: readonly number[],
  cached: readonly number[],
  extra: Partial<SeedRun> = {},
): SeedRun {
  return { seed, wallMs, requests: ttfts.map((ttft, index) => req(ttft, cached[index] ?? 0)), ...extra };
}

export function prediction(
  predictedTokens: number,
  observedTokens: number,
  confirmedTokens: number,
  predictions: Record<string, number>,
): PredictionTotals {
  return { predictedTokens, observedTokens, confirmedTokens, predictions };
}

export function bound(seed: number, promptTokens: number, cachedTokens: number, evictedBlocks = 0): SeedBound {
  return { seed, requests: 4, failed: 0, promptTokens, cachedTokens, evictedBlocks, numGpuBlocks: 1000 };
}

export const FIXTURE: ScenarioResults = {
  scenario: 'seed-cloud <test> & "x"',
  sweepVariable: 'sessions',
  points: [
    {
      value: 4,
      policies: [
        {
          policy: 'roundrobin',
          runs: [
            // Predicted nothing (precision undefined), the engines still hit 100 tokens: recall 0.
            run(1, 2000, [10, 20, 30, 40], [0, 0, 50, 50], {
              prediction: prediction(0, 100, 0, { confirmed: 0, underpredicted: 4, overpredicted: 0, unverified: 0 }),
            }),
            run(2, 4000, [20, 30, 40, 50], [0, 50, 50, 50], {
              prediction: prediction(100, 150, 50, { confirmed: 2, underpredicted: 2 }),
            }),
          ],
        },
        {
          policy: 'leastloaded',
          runs: [
            {
              seed: 1,
              wallMs: 2000,
              requests: [
                ...run(1, 2000, [5, 15, 25, 35], [0, 0, 0, 0]).requests,
                { e2eMs: 3, itlMs: [], status: 503, promptTokens: 100 },
              ],
            },
          ],
        },
        {
          policy: 'cacheaware',
          runs: [
            run(1, 2000, [6, 9, 12, 15], [80, 80, 80, 80], {
              backends: [{ backend: 'b0', prefixCacheHitsDelta: 30, prefixCacheQueriesDelta: 40 }],
              prediction: prediction(300, 320, 240, {
                confirmed: 2,
                overpredicted: 1,
                underpredicted: 0,
                unverified: 1,
              }),
            }),
          ],
        },
        { policy: 'oracle', runs: [run(1, 2000, [4, 8, 12, 16], [100, 100, 100, 60])] },
      ],
      // 95 % and 90 %: 92.5 ± 3.5.
      bound: [bound(1, 400, 380), bound(2, 400, 360)],
    },
    {
      value: 8,
      policies: [
        { policy: 'roundrobin', runs: [run(1, 2000, [50, 60, 70, 80], [0, 0, 0, 0])] },
        { policy: 'leastloaded', runs: [run(1, 2000, [30, 40, 50, 60], [0, 0, 0, 0])] },
        { policy: 'cacheaware', runs: [run(1, 2000, [10, 11, 12, 13], [70, 70, 70, 70])] },
        { policy: 'oracle', runs: [run(1, 2000, [9, 10, 11, 12], [80, 80, 80, 80])] },
      ],
      // The replay evicted: not a bound, so none is shown.
      bound: [bound(1, 400, 300, 12)],
    },
  ],
};
