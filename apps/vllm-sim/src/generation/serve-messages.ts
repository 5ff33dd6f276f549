import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { MessagesUsage } from '@kvroute/protocols';
import type { SequenceListener } from '../engine/engine';
import { OutputText } from '../text/output-text';
import { ChoiceTurn, turnEnd, type TurnPiece, type TurnPlan } from './agent-turn';
import type { PreparedPrompt } from './prepare-prompts';
import type { GenerationDeps } from './serve-generation';
import type { ModelTarget } from '../lora/lora-registry';

export interface MessagesGeneration {
  readonly model: string;
  readonly prompt: PreparedPrompt;
  readonly stream: boolean;
  readonly cacheSalt: string | undefined;
  /** The LoRA adapter its `model` names; none: the base model. */
  readonly target: ModelTarget;
  /** Reasoning and tool call to produce (generation/agent-turn.ts, shared with chat and Responses). */
  readonly turn: TurnPlan;
  /** `performance.now()` when the route handler started. */
  readonly receivedAtMs: number;
}

type BlockKind = 'thinking' | 'text' | 'tool_use';

/**
 * Runs one Anthropic Messages request on the engine (one sequence) and writes the Anthropic answer.
 * The turn is the shared agent plan: R reasoning tokens (a `thinking` block, vLLM's Anthropic endpoint
 * with a reasoning parser), then a `text` block or one `tool_use` block (`stop_reason: "tool_use"`):
 *
 * - a stream, as Anthropic and vLLM frame it (`event:` + `data:`): `message_start` (its usage) at the
 *   first token (after the prefill, when the cached tokens are known, as vLLM sends it with its first
 *   chunk); per block `content_block_start` (thinking `{thinking: ""}`, text `{text: ""}`, tool_use
 *   `{id, name, input: {}}` with the call's first token), one `content_block_delta` per token
 *   (`thinking_delta`, `text_delta`, `input_json_delta` with the argument piece), `content_block_stop`
 *   (a thinking block's preceded by its `signature_delta`); then `message_delta` (stop_reason and
 *   the final usage), `message_stop`;
 * - otherwise one `message` object whose `content` holds the same blocks (thinking with its
 *   `signature`; tool_use with the parsed `input`). vLLM's tool_use id is the chat tool call's
 *   (`chatcmpl-tool-…`); the sim uses Anthropic's `toolu_` form, which clients see from Anthropic.
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
  const output = new OutputText(deps.codec.outputWords, deps.seed, prompt.tokens);
  const outputTokens = deps.eosRandom ? 1 + Math.floor(output.fraction() * prompt.maxTokens) : prompt.maxTokens;
  const endReason = turnEnd(request.turn, outputTokens, prompt.maxTokens);
  // Anthropic's tool-use ids: `toolu_` and base62-ish characters (hex here).
  const turn = new ChoiceTurn(
    request.turn,
    outputTokens,
    () => `toolu_${randomUUID().replaceAll('-', '').slice(0, 24)}`,
  );
  let clientGone = false;
  let finished = false;
  /** The block being streamed and its index. */
  let openBlock: BlockKind | null = null;
  let blockIndex = -1;
  const usageOf = (cachedTokens: number, generated: number): MessagesUsage =>
    deps.cachedTokensReporting === 'off'
      ? { input_tokens: prompt.tokens.length, output_tokens: generated }
      : {
          input_tokens: prompt.tokens.length - cachedTokens,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: cachedTokens,
          output_tokens: generated,
        };
  const event = (name: string, data: object): void => {
    response.write(`event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`);
  };
  const stopReason = (): string => (turn.toolCalled ? 'tool_use' : endReason === 'stop' ? 'end_turn' : 'max_tokens');

  // vLLM signs a thinking block with a random 32-hex "signature" (it verifies none): non-streaming in
  // the block, streaming as a `signature_delta` just before the block stops.
  const thinkingSignature = randomUUID().replaceAll('-', '');
  const closeBlock = (): void => {
    if (openBlock === null) return;
    if (openBlock === 'thinking')
      event('content_block_delta', {
        index: blockIndex,
        delta: { type: 'signature_delta', signature: thinkingSignature },
      });
    openBlock = null;
    event('content_block_stop', { index: blockIndex });
  };
  const openBlockFor = (kind: BlockKind, contentBlock: object): void => {
    if (openBlock === kind) return;
    closeBlock();
    openBlock = kind;
    blockIndex++;
    event('content_block_start', { index: blockIndex, content_block: contentBlock });
  };
  const streamPiece = (piece: TurnPiece): void => {
    switch (piece.kind) {
      case 'reasoning':
        openBlockFor('thinking', { type: 'thinking', thinking: '' });
        event('content_block_delta', { index: blockIndex, delta: { type: 'thinking_delta', thinking: piece.text } });
        return;
      case 'content':
        openBlockFor('text', { type: 'text', text: '' });
        event('content_block_delta', { index: blockIndex, delta: { type: 'text_delta', text: piece.text } });
        return;
      case 'tool-start':
        openBlockFor('tool_use', { type: 'tool_use', id: piece.id, name: piece.name, input: {} });
        return;
      case 'tool-arguments':
        event('content_block_delta', {
          index: blockIndex,
          delta: { type: 'input_json_delta', partial_json: piece.text },
        });
        return;
    }
  };
  const contentBlocks = (): object[] => {
    const blocks: object[] = [];
    if (turn.reasoning !== '')
      blocks.push({ type: 'thinking', thinking: turn.reasoning, signature: thinkingSignature });
    if (turn.toolCalled && request.turn.toolCall)
      blocks.push({
        type: 'tool_use',
        id: turn.toolCallId,
        name: request.turn.toolCall.name,
        input: JSON.parse(turn.toolArguments) as unknown,
      });
    else if (turn.answers) blocks.push({ type: 'text', text: turn.content });
    return blocks;
  };

  if (request.stream) {
    response.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
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
      const pieces = turn.pieces(outputIndex, output.textAt(outputIndex));
      if (!request.stream || clientGone) return;
      if (outputIndex === 0) {
        const message = {
          id,
          type: 'message',
          role: 'assistant',
          content: [],
          model: request.model,
          stop_reason: null,
          stop_sequence: null,
          usage: usageOf(current.cachedTokens ?? 0, 0),
        };
        event('message_start', { message });
      }
      for (const piece of pieces) streamPiece(piece);
    },
    onFinish(current) {
      finished = true;
      if (clientGone) return;
      const usage = usageOf(current.cachedTokens ?? 0, current.outputCount);
      if (request.stream) {
        closeBlock();
        event('message_delta', { delta: { stop_reason: stopReason(), stop_sequence: null }, usage });
        event('message_stop', {});
        response.end();
        return;
      }
      const body = JSON.stringify({
        id,
        type: 'message',
        role: 'assistant',
        content: contentBlocks(),
        model: request.model,
        stop_reason: stopReason(),
        stop_sequence: null,
        usage,
      });
      response.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      response.end(body);
    },
  };
  const submittedAtMs = performance.now();
  const sequence = deps.loop.submit({
    id,
    promptTokens: prompt.tokens,
    outputTokens,
    finishReason: endReason,
    outputTokenAt: (index) => output.tokenAt(index),
    maxTokensParam: prompt.maxTokens,
    ...(request.cacheSalt === undefined ? {} : { cacheSalt: request.cacheSalt }),
    ...(request.target.lora === undefined ? {} : { lora: request.target.lora }),
    listener,
  });
}
