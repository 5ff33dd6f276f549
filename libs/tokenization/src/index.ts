/**
 * @kvroute/tokenization: a model's tokenizer and chat template, so the router names a prompt's tokens (and
 * their KV blocks) as vLLM does. README.md has the API, what was read in vLLM, and the library measurements.
 */
export {
  loadModelTokenizer,
  ModelTokenizer,
  type LoadModelTokenizerOptions,
  type RenderChatOptions,
} from './model-tokenizer';
export { createTokenizerPool, type TokenizerPool, type TokenizerPoolOptions } from './tokenizer-pool';
export {
  ChatTemplateError,
  TokenizerLoadError,
  TokenizerUnavailableError,
  type ChatTemplateErrorReason,
} from './errors';
export type { ChatMessageInput, ChatToolInput, ContentPartInput } from './chat-messages';
export type { ContentFormat } from './content-format';
