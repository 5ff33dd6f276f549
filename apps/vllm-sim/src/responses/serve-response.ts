import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { responsesChatMessages, type ChatMessage, type ResponseInputItem } from '@kvroute/protocols';
import { ChoiceTurn, turnEnd, type TurnPiece, type TurnPlan } from '../generation/agent-turn';
import type { GenerationDeps } from '../generation/serve-generation';
import type { PreparedPrompt } from '../generation/prepare-prompts';
import { OutputText } from '../text/output-text';
import {
  functionCallItem,
  messageItem,
  outputTextPart,
  reasoningItem,
  reasoningTextPart,
  responseEvent,
  responseObject,
  type ResponseFrame,
} from './response-objects';
import type { ResponseStore } from './response-store';
import type { ModelTarget } from '../lora/lora-registry';

export interface ResponseRun {
  readonly frame: ResponseFrame;
  readonly prompt: PreparedPrompt;
  readonly stream: boolean;
  readonly cacheSalt: string | undefined;
  /** The LoRA adapter its `model` names; none: the base model. */
  readonly target: ModelTarget;
  readonly ignoreEos: boolean;
  /** Reasoning and tool call to produce (generation/agent-turn.ts, shared with chat and Messages). */
  readonly turn: TurnPlan;
  /** The conversation before this turn's answer (without instructions): stored with the answer. */
  readonly historyBefore: readonly ChatMessage[];
  readonly store: ResponseStore;
}

/** A new response id, vLLM's form: `resp_` and 32 hex digits. */
export function newResponseId(): string {
  return `resp_${hex32()}`;
}

function hex32(): string {
  return randomUUID().replaceAll('-', '');
}

type OutputItemKind = 'reasoning' | 'message' | 'function_call';

/**
 * Runs one Responses turn on the engine (one sequence) and writes it: one JSON response when done, or
 * the event stream OpenAI sends. The turn is the shared agent plan: R reasoning tokens, then text or one
 * function call; each becomes one output item, in that order (`output_index` 0, 1):
 *
 * - `response.created`, `response.in_progress`;
 * - reasoning: `response.output_item.added` (an empty reasoning item), `response.content_part.added`
 *   (`reasoning_text`), one `response.reasoning_text.delta` per token, `response.reasoning_text.done`,
 *   `response.content_part.done`, `response.output_item.done`;
 * - text: the same with a message item, `output_text` part and `response.output_text.*` events;
 * - a function call: `response.output_item.added` (`function_call`, `arguments: ""`, in progress) with
 *   the call's first token, one `response.function_call_arguments.delta` per argument token,
 *   `response.function_call_arguments.done`, `response.output_item.done`;
 * - `response.completed` (with `usage`; as vLLM, also for a response cut by `max_output_tokens`,
 *   whose status is `incomplete`).
 *
 * An item opens with the first token that belongs to it (vLLM's simple streaming does the same), so
 * the first event after `response.in_progress` comes with the first token. No `[DONE]`: Responses
 * streams end with their last event. The response is stored (when `store`) once it is complete, before
 * its last bytes are written, so the id a client has read resolves by the time it could ask; its
 * output items are stored as the assistant's turn of the conversation (responsesChatMessages: the
 * call as the assistant's tool call, reasoning left out), so a follow-up's prompt extends this one.
 */
