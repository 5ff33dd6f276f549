import type { Engine } from '../engine/engine';
import { BUCKETS, type EngineStats } from '../engine/engine-stats';
import type { Histogram } from '../engine/histogram';
import { KV_TRANSFER_BUCKETS, type KvTransferLink } from '../engine/kv-transfer';
import { BLOCK_SIZE_TOKENS } from '../engine/profiles';
import { renderLoraInfo, renderSimLoraLoads } from './lora-metrics';
import type { MetricsSource } from './metrics-source';
import { PythonClientExposition, type LabelSet } from './python-client-exposition';

/**
 * vLLM V1 `/metrics` as 0.11.0 prints it with one API server (`vllm/v1/metrics/loggers.py`,
 * PrometheusStatLogger), families in registration order. Every series carries
 * `{engine="<rank>",model_name="<served name>"}`: one series per data-parallel rank, in rank order
 * (`make_per_engine`; `request_success` loops reasons outside ranks, as vLLM creates its children). Deprecated names hidden in 0.11
 * (`gpu_cache_usage_perc`, `gpu_prefix_cache_*`) are absent; `time_per_output_token_seconds`, deprecated
 * in 0.11 but still shown, is present with the same observations as `inter_token_latency_seconds`.
 * Optional families (speculative decoding, multimodal cache) are absent, as on a plain text-model server;
 * `vllm:lora_requests_info` is present with LoRA on (lora-metrics.ts), the KV-connector ones with `--pd-role`.
 *
 * One API server serves prometheus_client's default registry, whose own collectors print first:
 * `python_gc_*`, `python_info`, then the process collector's `process_*` families. Of those only
 * `process_start_time_seconds` is rendered (the simulator's start: a restarted sim shows a new one,
 * as a restarted vLLM does); the others would describe the Node process, not an engine.
 */
export function renderVllmV1Metrics(source: MetricsSource): string {
  const { modelName } = source;
  const engines = source.engines ?? [source.engine];
  const out = new PythonClientExposition({ kind: 'single-process', createdUnixSeconds: source.startedAtUnixSeconds });
  const labelsOf = (rank: number): LabelSet => ({ model_name: modelName, engine: String(rank) });
  const one = (value: (engine: Engine, stats: EngineStats) => number) =>
    engines.map((engine, rank) => ({ labels: labelsOf(rank), value: value(engine, engine.stats) }));
  const perRank = (histogram: (stats: EngineStats) => Histogram) =>
    engines.map((engine, rank) => ({ labels: labelsOf(rank), histogram: histogram(engine.stats) }));
  const tokenBounds = (engines[0] as Engine).stats.tokenBuckets;

  out.gauge('process_start_time_seconds', 'Start time of the process since unix epoch in seconds.', [
    { labels: {}, value: source.startedAtUnixSeconds },
  ]);
  out.gauge(
    'vllm:num_requests_running',
    'Number of requests in model execution batches.',
    one((engine) => engine.runningCount),
  );
  out.gauge(
    'vllm:num_requests_waiting',
    'Number of requests waiting to be processed.',
    one((engine) => engine.waitingCount),
  );
  // 1 − free / (num_gpu_blocks − 1); evictable cached blocks count as free.
  out.gauge(
    'vllm:kv_cache_usage_perc',
    'KV-cache usage. 1 means 100 percent usage.',
    one((engine) => engine.pool.usage()),
  );
  // Prompt tokens looked up / found in the prefix cache (tokens since 0.9).
  out.counter(
    'vllm:prefix_cache_queries',
    'Prefix cache queries, in terms of number of queried tokens.',
    one((_, stats) => stats.prefixQueryTokens),
  );
  out.counter(
    'vllm:prefix_cache_hits',
    'Prefix cache hits, in terms of number of cached tokens.',
    one((_, stats) => stats.prefixHitTokens),
  );
  out.counter(
    'vllm:num_preemptions',
    'Cumulative number of preemption from the engine.',
    one((_, stats) => stats.preemptions),
  );
  out.counter(
    'vllm:prompt_tokens',
    'Number of prefill tokens processed.',
    one((_, stats) => stats.promptTokens),
  );
  out.counter(
    'vllm:generation_tokens',
    'Number of generation tokens processed.',
    one((_, stats) => stats.generationTokens),
  );
  // One series per FinishReason, in enum order, created at start (so zeros are present).
  out.counter(
    'vllm:request_success',
    'Count of successfully processed requests.',
    (['stop', 'length', 'abort'] as const).flatMap((reason) =>
      engines.map((engine, rank) => ({
        labels: { ...labelsOf(rank), finished_reason: reason },
        value: engine.stats.requestSuccess[reason],
      })),
    ),
  );

  out.histogram(
    'vllm:request_prompt_tokens',
    'Number of prefill tokens processed.',
    tokenBounds,
    perRank((stats) => stats.requestPromptTokens),
  );
  out.histogram(
    'vllm:request_generation_tokens',
    'Number of generation tokens processed.',
    tokenBounds,
    perRank((stats) => stats.requestGenerationTokens),
  );
  out.histogram(
    'vllm:iteration_tokens_total',
    'Histogram of number of tokens per engine_step.',
    BUCKETS.vllmIterationTokens,
    perRank((stats) => stats.iterationTokens),
  );
  // With n = 1 (the only value the simulator serves) the max over a request's samples is its own length.
  out.histogram(
    'vllm:request_max_num_generation_tokens',
    'Histogram of maximum number of requested generation tokens.',
    tokenBounds,
    perRank((stats) => stats.requestGenerationTokens),
  );
  out.histogram(
    'vllm:request_params_n',
    'Histogram of the n request parameter.',
    BUCKETS.vllmParamsN,
    perRank((stats) => stats.requestParamsN),
  );
  out.histogram(
    'vllm:request_params_max_tokens',
    'Histogram of the max_tokens request parameter.',
    tokenBounds,
    perRank((stats) => stats.requestParamsMaxTokens),
  );

  out.histogram(
    'vllm:time_to_first_token_seconds',
    'Histogram of time to first token in seconds.',
    BUCKETS.vllmTtftSeconds,
    perRank((stats) => stats.ttftSeconds),
  );
  out.histogram(
    'vllm:time_per_output_token_seconds',
    'Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.',
    BUCKETS.vllmItlSeconds,
    perRank((stats) => stats.interTokenSeconds),
  );
  out.histogram(
    'vllm:inter_token_latency_seconds',
    'Histogram of inter-token latency in seconds.',
    BUCKETS.vllmItlSeconds,
    perRank((stats) => stats.interTokenSeconds),
  );
  out.histogram(
    'vllm:request_time_per_output_token_seconds',
    'Histogram of time_per_output_token_seconds per request.',
    BUCKETS.vllmItlSeconds,
    perRank((stats) => stats.requestTimePerOutputTokenSeconds),
  );
  const requestBounds = BUCKETS.vllmRequestSeconds;
  out.histogram(
    'vllm:e2e_request_latency_seconds',
    'Histogram of e2e request latency in seconds.',
    requestBounds,
    perRank((stats) => stats.e2eSeconds),
  );
  out.histogram(
    'vllm:request_queue_time_seconds',
    'Histogram of time spent in WAITING phase for request.',
    requestBounds,
    perRank((stats) => stats.queueSeconds),
  );
  out.histogram(
    'vllm:request_inference_time_seconds',
    'Histogram of time spent in RUNNING phase for request.',
    requestBounds,
    perRank((stats) => stats.inferenceSeconds),
  );
  out.histogram(
    'vllm:request_prefill_time_seconds',
    'Histogram of time spent in PREFILL phase for request.',
    requestBounds,
    perRank((stats) => stats.prefillSeconds),
  );
  out.histogram(
    'vllm:request_decode_time_seconds',
    'Histogram of time spent in DECODE phase for request.',
    requestBounds,
    perRank((stats) => stats.decodeSeconds),
  );

  renderLoraInfo(out, engines[0] as Engine);
  if (engines.every((engine) => engine.link !== null)) renderKvConnectorMetrics(out, engines, labelsOf);

  // Registered once the engine is initialised (after every other family): CacheConfig fields as
  // `str()`-ed Python values, plus `engine`; no `model_name`.
  out.gauge(
    'vllm:cache_config_info',
    'Information of the LLMEngine CacheConfig',
    engines.map((engine, rank) => ({
      labels: {
        block_size: String(BLOCK_SIZE_TOKENS),
        gpu_memory_utilization: '0.9',
        swap_space: '4',
        cache_dtype: 'auto',
        is_attention_free: 'False',
        num_gpu_blocks_override: 'None',
        sliding_window: 'None',
        enable_prefix_caching: 'True',
        prefix_caching_hash_algo: 'sha256',
        cpu_offload_gb: '0',
        calculate_kv_scales: 'False',
        kv_sharing_fast_prefill: 'False',
        mamba_page_size_padded: 'None',
        mamba_cache_dtype: 'auto',
        mamba_ssm_cache_dtype: 'auto',
        kv_cache_memory_bytes: 'None',
        num_gpu_blocks: String(engine.pool.numGpuBlocks),
        num_cpu_blocks: '0',
        engine: String(rank),
      },
      value: 1,
    })),
  );
  renderSimLoraLoads(out, engines[0] as Engine);
  return out.text();
}

