import type { RoutingRequest } from '../types';

/** Routing-text bytes per engine token: ~4 for English and code with BPE tokenizers. */
export const DEFAULT_BYTES_PER_TOKEN = 4;

/**
 * Prompt tokens a backend holding `matchBlocks` leading blocks still has to prefill for `request`,
 * estimated from the routing text (the router has no tokenizer; the estimate only needs to rank
 * backends and size their backlog, not to be exact).
 */
export function estimatePrefillTokens(
  request: RoutingRequest,
  matchBlocks: number,
  bytesPerToken = DEFAULT_BYTES_PER_TOKEN,
): number {
  return Math.ceil(Math.max(0, request.textBytes - matchBlocks * request.blockSizeBytes) / bytesPerToken);
}
