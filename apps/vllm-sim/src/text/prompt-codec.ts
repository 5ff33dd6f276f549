import type { ChatMessage } from '@kvroute/protocols';
import { renderChatPrompt } from './chat-template';
import { buildOutputWords, type OutputWords } from './output-text';
import { detokenize, tokenize } from './tokenizer';

/**
 * Text ↔ token ids for everything the sim serves, injected (app.ts → routes → generation) so one process can
 * hold sims with different vocabularies. Two implementations:
 * - the default (this file): cl100k_base and the sim's ChatML template (text/tokenizer.ts, text/chat-template.ts);
 * - `--tokenizer <dir|package>` (text/model-prompt-codec.ts): a real model's tokenizer and chat template through
 *   @kvroute/tokenization, the library the router's token mode uses, so the router and the sim count alike.
 */
export interface PromptCodec {
  /** What the ids come from, for logs: `cl100k_base+chatml` or the tokenizer's origin. */
  readonly name: string;
  /**
   * A chat request's prompt (vLLM's chat endpoints: template, then no special tokens added). A request the
   * template cannot render throws EngineError 400, as vLLM answers it.
   */
  chatPromptTokens(request: ChatPromptRequest): number[];
  /** A completions prompt text (vLLM's completions default: special tokens added, e.g. Llama's BOS). */
  completionPromptTokens(text: string): number[];
  /** A text's ids without special tokens. */
  textTokens(text: string): number[];
  /** Ids → text (`/detokenize`); null when this codec cannot decode. */
  detokenize(tokens: readonly number[]): string | null;
  /** The generated words: each one token of this vocabulary (text/output-text.ts). */
  readonly outputWords: OutputWords;
}

/** A chat prompt as vLLM's chat endpoints take it (their defaults when a field is absent). */
export interface ChatPromptRequest {
  readonly messages: readonly ChatMessage[];
  readonly tools?: readonly unknown[] | undefined;
  /** vLLM's default: true. */
  readonly addGenerationPrompt?: boolean;
  /** vLLM's default: false. */
  readonly continueFinalMessage?: boolean;
  /** The request's `chat_template_kwargs`. */
  readonly templateKwargs?: Readonly<Record<string, unknown>> | undefined;
}

/**
 * The chat fields of a chat body as vLLM reads them: top-level `add_generation_prompt` and
 * `continue_final_message` (they win over the same keys in `chat_template_kwargs`, vLLM's build_chat_params),
 * and the kwargs themselves. The same reading as the router's token mode (token-routing-wiring.ts).
 */
export function chatPromptRequestOf(body: {
  readonly messages: readonly ChatMessage[];
  readonly tools?: readonly unknown[] | undefined;
}): ChatPromptRequest {
  const fields = body as Record<string, unknown>;
  const kwargs = fields['chat_template_kwargs'];
  return {
    messages: body.messages,
    tools: body.tools,
    addGenerationPrompt: fields['add_generation_prompt'] !== false,
    continueFinalMessage: fields['continue_final_message'] === true,
    templateKwargs:
      kwargs !== null && typeof kwargs === 'object' && !Array.isArray(kwargs)
        ? (kwargs as Record<string, unknown>)
        : undefined,
  };
}

/**
 * The sim without `--tokenizer`: cl100k ids and the ChatML template, as before the codec existed. The chat
 * flags are not read (the ChatML template always ends with the generation prompt), and completions prompts
 * get no special tokens (cl100k has no BOS).
 */
export function createDefaultPromptCodec(): PromptCodec {
  return {
    name: 'cl100k_base+chatml',
    chatPromptTokens: (request) => renderChatPrompt({ messages: request.messages, tools: request.tools }),
    completionPromptTokens: tokenize,
    textTokens: tokenize,
    detokenize,
    outputWords: buildOutputWords(tokenize),
  };
}
