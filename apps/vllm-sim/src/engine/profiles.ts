/**
 * Hardware × model profiles for the simulated engine. Coefficients come from
 * shared/reference/simulator-model.md §2–3 (estimates, ±30 %); the expected idle TTFTs they produce are
 * in §4 and are checked by `step-time.test.ts`.
 *
 * Units: milliseconds, milliseconds per token, milliseconds per (query, key) pair, milliseconds per
 * context token. KV capacity is in 16-token blocks, counted as vLLM's `num_gpu_blocks`.
 */
export interface EngineProfile {
  readonly name: string;
  readonly description: string;
  /** Model name served when `--model` is not given. */
  readonly defaultModel: string;
  /** Fixed per-step overhead (scheduler, launch). */
  readonly tFixedMs: number;
  /** Weight-read floor of a step: a small batch costs at least this much. */
  readonly tWeightsMs: number;
  /** Linear-layer cost per token in the step. */
  readonly cTokenMs: number;
  /** Attention cost per (query, key) pair of prefill chunks. */
  readonly cAttentionMs: number;
  /** KV read cost per context token of decoding sequences. */
  readonly cKvMs: number;
  /** KV-cache capacity in blocks (vLLM `num_gpu_blocks`). */
  readonly numGpuBlocks: number;
  /** Per-step token budget (`max_num_batched_tokens`, V1 scheduler). */
  readonly maxNumBatchedTokens: number;
  readonly maxNumSeqs: number;
  readonly maxModelLen: number;
  /** HTTP + tokenisation time before a request reaches the scheduler (reference: ~3 ms). */
  readonly apiOverheadMs: number;
  /**
   * KV-cache bytes of one token, the whole model (2 × layers × KV heads × head dim × 2 bytes, bf16): what a
   * decode instance pulls per token from a prefill instance (README "Prefill/decode").
   */
  readonly kvBytesPerToken: number;
}

export const BLOCK_SIZE_TOKENS = 16;

const A100_BUDGET = { maxNumBatchedTokens: 2048, maxNumSeqs: 256 } as const;
const H100_BUDGET = { maxNumBatchedTokens: 8192, maxNumSeqs: 1024 } as const;

