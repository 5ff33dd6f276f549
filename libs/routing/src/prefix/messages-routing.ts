import type {
  ChatCompletionRequest,
  ChatMessage,
  ContentPart,
  MessagesContentBlock,
  MessagesRequest,
} from '@kvroute/protocols';
import type { RoutingRequest } from '../types';
import { buildRoutingRequest, type RoutingRequestOptions } from './routing-request';

/**
 * The routing request of an Anthropic Messages body: its routing text is the chat routing text
 * (routing-text.ts) of the same conversation seen as a chat, since engines serve `/v1/messages` by
 * converting it to a chat request and applying the same template (vLLM: anthropic/serving.py):
 *
 *   model, cache_salt, tools (the Messages `tools` array as JSON), then
 *   a `system` message (the `system` string, or its blocks), then every message with its role as sent
 *   and its content: a string, or blocks (`text` blocks' text; `tool_use`, `tool_result`, `thinking`,
 *   `image`, … as JSON, so whatever a block holds shapes the prefix).
 *
 * The chat invariant holds: appending messages only appends text, so turn k's blocks are a prefix of
 * turn k+1's and a multi-turn conversation keeps its backend. The view is built without copying any
 * text (blocks are passed by reference) and without recursion: its cost is one small object per message.
 */
export function buildMessagesRoutingRequest(body: MessagesRequest, options: RoutingRequestOptions): RoutingRequest {
  const userId = body.metadata?.user_id;
  return buildRoutingRequest(messagesAsChat(body), {
    ...options,
    // Anthropic's end-user id plays the part of chat's `user`; the header still comes first.
    sessionKey: options.sessionKey ?? (typeof userId === 'string' && userId !== '' ? userId : null),
  });
}

/** The chat view of a Messages body, for the routing text only (never forwarded). */
export function messagesAsChat(body: MessagesRequest): ChatCompletionRequest {
  const messages: ChatMessage[] = [];
  const system = body.system;
  if (typeof system === 'string' || (Array.isArray(system) && system.length > 0)) {
    messages.push({ role: 'system', content: typeof system === 'string' ? system : system.map(asPart) });
  }
  for (const message of body.messages) {
    messages.push({
      role: message.role,
      content: typeof message.content === 'string' ? message.content : message.content.map(asPart),
    });
  }
  return {
    model: body.model,
    messages,
    max_tokens: body.max_tokens,
    ...(typeof body.cache_salt === 'string' ? { cache_salt: body.cache_salt } : {}),
    // Rendered as JSON by the chat renderer, whatever each tool holds (name, description, input_schema).
    ...(Array.isArray(body.tools) && body.tools.length > 0
      ? { tools: body.tools as unknown as ChatCompletionRequest['tools'] }
      : {}),
  };
}

/** A block as a chat content part (the same object): the chat renderer writes a `text` part's text and any other part as its JSON. */
function asPart(block: MessagesContentBlock): ContentPart {
  return block as ContentPart;
}
