/**
 * Sends one workload request to a router (or any OpenAI-compatible server) as a streaming request and
 * times it: TTFT is the first event carrying generated output of any kind (text, reasoning, a tool call's
 * id, name or arguments: `eventCarriesOutput`, the router's own definition), not the first byte
 * (role-only chunks and keep-alives do not count); end-to-end is the last byte; inter-token latencies
 * are the gaps between output events. `usage` (asked for with `stream_options.include_usage`) gives
 * prompt and cached tokens. The reply is read back from the events: the text, and the tool calls
 * assembled from their streamed pieces (id and name first, then argument pieces, by `index`).
 */
import { eventCarriesOutput, SSE_DONE, SseParser } from '@kvroute/protocols';
import { Agent, request } from 'undici';
import type { RequestRecord } from '../report';
import type { AgentFields, WorkloadMessage, WorkloadToolCall } from '../workloads';

/** One request as the runner keeps it: the report's record plus where and when it ran. */
export interface RunRequestRecord extends RequestRecord {
  readonly id: string;
  /** Router it was sent to (index into the run's router URLs). */
  readonly router: number;
  /** Offset from the run's start when it was sent, ms. */
  readonly sentAtMs: number;
  readonly completionTokens?: number;
  /** The first choice's `finish_reason` (`stop`, `length`, `tool_calls`). */
  readonly finishReason?: string;
  /** The error body's message or the transport error, for failed requests; for an agent's tool round, a stream without a call. */
  readonly error?: string;
}

export interface SendInput {
  readonly baseUrl: string;
  readonly model: string;
  readonly body:
    | { readonly kind: 'chat'; readonly messages: readonly WorkloadMessage[]; readonly agent?: AgentFields | undefined }
    | { readonly kind: 'completion'; readonly prompt: string };
  readonly maxTokens: number;
  /** Extra body fields (e.g. `ignore_eos` for real vLLM). */
  readonly extraBody?: Readonly<Record<string, unknown>>;
  readonly signal?: AbortSignal;
}

export interface SendResult {
  readonly record: Omit<RunRequestRecord, 'id' | 'router' | 'sentAtMs'>;
  /** The generated text (sessions feed it back as the assistant turn). */
  readonly text: string;
  /** The first choice's tool calls, complete (agent sessions feed them back with their results). */
  readonly toolCalls: readonly WorkloadToolCall[];
}

/** One keep-alive pool for all requests of a process; closed by whoever made it. */
export function createClientAgent(): Agent {
  return new Agent({ connections: 512, keepAliveTimeout: 10_000, headersTimeout: 600_000, bodyTimeout: 600_000 });
}

export async function sendStreaming(
  agent: Agent,
  input: SendInput,
  now: () => number = () => performance.now(),
): Promise<SendResult> {
  const started = now();
  const path = input.body.kind === 'chat' ? '/v1/chat/completions' : '/v1/completions';
  const payload = {
    model: input.model,
    ...(input.body.kind === 'chat'
      ? { messages: input.body.messages, ...agentBody(input.body.agent) }
      : { prompt: input.body.prompt }),
    max_tokens: input.maxTokens,
    stream: true,
    stream_options: { include_usage: true },
    ...input.extraBody,
  };
  let status = 0;
  let backend: string | undefined;
  let reason: string | undefined;
  try {
    const response = await request(new URL(path, input.baseUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(payload),
      dispatcher: agent,
      signal: input.signal,
    });
    status = response.statusCode;
    backend = headerValue(response.headers['x-router-backend']);
    reason = headerValue(response.headers['x-router-reason']);
    if (status < 200 || status >= 300) {
      const text = await response.body.text();
      return {
        record: {
          e2eMs: now() - started,
          itlMs: [],
          status,
          backend,
          reason,
          promptTokens: 0,
          error: errorMessage(text),
        },
        text: '',
        toolCalls: [],
      };
    }
    const parser = new SseParser();
    const decoder = new TextDecoder();
    const itlMs: number[] = [];
    let ttftMs: number | undefined;
    let lastTokenAt = 0;
    const reply = new ReplyAssembler();
    let usage: Usage | undefined;
    for await (const bytes of response.body) {
      const arrived = now();
      for (const data of parser.push(decoder.decode(bytes as Uint8Array, { stream: true }))) {
        if (data === SSE_DONE) continue;
        if (eventCarriesOutput({ data })) {
          if (ttftMs === undefined) ttftMs = arrived - started;
          else itlMs.push(arrived - lastTokenAt);
          lastTokenAt = arrived;
        }
        const chunk = JSON.parse(data) as StreamChunk;
        reply.add(chunk);
        if (chunk.usage) usage = chunk.usage;
      }
    }
    return {
      record: {
        ttftMs,
        e2eMs: now() - started,
        itlMs,
        status,
        backend,
        reason,
        promptTokens: usage?.prompt_tokens ?? 0,
        cachedTokens: usage?.prompt_tokens_details?.cached_tokens ?? undefined,
        promptTextBytes: promptTextBytesOf(input.body),
        completionTokens: usage?.completion_tokens,
        finishReason: reply.finishReason,
      },
      text: reply.text,
      toolCalls: reply.toolCalls(),
    };
  } catch (error) {
    // Transport error (status 0) or a broken stream after a 200: the request failed either way.
    return {
      record: {
        e2eMs: now() - started,
        itlMs: [],
        status: status >= 200 && status < 300 ? 0 : status,
        backend,
        reason,
        promptTokens: 0,
        error: (error as Error).message,
      },
      text: '',
      toolCalls: [],
    };
  }
}

