import type { EngineKind } from '@kvroute/protocols';

/**
 * The engines whose `/metrics` this library reads: the one list, `ENGINE_KINDS` of `@kvroute/protocols`.
 * - `vllm`: vLLM V1 engine (≥ 0.8), `{engine, model_name}` labels, prefix-cache counters;
 * - `vllm-v0`: vLLM 0.6.x/0.7.x V0 engine, `gpu_*` names, a cumulative block hit-rate gauge;
 * - `sglang`: SGLang `--enable-metrics`;
 * - `llamacpp`: llama.cpp `llama-server --metrics` (plus `/slots` when given).
 */
export { ENGINE_KINDS, type EngineKind } from '@kvroute/protocols';

/**
 * One engine's state, normalised from whichever dialect it speaks. `null` always means "unknown":
 * the engine does not expose it, or every series of it was NaN/±Inf or out of range. Counts are
 * summed over the engine's series (DP ranks, model names); see the README for the rules.
 */
export interface EngineMetrics {
  readonly engine: EngineKind;
  /** KV-cache usage as a ratio in [0, 1] (clamped); 1 means full. */
  readonly kvUsage: number | null;
  /** KV-cache capacity in tokens, summed over DP ranks / slots. */
  readonly kvCapacityTokens: number | null;
  /** Requests in the running batch (llama.cpp: busy slots). */
  readonly running: number | null;
  /** Requests queued, preempted ones included (vLLM V0: waiting + swapped; llama.cpp: deferred). */
  readonly waiting: number | null;
  /** Preemptions since the engine started (a counter). */
  readonly preemptionsTotal: number | null;
  /** Output tokens generated since the engine started (a counter; every engine has one). */
  readonly generationTokensTotal: number | null;
  /** Prompt tokens (or blocks, see `prefixCacheCounterUnit`) looked up in the prefix cache since start. */
  readonly prefixCacheQueriesTotal: number | null;
  /** Of those, found in the prefix cache. */
  readonly prefixCacheHitsTotal: number | null;
  /** Unit of both prefix-cache counters: `blocks` only for vLLM 0.8.x's `gpu_prefix_cache_*` names. */
  readonly prefixCacheCounterUnit: 'tokens' | 'blocks' | null;
  /**
   * The engine's own hit-rate gauge in [0, 1], where it has one: vLLM V0 cumulative block hit rate
   * since start; SGLang the last prefill batch's hit rate. Prefer `hitRateOverInterval` on the counters.
   */
  readonly prefixCacheHitRate: number | null;
  /**
   * ms since the Unix epoch when the engine's process started, from `process_start_time_seconds`
   * (prometheus_client's process collector, on its default registry only: vLLM V1 with one API server;
   * vLLM V0's and SGLang's multiprocess registries, and llama.cpp, do not print it). Rounded to the ms.
   */
  readonly engineStartedAtMs: number | null;
  /**
   * LoRA adapters the engine serves right now (vLLM's `vllm:lora_requests_info`, its latest series); null
   * when the engine shows no such metric (no LoRA request served yet, LoRA off, another engine) or it is
   * malformed (then `loraAdaptersMalformed`).
   */
  readonly loraAdapters: LoraAdapters | null;
  /** `vllm:lora_requests_info` is there but unreadable (NaN/±Inf value, a label missing or out of bounds). */
  readonly loraAdaptersMalformed: boolean;
}

/**
 * LoRA adapter residency, as vLLM reports it at its last stats update. Names are the adapters' served
 * names (`--lora-modules name=…`, `load_lora_adapter`'s `lora_name`), distinct, non-empty, sorted by code
 * unit, at most 256 of at most 256 characters per list.
 */
export interface LoraAdapters {
  /** Adapters of the requests in the running batch (loaded on the GPU). */
  readonly running: readonly string[];
  /** Adapters of queued requests (waiting for a batch slot, possibly for their adapter to be loaded). */
  readonly waiting: readonly string[];
  /** `--max-loras`: how many distinct adapters one batch may hold; null when the engine does not say. */
  readonly maxLoras: number | null;
}

export type EngineMetricsErrorCode = 'ENGINE_METRICS_ERR_UNKNOWN_ENGINE';

export class EngineMetricsError extends Error {
  override readonly name = 'EngineMetricsError';

  constructor(
    readonly code: EngineMetricsErrorCode,
    message: string,
  ) {
    super(message);
  }
}
