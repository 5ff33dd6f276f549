import type { ChatCompletionRequest, ChatMessage, ContentPart, ResponseInputItem, ResponsesRequest } from '@kvroute/protocols';

/**
 * The routing body of a Responses request (`POST /v1/responses`): the chat request an engine renders
 * it as, so it gets a routing text (routing-text.ts) the way chat does. vLLM builds a Responses prompt
 * as chat messages through the model's chat template (`construct_input_messages`): `instructions` as
 * the system message, then the input items in order; `tools` go to the template as for chat. So:
 *
 *   instructions          → { role: system }
 *   input (a string)      → { role: user }
 *   message items         → { role, content } (`input_text`/`output_text` parts as text parts,
 *                           `input_image` as an image part, other parts as they are)
 *   function_call         → { role: assistant, tool_calls: [{ name, arguments }] }
 *   function_call_output  → { role: tool, content: output, tool_call_id: call_id }
 *   other items           → { role: user } with the item as one part (rendered as its JSON)
 *
 * Prefix stability holds as for chat: appending input items only appends messages. A follow-up with
 * `previous_response_id` carries only its new input; its earlier turns are on the backend that stored
 * them, which the router's response-owner map finds (prefix routing is the fallback).
 */
export function responsesRoutingBody(body: ResponsesRequest): ChatCompletionRequest {
  const messages: ChatMessage[] = [];
  if (typeof body.instructions === 'string' && body.instructions !== '') messages.push({ role: 'system', content: body.instructions });
  if (typeof body.input === 'string') messages.push({ role: 'user', content: body.input });
  else for (const item of body.input) messages.push(messageOf(item));
  const chat: ChatCompletionRequest = { model: body.model, messages };
  if (body.tools !== undefined) chat.tools = body.tools as ChatCompletionRequest['tools'];
  if (typeof body.cache_salt === 'string') chat.cache_salt = body.cache_salt;
  if (body.user !== undefined) chat.user = body.user;
  if (typeof body.max_output_tokens === 'number') chat.max_completion_tokens = body.max_output_tokens;
  const cacheKey = (body as { prompt_cache_key?: unknown }).prompt_cache_key;
  if (typeof cacheKey === 'string') (chat as Record<string, unknown>).prompt_cache_key = cacheKey;
  return chat;
}

const CHAT_ROLES = new Set(['system', 'developer', 'user', 'assistant']);

function messageOf(item: ResponseInputItem): ChatMessage {
  const type = item.type ?? 'message';
  if (type === 'message') {
    const role = (CHAT_ROLES.has(item.role ?? '') ? item.role : 'user') as ChatMessage['role'];
    const content = typeof item.content === 'string' ? item.content : (item.content ?? []).map(partOf);
    return { role, content };
  }
  if (type === 'function_call') {
    return { role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { name: item.name ?? '', arguments: item.arguments ?? '' } }] };
  }
  if (type === 'function_call_output') {
    const output = typeof item.output === 'string' ? item.output : JSON.stringify(item.output ?? null);
    return { role: 'tool', content: output, ...(item.call_id === undefined ? {} : { tool_call_id: item.call_id }) };
  }
  return { role: 'user', content: [{ ...item, type } as ContentPart] };
}

function partOf(part: { type: string; text?: string | undefined; image_url?: string | null | undefined }): ContentPart {
  if ((part.type === 'input_text' || part.type === 'output_text') && typeof part.text === 'string') return { type: 'text', text: part.text };
  if (part.type === 'input_image' && typeof part.image_url === 'string') return { type: 'image_url', image_url: { url: part.image_url } };
  return part as ContentPart;
}
