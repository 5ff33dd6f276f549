import { describe, expect, it } from 'vitest';
import type { EngineMetrics } from './engine-metrics';
import { hitRateOverInterval } from './hit-rate-over-interval';

const scrape = (overrides: Partial<EngineMetrics>): EngineMetrics => ({
  engine: 'vllm',
  kvUsage: 0.1,
  kvCapacityTokens: 1000,
  running: 0,
  waiting: 0,
  preemptionsTotal: 0,
  generationTokensTotal: 300,
  prefixCacheQueriesTotal: 1000,
  prefixCacheHitsTotal: 400,
  prefixCacheCounterUnit: 'tokens',
  prefixCacheHitRate: null,
  engineStartedAtMs: null,
  loraAdapters: null,
  loraAdaptersMalformed: false,
  ...overrides,
});

describe('hitRateOverInterval', () => {
  it('divides the hits gained by the queries made between the two scrapes', () => {
    expect(hitRateOverInterval(scrape({}), scrape({ prefixCacheQueriesTotal: 1500, prefixCacheHitsTotal: 775 }))).toBe(
      0.75,
    );
    expect(hitRateOverInterval(scrape({}), scrape({ prefixCacheQueriesTotal: 1200 }))).toBe(0);
  });

  it('is null when no query was made in between', () => {
    expect(hitRateOverInterval(scrape({}), scrape({}))).toBeNull();
  });

  it('is null when a counter went down (engine restart)', () => {
    expect(
      hitRateOverInterval(scrape({}), scrape({ prefixCacheQueriesTotal: 200, prefixCacheHitsTotal: 50 })),
    ).toBeNull();
    expect(
      hitRateOverInterval(scrape({}), scrape({ prefixCacheQueriesTotal: 2000, prefixCacheHitsTotal: 10 })),
    ).toBeNull();
  });

  it('is null when the counters changed meaning: other engine, other unit, or counters on one side only', () => {
    const later = { prefixCacheQueriesTotal: 2000, prefixCacheHitsTotal: 900 };
    expect(hitRateOverInterval(scrape({ engine: 'sglang' }), scrape(later))).toBeNull();
    expect(hitRateOverInterval(scrape({ prefixCacheCounterUnit: 'blocks' }), scrape(later))).toBeNull();
    expect(
      hitRateOverInterval(scrape({ prefixCacheQueriesTotal: null, prefixCacheHitsTotal: null }), scrape(later)),
    ).toBeNull();
    expect(
      hitRateOverInterval(
        scrape({}),
        scrape({ prefixCacheQueriesTotal: null, prefixCacheHitsTotal: null, prefixCacheHitRate: 0.5 }),
      ),
    ).toBeNull();
  });

  it('never exceeds 1 when hits grew faster than queries (counted at different moments)', () => {
    expect(hitRateOverInterval(scrape({}), scrape({ prefixCacheQueriesTotal: 1100, prefixCacheHitsTotal: 600 }))).toBe(
      1,
    );
  });

  it('falls back to the current gauge when the engine has no counters', () => {
    const v0 = {
      engine: 'vllm-v0',
      prefixCacheQueriesTotal: null,
      prefixCacheHitsTotal: null,
      prefixCacheCounterUnit: null,
    } as const;
    expect(
      hitRateOverInterval(scrape({ ...v0, prefixCacheHitRate: 0.2 }), scrape({ ...v0, prefixCacheHitRate: 0.9137 })),
    ).toBe(0.9137);
    const llamaCpp = { ...v0, engine: 'llamacpp', prefixCacheHitRate: null } as const;
    expect(hitRateOverInterval(scrape(llamaCpp), scrape(llamaCpp))).toBeNull();
  });
});
