import type { Usage } from '@kvroute/protocols';

/**
 * Response bodies and stream chunks exactly as vLLM's OpenAI server frames them
 * (shared/reference/engine-protocols.md §4). Chat and text completions differ only in the choice shape.
 *
 * What `stream_options.include_usage` changes in a stream, as vLLM does it (chat_completion/serving.py
 * `chat_completion_stream_generator`, completion/serving.py `completion_stream_generator`): chunks are
 * serialised with `exclude_unset`, so no chunk gains a `"usage"` key (only `continuous_usage_stats`, which
 * vLLM honours only together with `include_usage`, puts usage on every chunk: not simulated); one more
 * chunk comes before `[DONE]`, `"choices":[]` with the usage, serialised with `exclude_none` (a null
 * `prompt_tokens_details` is left out); and the `system_fingerprint` that a terminal chunk (one with a
 * `finish_reason`) carries without the option moves to that usage chunk.
 */
export type EndpointKind = 'chat' | 'text';

/**
 * The sim's `system_fingerprint`: vLLM stamps one (`--fingerprint-mode full`, the default since
 * vllm-project/vllm#40537: `vllm-<version>[-<parallelism>]-<config hash8>`) on non-streaming responses
 * and on a stream's final message.
 */
export const SIM_SYSTEM_FINGERPRINT = 'vllm-sim-5f1e0c2a';

export interface ResponseIdentity {
  readonly id: string;
  readonly created: number;
  readonly model: string;
  /** `system_fingerprint` of the answer; null: none (vLLM `--fingerprint-mode none`). */
  readonly systemFingerprint: string | null;
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

/**
 * The `system_fingerprint` a stream's terminal chunks carry: the identity's, unless a usage chunk will
 * follow them (`include_usage`), which then carries it instead.
 */
export function terminalFingerprintOf(identity: ResponseIdentity, includeUsage: boolean): string | null {
  return includeUsage ? null : identity.systemFingerprint;
}

/** `{system_fingerprint}` on a terminal chunk (a `finishReason`) when there is one to stamp, else nothing. */
function stampOf(finishReason: string | null, terminalFingerprint: string | null): { system_fingerprint?: string } {
  return finishReason !== null && terminalFingerprint !== null ? { system_fingerprint: terminalFingerprint } : {};
}

/**
 * A chat chunk with any delta (reasoning, tool calls); the last one of a choice carries `finish_reason`,
 * `stop_reason` and `terminalFingerprint` (terminalFingerprintOf).
 */
export function chatDeltaChunk(
  identity: ResponseIdentity,
  index: number,
  delta: object,
  finishReason: string | null,
  terminalFingerprint: string | null,
): object {
  const finish = finishReason === null ? { finish_reason: null } : { finish_reason: finishReason, stop_reason: null };
  return {
    id: identity.id,
    object: 'chat.completion.chunk',
    created: identity.created,
    model: identity.model,
    choices: [{ index, delta, logprobs: null, ...finish }],
    ...stampOf(finishReason, terminalFingerprint),
  };
}

/** A content delta; the last one of a choice carries `finish_reason`, `stop_reason` and `terminalFingerprint` (terminalFingerprintOf). */
export function deltaChunk(
  kind: EndpointKind,
  identity: ResponseIdentity,
  index: number,
  text: string,
  finishReason: string | null,
  terminalFingerprint: string | null,
): object {
  const finish = finishReason === null ? { finish_reason: null } : { finish_reason: finishReason, stop_reason: null };
  if (kind === 'chat') {
    return {
      id: identity.id,
      object: 'chat.completion.chunk',
      created: identity.created,
      model: identity.model,
      choices: [{ index, delta: { content: text }, logprobs: null, ...finish }],
      ...stampOf(finishReason, terminalFingerprint),
    };
  }
  return {
    id: identity.id,
    object: 'text_completion',
    created: identity.created,
    model: identity.model,
    choices: [{ index, text, logprobs: null, finish_reason: finishReason, stop_reason: null }],
    usage: null,
    ...stampOf(finishReason, terminalFingerprint),
  };
}

/**
 * The usage chunk sent before `[DONE]` when `stream_options.include_usage` is set: no choices, the
 * identity's fingerprint, and no null fields (vLLM serialises it with `exclude_none`).
 */
export function usageChunk(kind: EndpointKind, identity: ResponseIdentity, usage: Usage): object {
  const { prompt_tokens_details: details, ...counts } = usage;
  return {
    id: identity.id,
    object: kind === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: identity.created,
    model: identity.model,
    choices: [],
    usage: details === null || details === undefined ? counts : { ...counts, prompt_tokens_details: details },
    ...(identity.systemFingerprint === null ? {} : { system_fingerprint: identity.systemFingerprint }),
  };
}

export interface FinishedChoice {
  readonly text: string;
  readonly finishReason: string;
  /** Chat only: the whole `message` (reasoning, tool calls); default a plain text answer. */
  readonly message?: object;
}

export function completeResponse(
  kind: EndpointKind,
  identity: ResponseIdentity,
  choices: readonly FinishedChoice[],
  usage: Usage,
  /** A prefill instance's answer to a `do_remote_decode` request (kv-transfer-params.ts); else null, as vLLM prints it. */
  kvTransferParams: Record<string, unknown> | null = null,
): object {
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
      system_fingerprint: identity.systemFingerprint,
      usage,
      prompt_logprobs: null,
      kv_transfer_params: kvTransferParams,
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
    system_fingerprint: identity.systemFingerprint,
    usage,
    kv_transfer_params: kvTransferParams,
  };
}

/**
 * Encodes content-delta SSE events (`data: …\n\n`) without building and stringifying an object per
 * token: the per-request parts are serialised once. A stream writes one of these per generated
 * token, so this is the simulator's hottest path. Byte-identical to
 * `data: ${JSON.stringify(deltaChunk(…, terminalFingerprint))}\n\n` (checked in response-format.test.ts).
 */
export function createDeltaEventEncoder(
  kind: EndpointKind,
  identity: ResponseIdentity,
  terminalFingerprint: string | null,
): (index: number, text: string, finishReason: string | null) => string {
  const object = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
  const prefix =
    `data: {"id":${JSON.stringify(identity.id)},"object":"${object}","created":${identity.created},` +
    `"model":${JSON.stringify(identity.model)},"choices":[{"index":`;
  const stamp = terminalFingerprint === null ? '' : `,"system_fingerprint":${JSON.stringify(terminalFingerprint)}`;
  if (kind === 'chat') {
    return (index, text, finishReason) =>
      `${prefix}${index},"delta":{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":${
        finishReason === null ? 'null}]}' : `${JSON.stringify(finishReason)},"stop_reason":null}]${stamp}}`
      }\n\n`;
  }
  return (index, text, finishReason) =>
    `${prefix}${index},"text":${JSON.stringify(text)},"logprobs":null,"finish_reason":${
      finishReason === null ? 'null' : JSON.stringify(finishReason)
    },"stop_reason":null}],"usage":null${finishReason === null ? '' : stamp}}\n\n`;
}
