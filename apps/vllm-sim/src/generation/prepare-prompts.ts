import type { ChatCompletionRequest, CompletionRequest } from '@kvroute/protocols';
import { EngineError } from '../engine-errors';
import { chatPromptRequestOf, type PromptCodec } from '../text/prompt-codec';

/** One generation the engine will run: a prompt and how many tokens it may produce. */
export interface PreparedPrompt {
  readonly tokens: number[];
  readonly maxTokens: number;
}

export interface PromptLimits {
  readonly maxModelLen: number;
  readonly defaultMaxTokens: number;
}

/**
 * Chat request → one prompt per choice (`n`), after the template (with the request's tools and vLLM's chat
 * fields add_generation_prompt, continue_final_message, chat_template_kwargs).
 */
export function prepareChatPrompts(
  codec: PromptCodec,
  request: ChatCompletionRequest,
  limits: PromptLimits,
): PreparedPrompt[] {
  const tokens = codec.chatPromptTokens(chatPromptRequestOf(request));
  const requested = request.max_completion_tokens ?? request.max_tokens ?? undefined;
  const prompt = checkLength(tokens, requested, limits, 'messages');
  return Array.from({ length: request.n ?? 1 }, () => prompt);
}

/** An Anthropic Messages prompt (already templated) and its required `max_tokens`: vLLM's length rule. */
export function prepareMessagesPrompt(tokens: number[], maxTokens: number, limits: PromptLimits): PreparedPrompt {
  return checkLength(tokens, maxTokens, limits, 'messages');
}

/** Completion request → one prompt per entry of a batched `prompt` (times `n`). */
export function prepareCompletionPrompts(
  codec: PromptCodec,
  request: CompletionRequest,
  limits: PromptLimits,
): PreparedPrompt[] {
  const requested = request.max_tokens ?? undefined;
  const prompts: PreparedPrompt[] = [];
  for (const tokens of promptTokenLists(codec, request.prompt)) {
    const prompt = checkLength(tokens, requested, limits, 'prompt');
    for (let copy = 0; copy < (request.n ?? 1); copy++) prompts.push(prompt);
  }
  return prompts;
}

/** Texts get the codec's special tokens (vLLM's completions default); token ids are taken as given. */
function promptTokenLists(codec: PromptCodec, prompt: CompletionRequest['prompt']): number[][] {
  if (typeof prompt === 'string') return [codec.completionPromptTokens(prompt)];
  if (prompt.length === 0) return [];
  const first = prompt[0];
  if (typeof first === 'number') return [prompt as number[]];
  if (typeof first === 'string') return (prompt as string[]).map((text) => codec.completionPromptTokens(text));
  return (prompt as number[][]).map((tokens) => tokens.slice());
}

/** vLLM's context-length rule: prompt + max_tokens ≤ max_model_len, else 400 with its message. */
function checkLength(
  tokens: number[],
  requested: number | undefined,
  limits: PromptLimits,
  where: 'messages' | 'prompt',
): PreparedPrompt {
  if (tokens.length === 0) throw new EngineError('bad-request', 'The prompt is empty.');
  const maxTokens = requested ?? Math.min(limits.defaultMaxTokens, limits.maxModelLen - tokens.length);
  if (tokens.length >= limits.maxModelLen || tokens.length + maxTokens > limits.maxModelLen) {
    throw new EngineError(
      'bad-request',
      `This model's maximum context length is ${limits.maxModelLen} tokens. However, you requested ${tokens.length + maxTokens} tokens ` +
        `(${tokens.length} in the ${where}, ${maxTokens} in the completion). Please reduce the length of the ${where} or completion.`,
    );
  }
  return { tokens, maxTokens };
}
