import type { ChatCompletionRequest, CompletionRequest } from '@kvroute/protocols';
import { buildTokenRoutingRequest, type RoutingRequest } from '@kvroute/routing';

/**
 * What token mode needs of a model's tokenizer: the prompt's token ids exactly as vLLM makes them
 * (@kvroute/tokenization's pool, wired in wiring/token-routing-wiring.ts, is one).
 */
export interface PromptTokenizer {
  /**
   * A chat request's prompt: the model's chat template with the request's tools and
   * `add_generation_prompt`, then tokenized with no special tokens added (vLLM's chat default).
   * Rejects when the template cannot render the request.
   */
  chatPromptTokens(body: ChatCompletionRequest): Promise<ArrayLike<number>>;
  /** A completion prompt, special tokens added (vLLM's completions default). */
  completionPromptTokens(prompt: string): Promise<ArrayLike<number>>;
}

/**
 * Why a request of a model with a tokenizer was routed in byte mode all the same (the metric's `reason`):
 * its template could not render it, it is a batch of prompts, or the tokenizer could not take it (its
 * worker threads' queue full, a worker gone).
 */
export type ByteModeFallback = 'template-failed' | 'prompt-batch' | 'tokenizer-failed';

export interface TokenRoutingDeps {
  /** The model's tokenizer; null: the model is routed in byte mode. */
  readonly tokenizerOf: (model: string) => PromptTokenizer | null;
  /** A LoRA adapter's base model (its requests use the base's tokenizer, the adapter keys the blocks); null: not an adapter. */
  readonly baseModelOf?: (model: string) => string | null;
  /** The engines' KV block size, tokens. */
  readonly blockSizeTokens: number;
  /** Token blocks hashed, looked up and recorded per request (the rest is routed as unmatched). */
  readonly maxBlocks: number;
  readonly onFallback: (reason: ByteModeFallback) => void;
}

/**
 * Token mode's routing request for a chat or completion body (a Responses request's chat view
 * included), or null when the request is routed in byte mode: its model has no tokenizer, its template
 * failed on it, or it is a batch of prompts (each prompt is an engine request of its own; byte mode
 * routes them as one text). Never throws: a request the tokenizer refuses is still routed.
 */
export async function tokenRoutingRequest(
  deps: TokenRoutingDeps,
  body: ChatCompletionRequest | CompletionRequest,
  sessionKey: string | null,
): Promise<RoutingRequest | null> {
  const base = deps.baseModelOf?.(body.model) ?? null;
  const tokenizer = deps.tokenizerOf(base ?? body.model);
  if (tokenizer === null) return null;
  let tokenIds: ArrayLike<number>;
  if ('messages' in body) {
    try {
      tokenIds = await tokenizer.chatPromptTokens(body as ChatCompletionRequest);
    } catch (error) {
      deps.onFallback(isTokenizerFailure(error) ? 'tokenizer-failed' : 'template-failed');
      return null;
    }
  } else {
    const prompt = (body as CompletionRequest).prompt;
    const single = Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] === 'string' ? prompt[0] : prompt;
    if (typeof single === 'string') {
      try {
        tokenIds = await tokenizer.completionPromptTokens(single);
      } catch {
        deps.onFallback('tokenizer-failed');
        return null;
      }
    } else if (typeof prompt[0] === 'number') {
      // Token ids given: the engine prefills exactly these.
      tokenIds = prompt as number[];
    } else {
      deps.onFallback('prompt-batch');
      return null;
    }
  }
  return buildTokenRoutingRequest(body, tokenIds, {
    blockSizeTokens: deps.blockSizeTokens,
    maxBlocks: deps.maxBlocks,
    sessionKey,
    loraName: base === null ? null : body.model,
  });
}

/** A failure of the tokenizer's machinery (@kvroute/tokenization's TokenizerUnavailableError), not of the request's template. */
function isTokenizerFailure(error: unknown): boolean {
  return error instanceof Error && error.name === 'TokenizerUnavailableError';
}
