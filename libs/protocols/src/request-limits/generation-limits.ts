/**
 * Size limits of a chat or text completion request, checked on the parsed body before schema
 * validation and before any rendering, so the work those steps do is bounded by the limits rather
 * than by what a client sends: 200,000 messages are refused after reading one `length`, not validated
 * one by one (each invalid element costs zod an issue object and its message).
 *
 * The check reads only what it counts: array lengths, plus one loop over at most `maxMessages`
 * messages (their `content` and `tool_calls` lengths) and at most `maxPromptEntries` prompt entries.
 * No recursion, no allocation beyond the one violation it returns. Fields of the wrong type are left to
 * schema validation, which reports them. Every known field is counted whichever endpoint the body was
 * sent to (a `tools` array on a text completion is forwarded to the engine all the same).
 *
 * Nesting depth is checked before parsing (json-nesting.ts); string lengths are bounded by the body
 * size limit, and the routed part of a long prompt by the router's block cap.
 */

/** Each limit is the largest accepted count; the reasons for the defaults are in DEFAULT_GENERATION_LIMITS. */
export interface GenerationLimits {
  /** Entries of `messages`. */
  readonly maxMessages: number;
  /** Entries of `tools`. */
  readonly maxTools: number;
  /** Content parts (`messages[i].content` arrays) over all messages. */
  readonly maxContentParts: number;
  /** Content parts of one message. */
  readonly maxContentPartsPerMessage: number;
  /** `tool_calls` entries over all messages. */
  readonly maxToolCalls: number;
  /** Entries of a batched `prompt` (texts or token-id lists); a single token-id list counts as one entry. */
  readonly maxPromptEntries: number;
  /** Token ids in `prompt`: in the one list, or over all lists of a batch. */
  readonly maxPromptTokenIds: number;
  /** Entries of a `stop` array. */
  readonly maxStopSequences: number;
}

/**
 * Proposed defaults. OpenAI's API reference (openapi.yaml 2.3.0) documents few limits here: `messages`
 * `minItems: 1` and no maximum; chat `tools` no maximum in the schema, but "a max of 128 functions"
 * in its prose and `maxItems: 128` on the deprecated `functions`; content parts `minItems: 1`, no
 * maximum; `stop` up to 4; `prompt` no maximum. Engines behind this router (vLLM, SGLang) enforce none
 * of them, so the defaults are set well above what real clients send, as a bound on cost rather than a
 * product rule: a client that works against the engine directly keeps working through the router.
 */
export const DEFAULT_GENERATION_LIMITS: GenerationLimits = {
  /** Agent loops reach hundreds of turns; 4096 messages is more than a 128k-token context holds at ~30 tokens a message. */
  maxMessages: 4096,
  /** Above OpenAI's 128: self-hosted agents (MCP servers) expose hundreds of tools, and vLLM takes any number. */
  maxTools: 512,
  /** One part per image, audio clip or text chunk; 4096 is beyond any engine's multimodal item limit. */
  maxContentParts: 4096,
  /** Video-as-frames prompts send a few hundred image parts in one message. */
  maxContentPartsPerMessage: 1024,
  /** Parallel tool calls replayed over a long conversation. */
  maxToolCalls: 4096,
  /** Batched completions: vLLM serves each entry as its own request, so a batch is a burst. */
  maxPromptEntries: 4096,
  /** 2^20 ids: above the context length of the models these engines serve; longer gets the engine's own 400 anyway. */
  maxPromptTokenIds: 1_048_576,
  /** OpenAI allows 4, vLLM any number (each is checked against every generated token): 64 keeps room for eval harnesses. */
  maxStopSequences: 64,
};

export interface LimitViolation {
  /** For the client, in the OpenAI error's `message`: which limit, the count sent and the count allowed. */
  readonly message: string;
  /** OpenAI-style path of the offending field: `messages`, `messages[3].content`, `prompt`. */
  readonly param: string;
}

const counts = new Intl.NumberFormat('en-US');

