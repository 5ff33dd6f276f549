import { describe, expect, it } from 'vitest';
import llamaCppKvGauges from '../test/fixtures/llamacpp-kv-gauges.prom?raw';
import sglangDp2Tp2 from '../test/fixtures/sglang-dp2-tp2.prom?raw';
import vllmV0 from '../test/fixtures/vllm-v0.prom?raw';
import vllmV1NonFinite from '../test/fixtures/vllm-v1-nonfinite.prom?raw';
import vllmV1TwoEngines from '../test/fixtures/vllm-v1-two-engines.prom?raw';
import { EngineMetricsError, type EngineMetrics } from './engine-metrics';
import { normaliseEngineMetrics, parseEngineMetrics } from './normalise-engine-metrics';
import { parsePrometheusText } from './prometheus-text';

describe('parseEngineMetrics: vLLM V1', () => {
  it('sums counts and counters over DP engines, averages KV usage, multiplies blocks by block size', () => {
    expect(parsePrometheusText(vllmV1TwoEngines).issues).toEqual([]);
    expect(parseEngineMetrics(vllmV1TwoEngines)).toEqual<EngineMetrics>({
      engine: 'vllm',
      kvUsage: 0.5,
      kvCapacityTokens: 2 * 63_680 * 16,
      running: 8,
      waiting: 1,
      preemptionsTotal: 5,
      generationTokensTotal: 310_422 + 188_104,
      prefixCacheQueriesTotal: 2_417_733 + 1_000_000,
      prefixCacheHitsTotal: 1_200_000 + 250_000,
      prefixCacheCounterUnit: 'tokens',
      prefixCacheHitRate: null,
      engineStartedAtMs: 1_761_204_391_270,
      loraAdapters: null,
      loraAdaptersMalformed: false,
    });
  });

  it('treats NaN and ±Inf series as absent, clamps usage to 1 and leaves capacity unknown while an engine has no blocks yet', () => {
    const metrics = parseEngineMetrics(vllmV1NonFinite);
    expect(metrics).toEqual<EngineMetrics>({
      engine: 'vllm',
      kvUsage: 1,
      kvCapacityTokens: null,
      running: 4,
      waiting: null,
      preemptionsTotal: null,
      generationTokensTotal: null,
      prefixCacheQueriesTotal: null,
      prefixCacheHitsTotal: null,
      prefixCacheCounterUnit: null,
      prefixCacheHitRate: null,
      engineStartedAtMs: null,
      loraAdapters: null,
      loraAdaptersMalformed: false,
    });
    for (const value of Object.values(metrics))
      if (typeof value === 'number') expect(Number.isFinite(value)).toBe(true);
  });

  it('falls back to the pre-0.11 names: gpu_cache_usage_perc and gpu_prefix_cache_* counted in blocks', () => {
    const text = [
      'vllm:num_requests_running{engine="0",model_name="m"} 2.0',
      'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0',
      'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.3',
      'vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 400.0',
      'vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 100.0',
    ].join('\n');
    expect(parseEngineMetrics(text)).toMatchObject({
      engine: 'vllm',
      kvUsage: 0.3,
      prefixCacheQueriesTotal: 400,
      prefixCacheHitsTotal: 100,
      prefixCacheCounterUnit: 'blocks',
    });
  });

  it('prefers the new names when both eras are printed, and needs both counters of a pair', () => {
    const text = [
      'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.6',
      'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.1',
      'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0',
      'vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 50.0',
      'vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 20.0',
    ].join('\n');
    // prefix_cache_hits_total is missing, so the whole new pair is unusable: the old pair is read.
    expect(parseEngineMetrics(text)).toMatchObject({
      kvUsage: 0.6,
      prefixCacheQueriesTotal: 50,
      prefixCacheHitsTotal: 20,
      prefixCacheCounterUnit: 'blocks',
    });
  });

  it('reads kv_cache_size_tokens when num_gpu_blocks is not a number', () => {
    const text =
      'vllm:cache_config_info{block_size="16",engine="0",kv_cache_size_tokens="50000",num_gpu_blocks="None"} ' +
      '1.0\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1';
    expect(parseEngineMetrics(text).kvCapacityTokens).toBe(50_000);
  });
});

