import { BUCKETS } from '../engine/engine-stats';
import type { Histogram } from '../engine/histogram';
import { BLOCK_SIZE_TOKENS } from '../engine/profiles';
import type { MetricsSource } from './metrics-source';
import { PythonClientExposition, type LabelSet } from './python-client-exposition';

/** V0 histograms use the first bounds of the V1 lists (V1 later extended them). */
const V0_TTFT_BOUNDS = BUCKETS.vllmTtftSeconds.slice(0, 16); // … 7.5, 10.0
const V0_TPOT_BOUNDS = BUCKETS.vllmItlSeconds.slice(0, 13); // … 1.0, 2.5
const V0_REQUEST_BOUNDS = BUCKETS.vllmRequestSeconds.slice(0, 15); // … 50.0, 60.0

/**
 * vLLM 0.6.4 (V0 engine) `/metrics` (`vllm/engine/metrics.py`, Metrics + PrometheusStatLogger),
 * families in registration order. The OpenAI server runs prometheus_client in multiprocess mode, hence
 * no `_created` families and histograms printed `_sum`, buckets, `_count`. Labels: `model_name` only.
 * Not rendered: `vllm:lora_requests_info` (LoRA), spec-decode families, and
 * `vllm:model_{forward,execute}_time_milliseconds` (only observed with `--collect-detailed-traces`).
 *
 * Simplification: real V0 in multiprocess mode prints a labelled series only once it has been touched
 * (a histogram after its first observation, a finish reason after its first request); here every
 * family is always present, zero-valued until it moves.
 */
