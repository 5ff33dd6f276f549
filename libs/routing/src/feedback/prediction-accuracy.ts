/**
 * How well the router's picture of a backend's cache matched what the engine reported for one request:
 * the prefix the router believed the chosen backend held (its match, in routing blocks) against the
 * prompt tokens the engine served from its cache (`usage.prompt_tokens_details.cached_tokens`).
 *
 * Units: blocks are bytes of routing text; the engine counts tokens. This request's own ratio converts
 * one to the other: its prompt tokens over its routing text's bytes (the routing text also holds
 * separators and tags, a few bytes per message: close enough for a block-grained comparison).
 *
 * Outcomes (`within` = one routing block plus one engine block, ENGINE_BLOCK_TOKENS: the granularity
 * either side can see):
 * - `confirmed`: observed within `within` of predicted;
 * - `overpredicted`: the engine held less than the router believed (an eviction, a restart, a turn
 *   the router recorded that never computed its prefix);
 * - `underpredicted`: the engine held more (a prefix another route warmed, a shared system prompt);
 * - `unverified`: the engine does not report cached tokens.
 * Token-weighted precision = Σ confirmedTokens / Σ predictedTokens; recall = Σ confirmedTokens /
 * Σ observedTokens, where confirmedTokens = min(predicted, observed).
 */

/** vLLM's default KV block: the granularity of its cached-token counts. */
export const ENGINE_BLOCK_TOKENS = 16;

export type PredictionOutcome = 'confirmed' | 'overpredicted' | 'underpredicted' | 'unverified';
export const PREDICTION_OUTCOMES: readonly PredictionOutcome[] = [
  'confirmed',
  'overpredicted',
  'underpredicted',
  'unverified',
];

export interface Prediction {
  /** Leading routing blocks the chosen backend was believed to hold. */
  readonly matchBlocks: number;
  readonly blockSizeBytes: number;
  /** The request's routing text, bytes (tokens in token mode, where the check's ratio comes out ~1). */
  readonly textBytes: number;
  /** RoutingRequest.unit: in token mode there is no bytes-per-token ratio to learn. */
  readonly unit?: 'bytes' | 'tokens';
}

export interface PredictionCheck {
  readonly outcome: PredictionOutcome;
  /** Tokens the router predicted cached (0 when unverified). */
  readonly predictedTokens: number;
  /** Tokens the engine reported cached (0 when unverified). */
  readonly observedTokens: number;
  /** min(predicted, observed): the predicted tokens the engine confirmed. */
  readonly confirmedTokens: number;
}

export function checkPrediction(
  prediction: Prediction,
  usage: { readonly promptTokens: number; readonly cachedTokens: number | null } | null,
): PredictionCheck {
  if (usage === null || usage.cachedTokens === null || usage.promptTokens <= 0 || prediction.textBytes <= 0) {
    return { outcome: 'unverified', predictedTokens: 0, observedTokens: 0, confirmedTokens: 0 };
  }
  const tokensPerByte = usage.promptTokens / prediction.textBytes;
  const predictedBytes = Math.min(prediction.matchBlocks * prediction.blockSizeBytes, prediction.textBytes);
  const predictedTokens = Math.round(predictedBytes * tokensPerByte);
  const observedTokens = Math.min(usage.cachedTokens, usage.promptTokens);
  const within = prediction.blockSizeBytes * tokensPerByte + ENGINE_BLOCK_TOKENS;
  const outcome: PredictionOutcome =
    Math.abs(observedTokens - predictedTokens) <= within
      ? 'confirmed'
      : observedTokens < predictedTokens
        ? 'overpredicted'
        : 'underpredicted';
  return { outcome, predictedTokens, observedTokens, confirmedTokens: Math.min(predictedTokens, observedTokens) };
}
