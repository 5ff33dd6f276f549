/**
 * The usage an OpenAI-compatible engine reports at the end of a response, read from the response's last
 * bytes (a non-streaming body ends with its `usage`; a stream's usage chunk, with
 * `stream_options.include_usage`, comes right before `[DONE]`), without parsing the whole body:
 *
 *   chat / completions   usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens
 *   Responses            usage.input_tokens,  usage.input_tokens_details.cached_tokens
 *   Anthropic Messages   usage.input_tokens + cache_read_input_tokens + cache_creation_input_tokens,
 *                        usage.cache_read_input_tokens (a stream's `message_delta` usage, the last one)
 *
 * Anthropic's `input_tokens` leave out the cached and cache-written tokens, so a usage with either cache
 * field is read that way. vLLM's Anthropic endpoint sets only `input_tokens`, to the whole prompt, and
 * no cache field (apps/vllm-sim/README.md, "Anthropic Messages"): read as the prompt, cached unknown.
 *
 * `cachedTokens` is what the engine found in its prefix cache for this prompt (vLLM:
 * `--enable-prompt-tokens-details`, block-aligned); null when the engine does not say (the field is
 * absent or null: llama.cpp, SGLang without the flag, vLLM without it).
 */
export interface ResponseUsage {
  readonly promptTokens: number;
  readonly cachedTokens: number | null;
  /** Tokens generated (`completion_tokens`, Responses `output_tokens`); null when not said. Settles token limits. */
  readonly completionTokens?: number | null;
}

const USAGE_KEY = '"usage"';
const PROMPT_TOKENS = /"(?:prompt_tokens|input_tokens)"\s*:\s*(\d+)/;
const CACHED_TOKENS = /"cached_tokens"\s*:\s*(\d+)/;
const COMPLETION_TOKENS = /"(?:completion_tokens|output_tokens)"\s*:\s*(\d+)/;
const CACHE_READ_TOKENS = /"cache_read_input_tokens"\s*:\s*(\d+)/;
const CACHE_CREATION_TOKENS = /"cache_creation_input_tokens"\s*:\s*(\d+)/;

/** The usage in `tail` (the last bytes of a response body, as text), from its last `"usage"` on; null when there is none. */
export function usageFromTail(tail: string): ResponseUsage | null {
  const at = tail.lastIndexOf(USAGE_KEY);
  if (at === -1) return null;
  const usage = tail.slice(at);
  const prompt = PROMPT_TOKENS.exec(usage);
  if (prompt === null) return null;
  const completion = COMPLETION_TOKENS.exec(usage);
  const completionTokens = completion === null ? null : Number(completion[1]);
  const cacheRead = CACHE_READ_TOKENS.exec(usage);
  const cacheCreation = CACHE_CREATION_TOKENS.exec(usage);
  // Only with `input_tokens` (Anthropic's name): an OpenAI-shaped usage that also carries the cache
  // fields (LiteLLM adds them) already counts them in `prompt_tokens`.
  if ((cacheRead !== null || cacheCreation !== null) && prompt[0].includes('"input_tokens"')) {
    const read = cacheRead === null ? 0 : Number(cacheRead[1]);
    const created = cacheCreation === null ? 0 : Number(cacheCreation[1]);
    return {
      promptTokens: Number(prompt[1]) + read + created,
      cachedTokens: cacheRead === null ? null : read,
      completionTokens,
    };
  }
  const cached = CACHED_TOKENS.exec(usage);
  return {
    promptTokens: Number(prompt[1]),
    cachedTokens: cached === null ? null : Number(cached[1]),
    completionTokens,
  };
}

/** Bytes of a stream's start kept for its `message_start` (the event is ~300 B; a ping may come first). */
export const STREAM_START_BYTES = 2048;
const MESSAGE_START = '"message_start"';

/**
 * The usage of an Anthropic Messages stream whose last usage (`message_delta`) carries only
 * `output_tokens`, as Anthropic's API first sent it: the prompt's part (`input_tokens` and the cache
 * fields, mapped as in usageFromTail) is in the `message_start` event that opens the stream, found in
 * `head` (the stream's first bytes); the generated tokens are the last usage's, in `tail`. Null when
 * `head` holds no `message_start` with `input_tokens`.
 */
export function usageFromStreamStart(head: string, tail: string): ResponseUsage | null {
  const at = head.indexOf(MESSAGE_START);
  if (at === -1) return null;
  // That event only: up to the blank line that ends it (any SSE line ending).
  const end = head.slice(at).search(/\r?\n\r?\n|\r\r/);
  const start = usageFromTail(end === -1 ? head.slice(at) : head.slice(at, at + end));
  if (start === null) return null;
  const last = tail.lastIndexOf(USAGE_KEY);
  const completion = last === -1 ? null : COMPLETION_TOKENS.exec(tail.slice(last));
  return { ...start, completionTokens: completion === null ? null : Number(completion[1]) };
}
