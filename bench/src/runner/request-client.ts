/**
 * Sends one workload request to a router (or any OpenAI-compatible server) as a streaming request and
 * times it: TTFT is the first chunk carrying content (not the first byte: role-only chunks and
 * keep-alives do not count), end-to-end is the last byte, inter-token latencies are the gaps between
 * content chunks. `usage` (asked for with `stream_options.include_usage`) gives prompt and cached tokens.
 */
import { SSE_DONE, SseParser } from '@kvroute/protocols';
import { Agent, request } from 'undici';
import type { RequestRecord } from '../report';
import type { WorkloadMessage } from '../workloads';

/** One request as the runner keeps it: the report's record plus where and when it ran. */
export interface RunRequestRecord extends RequestRecord {
  readonly id: string;
  /** Router it was sent to (index into the run's router URLs). */
  readonly router: number;
  /** Offset from the run's start when it was sent, ms. */
  readonly sentAtMs: number;
  readonly completionTokens?: number;
  /** The error body's message or the transport error, for failed requests. */
  readonly error?: string;
}

export interface SendInput {
  readonly baseUrl: string;
  readonly model: string;
  readonly body: { readonly kind: 'chat'; readonly messages: readonly WorkloadMessage[] } | { readonly kind: 'completion'; readonly prompt: string };
  readonly maxTokens: number;
  /** Extra body fields (e.g. `ignore_eos` for real vLLM). */
  readonly extraBody?: Readonly<Record<string, unknown>>;
  readonly signal?: AbortSignal;
}

export interface SendResult {
  readonly record: Omit<RunRequestRecord, 'id' | 'router' | 'sentAtMs'>;
  /** The generated text (sessions feed it back as the assistant turn). */
  readonly text: string;
}

/** One keep-alive pool for all requests of a process; closed by whoever made it. */
export function createClientAgent(): Agent {
  return new Agent({ connections: 512, keepAliveTimeout: 10_000, headersTimeout: 600_000, bodyTimeout: 600_000 });
}

export async function sendStreaming(agent: Agent, input: SendInput, now: () => number = () => performance.now()): Promise<SendResult> {
  const started = now();
  const path = input.body.kind === 'chat' ? '/v1/chat/completions' : '/v1/completions';
  const payload = {
    model: input.model,
    ...(input.body.kind === 'chat' ? { messages: input.body.messages } : { prompt: input.body.prompt }),
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
      return { record: { e2eMs: now() - started, itlMs: [], status, backend, reason, promptTokens: 0, error: errorMessage(text) }, text: '' };
    }
    const parser = new SseParser();
    const decoder = new TextDecoder();
    const itlMs: number[] = [];
    let ttftMs: number | undefined;
    let lastTokenAt = 0;
    let text = '';
    let usage: Usage | undefined;
    for await (const bytes of response.body) {
      const arrived = now();
      for (const data of parser.push(decoder.decode(bytes as Uint8Array, { stream: true }))) {
        if (data === SSE_DONE) continue;
        const chunk = JSON.parse(data) as StreamChunk;
        const content = chunk.choices?.[0]?.delta?.content ?? chunk.choices?.[0]?.text;
        if (content) {
          if (ttftMs === undefined) ttftMs = arrived - started;
          else itlMs.push(arrived - lastTokenAt);
          lastTokenAt = arrived;
          text += content;
        }
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
        completionTokens: usage?.completion_tokens,
      },
      text,
    };
  } catch (error) {
    // Transport error (status 0) or a broken stream after a 200: the request failed either way.
    return { record: { e2eMs: now() - started, itlMs: [], status: status >= 200 && status < 300 ? 0 : status, backend, reason, promptTokens: 0, error: (error as Error).message }, text: '' };
  }
}

interface Usage {
  readonly prompt_tokens?: number;
  readonly completion_tokens?: number;
  readonly prompt_tokens_details?: { readonly cached_tokens?: number | null } | null;
}

interface StreamChunk {
  readonly choices?: ReadonlyArray<{ readonly delta?: { readonly content?: string | null }; readonly text?: string }>;
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
