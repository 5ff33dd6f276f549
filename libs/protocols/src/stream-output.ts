/**
 * Whether one server-sent event of a generation stream carries generated output: the moment the engine
 * has finished the prompt's prefill and produced something, whatever it produced. A router reads it as
 * the request's first token (its TTFT, the end of its prefill backlog, the backend now holding its
 * prefix), so a turn that starts with a tool call or with reasoning counts as much as one that starts
 * with text. Every stream format kvroute relays, by event:
 *
 * - OpenAI chat completions (`chat.completion.chunk`, no `event:` name), any `choices[i].delta` with a
 *   non-empty `content`, `reasoning_content` (vLLM's reasoning parsers), `reasoning` (newer vLLM,
 *   OpenRouter style), `refusal`, or a `tool_calls` entry with an `id`, a `function.name` or
 *   `function.arguments` (streamed in pieces; the first piece carries id and name), or the legacy
 *   `function_call`. The opening chunk with only `role` and empty `content` is no output.
 * - OpenAI completions (`text_completion`): a non-empty `choices[i].text`.
 * - OpenAI Responses (`event: response.*`, the same name in `data.type`): every `response.….delta`
 *   (`output_text`, `function_call_arguments`, `refusal`, `reasoning_text`, `reasoning_summary_text`,
 *   `mcp_call_arguments`, `custom_tool_call_input`, audio…: each carries a piece of what the model
 *   generated); `response.output_item.added` of a tool call (`function_call`, `mcp_call`,
 *   `custom_tool_call`…: it names the tool, so the model has produced it; a `message` or `reasoning`
 *   item is added empty, its text follows in deltas); and `response.output_item.done` of any item (a
 *   server that sends a whole item without deltas).
 * - Anthropic Messages: `content_block_delta` whose delta is a non-empty `text_delta`, `input_json_delta`
 *   or `thinking_delta`, and `content_block_start` of a `tool_use` block (it names the tool).
 *
 * Anything else (`[DONE]`, pings, `message_start`, `response.created`, usage-only chunks, errors, data
 * that is not JSON) is not output. Pure: no I/O; the caller does the SSE framing.
 */

/** One SSE event as a parser hands it over: its `event:` name (absent: `message`) and its joined `data:` lines. */
export interface StreamEvent {
  readonly event?: string | undefined;
  readonly data: string;
}

/** Responses items added empty, before what fills them (their deltas are the output). */
const RESPONSES_ITEMS_ADDED_EMPTY = new Set(['message', 'reasoning']);

export function eventCarriesOutput(event: StreamEvent): boolean {
  const name = event.event;
  if (name !== undefined && name !== 'message') return namedEventCarriesOutput(name, event.data);
  if (event.data === '[DONE]' || event.data === '') return false;
  const quick = chunkCarriesOutputQuickly(event.data);
  if (quick !== null) return quick;
  const payload = parseObject(event.data);
  if (payload === null) return false;
  // Responses and Anthropic events also say what they are in `type` (some servers send no `event:` line).
  if (typeof payload.type === 'string' && payload.type !== '') return typedPayloadCarriesOutput(payload.type, payload);
  return choicesCarryOutput(payload.choices);
}

/**
 * A chat or completions chunk (the streams a router sees most), read without `JSON.parse`, which cost
 * more than the rest of the relay's stream work: null when the data is not such a chunk or needs the
 * parse. A quote inside a JSON string is escaped, so a quoted-key pattern matches member names only:
 * - a non-empty string in `content`, `text`, `reasoning_content`, `reasoning` or `refusal` is output;
 * - with none of those and no `tool_calls` or `function_call` member, nothing is (the opening chunk with
 *   `role` and empty `content`, a usage-only chunk);
 * - a tool call is left to the parse (only some of its pieces carry output).
 */
function chunkCarriesOutputQuickly(data: string): boolean | null {
  if (!data.includes('"chat.completion.chunk"') && !data.includes('"text_completion"')) return null;
  if (TEXT_OUTPUT.test(data)) return true;
  return TOOL_CALL_MEMBER.test(data) ? null : false;
}

/** A member `content`, `text`, `reasoning_content`, `reasoning` or `refusal` whose value is a non-empty string. */
const TEXT_OUTPUT = /"(?:content|text|reasoning_content|reasoning|refusal)"[ \t\n\r]*:[ \t\n\r]*"(?!")/;
/** A member `tool_calls` or `function_call`. */
const TOOL_CALL_MEMBER = /"(?:tool_calls|function_call)"[ \t\n\r]*:/;

function namedEventCarriesOutput(name: string, data: string): boolean {
  if (isResponsesOutputDelta(name)) return true;
  if (
    name !== 'content_block_delta' &&
    name !== 'content_block_start' &&
    name !== 'response.output_item.added' &&
    name !== 'response.output_item.done'
  )
    return false;
  const payload = parseObject(data);
  return payload !== null && typedPayloadCarriesOutput(name, payload);
}

function isResponsesOutputDelta(type: string): boolean {
  return type.startsWith('response.') && type.endsWith('.delta');
}

function typedPayloadCarriesOutput(type: string, payload: Record<string, unknown>): boolean {
  if (isResponsesOutputDelta(type)) return true;
  if (type === 'response.output_item.done') return asObject(payload.item) !== null;
  if (type === 'response.output_item.added') {
    const item = asObject(payload.item);
    return item !== null && typeof item.type === 'string' && !RESPONSES_ITEMS_ADDED_EMPTY.has(item.type);
  }
  if (type === 'content_block_delta') {
    const delta = asObject(payload.delta);
    if (delta === null) return false;
    return nonEmpty(delta.text) || nonEmpty(delta.partial_json) || nonEmpty(delta.thinking);
  }
  if (type === 'content_block_start') {
    const block = asObject(payload.content_block);
    return block !== null && (block.type === 'tool_use' || nonEmpty(block.text) || nonEmpty(block.thinking));
  }
  return false;
}

function choicesCarryOutput(choices: unknown): boolean {
  if (!Array.isArray(choices)) return false;
  for (const choice of choices) {
    const entry = asObject(choice);
    if (entry === null) continue;
    if (nonEmpty(entry.text)) return true;
    const delta = asObject(entry.delta);
    if (delta === null) continue;
    if (
      nonEmpty(delta.content) ||
      nonEmpty(delta.reasoning_content) ||
      nonEmpty(delta.reasoning) ||
      nonEmpty(delta.refusal)
    )
      return true;
    if (Array.isArray(delta.tool_calls) && delta.tool_calls.some(toolCallCarriesOutput)) return true;
    if (toolCallFunctionCarriesOutput(delta.function_call)) return true;
  }
  return false;
}

function toolCallCarriesOutput(call: unknown): boolean {
  const entry = asObject(call);
  return entry !== null && (nonEmpty(entry.id) || toolCallFunctionCarriesOutput(entry.function));
}

function toolCallFunctionCarriesOutput(fn: unknown): boolean {
  const entry = asObject(fn);
  return entry !== null && (nonEmpty(entry.name) || nonEmpty(entry.arguments));
}

function parseObject(data: string): Record<string, unknown> | null {
  // Only objects can carry output: skip the parse for anything else ([DONE], keep-alive text).
  if (data.charCodeAt(0) !== 0x7b /* { */ && data.trimStart()[0] !== '{') return null;
  try {
    return asObject(JSON.parse(data));
  } catch {
    return null;
  }
}

function asObject(value: unknown): Record<string, unknown> | null {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : null;
}

function nonEmpty(value: unknown): boolean {
  return typeof value === 'string' && value !== '';
}
