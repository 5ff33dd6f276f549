import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { MessagesUsage } from '@kvroute/protocols';
import type { SequenceListener } from '../engine/engine';
import { OutputText } from '../text/output-text';
import type { PreparedPrompt } from './prepare-prompts';
import type { GenerationDeps } from './serve-generation';

export interface MessagesGeneration {
  readonly model: string;
  readonly prompt: PreparedPrompt;
  readonly stream: boolean;
  readonly cacheSalt: string | undefined;
  /** `performance.now()` when the route handler started. */
  readonly receivedAtMs: number;
}

/**
 * Runs one Anthropic Messages request on the engine (one sequence, plain text: the sim's tool calls and
 * reasoning are chat-only) and writes the Anthropic answer:
 *
 * - a stream, as Anthropic and vLLM frame it (`event:` + `data:`): `message_start` (its usage) at the
 *   first token (after the prefill, when the cached tokens are known, as vLLM sends it with its first
 *   chunk), `content_block_start`, one `content_block_delta` (`text_delta`) per token,
 *   `content_block_stop`, `message_delta` (stop_reason and the final usage), `message_stop`;
 * - otherwise one `message` object.
 *
 * Usage (apps/vllm-sim/README.md, "Anthropic Messages"): with prompt-token details off, as vLLM's
 * Anthropic endpoint reports it (`input_tokens` = the whole prompt, no cache fields); with them on, in
 * Anthropic's meaning, so cache affinity can be measured through the Anthropic SDK: `input_tokens` =
 * prompt tokens not read from the cache, `cache_read_input_tokens` = those read, and
 * `cache_creation_input_tokens: 0` (vLLM caches every prompt; Anthropic counts only marked writes).
 */
export function serveMessages(deps: GenerationDeps, request: MessagesGeneration, response: ServerResponse): void {
  const id = `msg_${randomUUID().replaceAll('-', '')}`;
  const { prompt } = request;
  const output = new OutputText(deps.seed, prompt.tokens);
  const outputTokens = deps.eosRandom ? 1 + Math.floor(output.fraction() * prompt.maxTokens) : prompt.maxTokens;
  const stopReason = outputTokens < prompt.maxTokens ? 'end_turn' : 'max_tokens';
  let text = '';
  let clientGone = false;
  let finished = false;
  const usageOf = (cachedTokens: number, generated: number): MessagesUsage =>
    deps.cachedTokensReporting === 'off'
      ? { input_tokens: prompt.tokens.length, output_tokens: generated }
      : { input_tokens: prompt.tokens.length - cachedTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: cachedTokens, output_tokens: generated };
  const event = (name: string, data: object): void => {
    response.write(`event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`);
  };

  if (request.stream) {
    response.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' });
    response.flushHeaders();
  }
  response.on('close', () => {
    if (finished) return;
    clientGone = true;
    deps.loop.abort(sequence);
  });

  const listener: SequenceListener = {
    onToken(current, outputIndex, nowMs) {
      if (outputIndex === 0) {
        deps.latency.record({
          wallTtftMs: performance.now() - request.receivedAtMs,
          engineTtftWallMs: (nowMs - current.arrivalMs) / deps.loop.timeScale,
          admissionMs: submittedAtMs - request.receivedAtMs,
        });
      }
      const piece = output.textAt(outputIndex);
      if (!request.stream) {
        text += piece;
        return;
      }
      if (clientGone) return;
      if (outputIndex === 0) {
        const message = { id, type: 'message', role: 'assistant', content: [], model: request.model, stop_reason: null, stop_sequence: null, usage: usageOf(current.cachedTokens ?? 0, 0) };
        event('message_start', { message });
        event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
      }
      event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: piece } });
    },
    onFinish(current) {
      finished = true;
      if (clientGone) return;
      const usage = usageOf(current.cachedTokens ?? 0, current.outputCount);
      if (request.stream) {
        event('content_block_stop', { index: 0 });
        event('message_delta', { delta: { stop_reason: stopReason, stop_sequence: null }, usage });
        event('message_stop', {});
        response.end();
        return;
      }
      const body = JSON.stringify({ id, type: 'message', role: 'assistant', content: [{ type: 'text', text }], model: request.model, stop_reason: stopReason, stop_sequence: null, usage });
      response.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      response.end(body);
    },
  };
  const submittedAtMs = performance.now();
  const sequence = deps.loop.submit({
    id,
    promptTokens: prompt.tokens,
    outputTokens,
    finishReason: stopReason === 'end_turn' ? 'stop' : 'length',
    outputTokenAt: (index) => output.tokenAt(index),
    maxTokensParam: prompt.maxTokens,
    ...(request.cacheSalt === undefined ? {} : { cacheSalt: request.cacheSalt }),
    listener,
  });
}
