/**
 * A model's chat template, rendered as transformers' `apply_chat_template(tokenize=False)` renders it for vLLM
 * (README.md, "What we read in vLLM"), through @huggingface/jinja (the Jinja subset HF templates use, with
 * trim_blocks and lstrip_blocks, `tojson` as Python's json.dumps with ensure_ascii=False, raise_exception and
 * strftime_now).
 *
 * The template's variables: the tokenizer's special tokens (`bos_token`, `eos_token`, … from
 * tokenizer_config.json, as strings), then the request's chat_template_kwargs (they win), then `messages`,
 * `tools`, `documents` and `add_generation_prompt`. vLLM passes on only the kwargs the template reads (or that
 * apply_chat_template takes): a kwarg the template does not read changes nothing, so passing all is the same
 * rendering; `chat_template` and `tokenize` are refused, as vLLM refuses them.
 *
 * continue_final_message: the rendering is cut right after the final message's text (transformers' rule), so
 * the model continues it.
 */

import { Template } from '@huggingface/jinja';
import { type CompiledTemplate, compileTemplate } from './compiled-template';
import { type ContentFormat, detectContentFormat } from './content-format';
import { ChatTemplateError } from './errors';
import type { ConversationMessage } from './chat-messages';

export interface RenderTemplateOptions {
  readonly tools: Record<string, unknown>[] | null;
  readonly addGenerationPrompt: boolean;
  readonly continueFinalMessage: boolean;
  /** The request's chat_template_kwargs. */
  readonly templateKwargs?: Readonly<Record<string, unknown>>;
}

/**
 * A request's chat_template_kwargs as template variables: refused where vLLM refuses them; apply_chat_template's
 * own parameters taken out (documents kept apart: it is a variable of its own).
 */
function templateKwargs(given: Readonly<Record<string, unknown>>): {
  readonly variables: Record<string, unknown>;
  readonly documents: unknown;
} {
  for (const refused of ['chat_template', 'tokenize', 'messages'])
    if (refused in given)
      throw new ChatTemplateError('invalid-request', `Found unexpected chat template kwargs from request: ${refused}`);
  // Defined, not assigned: a kwarg named __proto__ (JSON.parse makes it an own key) stays a variable, as a spread keeps it.
  const variables = Object.fromEntries(Object.entries(given).filter(([name]) => !APPLY_PARAMETERS.has(name)));
  return { variables, documents: given['documents'] ?? null };
}

function isEmpty(record: Readonly<Record<string, unknown>>): boolean {
  for (const _ in record) return false;
  return true;
}

/** The special-token attributes transformers puts in `special_tokens_map` (those that are set). */
const SPECIAL_TOKEN_KEYS = ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token'];
/** apply_chat_template's own parameters: consumed by it, not template variables (besides those it passes on). */
const APPLY_PARAMETERS = new Set([
  'conversation',
  'tools',
  'documents',
  'chat_template',
  'add_generation_prompt',
  'continue_final_message',
  'tokenize',
  'padding',
  'truncation',
  'max_length',
  'return_tensors',
  'return_dict',
  'return_assistant_tokens_mask',
  'tokenizer_kwargs',
]);
/** Python's str.strip() whitespace (JS's trim() differs on U+001C–U+001F, U+0085 and U+FEFF). */
const PY_SPACE =
  '[\\t\\n\\u000b\\f\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]';
const LEADING_SPACE = new RegExp(`^${PY_SPACE}+`);
const TRAILING_SPACE = new RegExp(`${PY_SPACE}+$`);

export class ChatTemplate {
  readonly contentFormat: ContentFormat;
  private readonly template: Template;
  /** The template as closures (compiled-template.ts); null: a construct they do not cover, the interpreter renders. */
  private readonly compiled: CompiledTemplate | null;

  /** The special tokens the template names: the others would be converted for the interpreter on every render, unread. */
  private readonly specialTokens: Readonly<Record<string, unknown>>;

