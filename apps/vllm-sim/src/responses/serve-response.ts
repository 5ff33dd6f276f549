import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { ChatMessage } from '@kvroute/protocols';
import type { GenerationDeps } from '../generation/serve-generation';
import type { PreparedPrompt } from '../generation/prepare-prompts';
import { OutputText } from '../text/output-text';
import { messageItem, outputTextPart, responseEvent, responseObject, type ResponseFrame } from './response-objects';
import type { ResponseStore } from './response-store';

export interface ResponseRun {
  readonly frame: ResponseFrame;
  readonly prompt: PreparedPrompt;
  readonly stream: boolean;
  readonly cacheSalt: string | undefined;
  readonly ignoreEos: boolean;
  /** The conversation before this turn's answer (without instructions): stored with the answer. */
  readonly historyBefore: readonly ChatMessage[];
  readonly store: ResponseStore;
}

/** A new response id, vLLM's form: `resp_` and 32 hex digits. */
export function newResponseId(): string {
  return `resp_${randomUUID().replaceAll('-', '')}`;
}

/**
 * Runs one Responses turn on the engine (one sequence: the sim answers with text only) and writes it:
 * one JSON response when done, or the event stream OpenAI sends: `response.created`,
 * `response.in_progress`, `response.output_item.added`, `response.content_part.added`, one
 * `response.output_text.delta` per token, `response.output_text.done`, `response.content_part.done`,
 * `response.output_item.done`, `response.completed` (with `usage`; as vLLM, also for a response cut
 * by `max_output_tokens`, whose status is `incomplete`). No `[DONE]`: Responses streams
 * end with their last event. The response is stored (when `store`) once it is complete, before its
 * last bytes are written, so the id a client has read resolves by the time it could ask.
 */
export function serveResponse(deps: GenerationDeps, run: ResponseRun, response: ServerResponse): void {
  const { frame, prompt } = run;
  const itemId = `msg_${randomUUID().replaceAll('-', '')}`;
  const output = new OutputText(deps.seed, prompt.tokens);
  const outputTokens = deps.eosRandom && !run.ignoreEos ? 1 + Math.floor(output.fraction() * prompt.maxTokens) : prompt.maxTokens;
  const endReason: 'stop' | 'length' = outputTokens < prompt.maxTokens ? 'stop' : 'length';
  let text = '';
  let sequenceNumber = 0;
  let finished = false;
  const emit = (type: string, fields: Record<string, unknown>): void => {
    response.write(responseEvent(type, sequenceNumber++, fields));
  };

  if (run.stream) {
    response.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' });
    emit('response.created', { response: responseObject(frame, 'in_progress', [], null) });
    emit('response.in_progress', { response: responseObject(frame, 'in_progress', [], null) });
    emit('response.output_item.added', { output_index: 0, item: messageItem(itemId, null) });
    emit('response.content_part.added', { item_id: itemId, output_index: 0, content_index: 0, part: outputTextPart('') });
  }

  const sequence = deps.loop.submit({
    id: frame.id,
    promptTokens: prompt.tokens,
    outputTokens,
    finishReason: endReason,
    outputTokenAt: (index) => output.tokenAt(index),
    maxTokensParam: prompt.maxTokens,
    ...(run.cacheSalt === undefined ? {} : { cacheSalt: run.cacheSalt }),
    listener: {
      onToken(_sequence, outputIndex) {
        const piece = output.textAt(outputIndex);
        text += piece;
        if (run.stream && !response.destroyed) emit('response.output_text.delta', { item_id: itemId, output_index: 0, content_index: 0, delta: piece, logprobs: [] });
      },
      onFinish(done, reason) {
        finished = true;
        if (response.destroyed) return;
        const item = messageItem(itemId, text);
        const usage = { inputTokens: prompt.tokens.length, cachedTokens: done.cachedTokens ?? 0, outputTokens: done.outputCount };
        // vLLM's Responses status: `incomplete` when max_output_tokens cut the answer.
        const status = reason === 'length' ? 'incomplete' : 'completed';
        const body = responseObject(frame, status, [item], usage);
        if (frame.store) run.store.put(frame.id, { response: body, history: [...run.historyBefore, { role: 'assistant', content: text }] });
        if (!run.stream) {
          const json = JSON.stringify(body);
          response.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
          response.end(json);
          return;
        }
        emit('response.output_text.done', { item_id: itemId, output_index: 0, content_index: 0, text, logprobs: [] });
        emit('response.content_part.done', { item_id: itemId, output_index: 0, content_index: 0, part: outputTextPart(text) });
        emit('response.output_item.done', { output_index: 0, item });
        // vLLM ends every stream with `response.completed`, an `incomplete` response too (OpenAI would send `response.incomplete`).
        response.end(responseEvent('response.completed', sequenceNumber++, { response: body }));
      },
    },
  });
  response.on('close', () => {
    if (!finished) deps.loop.abort(sequence);
  });
}