/**
 * The first limit `body` goes past, or null if it keeps within all of them (or is not an object, which
 * validation reports). Order: top-level array lengths (`messages`, `tools`, `stop`, `prompt` entries),
 * then per message (content parts, its own and the running total; tool calls), then prompt token ids.
 */
export function checkGenerationLimits(
  body: unknown,
  limits: GenerationLimits = DEFAULT_GENERATION_LIMITS,
): LimitViolation | null {
  if (!isRecord(body)) return null;
  // `system` (blocks) and `stop_sequences`: Anthropic Messages' own arrays, bounded like a message's content and `stop`.
  const { messages, tools, stop, prompt, system, stop_sequences: stopSequences } = body;
  if (Array.isArray(messages) && messages.length > limits.maxMessages)
    return tooMany('messages', messages.length, limits.maxMessages, 'entries');
  if (Array.isArray(system) && system.length > limits.maxContentPartsPerMessage)
    return tooMany('system', system.length, limits.maxContentPartsPerMessage, 'content parts');
  if (Array.isArray(stopSequences) && stopSequences.length > limits.maxStopSequences)
    return tooMany('stop_sequences', stopSequences.length, limits.maxStopSequences, 'entries');
  if (Array.isArray(tools) && tools.length > limits.maxTools)
    return tooMany('tools', tools.length, limits.maxTools, 'entries');
  if (Array.isArray(stop) && stop.length > limits.maxStopSequences)
    return tooMany('stop', stop.length, limits.maxStopSequences, 'entries');
  const promptIsBatch = Array.isArray(prompt) && prompt.length > 0 && typeof prompt[0] !== 'number';
  if (promptIsBatch && prompt.length > limits.maxPromptEntries)
    return tooMany('prompt', prompt.length, limits.maxPromptEntries, 'entries');
  if (Array.isArray(messages)) {
    const violation = checkMessages(messages, limits);
    if (violation) return violation;
  }
  if (Array.isArray(prompt)) return checkPromptTokenIds(prompt, promptIsBatch, limits.maxPromptTokenIds);
  return null;
}

function checkMessages(messages: readonly unknown[], limits: GenerationLimits): LimitViolation | null {
  let contentParts = 0;
  let toolCalls = 0;
  for (let index = 0; index < messages.length; index++) {
    const message = messages[index];
    if (!isRecord(message)) continue;
    const { content, tool_calls: calls } = message;
    if (Array.isArray(content)) {
      if (content.length > limits.maxContentPartsPerMessage) {
        return tooMany(`messages[${index}].content`, content.length, limits.maxContentPartsPerMessage, 'content parts');
      }
      contentParts += content.length;
      if (contentParts > limits.maxContentParts) {
        return totalTooLarge(`messages[${index}].content`, 'content parts', limits.maxContentParts);
      }
    }
    if (Array.isArray(calls)) {
      toolCalls += calls.length;
      if (toolCalls > limits.maxToolCalls)
        return totalTooLarge(`messages[${index}].tool_calls`, 'tool calls', limits.maxToolCalls);
    }
  }
  return null;
}

/** Token ids: the list itself, or each list of a batch (its entries were already counted). */
function checkPromptTokenIds(prompt: readonly unknown[], isBatch: boolean, maxTokenIds: number): LimitViolation | null {
  if (!isBatch) return prompt.length > maxTokenIds ? tooMany('prompt', prompt.length, maxTokenIds, 'token ids') : null;
  let tokenIds = 0;
  for (let index = 0; index < prompt.length; index++) {
    const entry = prompt[index];
    if (!Array.isArray(entry)) continue;
    tokenIds += entry.length;
    if (tokenIds > maxTokenIds) return totalTooLarge(`prompt[${index}]`, 'token ids', maxTokenIds);
  }
  return null;
}

function tooMany(param: string, count: number, max: number, what: string): LimitViolation {
  return {
    message: `\`${param}\` has ${counts.format(count)} ${what}; at most ${counts.format(max)} are accepted.`,
    param,
  };
}

function totalTooLarge(param: string, what: string, max: number): LimitViolation {
  return {
    message: `The request holds more than ${counts.format(max)} ${what} in total (the limit is passed at \`${param}\`).`,
    param,
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