export function renderVllmV0Metrics(source: MetricsSource): string {
  const { engine, modelName } = source;
  const stats = engine.stats;
  const out = new PythonClientExposition({ kind: 'multiprocess' });
  const labels: LabelSet = { model_name: modelName };
  const one = (value: number) => [{ labels, value }];

  out.gauge('vllm:num_requests_running', 'Number of requests currently running on GPU.', one(engine.runningCount));
  out.gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.', one(engine.waitingCount));
  // The simulator never swaps to CPU (it runs as with --swap-space 0: see cache_config_info).
  out.gauge('vllm:num_requests_swapped', 'Number of requests swapped to CPU.', one(0));
  out.gauge('vllm:gpu_cache_usage_perc', 'GPU KV-cache usage. 1 means 100 percent usage.', one(engine.pool.usage()));
  out.gauge('vllm:cpu_cache_usage_perc', 'CPU KV-cache usage. 1 means 100 percent usage.', one(0));
  // No CPU blocks, so no CPU lookups: 0 (V0 prints -1 only with prefix caching disabled).
  out.gauge('vllm:cpu_prefix_cache_hit_rate', 'CPU prefix cache block hit rate.', one(0));
  // Cumulative BLOCK hit rate since start (hit blocks / full prompt blocks looked up); 0 before any lookup.
  const blockHitRate = stats.prefixQueryBlocks > 0 ? stats.prefixHitBlocks / stats.prefixQueryBlocks : 0;
  out.gauge('vllm:gpu_prefix_cache_hit_rate', 'GPU prefix cache block hit rate.', one(blockHitRate));

  out.counter('vllm:num_preemptions_total', 'Cumulative number of preemption from the engine.', one(stats.preemptions));
  out.counter('vllm:prompt_tokens_total', 'Number of prefill tokens processed.', one(stats.promptTokens));
  out.counter('vllm:generation_tokens_total', 'Number of generation tokens processed.', one(stats.generationTokens));
  out.counter(
    'vllm:tokens_total',
    'Number of prefill plus generation tokens processed.',
    one(stats.promptTokens + stats.generationTokens),
  );
  // V0 enforce-eager buckets are 1 … 4096, 8096; the stored histogram has V1's bounds (… 4096, 8192,
  // 16384), so those are printed: identical up to 4096.
  out.histogram(
    'vllm:iteration_tokens_total',
    'Histogram of number of tokens per engine_step.',
    BUCKETS.vllmIterationTokens,
    [{ labels, histogram: stats.iterationTokens }],
  );
  out.histogram('vllm:time_to_first_token_seconds', 'Histogram of time to first token in seconds.', V0_TTFT_BOUNDS, [
    { labels, histogram: stats.ttftSeconds },
  ]);
  out.histogram(
    'vllm:time_per_output_token_seconds',
    'Histogram of time per output token in seconds.',
    V0_TPOT_BOUNDS,
    [{ labels, histogram: stats.interTokenSeconds }],
  );

  const request = (histogram: Histogram) => [{ labels, histogram }];
  out.histogram(
    'vllm:e2e_request_latency_seconds',
    'Histogram of end to end request latency in seconds.',
    V0_REQUEST_BOUNDS,
    request(stats.e2eSeconds),
  );
  out.histogram(
    'vllm:request_queue_time_seconds',
    'Histogram of time spent in WAITING phase for request.',
    V0_REQUEST_BOUNDS,
    request(stats.queueSeconds),
  );
  out.histogram(
    'vllm:request_inference_time_seconds',
    'Histogram of time spent in RUNNING phase for request.',
    V0_REQUEST_BOUNDS,
    request(stats.inferenceSeconds),
  );
  out.histogram(
    'vllm:request_prefill_time_seconds',
    'Histogram of time spent in PREFILL phase for request.',
    V0_REQUEST_BOUNDS,
    request(stats.prefillSeconds),
  );
  out.histogram(
    'vllm:request_decode_time_seconds',
    'Histogram of time spent in DECODE phase for request.',
    V0_REQUEST_BOUNDS,
    request(stats.decodeSeconds),
  );
  // Same quantity as the queue time (arrival → first scheduled), under V0's older name.
  out.histogram(
    'vllm:time_in_queue_requests',
    'Histogram of time the request spent in the queue in seconds.',
    V0_REQUEST_BOUNDS,
    request(stats.queueSeconds),
  );

  const tokenBounds = stats.tokenBuckets;
  out.histogram('vllm:request_prompt_tokens', 'Number of prefill tokens processed.', tokenBounds, [
    { labels, histogram: stats.requestPromptTokens },
  ]);
  out.histogram('vllm:request_generation_tokens', 'Number of generation tokens processed.', tokenBounds, [
    { labels, histogram: stats.requestGenerationTokens },
  ]);
  // n = 1 only: a request's max over its samples is its own generation length.
  out.histogram(
    'vllm:request_max_num_generation_tokens',
    'Histogram of maximum number of requested generation tokens.',
    tokenBounds,
    [{ labels, histogram: stats.requestGenerationTokens }],
  );
  out.histogram('vllm:request_params_n', 'Histogram of the n request parameter.', BUCKETS.vllmParamsN, [
    { labels, histogram: stats.requestParamsN },
  ]);
  out.histogram('vllm:request_params_max_tokens', 'Histogram of the max_tokens request parameter.', tokenBounds, [
    { labels, histogram: stats.requestParamsMaxTokens },
  ]);
  // V0 counts finished sequence groups; aborted requests leave the scheduler without a finish reason.
  out.counter(
    'vllm:request_success_total',
    'Count of successfully processed requests.',
    (['stop', 'length'] as const).map((reason) => ({
      labels: { ...labels, finished_reason: reason },
      value: stats.requestSuccess[reason],
    })),
  );

  // CacheConfig.__dict__ of 0.6.4, str()-ed; no engine or model_name label. swap_space 0 because the
  // simulator has no CPU block pool (so num_cpu_blocks 0 and cpu_cache_usage_perc 0 stay consistent).
  out.gauge('vllm:cache_config_info', 'Information of the LLMEngine CacheConfig', [
    {
      labels: {
        block_size: String(BLOCK_SIZE_TOKENS),
        gpu_memory_utilization: '0.9',
        swap_space_bytes: '0',
        num_gpu_blocks_override: 'None',
        cache_dtype: 'auto',
        is_attention_free: 'False',
        sliding_window: 'None',
        enable_prefix_caching: 'True',
        cpu_offload_gb: '0',
        num_gpu_blocks: String(engine.pool.numGpuBlocks),
        num_cpu_blocks: '0',
      },
      value: 1,
    },
  ]);
  return out.text();
}
