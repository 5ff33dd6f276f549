/**
 * The three ways tokenization fails, as types a caller can tell apart:
 * - TokenizerLoadError: a model's files are missing or unreadable. The router meets it at start and
 *   refuses to start (a tokenizer configured by path that is not there is an operator's mistake).
 * - ChatTemplateError: one request's messages cannot be rendered by the model's template (a template
 *   error, a value the template refuses with raise_exception, a content part vLLM would refuse). The
 *   router catches it and routes that request in byte mode; vLLM would answer it with a 400.
 * - TokenizerUnavailableError: the pool's worker threads could not take a prompt (their queue is full,
 *   a worker died, the pool is closing). The router routes that request in byte mode too.
 */

export class TokenizerLoadError extends Error {
  override readonly name = 'TokenizerLoadError';
  /** The file (or package) that could not be read. */
  readonly file: string;

  constructor(file: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.file = file;
  }
}

export type ChatTemplateErrorReason =
  /** The template threw while rendering (its own raise_exception, a type error, an unknown filter…). */
  | 'render'
  /** The model has no chat template (tokenizer_config.json has none and no chat_template.jinja). */
  | 'no-template'
  /** The request asks for something vLLM refuses before rendering (both continue_final_message and add_generation_prompt, a non-text part…). */
  | 'invalid-request';

export class ChatTemplateError extends Error {
  override readonly name = 'ChatTemplateError';
  readonly reason: ChatTemplateErrorReason;

  constructor(reason: ChatTemplateErrorReason, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.reason = reason;
  }
}

export class TokenizerUnavailableError extends Error {
  override readonly name = 'TokenizerUnavailableError';
}
