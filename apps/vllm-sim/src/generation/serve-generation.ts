import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { encodeSseData, SSE_DONE } from '@kvroute/protocols';
import type { Sequence, SequenceListener } from '../engine/engine';
import { DATA_PARALLEL_RANK_HEADER, type DataParallelRanks, type SequenceRunner } from '../engine/data-parallel';
import type { FinishReason } from '../engine/engine-stats';
import type { FaultInjector } from '../faults';
import { OutputText } from '../text/output-text';
import type { PromptCodec } from '../text/prompt-codec';
import type { LoraRegistry, ModelTarget } from '../lora/lora-registry';
import type { BootstrapRooms } from './bootstrap-rooms';
import { notifyPrefillDone, prefillAnswerParams, type KvTransferPlan, type SideChannel } from './kv-transfer-params';
import type { PreparedPrompt } from './prepare-prompts';
import type { ResponseLatency } from './response-latency';
import { ChoiceTurn, pieceDelta, turnEnd, type TurnPlan } from './agent-turn';
import {
  buildUsage,
  chatDeltaChunk,
  chatRoleChunk,
  completeResponse,
  createDeltaEventEncoder,
  SIM_SYSTEM_FINGERPRINT,
  terminalFingerprintOf,
  usageChunk,
  type EndpointKind,
  type ResponseIdentity,
} from './response-format';

export type CachedTokensReporting = 'off' | 'on-hit' | 'always';

export interface GenerationDeps {
  /** Where sequences run: the balancer over the data-parallel ranks, or one rank (withRequestedRank). */
  readonly loop: SequenceRunner;
  readonly ranks: DataParallelRanks;
  /** The sim's tokenizer and template: prompts, and the words generated text is made of. */
  readonly codec: PromptCodec;
  readonly seed: number;
  readonly eosRandom: boolean;
  readonly cachedTokensReporting: CachedTokensReporting;
  readonly faults: FaultInjector;
  readonly latency: ResponseLatency;
  /** The served model and LoRA adapters: what a request's `model` may name. */
  readonly models: LoraRegistry;
  /** Prefill/decode (`--pd-role`): how a prefill instance names itself in its answer's params. */
  readonly sideChannel?: SideChannel;
  /** SGLang prefill/decode: the rooms a prefill sim opens for decode sims. */
  readonly bootstrapRooms?: BootstrapRooms;
}

export interface GenerationRequest {
  readonly kind: EndpointKind;
  readonly model: string;
  readonly prompts: readonly PreparedPrompt[];
  readonly stream: boolean;
  readonly includeUsage: boolean;
  readonly ignoreEos: boolean;
  readonly cacheSalt: string | undefined;
  /** The LoRA adapter its `model` names; none: the base model. */
  readonly target: ModelTarget;
  /** Chat: reasoning and tool call to produce (PLAIN_TURN for text completions). */
  readonly turn: TurnPlan;
  /** `performance.now()` when the route handler started (before fault delays). */
  readonly receivedAtMs: number;
  /** Its part in prefill/decode (`kv_transfer_params`); null or absent: none. Served for one choice (n = 1) only. */
  readonly kvTransfer?: KvTransferPlan | null;
}

/** The deps for one request: its `X-data-parallel-rank` rank, or the balancer (400 when out of range). */
export function withRequestedRank(deps: GenerationDeps, headers: IncomingHttpHeaders): GenerationDeps {
  const loop = deps.ranks.runnerFor(headers[DATA_PARALLEL_RANK_HEADER]);
  return loop === deps.loop ? deps : { ...deps, loop };
}

/**
 * Runs one OpenAI request on the engine and writes the answer to `response` (Fastify has handed the
 * raw response over). Streams send one SSE event per generated token as the step that produced it
 * ends; a client that disconnects aborts its sequences at once, freeing their KV blocks.
 */
