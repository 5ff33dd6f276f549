import type { ChatMessage, ContentPart } from '../openai/chat-completions';
import type { MessagesContentBlock, MessagesRequest } from './messages';

/** A function tool as chat requests carry it. */
export interface ChatFunctionTool {
  readonly type: string;
  readonly function: {
    readonly name: string;
    readonly description?: unknown;
    readonly parameters?: unknown;
  };
}

/**
 * An Anthropic Messages request as the chat messages vLLM turns it into before applying the chat
 * template (vllm/entrypoints/anthropic/serving.py, `_convert_anthropic_to_openai_request`), so the sim's
 * prompt tokens, and so its prefix cache, follow what vLLM would compute, and so that a router in token
 * mode tokenizes a Messages request as the engine will:
 *
 * - `system` (a string, or its text blocks joined) becomes the first, `system` message;
 * - a string content stays a string; blocks: `text` → a text part, `image` → an image_url part,
 *   `tool_use` → an assistant tool call (arguments: the JSON of `input`), a user's `tool_result` → a
 *   `tool` message (its text), `thinking` → dropped (vLLM passes it as `reasoning`, which templates
 *   leave out of earlier turns).
 * - `tools` become function tools (name, description, parameters = input_schema).
 */
export function messagesAsChat(body: MessagesRequest): {
  messages: ChatMessage[];
  tools: ChatFunctionTool[] | undefined;
} {
  const messages: ChatMessage[] = [];
  const system =
    typeof body.system === 'string'
      ? body.system
      : (body.system ?? []).map((block) => (block.type === 'text' ? (block.text ?? '') : '')).join('');
  if (system !== '') messages.push({ role: 'system', content: system });
  for (const message of body.messages) {
    if (typeof message.content === 'string') {
      messages.push({ role: message.role, content: message.content });
      continue;
    }
    const parts: ContentPart[] = [];
    const toolCalls: NonNullable<ChatMessage['tool_calls']> = [];
    for (const block of message.content) {
      if (block.type === 'text' && block.text) parts.push({ type: 'text', text: block.text });
      else if (block.type === 'image') parts.push({ type: 'image_url', image_url: { url: imageUrlOf(block) } });
      else if (block.type === 'tool_use')
        toolCalls.push({
          id: stringField(block, 'id'),
          type: 'function',
          function: { name: stringField(block, 'name'), arguments: JSON.stringify(block.input ?? {}) },
        });
      else if (block.type === 'tool_result' && message.role === 'user')
        messages.push({
          role: 'tool',
          tool_call_id: stringField(block, 'tool_use_id'),
          content: toolResultText(block),
        });
    }
    if (parts.length > 0 || toolCalls.length > 0) {
      messages.push({ role: message.role, content: parts, ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}) });
    }
  }
  const tools = body.tools?.map((tool) => ({
    type: 'function',
    function: { name: tool.name, description: tool.description, parameters: tool.input_schema },
  }));
  return { messages, tools };
}

function stringField(block: MessagesContentBlock, key: string): string {
  const value = block[key];
  return typeof value === 'string' ? value : '';
}

function toolResultText(block: MessagesContentBlock): string {
  const content = block.content;
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((item: { type?: unknown; text?: unknown }) =>
      item?.type === 'text' && typeof item.text === 'string' ? item.text : '',
    )
    .join('\n');
}

function imageUrlOf(block: MessagesContentBlock): string {
  const source = (block.source ?? {}) as { type?: unknown; url?: unknown; media_type?: unknown; data?: unknown };
  // Strings only: a hostile object's toString must not run (or throw) here.
  const text = (value: unknown, otherwise: string): string => (typeof value === 'string' ? value : otherwise);
  if (source.type === 'url') return text(source.url, '');
  return `data:${text(source.media_type, 'image/jpeg')};base64,${text(source.data, '')}`;
}