const PROFILE_LIST: readonly EngineProfile[] = [
  {
    name: 'a100-7b',
    description: 'Qwen2.5-7B-Instruct on one A100-80GB (the seed benchmark setup)',
    defaultModel: 'Qwen/Qwen2.5-7B-Instruct',
    tFixedMs: 1.0,
    tWeightsMs: 9.5,
    cTokenMs: 0.063,
    cAttentionMs: 2.15e-6,
    cKvMs: 3.6e-5,
    numGpuBlocks: 63_680,
    ...A100_BUDGET,
    maxModelLen: 32_768,
    apiOverheadMs: 3,
    kvBytesPerToken: 57_344, // Qwen2.5-7B: 28 layers × 4 KV heads × 128
  },
  {
    name: 'a100-8b',
    description: 'Llama-3-8B on one A100-80GB',
    defaultModel: 'meta-llama/Meta-Llama-3-8B-Instruct',
    tFixedMs: 1.0,
    tWeightsMs: 10.0,
    cTokenMs: 0.067,
    cAttentionMs: 2.8e-6,
    cKvMs: 8.0e-5,
    numGpuBlocks: 27_600,
    ...A100_BUDGET,
    maxModelLen: 8_192,
    apiOverheadMs: 3,
    kvBytesPerToken: 131_072, // Llama-3-8B: 32 layers × 8 KV heads × 128
  },
  {
    name: 'a100-14b',
    description: 'Qwen2.5-14B-Instruct on one A100-80GB',
    defaultModel: 'Qwen/Qwen2.5-14B-Instruct',
    tFixedMs: 1.0,
    tWeightsMs: 19.3,
    cTokenMs: 0.126,
    cAttentionMs: 5.2e-6,
    cKvMs: 1.19e-4,
    numGpuBlocks: 14_125,
    ...A100_BUDGET,
    maxModelLen: 32_768,
    apiOverheadMs: 3,
    kvBytesPerToken: 196_608, // Qwen2.5-14B: 48 layers × 8 KV heads × 128
  },
  {
    name: 'h100-8b',
    description: 'Llama-3-8B on one H100',
    defaultModel: 'meta-llama/Meta-Llama-3-8B-Instruct',
    tFixedMs: 0.7,
    tWeightsMs: 6.0,
    cTokenMs: 0.0225,
    cAttentionMs: 0.95e-6,
    cKvMs: 4.9e-5,
    numGpuBlocks: 27_600,
    ...H100_BUDGET,
    maxModelLen: 8_192,
    apiOverheadMs: 3,
    kvBytesPerToken: 131_072, // Llama-3-8B: 32 layers × 8 KV heads × 128
  },
  {
    name: 'h100-14b',
    description: 'Qwen2.5-14B-Instruct on one H100',
    defaultModel: 'Qwen/Qwen2.5-14B-Instruct',
    tFixedMs: 0.8,
    tWeightsMs: 11.0,
    cTokenMs: 0.041,
    cAttentionMs: 1.8e-6,
    cKvMs: 7.3e-5,
    numGpuBlocks: 14_125,
    ...H100_BUDGET,
    maxModelLen: 32_768,
    apiOverheadMs: 3,
    kvBytesPerToken: 196_608, // Qwen2.5-14B: 48 layers × 8 KV heads × 128
  },
  {
    name: 'a100-70b-tp4',
    description: 'Llama-3-70B, tensor-parallel over 4 A100-80GB',
    defaultModel: 'meta-llama/Meta-Llama-3-70B-Instruct',
    tFixedMs: 1.5,
    tWeightsMs: 29.0,
    cTokenMs: 0.18,
    cAttentionMs: 3.4e-6,
    cKvMs: 4.8e-5,
    numGpuBlocks: 29_000,
    ...A100_BUDGET,
    maxModelLen: 8_192,
    apiOverheadMs: 3,
    kvBytesPerToken: 327_680, // Llama-3-70B: 80 layers × 8 KV heads × 128
  },
  {
    name: 'h100-70b-tp4',
    description: 'Llama-3-70B, tensor-parallel over 4 H100',
    defaultModel: 'meta-llama/Meta-Llama-3-70B-Instruct',
    tFixedMs: 1.5,
    tWeightsMs: 17.0,
    cTokenMs: 0.069,
    cAttentionMs: 1.2e-6,
    cKvMs: 3.0e-5,
    numGpuBlocks: 29_000,
    ...H100_BUDGET,
    maxModelLen: 8_192,
    apiOverheadMs: 3,
    kvBytesPerToken: 327_680, // Llama-3-70B: 80 layers × 8 KV heads × 128
  },
  {
    name: 'h100-70b-tp8',
    description: 'Llama-3-70B, tensor-parallel over 8 H100',
    defaultModel: 'meta-llama/Meta-Llama-3-70B-Instruct',
    tFixedMs: 1.5,
    tWeightsMs: 11.0,
    cTokenMs: 0.046,
    cAttentionMs: 0.6e-6,
    cKvMs: 1.5e-5,
    numGpuBlocks: 85_000,
    ...H100_BUDGET,
    maxModelLen: 8_192,
    apiOverheadMs: 3,
    kvBytesPerToken: 327_680, // Llama-3-70B: 80 layers × 8 KV heads × 128
  },
  {
    name: 'fast',
    description: 'near-zero engine time, for measuring proxy overhead',
    defaultModel: 'fake-model',
    tFixedMs: 0.01,
    tWeightsMs: 0,
    cTokenMs: 0,
    cAttentionMs: 0,
    cKvMs: 0,
    numGpuBlocks: 63_680,
    maxNumBatchedTokens: 65_536,
    maxNumSeqs: 4_096,
    maxModelLen: 32_768,
    apiOverheadMs: 0,
    kvBytesPerToken: 1_024, // a token model
  },
];

export const PROFILES: ReadonlyMap<string, EngineProfile> = new Map(
  PROFILE_LIST.map((profile) => [profile.name, profile]),
);

export const PROFILE_NAMES = PROFILE_LIST.map((profile) => profile.name) as [string, ...string[]];

export function getProfile(name: string): EngineProfile {
  const profile = PROFILES.get(name);
  if (!profile) throw new Error(`unknown profile "${name}"; known: ${PROFILE_NAMES.join(', ')}`);
  return profile;
}
