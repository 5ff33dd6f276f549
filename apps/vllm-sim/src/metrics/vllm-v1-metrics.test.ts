import { describe, expect, it } from 'vitest';
import {
  addRequest,
  familyShapes,
  MODEL_NAME,
  newEngine,
  parseSamples,
  prefixTotals,
  rawValue,
  renderDialect,
  runMixedWorkload,
  runSteps,
  tokenPrompt,
} from './metrics-test-support';

const BASE = ['engine', 'model_name'];

/** From the reference (§1.1, vLLM 0.11 `PrometheusStatLogger`): [family, type, label names]. */
const COUNTERS: Array<[string, string[]]> = [
  ['vllm:prefix_cache_queries', BASE],
  ['vllm:prefix_cache_hits', BASE],
  ['vllm:num_preemptions', BASE],
  ['vllm:prompt_tokens', BASE],
  ['vllm:generation_tokens', BASE],
  ['vllm:request_success', ['engine', 'finished_reason', 'model_name']],
];
const HISTOGRAMS = [
  'vllm:request_prompt_tokens',
  'vllm:request_generation_tokens',
  'vllm:iteration_tokens_total',
  'vllm:request_max_num_generation_tokens',
  'vllm:request_params_n',
  'vllm:request_params_max_tokens',
  'vllm:time_to_first_token_seconds',
  'vllm:time_per_output_token_seconds',
  'vllm:inter_token_latency_seconds',
  'vllm:request_time_per_output_token_seconds',
  'vllm:e2e_request_latency_seconds',
  'vllm:request_queue_time_seconds',
  'vllm:request_inference_time_seconds',
  'vllm:request_prefill_time_seconds',
  'vllm:request_decode_time_seconds',
];
const CACHE_CONFIG_LABELS = [
  'block_size',
  'cache_dtype',
  'calculate_kv_scales',
  'cpu_offload_gb',
  'enable_prefix_caching',
  'engine',
  'gpu_memory_utilization',
  'is_attention_free',
  'kv_cache_memory_bytes',
  'kv_sharing_fast_prefill',
  'mamba_cache_dtype',
  'mamba_page_size_padded',
  'mamba_ssm_cache_dtype',
  'num_cpu_blocks',
  'num_gpu_blocks',
  'num_gpu_blocks_override',
  'prefix_caching_hash_algo',
  'sliding_window',
  'swap_space',
];

