import type { ChatCompletionRequest, CompletionRequest } from '@kvroute/protocols';
import type { RoutingRequest } from '../types';
import { assertBlockSize, assertMaxBlocks, RoutingTextEncoder, routedTextUnits, STRADDLE_BYTES } from './block-hasher';
import { renderRoutingTextInto } from './routing-text';

/**
 * Blocks of a request that are hashed and routed on by default: 128 k tokens' worth at 4 bytes per
 * token and 256-byte blocks (llm-d caps its prefix at 128 k tokens too). Past them a prompt's prefix
 * is not looked up or recorded, so one huge prompt costs the state store a bounded time.
 */
export const DEFAULT_MAX_ROUTED_BLOCKS = 2048;

export interface RoutingRequestOptions {
  /** Prefix block size in bytes (integer ≥ 1); must equal the one the shared prefix index uses. */
  readonly blockSizeBytes: number;
  /** Only the first this many blocks are hashed (integer ≥ 1; default DEFAULT_MAX_ROUTED_BLOCKS); `textBytes` stays the whole text's. */
  readonly maxBlocks?: number;
  /** `X-Session-Id` header value, when sent; takes precedence over the body's `prompt_cache_key` and `user`. */
  readonly sessionKey?: string | null;
}

/**
 * What a policy needs to know about a request body: render the routing text, hash its blocks, pick
 * the affinity key. Empty session keys count as absent (an empty header is not an identity).
 *
 * The affinity key, first found wins: `X-Session-Id` (the operator's or gateway's own header, the most
 * deliberate), then the body's `prompt_cache_key` (OpenAI's hint for exactly this: requests that share
 * a prefix), then `user` (an end-user id: one user's conversations, a coarser grouping). A
 * `prompt_cache_key` that is not a string is ignored (engines ignore it; the router does not refuse
 * what vLLM accepts).
 */
export function buildRoutingRequest(
  body: ChatCompletionRequest | CompletionRequest,
  options: RoutingRequestOptions,
): RoutingRequest {
  const maxBlocks = options.maxBlocks ?? DEFAULT_MAX_ROUTED_BLOCKS;
  assertBlockSize(options.blockSizeBytes);
  assertMaxBlocks(maxBlocks);
  // Rendered straight into bytes: only what the kept blocks need is encoded, the rest is measured.
  const encoder = new RoutingTextEncoder(maxBlocks * options.blockSizeBytes + STRADDLE_BYTES);
  const rendered = renderRoutingTextInto(body, encoder, {
    maxUnits: routedTextUnits(maxBlocks, options.blockSizeBytes),
  });
  const hashed = encoder.hash(options.blockSizeBytes, maxBlocks, rendered.omittedBytes);
  const sessionKey = sessionKeyOf(body, options.sessionKey);
  return {
    model: body.model,
    blockHashes: hashed.blockHashes,
    blockSizeBytes: options.blockSizeBytes,
    textBytes: hashed.textBytes,
    contextBlocks: hashed.contextBlocks,
    headHash: hashed.headHash,
    firstTurnBytes: hashed.firstTurnBytes,
    boundaryBlocks: hashed.boundaryBlocks,
    sessionKey,
    maxTokens: maxTokensOf(body),
  };
}

/** The affinity key: `X-Session-Id`, else the body's `prompt_cache_key`, else its `user` (first non-empty wins). */
export function sessionKeyOf(
  body: ChatCompletionRequest | CompletionRequest,
  sessionHeader: string | null | undefined,
): string | null {
  return nonEmpty(sessionHeader) ?? nonEmpty(promptCacheKeyOf(body)) ?? nonEmpty(body.user) ?? null;
}

/** Most tokens the request may generate over all its choices; null when the body does not bound it. */
export function maxTokensOf(body: ChatCompletionRequest | CompletionRequest): number | null {
  const completionTokens = 'max_completion_tokens' in body ? body.max_completion_tokens : undefined;
  const perChoice = completionTokens ?? body.max_tokens;
  return typeof perChoice === 'number' ? perChoice * (body.n ?? 1) : null;
}

function promptCacheKeyOf(body: ChatCompletionRequest | CompletionRequest): string | undefined {
  const key = (body as { prompt_cache_key?: unknown }).prompt_cache_key;
  return typeof key === 'string' ? key : undefined;
}

function nonEmpty(value: string | null | undefined): string | undefined {
  return value === null || value === undefined || value === '' ? undefined : value;
}