/** An agent request's fields in the wire's names. */
function agentBody(agent: AgentFields | undefined): Record<string, unknown> {
  if (agent === undefined) return {};
  return {
    tools: agent.tools,
    tool_choice: agent.toolChoice,
    chat_template_kwargs: { enable_thinking: agent.thinking },
  };
}

interface ToolCallDelta {
  readonly index?: number;
  readonly id?: string;
  readonly function?: { readonly name?: string; readonly arguments?: string };
}

/** The first choice's reply, from its deltas: text, tool calls by index, finish reason (reasoning is not kept: clients do not send it back). */
class ReplyAssembler {
  text = '';
  finishReason: string | undefined;
  private readonly calls = new Map<number, { id: string; name: string; arguments: string }>();

  add(chunk: StreamChunk): void {
    const choice = chunk.choices?.[0];
    if (choice === undefined) return;
    const content = choice.delta?.content ?? choice.text;
    if (content) this.text += content;
    for (const delta of choice.delta?.tool_calls ?? []) {
      const index = delta.index ?? 0;
      const call = this.calls.get(index) ?? { id: '', name: '', arguments: '' };
      if (delta.id) call.id = delta.id;
      if (delta.function?.name) call.name += delta.function.name;
      if (delta.function?.arguments) call.arguments += delta.function.arguments;
      this.calls.set(index, call);
    }
    if (choice.finish_reason) this.finishReason = choice.finish_reason;
  }

  /** The calls that got an id and a name, by index. */
  toolCalls(): WorkloadToolCall[] {
    return [...this.calls.entries()]
      .sort(([a], [b]) => a - b)
      .filter(([, call]) => call.id !== '' && call.name !== '')
      .map(([, call]) => ({ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } }));
  }
}

interface Usage {
  readonly prompt_tokens?: number;
  readonly completion_tokens?: number;
  readonly prompt_tokens_details?: { readonly cached_tokens?: number | null } | null;
}

interface StreamChunk {
  readonly choices?: ReadonlyArray<{
    readonly delta?: { readonly content?: string | null; readonly tool_calls?: readonly ToolCallDelta[] };
    readonly text?: string;
    readonly finish_reason?: string | null;
  }>;
  readonly usage?: Usage | null;
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** The OpenAI error shape's message, else the first 200 characters of the body. */
function errorMessage(body: string): string {
  try {
    const parsed = JSON.parse(body) as { error?: { message?: string } };
    if (parsed.error?.message) return parsed.error.message;
  } catch {
    // not JSON
  }
  return body.slice(0, 200);
}

/** UTF-8 bytes of a request's prompt text: string contents and text parts of its messages, or the completions prompt. */
export function promptTextBytesOf(body: SendInput['body']): number {
  if (body.kind !== 'chat') return Buffer.byteLength(body.prompt, 'utf8');
  let bytes = 0;
  for (const message of body.messages as readonly { content?: unknown }[]) {
    const content = message.content;
    if (typeof content === 'string') bytes += Buffer.byteLength(content, 'utf8');
    else if (Array.isArray(content)) {
      for (const part of content as { type?: string; text?: unknown }[])
        if (part.type === 'text' && typeof part.text === 'string') bytes += Buffer.byteLength(part.text, 'utf8');
    }
  }
  return bytes;
}

/** The first model a router (or an engine) serves (`GET /v1/models`). */
export async function servedModel(routerUrl: string): Promise<string> {
  const response = await fetch(new URL('/v1/models', routerUrl));
  if (!response.ok) throw new Error(`${routerUrl}/v1/models answered ${response.status}`);
  const body = (await response.json()) as { data?: Array<{ id?: string }> };
  const id = body.data?.[0]?.id;
  if (!id) throw new Error(`${routerUrl}/v1/models lists no model`);
  return id;
}
