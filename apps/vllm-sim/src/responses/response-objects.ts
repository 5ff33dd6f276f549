/**
 * Responses API objects and stream events as OpenAI's spec (`Response`, `ResponseStreamEvent`) and
 * vLLM's `ResponsesResponse` frame them: only the fields the spec requires plus the usual ones, and
 * `usage` last in a response (a router reads a stream's usage from its last bytes:
 * libs/protocols response-usage.ts).
 */

export interface ResponseFrame {
  readonly id: string;
  readonly createdAt: number;
  readonly model: string;
  readonly instructions: string | null;
  readonly previousResponseId: string | null;
  readonly tools: readonly unknown[];
  /** The request's `tool_choice`, echoed as vLLM's response does (`auto` when not given). */
  readonly toolChoice: unknown;
  readonly store: boolean;
  readonly maxOutputTokens: number | null;
  readonly metadata: unknown;
  readonly user: string | null;
}

export interface ResponseUsageCounts {
  readonly inputTokens: number;
  readonly cachedTokens: number;
  readonly outputTokens: number;
  /** Of the output tokens, those spent reasoning. */
  readonly reasoningTokens: number;
}

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete';

/** The assistant's message item: `output_text` once done, no parts while in progress. */
export function messageItem(id: string, text: string | null): Record<string, unknown> {
  return {
    id,
    type: 'message',
    status: text === null ? 'in_progress' : 'completed',
    role: 'assistant',
    content: text === null ? [] : [outputTextPart(text)],
  };
}

export function outputTextPart(text: string): Record<string, unknown> {
  return { type: 'output_text', text, annotations: [], logprobs: [] };
}

/** A reasoning item (vLLM's with a reasoning parser): empty while in progress, its text as one `reasoning_text` part once done. */
export function reasoningItem(id: string, text: string | null): Record<string, unknown> {
  return text === null
    ? { id, type: 'reasoning', summary: [], status: 'in_progress' }
    : { id, type: 'reasoning', summary: [], content: [reasoningTextPart(text)], status: 'completed' };
}

export function reasoningTextPart(text: string): Record<string, unknown> {
  return { type: 'reasoning_text', text };
}

/** A function call item: `arguments` (a JSON string) empty while in progress, whole once done. */
export function functionCallItem(
  id: string,
  callId: string,
  name: string,
  completedArguments: string | null,
): Record<string, unknown> {
  return {
    id,
    type: 'function_call',
    call_id: callId,
    name,
    arguments: completedArguments ?? '',
    status: completedArguments === null ? 'in_progress' : 'completed',
  };
}

/** A response object; without `usage` until it is done. */
export function responseObject(
  frame: ResponseFrame,
  status: ResponseStatus,
  output: readonly unknown[],
  usage: ResponseUsageCounts | null,
): Record<string, unknown> {
  return {
    id: frame.id,
    object: 'response',
    created_at: frame.createdAt,
    status,
    background: false,
    error: null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: frame.instructions,
    max_output_tokens: frame.maxOutputTokens,
    metadata: frame.metadata ?? {},
    model: frame.model,
    output,
    parallel_tool_calls: true,
    previous_response_id: frame.previousResponseId,
    reasoning: null,
    store: frame.store,
    temperature: 1,
    text: { format: { type: 'text' } },
    tool_choice: frame.toolChoice,
    tools: frame.tools,
    top_p: 1,
    truncation: 'disabled',
    // Absent rather than null (the spec's types are not nullable): `user` when not given, `usage` until done.
    ...(frame.user === null ? {} : { user: frame.user }),
    ...(usage === null
      ? {}
      : {
          usage: {
            input_tokens: usage.inputTokens,
            // `cache_write_tokens` is the spec's (required there; vLLM leaves it out): the prompt tokens computed now, which the prefix cache keeps.
            input_tokens_details: {
              cached_tokens: usage.cachedTokens,
              cache_write_tokens: usage.inputTokens - usage.cachedTokens,
            },
            output_tokens: usage.outputTokens,
            output_tokens_details: { reasoning_tokens: usage.reasoningTokens },
            total_tokens: usage.inputTokens + usage.outputTokens,
          },
        }),
  };
}

/** One SSE event, `event:` line and `data:` with the same `type` (OpenAI sends both). */
export function responseEvent(type: string, sequenceNumber: number, fields: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequenceNumber, ...fields })}\n\n`;
}
