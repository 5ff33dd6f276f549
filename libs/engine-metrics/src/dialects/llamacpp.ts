import type { EngineMetrics } from '../engine-metrics';
import { engineStartedAtMs } from '../process-start-time';
import { clampRatio, type SeriesReader } from '../series-reader';

/**
 * llama.cpp `llama-server --metrics` (`tools/server`), as vllm-sim's `llamacpp` dialect prints it: no
 * labels. The KV gauges (`kv_cache_usage_ratio`, `kv_cache_tokens`) exist only in builds before
 * ggml-org/llama.cpp#13660 (2025); newer builds need `/slots` for a capacity. llama.cpp has no
 * preemption counter and no prefix-cache hit counter (`prompt_tokens_total` counts only the prompt
 * tokens it computed, cached ones excluded), so those fields stay null.
 */
export const LLAMACPP_METRIC_NAMES = {
  /** Busy slots. */
  running: 'llamacpp:requests_processing',
  /** Requests waiting for a free slot. */
  waiting: 'llamacpp:requests_deferred',
  kvUsage: 'llamacpp:kv_cache_usage_ratio',
  kvTokens: 'llamacpp:kv_cache_tokens',
  /** Output tokens generated since start. */
  generationTokens: 'llamacpp:tokens_predicted_total',
} as const;

const N = LLAMACPP_METRIC_NAMES;

/** What this library reads of one `GET /slots` entry. */
export interface LlamaCppSlotView {
  /** Context size of the slot, tokens. */
  readonly nCtx: number;
  readonly isProcessing: boolean;
}

/**
 * The usable entries of a parsed `GET /slots` body: objects with a finite non-negative `n_ctx` and a
 * boolean `is_processing`. Anything else (not an array, other entries) is ignored.
 */
export function readLlamaCppSlots(body: unknown): LlamaCppSlotView[] {
  if (!Array.isArray(body)) return [];
  const slots: LlamaCppSlotView[] = [];
  for (const entry of body as unknown[]) {
    if (typeof entry !== 'object' || entry === null) continue;
    const { n_ctx: nCtx, is_processing: isProcessing } = entry as Record<string, unknown>;
    if (typeof nCtx === 'number' && Number.isFinite(nCtx) && nCtx >= 0 && typeof isProcessing === 'boolean')
      slots.push({ nCtx, isProcessing });
  }
  return slots;
}

/**
 * Capacity = Σ slot `n_ctx` (each slot owns its share of the context); KV usage = the usage gauge,
 * else `kv_cache_tokens` / capacity; running = `requests_processing`, else the busy slots.
 */
export function normaliseLlamaCpp(series: SeriesReader, slotsBody: unknown): EngineMetrics {
  const slots = readLlamaCppSlots(slotsBody);
  const capacity = slots.length === 0 ? null : slots.reduce((total, slot) => total + slot.nCtx, 0);
  const kvTokens = series.sum(N.kvTokens);
  const kvUsage =
    series.mean(N.kvUsage) ?? (kvTokens !== null && capacity !== null && capacity > 0 ? kvTokens / capacity : null);
  const busySlots = slots.length === 0 ? null : slots.filter((slot) => slot.isProcessing).length;
  return {
    engine: 'llamacpp',
    kvUsage: clampRatio(kvUsage),
    kvCapacityTokens: capacity !== null && capacity > 0 ? capacity : null,
    running: series.sum(N.running) ?? busySlots,
    waiting: series.sum(N.waiting),
    preemptionsTotal: null,
    generationTokensTotal: series.sum(N.generationTokens),
    prefixCacheQueriesTotal: null,
    prefixCacheHitsTotal: null,
    prefixCacheCounterUnit: null,
    prefixCacheHitRate: null,
    // llama.cpp prints no process metrics; read anyway, as for every engine.
    engineStartedAtMs: engineStartedAtMs(series),
    loraAdapters: null,
    loraAdaptersMalformed: false,
  };
}