/**
 * The KV-connector families of an engine with a NIXL connector (`--pd-role`; docs/features/nixl_connector_metrics.md
 * and the prompt-token sources): a decode instance's pulled tokens show as `external_kv_transfer`.
 */
function renderKvConnectorMetrics(
  out: PythonClientExposition,
  engines: readonly Engine[],
  labelsOf: (rank: number) => LabelSet,
): void {
  const link = (engine: Engine): KvTransferLink => engine.link as KvTransferLink;
  out.counter(
    'vllm:prompt_tokens_by_source',
    'Number of prompt tokens by source.',
    (['local_compute', 'local_cache_hit', 'external_kv_transfer'] as const).flatMap((source) =>
      engines.map((engine, rank) => ({
        labels: { ...labelsOf(rank), source },
        value: engine.stats.promptTokensBySource[source],
      })),
    ),
  );
  out.histogram(
    'vllm:nixl_xfer_time_seconds',
    'Histogram of transfer duration for NIXL KV Cache transfers.',
    KV_TRANSFER_BUCKETS.seconds,
    engines.map((engine, rank) => ({ labels: labelsOf(rank), histogram: link(engine).transferSeconds })),
  );
  out.histogram(
    'vllm:nixl_bytes_transferred',
    'Histogram of bytes transferred per NIXL KV Cache transfers.',
    KV_TRANSFER_BUCKETS.bytes,
    engines.map((engine, rank) => ({ labels: labelsOf(rank), histogram: link(engine).transferBytes })),
  );
  out.counter(
    'vllm:nixl_num_failed_transfers',
    'Number of failed NIXL KV Cache transfers.',
    engines.map((engine, rank) => ({ labels: labelsOf(rank), value: link(engine).failedTransfers })),
  );
  out.counter(
    'vllm:nixl_num_kv_expired_reqs',
    'Number of requests that had their KV expire before the remote side read it.',
    engines.map((engine, rank) => ({ labels: labelsOf(rank), value: engine.holds.expiredRequests })),
  );
}
