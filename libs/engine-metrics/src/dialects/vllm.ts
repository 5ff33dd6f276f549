import type { EngineMetrics } from '../engine-metrics';
import { readLoraAdapters } from '../lora-adapters';
import { engineStartedAtMs } from '../process-start-time';
import { clampRatio, type SeriesReader } from '../series-reader';

/**
 * vLLM, both engines. Names from `vllm/v1/metrics/loggers.py` (V1) and `vllm/engine/metrics.py` (V0),
 * as vllm-sim's `vllm` and `vllm-v0` dialects print them. Every name of either era is read whatever
 * the detected kind, newest first, because V1 up to 0.10 still printed some V0 names
 * (`gpu_cache_usage_perc`, `gpu_prefix_cache_*`).
 *
 * Several series of one name (V1 data parallelism: one per `engine` index) are independent engines:
 * counts and counters are summed, KV usage is the mean (DP ranks have identical pools, so the mean is
 * used / total).
 */
export const VLLM_METRIC_NAMES = {
  running: 'vllm:num_requests_running',
  waiting: 'vllm:num_requests_waiting',
  /** V0 only: preempted by swapping to CPU; V1 counts preempted requests in waiting. */
  swapped: 'vllm:num_requests_swapped',
  kvUsage: 'vllm:kv_cache_usage_perc',
  /** V0 and V1 ≤ 0.10. */
  kvUsageOld: 'vllm:gpu_cache_usage_perc',
  /** Tokens, ≥ 0.9. */
  prefixQueries: 'vllm:prefix_cache_queries_total',
  prefixHits: 'vllm:prefix_cache_hits_total',
  /** Blocks in 0.8.x (the only era where they appear without the new names). */
  prefixQueriesOld: 'vllm:gpu_prefix_cache_queries_total',
  prefixHitsOld: 'vllm:gpu_prefix_cache_hits_total',
  /** V0: cumulative block hit rate since start, -1 with prefix caching off. */
  prefixHitRate: 'vllm:gpu_prefix_cache_hit_rate',
  preemptions: 'vllm:num_preemptions_total',
  generationTokens: 'vllm:generation_tokens_total',
  /** Value 1; CacheConfig fields as string labels, one series per `engine` (V0: a single series). */
  cacheConfig: 'vllm:cache_config_info',
} as const;

const N = VLLM_METRIC_NAMES;

export function normaliseVllm(series: SeriesReader, engine: 'vllm' | 'vllm-v0'): EngineMetrics {
  const waiting = series.sum(N.waiting);
  const swapped = series.sum(N.swapped);
  const counters = prefixCounters(series);
  return {
    engine,
    kvUsage: clampRatio(series.firstOf([N.kvUsage, N.kvUsageOld], (name) => series.mean(name))),
    kvCapacityTokens: kvCapacityTokens(series),
    running: series.sum(N.running),
    waiting: waiting === null ? null : waiting + (swapped ?? 0),
    preemptionsTotal: series.sum(N.preemptions),
    generationTokensTotal: series.sum(N.generationTokens),
    ...counters,
    prefixCacheHitRate: v0HitRate(series),
    engineStartedAtMs: engineStartedAtMs(series),
    ...readLoraAdapters(series),
  };
}

function prefixCounters(
  series: SeriesReader,
): Pick<EngineMetrics, 'prefixCacheQueriesTotal' | 'prefixCacheHitsTotal' | 'prefixCacheCounterUnit'> {
  const pairs = [
    [N.prefixQueries, N.prefixHits, 'tokens'],
    [N.prefixQueriesOld, N.prefixHitsOld, 'blocks'],
  ] as const;
  for (const [queriesName, hitsName, unit] of pairs) {
    const queries = series.sum(queriesName);
    const hits = series.sum(hitsName);
    if (queries !== null && hits !== null)
      return { prefixCacheQueriesTotal: queries, prefixCacheHitsTotal: hits, prefixCacheCounterUnit: unit };
  }
  return { prefixCacheQueriesTotal: null, prefixCacheHitsTotal: null, prefixCacheCounterUnit: null };
}

/** Mean of the V0 gauge over series in [0, 1]; -1 (caching off) and anything else out of range are unknown. */
function v0HitRate(series: SeriesReader): number | null {
  const values = series
    .samples(N.prefixHitRate)
    .map((sample) => sample.value)
    .filter((value) => value >= 0 && value <= 1);
  return values.length === 0 ? null : values.reduce((total, value) => total + value, 0) / values.length;
}

/**
 * Σ over engines of `num_gpu_blocks × block_size` from `cache_config_info` (one series per `engine`
 * label, the first one kept). A series without both as positive integers (`None` before the engine
 * has profiled memory) makes the total unknown rather than an undercount.
 */
function kvCapacityTokens(series: SeriesReader): number | null {
  const perEngine = new Map<string, number | null>();
  for (const { labels } of series.samples(N.cacheConfig)) {
    const engine = labels['engine'] ?? '';
    if (perEngine.has(engine)) continue;
    const blocks = positiveInteger(labels['num_gpu_blocks']);
    const blockSize = positiveInteger(labels['block_size']);
    perEngine.set(
      engine,
      blocks !== null && blockSize !== null ? blocks * blockSize : positiveInteger(labels['kv_cache_size_tokens']),
    );
  }
  if (perEngine.size === 0) return null;
  let total = 0;
  for (const tokens of perEngine.values()) {
    if (tokens === null) return null;
    total += tokens;
  }
  return total;
}

function positiveInteger(text: string | undefined): number | null {
  if (text === undefined || !/^\d+$/.test(text)) return null;
  const value = Number(text);
  return value > 0 && Number.isSafeInteger(value) ? value : null;
}
