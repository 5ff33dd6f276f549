import { describe, expect, it } from 'vitest';
import llamaCppProm from './fixtures/sim-llamacpp.prom?raw';
import llamaCppSlots from './fixtures/sim-llamacpp.slots.json';
import llamaCppState from './fixtures/sim-llamacpp.state.json';
import sglangProm from './fixtures/sim-sglang.prom?raw';
import sglangState from './fixtures/sim-sglang.state.json';
import vllmV0Prom from './fixtures/sim-vllm-v0.prom?raw';
import vllmV0State from './fixtures/sim-vllm-v0.state.json';
import vllmProm from './fixtures/sim-vllm.prom?raw';
import vllmState from './fixtures/sim-vllm.state.json';
import {
  detectEngineKind,
  hitRateOverInterval,
  parseEngineMetrics,
  parsePrometheusText,
  type EngineMetrics,
} from '../src/index';

/**
 * Expositions captured from the real apps/vllm-sim (capture-sim-fixtures.sh): KV cache of 96 blocks,
 * 3 requests running and 3 waiting at capture, 1985 prompt tokens looked up of which 384 hit. Each
 * `*.state.json` is the sim's own /sim/state right after, used as a cross-check.
 */
describe('vllm-sim expositions', () => {
  it('parse without a skipped line and are detected as their dialect', () => {
    const cases = [
      [vllmProm, 'vllm'],
      [vllmV0Prom, 'vllm-v0'],
      [sglangProm, 'sglang'],
      [llamaCppProm, 'llamacpp'],
    ] as const;
    for (const [text, engine] of cases) {
      const exposition = parsePrometheusText(text);
      expect(exposition.issues).toEqual([]);
      expect(detectEngineKind(exposition)).toBe(engine);
    }
  });

  it('vllm (V1)', () => {
    const metrics = parseEngineMetrics(vllmProm);
    expect(metrics).toEqual<EngineMetrics>({
      engine: 'vllm',
      kvUsage: 0.9789473684210527,
      kvCapacityTokens: 96 * 16,
      running: 3,
      waiting: 3,
      preemptionsTotal: 0,
      generationTokensTotal: 270,
      prefixCacheQueriesTotal: 1985,
      prefixCacheHitsTotal: 384,
      prefixCacheCounterUnit: 'tokens',
      prefixCacheHitRate: null,
      // The sim prints its start as process_start_time_seconds, as vLLM V1 with one API server does.
      engineStartedAtMs: 1_795_974_452_297,
      loraAdapters: null,
      loraAdaptersMalformed: false,
    });
    expect(metrics).toMatchObject({
      kvUsage: vllmState.kv_cache_usage,
      kvCapacityTokens: vllmState.num_gpu_blocks * 16,
      running: vllmState.running,
      waiting: vllmState.waiting,
      preemptionsTotal: vllmState.preemptions,
      prefixCacheQueriesTotal: vllmState.prefix_cache_queries_tokens,
      prefixCacheHitsTotal: vllmState.prefix_cache_hits_tokens,
    });
  });

  it('vllm-v0', () => {
    const metrics = parseEngineMetrics(vllmV0Prom);
    expect(metrics).toEqual<EngineMetrics>({
      engine: 'vllm-v0',
      kvUsage: 0.9789473684210527,
      kvCapacityTokens: 96 * 16,
      running: 3,
      waiting: 3,
      preemptionsTotal: 0,
      generationTokensTotal: 266,
      prefixCacheQueriesTotal: null,
      prefixCacheHitsTotal: null,
      prefixCacheCounterUnit: null,
      engineStartedAtMs: null,
      loraAdapters: null,
      loraAdaptersMalformed: false,
      // Block hit rate: 24 hit blocks of 123 full blocks looked up.
      prefixCacheHitRate: 0.1951219512195122,
    });
    expect(metrics).toMatchObject({
      kvUsage: vllmV0State.kv_cache_usage,
      running: vllmV0State.running,
      waiting: vllmV0State.waiting,
    });
    expect(hitRateOverInterval(metrics, metrics)).toBe(0.1951219512195122);
  });

  it('sglang', () => {
    const metrics = parseEngineMetrics(sglangProm);
    expect(metrics).toEqual<EngineMetrics>({
      engine: 'sglang',
      // num_used_tokens / max_total_num_tokens = 1488 / 1520, not the rounded token_usage 0.98.
      kvUsage: 1488 / 1520,
      kvCapacityTokens: 1520,
      running: 3,
      waiting: 3,
      preemptionsTotal: null,
      // Like prompt_tokens_total, counted when a request finishes (2 × 4 tokens).
      generationTokensTotal: 8,
      // prompt_tokens_total counts finished requests only (2 × 391 tokens).
      prefixCacheQueriesTotal: 782,
      prefixCacheHitsTotal: 384,
      prefixCacheCounterUnit: 'tokens',
      prefixCacheHitRate: 0,
      engineStartedAtMs: null,
      loraAdapters: null,
      loraAdaptersMalformed: false,
    });
    // The sim's pool has num_gpu_blocks − 1 usable blocks.
    expect(metrics).toMatchObject({
      kvUsage: sglangState.kv_cache_usage,
      kvCapacityTokens: (sglangState.num_gpu_blocks - 1) * 16,
    });
  });

  it('llamacpp, with and without /slots', () => {
    expect(parseEngineMetrics(llamaCppProm, { llamaCppSlots })).toEqual<EngineMetrics>({
      engine: 'llamacpp',
      kvUsage: null,
      kvCapacityTokens: 4 * 32_768,
      running: 3,
      waiting: 3,
      preemptionsTotal: null,
      generationTokensTotal: 270,
      prefixCacheQueriesTotal: null,
      prefixCacheHitsTotal: null,
      prefixCacheCounterUnit: null,
      prefixCacheHitRate: null,
      engineStartedAtMs: null,
      loraAdapters: null,
      loraAdaptersMalformed: false,
    });
    expect(parseEngineMetrics(llamaCppProm)).toMatchObject({
      kvCapacityTokens: null,
      running: llamaCppState.running,
      waiting: llamaCppState.waiting,
    });
  });
});
