/**
 * A chat request's messages and tools as vLLM hands them to the chat template (the "conversation"), read
 * from vLLM's source (README.md, "What we read in vLLM"):
 *
 * - content: null → no parts; a string → one text part. Text parts are `text`, `input_text`, `output_text`
 *   (their `text`), `refusal` (its `refusal`) and `thinking` (its `thinking`); a text or refusal part without
 *   its value is skipped. In the 'string' format the texts are joined with "\n"; in the 'openai' format the
 *   content stays a list of `{type: 'text', text}`.
 * - Parts that carry media (images, audio, video, embeddings, tool references) become model-specific
 *   placeholders in vLLM: this library does not know them and refuses the request (ChatTemplateError,
 *   'invalid-request'), so the router routes it in byte mode.
 * - system: a text part starting with Claude Code's `x-anthropic-billing-header` loses that line.
 * - assistant: `tool_calls` (when not null) and `reasoning` (also as `reasoning_content`); tool: `tool_call_id`,
 *   and list content of text parts only joined to one string; any role: `name`, `task` when strings;
 *   developer: `tools` (or null).
 * - After all messages: an assistant's empty `tool_calls` is dropped; each call's `function.arguments` becomes
 *   an object (a JSON string parsed; empty, invalid or non-object JSON → {}), as templates expect.
 * - tools: each as pydantic's `model_dump()` of vLLM's ChatCompletionToolsParam: `{type, function: {name,
 *   description, parameters, …extra}, …extra}` with description and parameters null when absent.
 */

import { ChatTemplateError } from './errors';
import type { ContentFormat } from './content-format';

/** A content part as a request carries it (OpenAI chat, or a Responses/Messages chat view). */
export interface ContentPartInput {
  readonly type?: string;
  readonly text?: string | null;
  readonly [field: string]: unknown;
}

/** A chat message as a request carries it; structurally the ChatMessage of @kvroute/protocols. */
export interface ChatMessageInput {
  readonly role: string;
  readonly content?: string | readonly (ContentPartInput | string)[] | null;
  readonly name?: string;
  readonly tool_calls?: readonly unknown[] | null;
  readonly tool_call_id?: string;
  readonly [field: string]: unknown;
}

/** A tool as a chat request carries it. */
export interface ChatToolInput {
  readonly type?: string;
  readonly function?: { readonly name: string; readonly [field: string]: unknown };
  readonly [field: string]: unknown;
}

export type ConversationMessage = Record<string, unknown> & { role: string };

const TEXT_FIELD: Readonly<Record<string, string>> = {
  text: 'text',
  input_text: 'text',
  output_text: 'text',
  refusal: 'refusal',
  thinking: 'thinking',
};
const BILLING_HEADER = 'x-anthropic-billing-header';

export function toConversation(messages: readonly ChatMessageInput[], format: ContentFormat): ConversationMessage[] {
  const conversation = messages.map((message) => toConversationMessage(message, format));
  for (const message of conversation) normalizeToolCalls(message);
  return conversation;
}

function toConversationMessage(message: ChatMessageInput, format: ContentFormat): ConversationMessage {
  const role = message.role;
  let parts = partsOf(message.content);
  if (role === 'system') parts = withoutBillingHeader(parts);
  const texts = parts.map(partText).filter((text): text is string => text !== null);
  const result: ConversationMessage = {
    role,
    content: format === 'openai' ? texts.map((text) => ({ type: 'text', text })) : texts.join('\n'),
  };
  if (role === 'assistant') {
    if (Array.isArray(message.tool_calls)) result['tool_calls'] = structuredClone(message.tool_calls);
    const reasoning = message['reasoning'];
    if (reasoning !== undefined && reasoning !== null) {
      result['reasoning'] = reasoning;
      result['reasoning_content'] = reasoning;
    }
  } else if (role === 'tool') {
    if ('tool_call_id' in message) result['tool_call_id'] = message.tool_call_id;
    if (Array.isArray(result['content'])) result['content'] = texts.join('\n');
  }
  if (typeof message.name === 'string') result['name'] = message.name;
  if (typeof message['task'] === 'string') result['task'] = message['task'];
  if (role === 'developer') result['tools'] = message['tools'] ?? null;
  return result;
}

