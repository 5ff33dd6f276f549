import { BUCKETS } from '../engine/engine-stats';
import { BLOCK_SIZE_TOKENS } from '../engine/profiles';
import type { MetricsSource } from './metrics-source';
import { PythonClientExposition, type LabelSet } from './python-client-exposition';

/**
 * SGLang (0.5.x, `--enable-metrics`) `/metrics`, from `python/sglang/srt/metrics/collector.py`. SGLang
 * always runs prometheus_client in multiprocess mode: no `_created`, histograms print `_sum` first.
 * Two label sets, as in SGLang:
 * - scheduler gauges (SchedulerMetricsCollector): `model_name`, `engine_type` ("unified", no PD
 *   disaggregation), `tp_rank`, `pp_rank` (one rank, so "0");
 * - tokenizer-manager counters and histograms (TokenizerMetricsCollector): `model_name` only.
 * Only the families routers read are rendered (SGLang prints many more: gen_throughput, spec decoding,
 * PD queues, grammar, per-stage latency …).
 *
 * KV accounting is in tokens: the pool holds (num_gpu_blocks − 1) × 16 tokens; tokens of evictable
 * cached blocks count as free (SGLang: available + evictable).
 */
export function renderSglangMetrics(source: MetricsSource): string {
  const { engine, modelName } = source;
  const stats = engine.stats;
  const pool = engine.pool;
  const out = new PythonClientExposition({ kind: 'multiprocess' });
  const scheduler: LabelSet = { model_name: modelName, engine_type: 'unified', tp_rank: '0', pp_rank: '0' };
  const tokenizer: LabelSet = { model_name: modelName };

  const maxTotalTokens = pool.usableBlocks * BLOCK_SIZE_TOKENS;
  const usedTokens = (pool.usableBlocks - pool.freeCount) * BLOCK_SIZE_TOKENS;
  out.gauge('sglang:num_running_reqs', 'The number of running requests.', [
    { labels: scheduler, value: engine.runningCount },
  ]);
  out.gauge('sglang:num_used_tokens', 'The number of used tokens.', [{ labels: scheduler, value: usedTokens }]);
  // The scheduler rounds the ratio to two decimals before setting the gauge.
  out.gauge('sglang:token_usage', 'The token usage.', [
    { labels: scheduler, value: roundToHundredthsLikePython(usedTokens / maxTotalTokens) },
  ]);
  out.gauge('sglang:num_queue_reqs', 'The number of requests in the waiting queue.', [
    { labels: scheduler, value: engine.waitingCount },
  ]);
  // Hit ratio of the most recent prefill batch only (not cumulative).
  out.gauge('sglang:cache_hit_rate', 'The prefix cache hit rate.', [
    { labels: scheduler, value: stats.lastPrefillBatchHitRate },
  ]);
  out.gauge('sglang:max_total_num_tokens', 'Maximum total number of tokens in the KV cache pool.', [
    { labels: scheduler, value: maxTotalTokens },
  ]);

  // SGLang adds prompt/generation tokens when a request finishes: the finished-request histograms hold
  // exactly those sums.
  out.counter('sglang:prompt_tokens_total', 'Number of prefill tokens processed.', [
    { labels: tokenizer, value: stats.requestPromptTokens.sum },
  ]);
  out.counter('sglang:generation_tokens_total', 'Number of generation tokens processed.', [
    { labels: tokenizer, value: stats.requestGenerationTokens.sum },
  ]);
  out.counter('sglang:cached_tokens_total', 'Number of cached prompt tokens.', [
    { labels: tokenizer, value: stats.prefixHitTokens },
  ]);
  const finished = stats.requestSuccess.stop + stats.requestSuccess.length + stats.requestSuccess.abort;
  out.counter('sglang:num_requests_total', 'Number of requests processed.', [{ labels: tokenizer, value: finished }]);

  out.histogram(
    'sglang:time_to_first_token_seconds',
    'Histogram of time to first token in seconds.',
    BUCKETS.sglangTtftSeconds,
    [{ labels: tokenizer, histogram: stats.ttftSeconds }],
  );
  out.histogram(
    'sglang:inter_token_latency_seconds',
    'Histogram of inter-token latency in seconds.',
    BUCKETS.sglangItlSeconds,
    [{ labels: tokenizer, histogram: stats.interTokenSeconds }],
  );
  out.histogram(
    'sglang:e2e_request_latency_seconds',
    'Histogram of End-to-end request latency in seconds',
    BUCKETS.sglangE2eSeconds,
    [{ labels: tokenizer, histogram: stats.e2eSeconds }],
  );
  return out.text();
}

/**
 * Python's `round(x, 2)`: the exact binary value rounded to hundredths, ties to even. A value can only
 * sit exactly on a tie at two decimals if it is an odd multiple of 1/8 (0.125, 0.375, …); every other
 * value rounds correctly through `toFixed`, which also works on the exact binary value.
 */
function roundToHundredthsLikePython(value: number): number {
  const eighths = value * 8; // exact (power of two)
  if (Number.isInteger(eighths) && Math.abs(eighths) % 2 === 1) {
    const hundredths = value * 100; // exact here: k + 0.5
    const floor = Math.floor(hundredths);
    return (floor % 2 === 0 ? floor : floor + 1) / 100;
  }
  return Number(value.toFixed(2));
}