  constructor(
    readonly source: string,
    specialTokens: Readonly<Record<string, unknown>>,
  ) {
    this.specialTokens = Object.fromEntries(Object.entries(specialTokens).filter(([name]) => source.includes(name)));
    try {
      this.template = new Template(source);
    } catch (error) {
      throw new ChatTemplateError('render', `The chat template does not parse: ${(error as Error).message}`, {
        cause: error,
      });
    }
    this.compiled = compileTemplate(this.template.parsed);
    this.contentFormat = detectContentFormat(source);
  }

  /** Whether renders run compiled (else every one goes to the interpreter); for tests. */
  get isCompiled(): boolean {
    return this.compiled !== null;
  }

  render(conversation: ConversationMessage[], options: RenderTemplateOptions): string {
    if (options.addGenerationPrompt && options.continueFinalMessage)
      throw new ChatTemplateError(
        'invalid-request',
        'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
      );
    // Most requests bring no kwargs: then nothing is copied or deleted (this runs for every chat request).
    const given = options.templateKwargs;
    const kwargs = given === undefined || isEmpty(given) ? null : templateKwargs(given);
    const variables = {
      ...this.specialTokens,
      ...kwargs?.variables,
      messages: conversation,
      tools: options.tools,
      documents: kwargs?.documents ?? null,
      add_generation_prompt: options.addGenerationPrompt,
    };
    const rendered = this.renderCompiled(variables) ?? this.interpret(variables);
    return options.continueFinalMessage ? cutAfterFinalMessage(rendered, conversation) : rendered;
  }

  /** The compiled rendering; null when it declines (a value it does not cover, or any fault): the interpreter decides. */
  private renderCompiled(variables: Record<string, unknown>): string | null {
    if (this.compiled === null) return null;
    try {
      return this.compiled(variables);
    } catch {
      return null;
    }
  }

  private interpret(variables: Record<string, unknown>): string {
    try {
      return this.template.render(variables);
    } catch (error) {
      throw new ChatTemplateError('render', `The chat template failed: ${(error as Error).message}`, { cause: error });
    }
  }
}

/** The template variables transformers' special_tokens_map gives, from tokenizer_config.json (AddedToken objects as their content). */
export function specialTokensMap(config: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const map: Record<string, unknown> = {};
  for (const key of SPECIAL_TOKEN_KEYS) {
    const token = tokenContent(config[key]);
    if (token) map[key] = token;
  }
  const additional = config['additional_special_tokens'];
  if (Array.isArray(additional) && additional.length > 0)
    map['additional_special_tokens'] = additional.map(tokenContent);
  return map;
}

function tokenContent(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (typeof value === 'object' && value !== null && typeof (value as { content?: unknown }).content === 'string')
    return (value as { content: string }).content;
  return null;
}

/** transformers' continue_final_message: keep the rendering up to the end of the final message's text. */
function cutAfterFinalMessage(rendered: string, conversation: ConversationMessage[]): string {
  const content = conversation.at(-1)?.['content'];
  let final: string | undefined;
  if (typeof content === 'string') final = content;
  else if (Array.isArray(content)) {
    const part = content.findLast((block) => typeof (block as { text?: unknown }).text === 'string');
    final = (part as { text: string } | undefined)?.text;
  }
  if (final === undefined)
    throw new ChatTemplateError(
      'render',
      'continue_final_message is set but the final message has no text to continue.',
    );
  const stripped = final.replace(LEADING_SPACE, '').replace(TRAILING_SPACE, '');
  const at = rendered.lastIndexOf(stripped);
  if (at < 0)
    throw new ChatTemplateError(
      'render',
      'continue_final_message is set but the final message does not appear in the rendering.',
    );
  const leftStripped = final.replace(LEADING_SPACE, '');
  if (rendered.slice(at, at + leftStripped.length) === final) return rendered.slice(0, at + leftStripped.length);
  return rendered.slice(0, at + stripped.length);
}
