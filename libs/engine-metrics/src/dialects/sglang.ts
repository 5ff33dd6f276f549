import type { EngineMetrics } from '../engine-metrics';
import { engineStartedAtMs } from '../process-start-time';
import { clampRatio, type SeriesReader } from '../series-reader';

/**
 * SGLang `--enable-metrics` (`python/sglang/srt/metrics/collector.py`), as vllm-sim's `sglang`
 * dialect prints it. Scheduler gauges carry `model_name`, `engine_type`, `tp_rank`, `pp_rank` (newer:
 * `dp_rank`, `moe_ep_rank`); tokenizer counters carry `model_name`.
 *
 * Series that differ only in `tp_rank`, `pp_rank` or `moe_ep_rank` are read as copies of one
 * scheduler's view (the largest value stands for them); series that differ in anything else (`dp_rank`,
 * `model_name`, `cache_source`) are separate and are summed. Tokenizer counters are incremented when a
 * request finishes (`observe_one_finished_request`), so queries and hits move together.
 */
export const SGLANG_METRIC_NAMES = {
  running: 'sglang:num_running_reqs',
  waiting: 'sglang:num_queue_reqs',
  usedTokens: 'sglang:num_used_tokens',
  maxTotalTokens: 'sglang:max_total_num_tokens',
  /** used / max rounded to 2 decimals by SGLang: only a fallback for the exact token counts. */
  tokenUsage: 'sglang:token_usage',
  /** Hit rate of the last prefill batch only. */
  cacheHitRate: 'sglang:cache_hit_rate',
  /** Prompt tokens of finished requests: the prefix-cache queries. */
  promptTokens: 'sglang:prompt_tokens_total',
  /** Of those, served from the radix cache: the prefix-cache hits (newer: one series per `cache_source`, summed). */
  cachedTokens: 'sglang:cached_tokens_total',
  /** Output tokens of finished requests. */
  generationTokens: 'sglang:generation_tokens_total',
  /**
   * Newer SGLang: histogram of retractions (SGLang's preemptions) per finished request; its `_sum` only
   * grows, so it serves as the preemption counter (it counts a retraction when its request finishes).
   */
  retractionsSum: 'sglang:num_retractions_sum',
} as const;

export const SGLANG_REPLICA_LABELS = ['tp_rank', 'pp_rank', 'moe_ep_rank'] as const;

const N = SGLANG_METRIC_NAMES;

export function normaliseSglang(series: SeriesReader): EngineMetrics {
  const used = series.sum(N.usedTokens);
  const capacity = series.sum(N.maxTotalTokens);
  const kvUsage = used !== null && capacity !== null && capacity > 0 ? used / capacity : series.mean(N.tokenUsage);
  const queries = series.sum(N.promptTokens);
  const hits = series.sum(N.cachedTokens);
  const counted = queries !== null && hits !== null;
  return {
    engine: 'sglang',
    kvUsage: clampRatio(kvUsage),
    kvCapacityTokens: capacity !== null && capacity > 0 ? capacity : null,
    running: series.sum(N.running),
    waiting: series.sum(N.waiting),
    preemptionsTotal: series.sum(N.retractionsSum),
    generationTokensTotal: series.sum(N.generationTokens),
    prefixCacheQueriesTotal: counted ? queries : null,
    prefixCacheHitsTotal: counted ? hits : null,
    prefixCacheCounterUnit: counted ? 'tokens' : null,
    prefixCacheHitRate: clampRatio(series.mean(N.cacheHitRate)),
    engineStartedAtMs: engineStartedAtMs(series),
    loraAdapters: null,
    loraAdaptersMalformed: false,
  };
}
