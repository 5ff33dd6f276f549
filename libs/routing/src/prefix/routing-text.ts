/**
 * The routing text: a deterministic rendering of everything in a request body that shapes the
 * engine's KV prefix, so equal rendered prefixes ⇔ (approximately) equal engine prefixes. We do not
 * apply the model's chat template or tokenizer (the router does not know them); instead we keep
 * every input the template reads, in the order it reads them:
 *
 *   model, cache_salt, tools (JSON), then per message: role, name, content (text parts' text,
 *   image_url parts' url, other parts as JSON), tool_calls (name, arguments), tool_call_id.
 *   Completions: model, cache_salt, then each prompt (text, or token ids as decimal text).
 *
 * Invariant (prefix stability): appending messages only appends text. Turn k's rendering is a
 * byte prefix of turn k+1's, so turn k's block hashes are a prefix of turn k+1's. Hence nothing
 * is ever written after the last message (no trailer, no message count).
 *
 * Layout: every field is `<tag> US <value> RS`; every message starts with GS. Tags are single
 * ASCII letters. Values never contain the separators: the five control characters ESC, FS, GS,
 * RS, US (U+001B–U+001F) are escaped as ESC + (char + 0x40), which is injective, so no content can
 * imitate a field or message boundary.
 */

import type { ChatCompletionRequest, ChatMessage, CompletionRequest, ContentPart } from '@kvroute/protocols';

/** Starts every message. */
const MESSAGE_START = '\u001d';
/** Ends every field. */
const FIELD_END = '\u001e';
/** Separates a field's tag from its value. */
const TAG_END = '\u001f';
const SEPARATOR_CHARS = /[\u001b-\u001f]/;
const SEPARATOR_CHARS_GLOBAL = /[\u001b-\u001f]/g;

/** Field tags: one letter each, never reused with another meaning (renaming one re-keys every cache). */
const Tag = {
  model: 'M',
  cacheSalt: 'S',
  tools: 'T',
  role: 'r',
  name: 'n',
  text: 'c',
  imageUrl: 'i',
  otherPart: 'x',
  toolCallName: 'f',
  toolCallArguments: 'a',
  toolCallId: 'd',
  promptText: 'p',
  promptTokens: 'k',
} as const;

export interface RenderedRoutingText {
  readonly text: string;
  /**
   * UTF-16 index in `text` where the last message starts: everything before it is what a previous
   * turn of the same conversation already sent. 0 for completions and single-message chats.
   */
  readonly contextEndOffset: number;
}

function escapeValue(value: string): string {
  // Fast path: real content almost never holds these control characters.
  if (!SEPARATOR_CHARS.test(value)) return value;
  return value.replace(SEPARATOR_CHARS_GLOBAL, (char) => `\u001b${String.fromCharCode(char.charCodeAt(0) + 0x40)}`);
}

function field(tag: string, value: string): string {
  return `${tag}${TAG_END}${escapeValue(value)}${FIELD_END}`;
}

function isChatRequest(body: ChatCompletionRequest | CompletionRequest): body is ChatCompletionRequest {
  return Array.isArray((body as Partial<ChatCompletionRequest>).messages);
}

function renderContentPart(part: ContentPart): string {
  if (part.type === 'text') return field(Tag.text, part.text ?? '');
  if (part.type === 'image_url') return field(Tag.imageUrl, part.image_url?.url ?? '');
  // Audio, files, …: whatever the part holds shapes the prefix; JSON keeps all of it.
  return field(Tag.otherPart, JSON.stringify(part));
}

function renderMessage(message: ChatMessage): string {
  let out = MESSAGE_START + field(Tag.role, message.role);
  if (message.name !== undefined) out += field(Tag.name, message.name);
  const content = message.content;
  if (typeof content === 'string') {
    out += field(Tag.text, content);
  } else if (Array.isArray(content)) {
    for (const part of content) out += renderContentPart(part);
  }
  if (message.tool_calls !== undefined) {
    for (const call of message.tool_calls) {
      out += field(Tag.toolCallName, call.function.name);
      out += field(Tag.toolCallArguments, call.function.arguments ?? '');
    }
  }
  if (message.tool_call_id !== undefined) out += field(Tag.toolCallId, message.tool_call_id);
  return out;
}

function renderHeader(body: ChatCompletionRequest | CompletionRequest): string {
  let out = field(Tag.model, body.model);
  if (body.cache_salt !== undefined) out += field(Tag.cacheSalt, body.cache_salt);
  return out;
}

function renderPrompt(prompt: CompletionRequest['prompt']): string {
  if (typeof prompt === 'string') return field(Tag.promptText, prompt);
  let out = '';
  for (const item of prompt) {
    if (typeof item === 'string') out += field(Tag.promptText, item);
    else if (typeof item === 'number') return field(Tag.promptTokens, prompt.join(','));
    else out += field(Tag.promptTokens, item.join(','));
  }
  return out;
}

/** Renders a validated chat or completion request body; see the module comment for the format. */
export function renderRoutingText(body: ChatCompletionRequest | CompletionRequest): RenderedRoutingText {
  let text = renderHeader(body);
  if (!isChatRequest(body)) {
    return { text: text + renderPrompt(body.prompt), contextEndOffset: 0 };
  }
  if (body.tools !== undefined) text += field(Tag.tools, JSON.stringify(body.tools));
  const lastIndex = body.messages.length - 1;
  let contextEndOffset = 0;
  for (const [index, message] of body.messages.entries()) {
    if (index === lastIndex && index > 0) contextEndOffset = text.length;
    text += renderMessage(message);
  }
  return { text, contextEndOffset };
}