export function serveResponse(deps: GenerationDeps, run: ResponseRun, response: ServerResponse): void {
  const { frame, prompt } = run;
  const itemIds: Record<OutputItemKind, string> = {
    reasoning: `rs_${hex32()}`,
    message: `msg_${hex32()}`,
    function_call: `fc_${hex32()}`,
  };
  const output = new OutputText(deps.codec.outputWords, deps.seed, prompt.tokens);
  const outputTokens =
    deps.eosRandom && !run.ignoreEos ? 1 + Math.floor(output.fraction() * prompt.maxTokens) : prompt.maxTokens;
  const endReason = turnEnd(run.turn, outputTokens, prompt.maxTokens);
  const turn = new ChoiceTurn(run.turn, outputTokens, () => `call_${hex32()}`);
  let sequenceNumber = 0;
  let finished = false;
  /** The item being streamed and its output_index. */
  let openItem: OutputItemKind | null = null;
  let outputIndex = -1;
  const emit = (type: string, fields: Record<string, unknown>): void => {
    response.write(responseEvent(type, sequenceNumber++, fields));
  };

  /** The completed items, in output order. */
  const completedItems = (): Record<string, unknown>[] => {
    const items: Record<string, unknown>[] = [];
    if (turn.reasoning !== '') items.push(reasoningItem(itemIds.reasoning, turn.reasoning));
    if (turn.toolCalled && run.turn.toolCall)
      items.push(
        functionCallItem(itemIds.function_call, turn.toolCallId as string, run.turn.toolCall.name, turn.toolArguments),
      );
    else if (turn.answers) items.push(messageItem(itemIds.message, turn.content));
    return items;
  };

  const closeItem = (): void => {
    const item = openItem;
    if (item === null) return;
    openItem = null;
    const at = { item_id: itemIds[item], output_index: outputIndex };
    if (item === 'reasoning') {
      emit('response.reasoning_text.done', { ...at, content_index: 0, text: turn.reasoning });
      emit('response.content_part.done', { ...at, content_index: 0, part: reasoningTextPart(turn.reasoning) });
      emit('response.output_item.done', {
        output_index: outputIndex,
        item: reasoningItem(itemIds.reasoning, turn.reasoning),
      });
    } else if (item === 'message') {
      emit('response.output_text.done', { ...at, content_index: 0, text: turn.content, logprobs: [] });
      emit('response.content_part.done', { ...at, content_index: 0, part: outputTextPart(turn.content) });
      emit('response.output_item.done', {
        output_index: outputIndex,
        item: messageItem(itemIds.message, turn.content),
      });
    } else {
      const name = run.turn.toolCall?.name ?? '';
      emit('response.function_call_arguments.done', { ...at, name, arguments: turn.toolArguments });
      emit('response.output_item.done', {
        output_index: outputIndex,
        item: functionCallItem(itemIds.function_call, turn.toolCallId as string, name, turn.toolArguments),
      });
    }
  };

  const openItemFor = (kind: OutputItemKind, piece: TurnPiece): void => {
    if (openItem === kind) return;
    closeItem();
    openItem = kind;
    outputIndex++;
    const at = { item_id: itemIds[kind], output_index: outputIndex, content_index: 0 };
    if (kind === 'reasoning') {
      emit('response.output_item.added', { output_index: outputIndex, item: reasoningItem(itemIds.reasoning, null) });
      emit('response.content_part.added', { ...at, part: reasoningTextPart('') });
    } else if (kind === 'message') {
      emit('response.output_item.added', { output_index: outputIndex, item: messageItem(itemIds.message, null) });
      emit('response.content_part.added', { ...at, part: outputTextPart('') });
    } else if (piece.kind === 'tool-start') {
      emit('response.output_item.added', {
        output_index: outputIndex,
        item: functionCallItem(itemIds.function_call, piece.id, piece.name, null),
      });
    }
  };

  const streamPiece = (piece: TurnPiece): void => {
    switch (piece.kind) {
      case 'reasoning':
        openItemFor('reasoning', piece);
        emit('response.reasoning_text.delta', {
          item_id: itemIds.reasoning,
          output_index: outputIndex,
          content_index: 0,
          delta: piece.text,
        });
        return;
      case 'content':
        openItemFor('message', piece);
        emit('response.output_text.delta', {
          item_id: itemIds.message,
          output_index: outputIndex,
          content_index: 0,
          delta: piece.text,
          logprobs: [],
        });
        return;
      case 'tool-start':
        openItemFor('function_call', piece);
        return;
      case 'tool-arguments':
        emit('response.function_call_arguments.delta', {
          item_id: itemIds.function_call,
          output_index: outputIndex,
          delta: piece.text,
        });
        return;
    }
  };

  if (run.stream) {
    response.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
    emit('response.created', { response: responseObject(frame, 'in_progress', [], null) });
    emit('response.in_progress', { response: responseObject(frame, 'in_progress', [], null) });
  }

  const sequence = deps.loop.submit({
    id: frame.id,
    promptTokens: prompt.tokens,
    outputTokens,
    finishReason: endReason,
    outputTokenAt: (index) => output.tokenAt(index),
    maxTokensParam: prompt.maxTokens,
    ...(run.cacheSalt === undefined ? {} : { cacheSalt: run.cacheSalt }),
    ...(run.target.lora === undefined ? {} : { lora: run.target.lora }),
    listener: {
      onToken(_sequence, tokenIndex) {
        const pieces = turn.pieces(tokenIndex, output.textAt(tokenIndex));
        if (run.stream && !response.destroyed) for (const piece of pieces) streamPiece(piece);
      },
      onFinish(done, reason) {
        finished = true;
        if (response.destroyed) return;
        const items = completedItems();
        const usage = {
          inputTokens: prompt.tokens.length,
          cachedTokens: done.cachedTokens ?? 0,
          outputTokens: done.outputCount,
          reasoningTokens: turn.reasoningCount(done.outputCount),
        };
        // vLLM's Responses status: `incomplete` when max_output_tokens cut the answer.
        const status = reason === 'length' ? 'incomplete' : 'completed';
        const body = responseObject(frame, status, items, usage);
        if (frame.store)
          run.store.put(frame.id, {
            response: body,
            history: [...run.historyBefore, ...responsesChatMessages(null, items as ResponseInputItem[])],
          });
        if (!run.stream) {
          const json = JSON.stringify(body);
          response.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
          response.end(json);
          return;
        }
        closeItem();
        // vLLM ends every stream with `response.completed`, an `incomplete` response too (OpenAI would send `response.incomplete`).
        response.end(responseEvent('response.completed', sequenceNumber++, { response: body }));
      },
    },
  });
  response.on('close', () => {
    if (!finished) deps.loop.abort(sequence);
  });
}
