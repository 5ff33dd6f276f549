import type { Usage } from '@kvroute/protocols';

/**
 * Response bodies and stream chunks exactly as vLLM's OpenAI server frames them
 * (shared/reference/engine-protocols.md §4). Chat and text completions differ only in the choice shape.
 */
export type EndpointKind = 'chat' | 'text';

export interface ResponseIdentity {
  readonly id: string;
  readonly created: number;
  readonly model: string;
}

export interface UsageCounts {
  readonly promptTokens: number;
  readonly completionTokens: number;
  /** Prompt tokens served from cache; null when cached-token reporting is off or there was no hit. */
  readonly cachedTokens: number | null;
}

export function buildUsage(counts: UsageCounts): Usage {
  return {
    prompt_tokens: counts.promptTokens,
    total_tokens: counts.promptTokens + counts.completionTokens,
    completion_tokens: counts.completionTokens,
    prompt_tokens_details: counts.cachedTokens === null ? null : { cached_tokens: counts.cachedTokens },
  };
}

/** The first chat chunk of a choice: the assistant role with empty content. */
export function chatRoleChunk(identity: ResponseIdentity, index: number): object {
  return {
    id: identity.id,
    object: 'chat.completion.chunk',
    created: identity.created,
    model: identity.model,
    choices: [{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
  };
}

/** A chat chunk with any delta (reasoning, tool calls); the last one of a choice carries `finish_reason` and `stop_reason`. */
export function chatDeltaChunk(identity: ResponseIdentity, index: number, delta: object, finishReason: string | null): object {
  const finish = finishReason === null ? { finish_reason: null } : { finish_reason: finishReason, stop_reason: null };
  return {
    id: identity.id,
    object: 'chat.completion.chunk',
    created: identity.created,
    model: identity.model,
    choices: [{ index, delta, logprobs: null, ...finish }],
  };
}

/** A content delta; the last one of a choice carries `finish_reason` and `stop_reason`. */
export function deltaChunk(kind: EndpointKind, identity: ResponseIdentity, index: number, text: string, finishReason: string | null): object {
  const finish = finishReason === null ? { finish_reason: null } : { finish_reason: finishReason, stop_reason: null };
  if (kind === 'chat') {
    return {
      id: identity.id,
      object: 'chat.completion.chunk',
      created: identity.created,
      model: identity.model,
      choices: [{ index, delta: { content: text }, logprobs: null, ...finish }],
    };
  }
  return {
    id: identity.id,
    object: 'text_completion',
    created: identity.created,
    model: identity.model,
    choices: [{ index, text, logprobs: null, finish_reason: finishReason, stop_reason: null }],
    usage: null,
  };
}

/** The usage chunk sent before `[DONE]` when `stream_options.include_usage` is set: no choices. */
export function usageChunk(kind: EndpointKind, identity: ResponseIdentity, usage: Usage): object {
  return {
    id: identity.id,
    object: kind === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: identity.created,
    model: identity.model,
    choices: [],
    usage,
  };
}

export interface FinishedChoice {
  readonly text: string;
  readonly finishReason: string;
  /** Chat only: the whole `message` (reasoning, tool calls); default a plain text answer. */
  readonly message?: object;
}

export function completeResponse(kind: EndpointKind, identity: ResponseIdentity, choices: readonly FinishedChoice[], usage: Usage): object {
  if (kind === 'chat') {
    return {
      id: identity.id,
      object: 'chat.completion',
      created: identity.created,
      model: identity.model,
      choices: choices.map((choice, index) => ({
        index,
        message: choice.message ?? { role: 'assistant', reasoning_content: null, content: choice.text, tool_calls: [] },
        logprobs: null,
        finish_reason: choice.finishReason,
        stop_reason: null,
      })),
      usage,
      prompt_logprobs: null,
      kv_transfer_params: null,
    };
  }
  return {
    id: identity.id,
    object: 'text_completion',
    created: identity.created,
    model: identity.model,
    choices: choices.map((choice, index) => ({
      index,
      text: choice.text,
      logprobs: null,
      finish_reason: choice.finishReason,
      stop_reason: null,
      prompt_logprobs: null,
    })),
    usage,
    kv_transfer_params: null,
  };
}

/**
 * Encodes content-delta SSE events (`data: …\n\n`) without building and stringifying an object per
 * token: the per-request parts are serialised once. A stream writes one of these per generated
 * token, so this is the simulator's hottest path. Byte-identical to
 * `data: ${JSON.stringify(deltaChunk(…))}\n\n` (checked in response-format.test.ts).
 */
export function createDeltaEventEncoder(kind: EndpointKind, identity: ResponseIdentity): (index: number, text: string, finishReason: string | null) => string {
  const object = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
  const prefix = `data: {"id":${JSON.stringify(identity.id)},"object":"${object}","created":${identity.created},"model":${JSON.stringify(identity.model)},"choices":[{"index":`;
  if (kind === 'chat') {
    return (index, text, finishReason) =>
      `${prefix}${index},"delta":{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":${
        finishReason === null ? 'null' : `${JSON.stringify(finishReason)},"stop_reason":null`
      }}]}\n\n`;
  }
  return (index, text, finishReason) =>
    `${prefix}${index},"text":${JSON.stringify(text)},"logprobs":null,"finish_reason":${
      finishReason === null ? 'null' : JSON.stringify(finishReason)
    },"stop_reason":null}],"usage":null}\n\n`;
}