function expectedShapes(): Map<string, { type: string; labelNames: string[] }> {
  const shapes = new Map<string, { type: string; labelNames: string[] }>();
  shapes.set('process_start_time_seconds', { type: 'GAUGE', labelNames: [] });
  for (const name of ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc'])
    shapes.set(name, { type: 'GAUGE', labelNames: BASE });
  for (const [base, labelNames] of COUNTERS) {
    shapes.set(`${base}_total`, { type: 'COUNTER', labelNames });
    shapes.set(`${base}_created`, { type: 'GAUGE', labelNames });
  }
  for (const name of HISTOGRAMS) {
    shapes.set(name, { type: 'HISTOGRAM', labelNames: BASE });
    shapes.set(`${name}_created`, { type: 'GAUGE', labelNames: BASE });
  }
  shapes.set('vllm:cache_config_info', { type: 'GAUGE', labelNames: CACHE_CONFIG_LABELS });
  return shapes;
}

describe('vLLM V1 /metrics', () => {
  const workload = runMixedWorkload('v1');
  const text = renderDialect('vllm', workload.engine);
  const labels = `engine="0",model_name="${MODEL_NAME}"`;

  it('has exactly the reference families, with their types and label names', () => {
    expect(familyShapes(text)).toEqual(expectedShapes());
  });

  it('includes every EXPECTED_METRICS_V1 sample name', () => {
    const names = new Set(parseSamples(text).map((sample) => sample.name));
    const expected = [
      'vllm:num_requests_running',
      'vllm:num_requests_waiting',
      'vllm:kv_cache_usage_perc',
      'vllm:prefix_cache_queries_total',
      'vllm:prefix_cache_hits_total',
      'vllm:num_preemptions_total',
      'vllm:prompt_tokens_total',
      'vllm:generation_tokens_total',
      'vllm:request_success_total',
      'vllm:cache_config_info',
      'vllm:iteration_tokens_total_bucket',
      ...[
        'request_prompt_tokens',
        'request_generation_tokens',
        'request_params_n',
        'request_params_max_tokens',
        'time_to_first_token_seconds',
        'inter_token_latency_seconds',
        'e2e_request_latency_seconds',
        'request_queue_time_seconds',
        'request_inference_time_seconds',
        'request_prefill_time_seconds',
        'request_decode_time_seconds',
      ].flatMap((base) => ['_sum', '_bucket', '_count'].map((suffix) => `vllm:${base}${suffix}`)),
    ];
    for (const name of expected) expect(names, name).toContain(name);
  });

  it('opens with the process start time, as the process collector of prometheus_client prints it', () => {
    // Start 1.7612044183526373e+09 s (metrics-test-support), Python float repr in Go style.
    expect(
      text.startsWith(
        [
          '# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.',
          '# TYPE process_start_time_seconds gauge',
          'process_start_time_seconds 1.7612044183526373e+09',
          '# HELP vllm:num_requests_running ',
        ].join('\n'),
      ),
    ).toBe(true);
  });

  it('prints labels sorted, le between engine and model_name', () => {
    expect(text).toContain(
      `vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="${MODEL_NAME}"} `,
    );
    expect(text).toContain(`vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="${MODEL_NAME}"} `);
    expect(text).toContain(
      `vllm:request_success_total{engine="0",finished_reason="stop",model_name="${MODEL_NAME}"} 7.0\n`,
    );
    for (const sample of parseSamples(text)) expect(sample.labelNames).toEqual([...sample.labelNames].sort());
    const bucket = parseSamples(text).find((sample) => sample.name === 'vllm:e2e_request_latency_seconds_bucket');
    expect(bucket?.labelNames).toEqual(['engine', 'le', 'model_name']);
  });

  it('follows each counter and histogram with a _created gauge family at the start time', () => {
    expect(text).toContain(
      [
        `vllm:prefix_cache_queries_total{${labels}} ${rawValue(text, 'vllm:prefix_cache_queries_total')}`,
        '# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.',
        '# TYPE vllm:prefix_cache_queries_created gauge',
        `vllm:prefix_cache_queries_created{${labels}} 1.7612044183526373e+09`,
      ].join('\n'),
    );
    expect(rawValue(text, 'vllm:iteration_tokens_total_created')).toBe('1.7612044183526373e+09');
    const created = parseSamples(text).filter((sample) => sample.name === 'vllm:request_success_created');
    expect(created.map((sample) => sample.labels.finished_reason)).toEqual(['stop', 'length', 'abort']);
  });

  it('prints a histogram as buckets, _count, _sum with Python float formatting', () => {
    const lines = text.split('\n');
    const inf = lines.findIndex((line) =>
      line.startsWith(`vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf"`),
    );
    expect(lines[inf + 1]).toBe(`vllm:e2e_request_latency_seconds_count{${labels}} 8.0`);
    expect(lines[inf + 2]?.startsWith(`vllm:e2e_request_latency_seconds_sum{${labels}} `)).toBe(true);
    expect(text).toContain(`le="2560.0"`);
    expect(text).toContain(`le="1.0"`);
  });

  it('counts the prompt tokens the engine looked up and found in its prefix cache', () => {
    const totals = prefixTotals(workload.sequences);
    expect(totals.hit).toBe(2032); // the repeated 2048-token prompt: floor(2047 / 16) blocks
    expect(Number(rawValue(text, 'vllm:prefix_cache_hits_total'))).toBe(totals.hit);
    expect(Number(rawValue(text, 'vllm:prefix_cache_queries_total'))).toBe(totals.queried);
    expect(totals.queried).toBe(2048 * 2 + 6 * 100 + 300 + 8192);
    expect(rawValue(text, 'vllm:num_preemptions_total')).toBe('0.0');
  });

  it('shows KV usage between 0 and 1 while the long request runs, and 0 once idle', () => {
    const engine = workload.engine;
    expect(workload.long.status).toBe('running');
    expect(rawValue(text, 'vllm:num_requests_running')).toBe('1.0');
    const usage = Number(rawValue(text, 'vllm:kv_cache_usage_perc'));
    expect(usage).toBeGreaterThan(0);
    expect(usage).toBeLessThan(1);
    expect(usage).toBe(1 - engine.pool.freeCount / (engine.pool.numGpuBlocks - 1));

    runSteps(engine, workload.nowMs);
    const idle = renderDialect('vllm', workload.engine);
    expect(rawValue(idle, 'vllm:kv_cache_usage_perc')).toBe('0.0');
    expect(rawValue(idle, 'vllm:num_requests_running')).toBe('0.0');
  });

  it('reports the cache config of the simulated pool', () => {
    const [info] = parseSamples(text).filter((sample) => sample.name === 'vllm:cache_config_info');
    expect(info?.value).toBe('1.0');
    expect(info?.labels).toMatchObject({
      block_size: '16',
      num_gpu_blocks: '63680',
      enable_prefix_caching: 'True',
      prefix_caching_hash_algo: 'sha256',
      engine: '0',
    });
    expect(info?.labels.model_name).toBeUndefined();
  });

  it('formats counts above 10^6 Go-style, in values and in le bounds', () => {
    const engine = newEngine('v1', { numGpuBlocks: 200_000, maxModelLen: 3_000_000 });
    addRequest(engine, tokenPrompt(2_417_733, 7), 1, 'length', 0);
    runSteps(engine, 0);
    const big = renderDialect('vllm', engine);
    expect(big).toContain(`vllm:prefix_cache_queries_total{${labels}} 2.417733e+06\n`);
    expect(big).toContain(`vllm:prompt_tokens_total{${labels}} 2.417733e+06\n`);
    expect(big).toContain(`vllm:request_prompt_tokens_bucket{engine="0",le="1e+06",model_name="${MODEL_NAME}"} 0.0\n`);
    expect(big).toContain(`vllm:request_prompt_tokens_bucket{engine="0",le="+Inf",model_name="${MODEL_NAME}"} 1.0\n`);
  });
});