function partsOf(content: ChatMessageInput['content']): (ContentPartInput | string)[] {
  if (content === undefined || content === null) return [];
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return [...content];
}

/** A part's text, null for a text/refusal part without one; media parts are refused (see the header). */
function partText(part: ContentPartInput | string): string | null {
  if (typeof part === 'string') return part;
  const type = part.type;
  const field = type === undefined ? undefined : TEXT_FIELD[type];
  if (field === undefined)
    throw new ChatTemplateError(
      'invalid-request',
      `Content part of type ${JSON.stringify(type)} is not rendered here.`,
    );
  const value = part[field];
  if (value === undefined || value === null) {
    if (type === 'text' || type === 'refusal') return null;
    throw new ChatTemplateError('invalid-request', `Content part of type ${type} has no ${field}.`);
  }
  if (typeof value !== 'string')
    throw new ChatTemplateError('invalid-request', `Content part of type ${type} has a non-string ${field}.`);
  return value;
}

function withoutBillingHeader(parts: (ContentPartInput | string)[]): (ContentPartInput | string)[] {
  const kept: (ContentPartInput | string)[] = [];
  for (const part of parts) {
    const text = typeof part === 'string' ? part : part.type === 'text' ? part.text : undefined;
    if (typeof text !== 'string' || !text.startsWith(BILLING_HEADER)) {
      kept.push(part);
      continue;
    }
    const newline = text.indexOf('\n');
    const rest = newline < 0 ? '' : text.slice(newline + 1);
    if (rest !== '') kept.push(typeof part === 'string' ? rest : { ...part, text: rest });
  }
  return kept;
}

function normalizeToolCalls(message: ConversationMessage): void {
  if (message.role !== 'assistant' || !('tool_calls' in message)) return;
  const calls = message['tool_calls'];
  if (!Array.isArray(calls)) return;
  if (calls.length === 0) {
    delete message['tool_calls'];
    return;
  }
  for (const call of calls) {
    if (typeof call !== 'object' || call === null || Array.isArray(call))
      throw new ChatTemplateError('invalid-request', 'assistant tool_calls entries must be objects.');
    const { type = 'function', function: fn } = call as { type?: unknown; function?: unknown };
    if (type !== 'function' || typeof fn !== 'object' || fn === null || Array.isArray(fn))
      throw new ChatTemplateError(
        'invalid-request',
        "chat completions only support assistant tool_calls of type 'function'.",
      );
    const target = fn as Record<string, unknown>;
    target['arguments'] = argumentsObject(target['arguments']);
  }
}

/** vLLM's rule: an object stays; a JSON string is parsed; anything else (or a non-object result) is {}. */
function argumentsObject(value: unknown): unknown {
  if (!value) return {};
  if (isPlainObject(value)) return value;
  let parsed: unknown = value;
  if (typeof value === 'string') {
    try {
      parsed = JSON.parse(value);
    } catch {
      return {};
    }
  }
  return isPlainObject(parsed) ? parsed : {};
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Tools as vLLM's `tool.model_dump()` gives them to the template (see the header), or null for none. */
export function toTemplateTools(tools: readonly ChatToolInput[] | null | undefined): Record<string, unknown>[] | null {
  if (tools === undefined || tools === null) return null;
  return tools.map((tool) => {
    const { type = 'function', function: fn, ...toolExtra } = tool;
    if (type !== 'function' || !isPlainObject(fn) || typeof fn['name'] !== 'string')
      throw new ChatTemplateError(
        'invalid-request',
        'Each tool must be {"type": "function", "function": {"name": …}}.',
      );
    const { name, description = null, parameters = null, defer_loading = null, ...functionExtra } = fn;
    const dumped: Record<string, unknown> = { name, description, parameters };
    if (defer_loading !== null) dumped['defer_loading'] = defer_loading;
    return { type, function: { ...dumped, ...functionExtra }, ...structuredClone(toolExtra) };
  });
}
