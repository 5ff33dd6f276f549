import { Histogram } from './histogram';

/**
 * Bucket bounds of the engines whose metrics the simulator speaks (shared/reference/engine-protocols.md).
 * vLLM V0 uses a prefix of each V1 list; SGLang uses its own.
 */
export const BUCKETS = {
  vllmTtftSeconds: [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
    640.0, 2560.0,
  ],
  vllmItlSeconds: [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
  ],
  vllmRequestSeconds: [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
  ],
  vllmIterationTokens: [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
  vllmParamsN: [1, 2, 5, 10, 20],
  sglangTtftSeconds: [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400],
  sglangE2eSeconds: [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400],
  sglangItlSeconds: [
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0,
    2.0, 4.0, 6.0, 8.0,
  ],
} as const;

/** vLLM's 1-2-5 series up to `maxModelLen` (request prompt / generation token histograms). */
export function oneTwoFiveBuckets(maxValue: number): number[] {
  const bounds: number[] = [];
  for (let exponent = 0; ; exponent++) {
    for (const mantissa of [1, 2, 5]) {
      const value = mantissa * 10 ** exponent;
      if (value > maxValue) return bounds;
      bounds.push(value);
    }
  }
}

export type FinishReason = 'stop' | 'length' | 'abort';

/** Everything the engine counts; the metrics dialects render it. Times in seconds, sizes in tokens. */
export class EngineStats {
  promptTokens = 0;
  generationTokens = 0;
  /** Prompt tokens looked up in / served from the prefix cache (vLLM ≥0.9 counts tokens). */
  prefixQueryTokens = 0;
  prefixHitTokens = 0;
  /** The same in blocks (vLLM 0.8 `gpu_prefix_cache_*` and V0's block hit rate). */
  prefixQueryBlocks = 0;
  prefixHitBlocks = 0;
  /** SGLang's `cache_hit_rate`: hit ratio of the last prefill batch. */
  lastPrefillBatchHitRate = 0;
  preemptions = 0;
  /**
   * Prompt tokens by where their KV came from, counted once per request at its first schedule (vLLM's
   * `vllm:prompt_tokens_by_source_total{source}`): computed here, hit in the prefix cache, pulled from a prefill instance.
   */
  readonly promptTokensBySource = { local_compute: 0, local_cache_hit: 0, external_kv_transfer: 0 };
  readonly requestSuccess: Record<FinishReason, number> = { stop: 0, length: 0, abort: 0 };
  /** Forward passes run, and decode-only ones (llama.cpp `n_decode_total`). */
  steps = 0;
  /** Busy time spent in steps that prefilled / decoded (llama.cpp `prompt_seconds_total`, `tokens_predicted_seconds_total`). */
  prefillBusySeconds = 0;
  decodeBusySeconds = 0;

  readonly ttftSeconds = new Histogram(BUCKETS.vllmTtftSeconds, BUCKETS.sglangTtftSeconds);
  readonly interTokenSeconds = new Histogram(BUCKETS.vllmItlSeconds, BUCKETS.sglangItlSeconds);
  readonly e2eSeconds = new Histogram(BUCKETS.vllmRequestSeconds, BUCKETS.sglangE2eSeconds);
  readonly queueSeconds = new Histogram(BUCKETS.vllmRequestSeconds);
  readonly inferenceSeconds = new Histogram(BUCKETS.vllmRequestSeconds);
  readonly prefillSeconds = new Histogram(BUCKETS.vllmRequestSeconds);
  readonly decodeSeconds = new Histogram(BUCKETS.vllmRequestSeconds);
  readonly requestTimePerOutputTokenSeconds = new Histogram(BUCKETS.vllmItlSeconds);
  readonly iterationTokens = new Histogram(BUCKETS.vllmIterationTokens);
  readonly requestPromptTokens: Histogram;
  readonly requestGenerationTokens: Histogram;
  readonly requestParamsMaxTokens: Histogram;
  readonly requestParamsN = new Histogram(BUCKETS.vllmParamsN);
  readonly tokenBuckets: readonly number[];

  /** One request's prompt of `total` tokens: `cached` from the prefix cache, `pulled` over the KV link, the rest computed. */
  countPromptSources(total: number, cached: number, pulled: number): void {
    this.promptTokensBySource.local_cache_hit += cached;
    this.promptTokensBySource.external_kv_transfer += pulled;
    this.promptTokensBySource.local_compute += total - cached - pulled;
  }

  constructor(maxModelLen: number) {
    this.tokenBuckets = oneTwoFiveBuckets(maxModelLen);
    this.requestPromptTokens = new Histogram(this.tokenBuckets);
    this.requestGenerationTokens = new Histogram(this.tokenBuckets);
    this.requestParamsMaxTokens = new Histogram(this.tokenBuckets);
  }
}
