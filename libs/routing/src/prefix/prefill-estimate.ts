import type { RoutingRequest } from '../types';

/** Routing-text bytes per engine token: ~4 for English and code with BPE tokenizers. */
export const DEFAULT_BYTES_PER_TOKEN = 4;

/**
 * Prompt tokens a backend holding `matchBlocks` leading blocks still has to prefill for `request`:
 * counted in token mode, else estimated from the routing text at `bytesPerToken` (the estimate only
 * needs to rank backends and size their backlog, not to be exact).
 */
export function estimatePrefillTokens(
  request: RoutingRequest,
  matchBlocks: number,
  bytesPerToken = DEFAULT_BYTES_PER_TOKEN,
): number {
  const units = Math.max(0, request.textBytes - matchBlocks * request.blockSizeBytes);
  return Math.ceil(units / unitsPerToken(request, bytesPerToken));
}

/** What one token is in `request`'s units: 1 in token mode, else `bytesPerToken` bytes of routing text. */
export function unitsPerToken(request: Pick<RoutingRequest, 'unit'>, bytesPerToken: number): number {
  return request.unit === 'tokens' ? 1 : bytesPerToken;
}
