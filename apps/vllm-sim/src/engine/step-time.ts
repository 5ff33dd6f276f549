import type { EngineProfile } from './profiles';

/** One prefill chunk in a step: `queryTokens` new tokens on top of `keysBefore` tokens already in KV. */
export interface PrefillChunk {
  readonly queryTokens: number;
  readonly keysBefore: number;
}

/** What one forward pass ("step") computes. */
export interface StepShape {
  /** Sequences decoding one token each. */
  readonly decodeSequences: number;
  /** Total context (tokens in KV) of the decoding sequences. */
  readonly decodeContextTokens: number;
  readonly prefillChunks: readonly PrefillChunk[];
}

/**
 * Step duration in milliseconds (shared/reference/simulator-model.md §2):
 *
 *   T = t_fixed + max(t_w, c_tok·(D + N_new)) + c_attn·Σ(q·k_before + q²/2) + c_kv·C_ctx
 *
 * D decode sequences, N_new new prefill tokens, q a chunk's length, k_before the tokens already in KV
 * for that request (cache hit + earlier chunks), C_ctx the total context of decoding sequences.
 */
export function computeStepMs(profile: EngineProfile, step: StepShape): number {
  let newTokens = 0;
  let attentionPairs = 0;
  for (const chunk of step.prefillChunks) {
    newTokens += chunk.queryTokens;
    attentionPairs += chunk.queryTokens * chunk.keysBefore + (chunk.queryTokens * chunk.queryTokens) / 2;
  }
  const linearMs = Math.max(profile.tWeightsMs, profile.cTokenMs * (step.decodeSequences + newTokens));
  return profile.tFixedMs + linearMs + profile.cAttentionMs * attentionPairs + profile.cKvMs * step.decodeContextTokens;
}