export function serveGeneration(deps: GenerationDeps, request: GenerationRequest, response: ServerResponse): void {
  const identity: ResponseIdentity = {
    id: `${request.kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID().replaceAll('-', '')}`,
    created: Math.floor(Date.now() / 1000),
    model: request.model,
    systemFingerprint: SIM_SYSTEM_FINGERPRINT,
  };
  // An SGLang prefill engine computes the prompt and its first token; the decode engine generates the rest.
  const bootstrapPrefill = request.prompts.length === 1 && request.kvTransfer?.kind === 'bootstrap-prefill';
  const choices = request.prompts.map((prompt) => {
    const output = new OutputText(deps.codec.outputWords, deps.seed, prompt.tokens);
    const eosLength = bootstrapPrefill
      ? 1
      : deps.eosRandom && !request.ignoreEos
        ? 1 + Math.floor(output.fraction() * prompt.maxTokens)
        : prompt.maxTokens;
    const turn = new ChoiceTurn(request.turn, eosLength);
    const endReason = turnEnd(request.turn, eosLength, prompt.maxTokens);
    return {
      prompt,
      output,
      turn,
      outputTokens: eosLength,
      endReason,
      text: '',
      finishReason: null as FinishReason | null,
      sequence: null as Sequence | null,
    };
  });
  let unfinished = choices.length;
  const kvTransfer = choices.length === 1 ? (request.kvTransfer ?? null) : null;
  let clientGone = false;
  let dropAfterFirstToken = request.stream && deps.faults.shouldDropStream();

  const send = (payload: object): void => {
    response.write(encodeSseData(JSON.stringify(payload)));
  };
  const terminalFingerprint = terminalFingerprintOf(identity, request.includeUsage);
  const encodeDelta = createDeltaEventEncoder(request.kind, identity, terminalFingerprint);

  const finishResponse = (): void => {
    const usage = buildUsage({
      promptTokens: choices.reduce((sum, choice) => sum + choice.prompt.tokens.length, 0),
      completionTokens: choices.reduce((sum, choice) => sum + (choice.sequence?.outputCount ?? 0), 0),
      cachedTokens: reportedCachedTokens(
        deps.cachedTokensReporting,
        choices.reduce((sum, choice) => sum + (choice.sequence?.cachedTokens ?? 0), 0),
      ),
    });
    if (request.stream) {
      if (request.includeUsage) send(usageChunk(request.kind, identity, usage));
      response.end(encodeSseData(SSE_DONE));
      return;
    }
    const body = JSON.stringify(
      completeResponse(
        request.kind,
        identity,
        choices.map((choice) =>
          request.kind === 'chat'
            ? {
                text: '',
                finishReason: choice.turn.finishReason(choice.finishReason ?? 'abort'),
                message: choice.turn.message(),
              }
            : { text: choice.text, finishReason: choice.finishReason ?? 'abort' },
        ),
        usage,
        kvTransfer?.kind === 'prefill' ? prefillParamsOf(deps, choices[0]?.sequence ?? null) : null,
      ),
    );
    response.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    response.end(body);
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
    if (unfinished === 0) return;
    clientGone = true;
    for (const choice of choices) if (choice.sequence) deps.loop.abort(choice.sequence);
  });

  const submittedAtMs = performance.now();
  choices.forEach((choice, index) => {
    const listener: SequenceListener = {
      onToken(sequence, outputIndex, nowMs) {
        if (outputIndex === 0 && index === 0) {
          // The pull is done once the first token exists: the prefill side may free its blocks.
          notifyPrefillDone(kvTransfer);
          const wallNow = performance.now();
          deps.latency.record({
            wallTtftMs: wallNow - request.receivedAtMs,
            engineTtftWallMs: (nowMs - sequence.arrivalMs) / deps.loop.timeScale,
            admissionMs: submittedAtMs - request.receivedAtMs,
          });
        }
        const piece = choice.output.textAt(outputIndex);
        // The whole text is only needed for a non-streaming answer (a chat turn accumulates its own).
        if (!request.stream) {
          if (request.kind === 'chat') choice.turn.pieces(outputIndex, piece);
          else choice.text += piece;
          return;
        }
        if (clientGone) return;
        const isLast = sequence.outputCount >= choice.outputTokens;
        if (request.kind === 'chat' && outputIndex === 0) send(chatRoleChunk(identity, index));
        if (request.turn.reasoningTokens === 0 && request.turn.toolCall === null) {
          // The hot path: plain text, one pre-serialised event per token.
          response.write(encodeDelta(index, piece, isLast ? choice.endReason : null));
        } else {
          const pieces = choice.turn.pieces(outputIndex, piece);
          pieces.forEach((turnPiece, pieceIndex) => {
            const finish =
              isLast && pieceIndex === pieces.length - 1 ? choice.turn.finishReason(choice.endReason) : null;
            if (turnPiece.kind === 'content') response.write(encodeDelta(index, turnPiece.text, finish));
            else send(chatDeltaChunk(identity, index, pieceDelta(turnPiece), finish, terminalFingerprint));
          });
        }
        if (dropAfterFirstToken) {
          dropAfterFirstToken = false;
          response.destroy();
        }
      },
      onFinish(sequence, reason) {
        choice.finishReason = reason;
        if (kvTransfer?.kind === 'bootstrap-prefill' && reason !== 'abort') {
          deps.bootstrapRooms?.open(kvTransfer.room, { requestId: sequence.id, tokens: sequence.promptLength });
        }
        unfinished--;
        if (unfinished === 0 && !clientGone) finishResponse();
      },
    };
    choice.sequence = deps.loop.submit({
      id: `${identity.id}-${index}`,
      promptTokens: choice.prompt.tokens,
      outputTokens: choice.outputTokens,
      finishReason: choice.endReason,
      outputTokenAt: (outputIndex) => choice.output.tokenAt(outputIndex),
      maxTokensParam: choice.prompt.maxTokens,
      ...(request.cacheSalt === undefined ? {} : { cacheSalt: request.cacheSalt }),
      ...(request.target.lora === undefined ? {} : { lora: request.target.lora }),
      ...(kvTransfer?.kind === 'prefill' || kvTransfer?.kind === 'bootstrap-prefill'
        ? { holdForRemoteDecode: true }
        : {}),
      ...(kvTransfer?.kind === 'decode'
        ? { remotePrefillTokens: kvTransfer.remoteTokens ?? choice.prompt.tokens.length }
        : {}),
      listener,
    });
  });
}

/** vLLM reports `cached_tokens` only on a hit (and only with --enable-prompt-tokens-details). */
function reportedCachedTokens(reporting: CachedTokensReporting, cachedTokens: number): number | null {
  if (reporting === 'off') return null;
  if (reporting === 'on-hit' && cachedTokens === 0) return null;
  return cachedTokens;
}

/** The params a prefill instance answers for its finished `sequence`, from the rank that holds its blocks. */
function prefillParamsOf(deps: GenerationDeps, sequence: Sequence | null): Record<string, unknown> | null {
  if (sequence === null || deps.sideChannel === undefined) return null;
  for (const loop of deps.ranks.loops) {
    const params = prefillAnswerParams(loop.engine, sequence, deps.sideChannel, Date.now() / 1000);
    if (params !== null) return params;
  }
  return null;
}