describe('parseEngineMetrics: vLLM V0', () => {
  it('reads gpu_* names, adds swapped requests to waiting and keeps the cumulative hit-rate gauge', () => {
    expect(parseEngineMetrics(vllmV0)).toEqual<EngineMetrics>({
      engine: 'vllm-v0',
      kvUsage: 0.0213,
      kvCapacityTokens: 27_000 * 16,
      running: 12,
      waiting: 6,
      preemptionsTotal: 17,
      generationTokensTotal: null,
      prefixCacheQueriesTotal: null,
      prefixCacheHitsTotal: null,
      prefixCacheCounterUnit: null,
      prefixCacheHitRate: 0.9137,
      engineStartedAtMs: null,
      loraAdapters: null,
      loraAdaptersMalformed: false,
    });
  });

  it('reads a hit rate of -1 (prefix caching off) as unknown', () => {
    const text = vllmV0.replace(
      'vllm:gpu_prefix_cache_hit_rate{model_name="qwen2.5-7b"} 0.9137',
      'vllm:gpu_prefix_cache_hit_rate{model_name="qwen2.5-7b"} -1.0',
    );
    expect(parseEngineMetrics(text).prefixCacheHitRate).toBeNull();
  });
});

describe('parseEngineMetrics: SGLang', () => {
  it('takes one value per scheduler across TP ranks and sums across DP ranks; KV usage from exact token counts', () => {
    expect(parseEngineMetrics(sglangDp2Tp2)).toEqual<EngineMetrics>({
      engine: 'sglang',
      kvUsage: 61_000 / 200_000,
      kvCapacityTokens: 200_000,
      running: 6,
      waiting: 7,
      preemptionsTotal: null,
      generationTokensTotal: null,
      prefixCacheQueriesTotal: 50_000,
      prefixCacheHitsTotal: 30_000,
      prefixCacheCounterUnit: 'tokens',
      prefixCacheHitRate: 0.4,
      engineStartedAtMs: null,
      loraAdapters: null,
      loraAdaptersMalformed: false,
    });
  });

  it('reads retractions of finished requests as preemptions and sums cached tokens over cache sources', () => {
    const text = [
      'sglang:num_retractions_sum{model_name="m"} 3.0',
      'sglang:num_retractions_bucket{le="+Inf",model_name="m"} 40.0',
      'sglang:prompt_tokens_total{model_name="m"} 1000.0',
      'sglang:cached_tokens_total{cache_source="device",model_name="m"} 600.0',
      'sglang:cached_tokens_total{cache_source="host",model_name="m"} 100.0',
      'sglang:generation_tokens_total{model_name="m"} 250.0',
    ].join('\n');
    expect(parseEngineMetrics(text)).toMatchObject({
      preemptionsTotal: 3,
      prefixCacheQueriesTotal: 1000,
      prefixCacheHitsTotal: 700,
      generationTokensTotal: 250,
    });
  });

  it('falls back to the rounded token_usage gauge without the token counts', () => {
    const text =
      'sglang:token_usage{model_name="m",tp_rank="0"} 0.41\nsglang:num_running_reqs{model_name="m",tp_rank="0"} 1.0';
    expect(parseEngineMetrics(text)).toMatchObject({
      kvUsage: 0.41,
      kvCapacityTokens: null,
      running: 1,
      waiting: null,
      prefixCacheQueriesTotal: null,
      prefixCacheCounterUnit: null,
    });
  });
});

