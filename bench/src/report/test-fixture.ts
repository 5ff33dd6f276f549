import type { RequestRecord, ScenarioResults, SeedRun } from './summary';

/** Hand-computable fixture shared by the report tests (prompt 100 tokens, e2e = 10 × TTFT). */
export function req(ttftMs: number, cachedTokens: number, status = 200): RequestRecord {
  return { ttftMs, e2eMs: 10 * ttftMs, itlMs: [1, 2], status, backend: 'b0', reason: 'test', promptTokens: 100, cachedTokens };
}

export function run(seed: number, wallMs: number, ttfts: readonly number[], cached: readonly number[], extra: Partial<SeedRun> = {}): SeedRun {
  return { seed, wallMs, requests: ttfts.map((ttft, index) => req(ttft, cached[index] ?? 0)), ...extra };
}

export const FIXTURE: ScenarioResults = {
  scenario: 'seed-cloud <test> & "x"',
  sweepVariable: 'sessions',
  points: [
    {
      value: 4,
      policies: [
        { policy: 'roundrobin', runs: [run(1, 2000, [10, 20, 30, 40], [0, 0, 50, 50]), run(2, 4000, [20, 30, 40, 50], [0, 50, 50, 50])] },
        {
          policy: 'leastloaded',
          runs: [{ seed: 1, wallMs: 2000, requests: [...run(1, 2000, [5, 15, 25, 35], [0, 0, 0, 0]).requests, { e2eMs: 3, itlMs: [], status: 503, promptTokens: 100 }] }],
        },
        { policy: 'cacheaware', runs: [run(1, 2000, [6, 9, 12, 15], [80, 80, 80, 80], { backends: [{ backend: 'b0', prefixCacheHitsDelta: 30, prefixCacheQueriesDelta: 40 }] })] },
        { policy: 'oracle', runs: [run(1, 2000, [4, 8, 12, 16], [100, 100, 100, 60])] },
      ],
    },
    {
      value: 8,
      policies: [
        { policy: 'roundrobin', runs: [run(1, 2000, [50, 60, 70, 80], [0, 0, 0, 0])] },
        { policy: 'leastloaded', runs: [run(1, 2000, [30, 40, 50, 60], [0, 0, 0, 0])] },
        { policy: 'cacheaware', runs: [run(1, 2000, [10, 11, 12, 13], [70, 70, 70, 70])] },
        { policy: 'oracle', runs: [run(1, 2000, [9, 10, 11, 12], [80, 80, 80, 80])] },
      ],
    },
  ],
};
