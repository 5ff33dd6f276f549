import { z } from 'zod';
import { CacheSalt, type ChatCompletionRequest, type ChatMessage, type ContentPart } from './chat-completions';

/**
 * OpenAI Responses API request bodies (`POST /v1/responses`), as OpenAI's spec (`CreateResponse`) and
 * vLLM's `ResponsesRequest` accept them. Only what routing or simulation reads is typed; everything
 * else passes through (loose objects): a proxy forwards the body as it came.
 *
 * `input` is a string (one user message) or a list of items: messages (`{role, content}`, `type`
 * "message" optional; content a string or parts such as `input_text`/`output_text`/`input_image`),
 * `function_call` (`call_id`, `name`, `arguments`) and `function_call_output` (`call_id`, `output`)
 * items, and other item types (reasoning, …) kept as they are.
 */

/** Longest response id accepted (`previous_response_id`, `GET /v1/responses/{id}`): vLLM's are `resp_` + 32 hex; OpenAI's ~50 characters. */
export const MAX_RESPONSE_ID_CHARS = 128;
/** What a response id may look like: no separators, quotes or path characters (it is used in paths and Redis keys). */
export const RESPONSE_ID_PATTERN = /^[A-Za-z0-9_.:-]{1,128}$/;

export const ResponseId = z
  .string()
  .regex(
    RESPONSE_ID_PATTERN,
    `A response id is 1 to ${MAX_RESPONSE_ID_CHARS} characters of letters, digits, '_', '.', ':' or '-'.`,
  );

export const ResponseInputPart = z.looseObject({
  type: z.string(),
  text: z.string().optional(),
  image_url: z.string().nullish(),
});
export type ResponseInputPart = z.infer<typeof ResponseInputPart>;

/** One entry of `input`: every item is an object; what each type needs is read where it is used. */
export const ResponseInputItem = z.looseObject({
  type: z.string().optional(),
  role: z.string().optional(),
  content: z.union([z.string(), z.array(ResponseInputPart)]).optional(),
  call_id: z.string().optional(),
  name: z.string().optional(),
  arguments: z.string().optional(),
  output: z.unknown().optional(),
});
export type ResponseInputItem = z.infer<typeof ResponseInputItem>;

export const ResponsesRequest = z.looseObject({
  // Optional in OpenAI's spec and vLLM's; the router needs it for the pool, so its parse stage fills in
  // the only served model before validating a body without one (apps/router request-model.ts).
  model: z.string().min(1),
  input: z.union([z.string(), z.array(ResponseInputItem)]),
  instructions: z.string().nullish(),
  previous_response_id: ResponseId.nullish(),
  tools: z.array(z.looseObject({ type: z.string() })).optional(),
  stream: z.boolean().nullish(),
  store: z.boolean().nullish(),
  max_output_tokens: z.number().int().positive().nullish(),
  user: z.string().optional(),
  // vLLM's extension, with chat's rule.
  cache_salt: CacheSalt,
});
export type ResponsesRequest = z.infer<typeof ResponsesRequest>;

/**
 * A Responses request's `tools` as the chat tools its chat template renders, as vLLM converts them
 * (`construct_tool_dicts` → `convert_tool_responses_to_completions_format`): a flat function tool
 * `{type: "function", name, description?, parameters?, …}` becomes
 * `{type: "function", function: {name, description?, parameters?, …}}` (every field but `type` moves
 * in); other tool types (hosted tools: web search, file search, MCP…) are not rendered. Undefined when
 * no function tool is left (the template then renders no tools block).
 */
export function responsesChatTools(tools: ResponsesRequest['tools']): ChatCompletionRequest['tools'] {
  const functions: NonNullable<ChatCompletionRequest['tools']> = [];
  for (const tool of tools ?? []) {
    if (tool.type !== 'function' || typeof tool['name'] !== 'string') continue;
    const { type: _type, ...definition } = tool;
    functions.push({ type: 'function', function: definition as { name: string } });
  }
  return functions.length === 0 ? undefined : functions;
}

/**
 * The chat messages a Responses request's `instructions` and `input` stand for, as vLLM builds them
 * (`construct_input_messages`) before its chat template:
 *
 *   instructions          → { role: system }
 *   input (a string)      → { role: user }
 *   message items         → { role, content } (`input_text`/`output_text` parts as text parts,
 *                           `input_image` as an image part, other parts as they are; a role chat does
 *                           not know as `user`)
 *   function_call         → { role: assistant, tool_calls: [{ id: call_id, name, arguments }] }
 *   function_call_output  → { role: tool, content: output, tool_call_id: call_id }
 *   reasoning             → nothing: chat templates leave an earlier turn's reasoning out of the
 *                           prompt, so a previous answer's reasoning item changes no prompt token
 *   other items           → { role: user } with the item as one part
 *
 * Appending input items only appends messages (the routing text's prefix stability). A response's
 * `output` items map the same way, so the conversation a follow-up continues (its previous response's
 * input and output) renders as the prefix the previous turn computed.
 */
export function responsesChatMessages(
  instructions: string | null | undefined,
  input: ResponsesRequest['input'],
): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (typeof instructions === 'string' && instructions !== '') messages.push({ role: 'system', content: instructions });
  if (typeof input === 'string') messages.push({ role: 'user', content: input });
  else {
    for (const item of input) {
      const message = inputItemMessage(item);
      if (message !== null) messages.push(message);
    }
  }
  return messages;
}

const CHAT_ROLES = new Set(['system', 'developer', 'user', 'assistant']);

function inputItemMessage(item: ResponseInputItem): ChatMessage | null {
  const type = item.type ?? 'message';
  if (type === 'message') {
    const role = (CHAT_ROLES.has(item.role ?? '') ? item.role : 'user') as ChatMessage['role'];
    const content = typeof item.content === 'string' ? item.content : (item.content ?? []).map(inputPart);
    return { role, content };
  }
  if (type === 'function_call') {
    const id = item.call_id === undefined ? {} : { id: item.call_id };
    return {
      role: 'assistant',
      content: null,
      tool_calls: [{ ...id, type: 'function', function: { name: item.name ?? '', arguments: item.arguments ?? '' } }],
    };
  }
  if (type === 'reasoning') return null;
  if (type === 'function_call_output') {
    const output = typeof item.output === 'string' ? item.output : JSON.stringify(item.output ?? null);
    return { role: 'tool', content: output, ...(item.call_id === undefined ? {} : { tool_call_id: item.call_id }) };
  }
  return { role: 'user', content: [{ ...item, type } as ContentPart] };
}

function inputPart(part: ResponseInputPart): ContentPart {
  if ((part.type === 'input_text' || part.type === 'output_text') && typeof part.text === 'string')
    return { type: 'text', text: part.text };
  if (part.type === 'input_image' && typeof part.image_url === 'string')
    return { type: 'image_url', image_url: { url: part.image_url } };
  return part as ContentPart;
}
