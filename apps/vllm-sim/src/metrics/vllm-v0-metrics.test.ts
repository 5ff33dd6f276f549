import { describe, expect, it } from 'vitest';
import {
  familyShapes,
  MODEL_NAME,
  parseSamples,
  prefixTotals,
  rawValue,
  renderDialect,
  runMixedWorkload,
} from './metrics-test-support';

const M = ['model_name'];

/** From the reference (§1.2, vLLM 0.6.4 `vllm/engine/metrics.py`): family → [type, label names]. */
const EXPECTED: Array<[string, string, string[]]> = [
  ['vllm:num_requests_running', 'GAUGE', M],
  ['vllm:num_requests_waiting', 'GAUGE', M],
  ['vllm:num_requests_swapped', 'GAUGE', M],
  ['vllm:gpu_cache_usage_perc', 'GAUGE', M],
  ['vllm:cpu_cache_usage_perc', 'GAUGE', M],
  ['vllm:cpu_prefix_cache_hit_rate', 'GAUGE', M],
  ['vllm:gpu_prefix_cache_hit_rate', 'GAUGE', M],
  ['vllm:num_preemptions_total', 'COUNTER', M],
  ['vllm:prompt_tokens_total', 'COUNTER', M],
  ['vllm:generation_tokens_total', 'COUNTER', M],
  ['vllm:tokens_total', 'COUNTER', M],
  ['vllm:iteration_tokens_total', 'HISTOGRAM', M],
  ['vllm:time_to_first_token_seconds', 'HISTOGRAM', M],
  ['vllm:time_per_output_token_seconds', 'HISTOGRAM', M],
  ['vllm:e2e_request_latency_seconds', 'HISTOGRAM', M],
  ['vllm:request_queue_time_seconds', 'HISTOGRAM', M],
  ['vllm:request_inference_time_seconds', 'HISTOGRAM', M],
  ['vllm:request_prefill_time_seconds', 'HISTOGRAM', M],
  ['vllm:request_decode_time_seconds', 'HISTOGRAM', M],
  ['vllm:time_in_queue_requests', 'HISTOGRAM', M],
  ['vllm:request_prompt_tokens', 'HISTOGRAM', M],
  ['vllm:request_generation_tokens', 'HISTOGRAM', M],
  ['vllm:request_max_num_generation_tokens', 'HISTOGRAM', M],
  ['vllm:request_params_n', 'HISTOGRAM', M],
  ['vllm:request_params_max_tokens', 'HISTOGRAM', M],
  ['vllm:request_success_total', 'COUNTER', ['finished_reason', 'model_name']],
  [
    'vllm:cache_config_info',
    'GAUGE',
    [
      'block_size',
      'cache_dtype',
      'cpu_offload_gb',
      'enable_prefix_caching',
      'gpu_memory_utilization',
      'is_attention_free',
      'num_cpu_blocks',
      'num_gpu_blocks',
      'num_gpu_blocks_override',
      'sliding_window',
      'swap_space_bytes',
    ],
  ],
];

describe('vLLM V0 (0.6.x) /metrics', () => {
  const workload = runMixedWorkload('v0');
  const text = renderDialect('vllm-v0', workload.engine);

  it('has exactly the V0 families, with their types and label names', () => {
    expect(familyShapes(text)).toEqual(
      new Map(EXPECTED.map(([name, type, labelNames]) => [name, { type, labelNames }])),
    );
  });

  it('has no _created families (multiprocess mode)', () => {
    expect(text).not.toContain('_created');
  });

  it('prints model_name only, sorted after le, and histograms as _sum, buckets, _count', () => {
    const lines = text.split('\n');
    const sum = lines.findIndex((line) => line.startsWith('vllm:time_to_first_token_seconds_sum{'));
    expect(lines[sum]).toMatch(
      new RegExp(`^vllm:time_to_first_token_seconds_sum\\{model_name="${MODEL_NAME}"\\} \\d+\\.\\d+`),
    );
    expect(lines[sum + 1]).toBe(`vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="${MODEL_NAME}"} 0.0`);
    expect(lines[sum + 16]?.startsWith(`vllm:time_to_first_token_seconds_bucket{le="10.0",`)).toBe(true);
    expect(lines[sum + 17]?.startsWith(`vllm:time_to_first_token_seconds_bucket{le="+Inf",`)).toBe(true);
    expect(lines[sum + 18]).toBe(`vllm:time_to_first_token_seconds_count{model_name="${MODEL_NAME}"} 10.0`);
  });

  it('uses the shorter V0 bucket lists', () => {
    const bounds = (family: string) =>
      parseSamples(text)
        .filter((sample) => sample.name === `${family}_bucket`)
        .map((sample) => sample.labels.le);
    expect(bounds('vllm:time_to_first_token_seconds')).toHaveLength(17);
    expect(bounds('vllm:time_per_output_token_seconds').slice(-2)).toEqual(['2.5', '+Inf']);
    expect(bounds('vllm:e2e_request_latency_seconds').slice(-2)).toEqual(['60.0', '+Inf']);
  });

  it('reports the cumulative prefix-cache BLOCK hit rate and no prefix-cache counters', () => {
    const queriedBlocks = workload.sequences
      .filter((sequence) => sequence.admittedAtMs !== null)
      .reduce((blocks, sequence) => blocks + Math.floor(sequence.promptLength / 16), 0);
    expect(prefixTotals(workload.sequences).hit).toBe(2032);
    expect(Number(rawValue(text, 'vllm:gpu_prefix_cache_hit_rate'))).toBe(127 / queriedBlocks);
    expect(text).not.toContain('prefix_cache_queries');
  });

  it('shows GPU KV usage while the long request runs, and finish reasons without abort', () => {
    const usage = Number(rawValue(text, 'vllm:gpu_cache_usage_perc'));
    expect(usage).toBeGreaterThan(0);
    expect(usage).toBeLessThan(1);
    expect(rawValue(text, 'vllm:num_requests_running')).toBe('1.0');
    expect(text).toContain(`vllm:request_success_total{finished_reason="stop",model_name="${MODEL_NAME}"} 7.0\n`);
    expect(text).not.toContain('finished_reason="abort"');
  });

  it('reports cache_config_info without engine or model_name, with swap_space_bytes', () => {
    const [info] = parseSamples(text).filter((sample) => sample.name === 'vllm:cache_config_info');
    expect(info?.labels).toMatchObject({
      block_size: '16',
      num_gpu_blocks: '63680',
      enable_prefix_caching: 'True',
      swap_space_bytes: '0',
    });
  });
});
