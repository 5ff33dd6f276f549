import type { ChatCompletionRequest, CompletionRequest } from '@kvroute/protocols';
import { hashTokenBlock53, TOKEN_CHAIN_ROOT, tokenBlockExtra } from '../hash/hash53';
import type { BlockHash, RoutingRequest } from '../types';
import { assertBlockSize, assertMaxBlocks } from './block-hasher';
import { maxTokensOf, sessionKeyOf } from './routing-request';

/** vLLM's default KV block size, in tokens (`--block-size`). */
export const DEFAULT_BLOCK_SIZE_TOKENS = 16;

/**
 * Token blocks routed on by default: 128 k tokens at 16 tokens a block, the same reach as byte mode's
 * DEFAULT_MAX_ROUTED_BLOCKS (llm-d caps its prefix at 128 k tokens too).
 */
export const DEFAULT_MAX_ROUTED_TOKEN_BLOCKS = 8192;

export interface TokenRoutingRequestOptions {
  /** The engine's KV block size in tokens (integer ≥ 1): a block here is a block there. */
  readonly blockSizeTokens: number;
  /** Only the first this many blocks are hashed (default DEFAULT_MAX_ROUTED_TOKEN_BLOCKS). */
  readonly maxBlocks?: number;
  /** `X-Session-Id` header value, when sent (see buildRoutingRequest). */
  readonly sessionKey?: string | null;
  /** Where the first turn starts and ends, in tokens (see RoutingRequest.firstTurnBytes); absent without one. */
  readonly firstTurnTokens?: { readonly start: number; readonly end: number } | undefined;
  /** The LoRA adapter the request names (its `model`, when that is an adapter of a base model); absent: none. */
  readonly loraName?: string | null;
}

/**
 * The routing request of a prompt the router tokenized as the engine does (token mode): the chain of
 * block names over its token ids, in blocks of the engine's block size, named with hashTokenBlock53
 * as the KV-event indexer names the blocks an engine reports storing, so an event and a request meet
 * on the same key. Only full blocks are named (vLLM caches full blocks only).
 *
 * Extra keys as vLLM keys a block (vllm/v1/core/kv_cache_utils.py generate_block_hash_extra_keys): the
 * LoRA adapter's name on every block (`options.loraName`), the `cache_salt` on block 0 only, so adapters, and salted
 * and unsalted prompts, share no block.
 *
 * Units: in token mode `textBytes` and `blockSizeBytes` count tokens (`unit: 'tokens'`), so every
 * estimate built on them (prefill tokens, backlog, demand) divides by one token per token instead of a
 * learned bytes-per-token ratio.
 */
export function buildTokenRoutingRequest(
  body: ChatCompletionRequest | CompletionRequest,
  tokenIds: ArrayLike<number>,
  options: TokenRoutingRequestOptions,
): RoutingRequest {
  const { blockSizeTokens } = options;
  const maxBlocks = options.maxBlocks ?? DEFAULT_MAX_ROUTED_TOKEN_BLOCKS;
  assertBlockSize(blockSizeTokens);
  assertMaxBlocks(maxBlocks);
  const salt = (body as { cache_salt?: unknown }).cache_salt;
  const loraName = options.loraName ?? null;
  const saltKey = tokenBlockExtra(loraName, typeof salt === 'string' ? salt : null, true);
  const loraKey = tokenBlockExtra(loraName, null, false);
  const blockCount = Math.min(maxBlocks, Math.floor(tokenIds.length / blockSizeTokens));
  const blockHashes: BlockHash[] = new Array(blockCount);
  let previous = TOKEN_CHAIN_ROOT;
  for (let i = 0; i < blockCount; i++) {
    previous = hashTokenBlock53(tokenIds, i * blockSizeTokens, blockSizeTokens, previous, i === 0 ? saltKey : loraKey);
    blockHashes[i] = previous;
  }
  // A prompt shorter than a block: a hash of all of it, for cold placement only (it is never looked up).
  const headHash = blockHashes[0] ?? hashTokenBlock53(tokenIds, 0, tokenIds.length, TOKEN_CHAIN_ROOT, saltKey);
  return {
    model: body.model,
    blockHashes,
    blockSizeBytes: blockSizeTokens,
    textBytes: tokenIds.length,
    unit: 'tokens',
    // The seed kv-router policy's "all messages but the last" key, in byte mode only: finding where the last
    // message starts in tokens would render the template twice.
    contextBlocks: 0,
    headHash,
    firstTurnBytes: options.firstTurnTokens,
    sessionKey: sessionKeyOf(body, options.sessionKey),
    maxTokens: maxTokensOf(body),
  };
}
