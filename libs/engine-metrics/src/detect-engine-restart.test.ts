import { describe, expect, it } from 'vitest';
import vllmV1TwoEngines from '../test/fixtures/vllm-v1-two-engines.prom?raw';
import { detectEngineRestart } from './detect-engine-restart';
import type { EngineMetrics } from './engine-metrics';
import { parseEngineMetrics } from './normalise-engine-metrics';

const scrape = (overrides: Partial<EngineMetrics>): EngineMetrics => ({
  engine: 'sglang',
  kvUsage: 0.1,
  kvCapacityTokens: 1000,
  running: 0,
  waiting: 0,
  preemptionsTotal: 2,
  generationTokensTotal: 5000,
  prefixCacheQueriesTotal: 1000,
  prefixCacheHitsTotal: 400,
  prefixCacheCounterUnit: 'tokens',
  prefixCacheHitRate: null,
  engineStartedAtMs: null,
  loraAdapters: null,
  loraAdaptersMalformed: false,
  ...overrides,
});

describe('detectEngineRestart', () => {
  it('sees no restart while every counter grows or stays', () => {
    expect(detectEngineRestart(scrape({}), scrape({}))).toBeNull();
    expect(
      detectEngineRestart(
        scrape({}),
        scrape({
          generationTokensTotal: 5100,
          prefixCacheQueriesTotal: 1200,
          prefixCacheHitsTotal: 500,
          preemptionsTotal: 3,
        }),
      ),
    ).toBeNull();
  });

  it('sees a restart when the process start time changed, and only then when both scrapes have one', () => {
    const started = { engine: 'vllm', engineStartedAtMs: 1_761_204_391_270 } as const;
    expect(detectEngineRestart(scrape(started), scrape({ ...started, generationTokensTotal: 9000 }))).toBeNull();
    expect(
      detectEngineRestart(
        scrape(started),
        scrape({ ...started, engineStartedAtMs: 1_761_209_000_010, generationTokensTotal: 9000 }),
      ),
    ).toEqual({
      sign: 'start-time-changed',
      previousStartedAtMs: 1_761_204_391_270,
      startedAtMs: 1_761_209_000_010,
    });
    // Same process, a counter lower: a series went away (say a label changed), not a restart.
    expect(detectEngineRestart(scrape(started), scrape({ ...started, generationTokensTotal: 10 }))).toBeNull();
  });

  it('falls back to the counters when either scrape lacks a start time', () => {
    expect(
      detectEngineRestart(scrape({ engineStartedAtMs: 1_761_204_391_270 }), scrape({ generationTokensTotal: 10 })),
    ).toMatchObject({ sign: 'counter-went-down', counter: 'generationTokensTotal' });
  });

  it('sees a restart when any counter went down: prefix-cache queries or hits, generation tokens, preemptions', () => {
    expect(
      detectEngineRestart(
        scrape({}),
        scrape({
          prefixCacheQueriesTotal: 300,
          prefixCacheHitsTotal: 20,
          generationTokensTotal: 40,
          preemptionsTotal: 0,
        }),
      ),
    ).toEqual({
      sign: 'counter-went-down',
      counter: 'prefixCacheQueriesTotal',
      previous: 1000,
      current: 300,
    });
    expect(detectEngineRestart(scrape({}), scrape({ prefixCacheHitsTotal: 399 }))).toMatchObject({
      counter: 'prefixCacheHitsTotal',
    });
    expect(detectEngineRestart(scrape({}), scrape({ generationTokensTotal: 4999 }))).toMatchObject({
      counter: 'generationTokensTotal',
    });
    expect(detectEngineRestart(scrape({}), scrape({ preemptionsTotal: 0 }))).toMatchObject({
      counter: 'preemptionsTotal',
    });
  });

  it('ignores counters read on one side only, and prefix-cache counters whose unit changed', () => {
    const llamaCpp = {
      engine: 'llamacpp',
      preemptionsTotal: null,
      prefixCacheQueriesTotal: null,
      prefixCacheHitsTotal: null,
      prefixCacheCounterUnit: null,
    } as const;
    expect(detectEngineRestart(scrape(llamaCpp), scrape({ ...llamaCpp, generationTokensTotal: 6000 }))).toBeNull();
    expect(detectEngineRestart(scrape(llamaCpp), scrape({ ...llamaCpp, generationTokensTotal: 12 }))).toMatchObject({
      counter: 'generationTokensTotal',
    });
    expect(
      detectEngineRestart(scrape({ generationTokensTotal: null }), scrape({ generationTokensTotal: 3 })),
    ).toBeNull();
    expect(
      detectEngineRestart(
        scrape({ prefixCacheCounterUnit: 'blocks' }),
        scrape({ prefixCacheQueriesTotal: 10, prefixCacheHitsTotal: 1 }),
      ),
    ).toBeNull();
  });

  it('sees a restart when another engine kind answers at the address', () => {
    expect(detectEngineRestart(scrape({ engine: 'vllm' }), scrape({}))).toEqual({ sign: 'engine-changed' });
  });

  it('misses a restart after which the new process already served more than the old one had (no start time)', () => {
    expect(
      detectEngineRestart(
        scrape({}),
        scrape({
          prefixCacheQueriesTotal: 1500,
          prefixCacheHitsTotal: 450,
          generationTokensTotal: 7000,
          preemptionsTotal: 2,
        }),
      ),
    ).toBeNull();
  });

  it('reads a restarted vLLM V1 from its exposition: a new start time, counters from zero', () => {
    const before = parseEngineMetrics(vllmV1TwoEngines);
    const restartedText = vllmV1TwoEngines
      .replace('process_start_time_seconds 1.76120439127e+09', 'process_start_time_seconds 1.76120502304e+09')
      .replace(/^(vllm:[a-z_]+_total\{[^}]*\}) .*$/gm, '$1 0.0');
    const after = parseEngineMetrics(restartedText);
    expect(after).toMatchObject({
      engineStartedAtMs: 1_761_205_023_040,
      generationTokensTotal: 0,
      prefixCacheQueriesTotal: 0,
    });
    expect(detectEngineRestart(before, after)).toEqual({
      sign: 'start-time-changed',
      previousStartedAtMs: 1_761_204_391_270,
      startedAtMs: 1_761_205_023_040,
    });
    expect(detectEngineRestart(after, after)).toBeNull();
  });
});