describe('parseEngineMetrics: llama.cpp', () => {
  const slots = [
    { id: 0, n_ctx: 8192, is_processing: true },
    { id: 1, n_ctx: 8192, is_processing: false },
  ];

  it('reads the KV gauges of builds before #13660 and the slot context sizes', () => {
    expect(parseEngineMetrics(llamaCppKvGauges, { llamaCppSlots: slots })).toEqual<EngineMetrics>({
      engine: 'llamacpp',
      kvUsage: 0.637939,
      kvCapacityTokens: 16_384,
      running: 2,
      waiting: 1,
      preemptionsTotal: null,
      generationTokensTotal: 91_432,
      prefixCacheQueriesTotal: null,
      prefixCacheHitsTotal: null,
      prefixCacheCounterUnit: null,
      prefixCacheHitRate: null,
      engineStartedAtMs: null,
      loraAdapters: null,
      loraAdaptersMalformed: false,
    });
  });

  it('derives usage from kv_cache_tokens and the slots when the ratio gauge is missing', () => {
    const text = 'llamacpp:kv_cache_tokens 4096\nllamacpp:requests_processing 1\nllamacpp:requests_deferred 0';
    expect(parseEngineMetrics(text, { llamaCppSlots: slots })).toMatchObject({
      kvUsage: 0.25,
      kvCapacityTokens: 16_384,
    });
    expect(parseEngineMetrics(text)).toMatchObject({ kvUsage: null, kvCapacityTokens: null });
  });

  it('counts busy slots as running when /metrics is off, and ignores slot entries it cannot read', () => {
    const body = [...slots, { id: 2, n_ctx: 'big', is_processing: true }, null, 7];
    expect(normaliseEngineMetrics(parsePrometheusText(''), { llamaCppSlots: body })).toMatchObject({
      engine: 'llamacpp',
      running: 1,
      waiting: null,
      kvCapacityTokens: 16_384,
    });
    expect(parseEngineMetrics('', { engine: 'llamacpp', llamaCppSlots: { not: 'an array' } })).toMatchObject({
      running: null,
      kvCapacityTokens: null,
    });
  });
});

describe('parseEngineMetrics: process start time', () => {
  it('reads process_start_time_seconds for any engine, in ms, and the newest of several series', () => {
    expect(
      parseEngineMetrics('process_start_time_seconds 1.76120439127e+09\nsglang:num_running_reqs{model_name="m"} 1.0')
        .engineStartedAtMs,
    ).toBe(1_761_204_391_270);
    const merged =
      'process_start_time_seconds{pid="1"} 1.7e+09\nprocess_start_time_seconds{pid="2"} 1.7000000125e+09\nvllm:num_requests_running{engine="0",' +
      'model_name="m"} ' +
      '0.0';
    expect(parseEngineMetrics(merged).engineStartedAtMs).toBe(1_700_000_012_500);
  });

  it('is unknown when absent, not a positive finite number', () => {
    for (const value of ['NaN', '+Inf', '0.0', '-5.0']) {
      expect(
        parseEngineMetrics(`process_start_time_seconds ${value}\nllamacpp:requests_processing 1`).engineStartedAtMs,
      ).toBeNull();
    }
    expect(parseEngineMetrics(vllmV0).engineStartedAtMs).toBeNull();
  });
});

describe('parseEngineMetrics: engine choice', () => {
  it('reads the exposition as the engine given, ignoring other engines’ names', () => {
    expect(parseEngineMetrics(sglangDp2Tp2, { engine: 'vllm' })).toMatchObject({
      engine: 'vllm',
      running: null,
      kvUsage: null,
    });
  });

  it('throws ENGINE_METRICS_ERR_UNKNOWN_ENGINE when no engine can be told', () => {
    const attempt = () => parseEngineMetrics('# HELP process_cpu_seconds_total CPU\nprocess_cpu_seconds_total 3.2\n');
    expect(attempt).toThrow(EngineMetricsError);
    expect(attempt).toThrow(expect.objectContaining({ code: 'ENGINE_METRICS_ERR_UNKNOWN_ENGINE' }));
  });
});
