import type { FastifyInstance } from 'fastify';
import { ChatCompletionRequest, CompletionRequest } from '@kvroute/protocols';
import { DATA_PARALLEL_RANK_HEADER, parseRankHeader, type DataParallelRanks } from '../engine/data-parallel';
import type { EngineLoop } from '../engine/engine-loop';
import type { ResponseLatency } from '../generation/response-latency';
import { FaultSettings, type ConnectionGate, type FaultInjector } from '../faults';
import {
  prepareChatPrompts,
  prepareCompletionPrompts,
  type PreparedPrompt,
  type PromptLimits,
} from '../generation/prepare-prompts';
import { EngineError } from '../engine-errors';
import type { BootstrapRooms } from '../generation/bootstrap-rooms';
import type { PromptCodec } from '../text/prompt-codec';
import type { LoraRegistry } from '../lora/lora-registry';
import { parseSaltedBody } from './generation-routes';

export interface SimControlRoutesOptions {
  readonly ranks: DataParallelRanks;
  readonly latency: ResponseLatency;
  /** The served model and LoRA adapters (`/sim/match` looks under the adapter `model` names). */
  readonly models: LoraRegistry;
  readonly limits: PromptLimits;
  /** The sim's tokenizer and template (`/sim/match` prepares prompts as generation does). */
  readonly codec: PromptCodec;
  readonly faults: FaultInjector;
  readonly connectionGate: ConnectionGate | null;
  /** SGLang prefill/decode rooms this sim opens (a prefill role); absent: none. */
  readonly bootstrapRooms?: BootstrapRooms;
}

/** How long a decode sim's room request waits for the room to open, ms (its own wait is as long). */
const BOOTSTRAP_WAIT_MS = 30_000;

/**
 * Simulator-only endpoints under `/sim/…`, off the OpenAI paths:
 * - `POST /sim/match`: what the bench's oracles ask. Takes a chat or completion body and returns the
 *   prompt tokens this backend would serve from its cache right now (what `cached_tokens` of the same
 *   request would say if it were sent now): the true match a placement can be chosen on. (The most
 *   reuse any placement could get is the bench's compulsory-miss bound, not this.)
 *   With data-parallel ranks: the rank `X-data-parallel-rank` names, else the best rank (`ranks` lists each).
 * - `GET /sim/state`: queue, KV and cache figures as JSON (summed over ranks, each in `data_parallel_ranks`).
 * - `POST /sim/reset-cache`: forget every cached prefix on every rank (a cold start without a restart).
 * - `GET|POST|DELETE /sim/faults`: read, change (partial update) or clear fault injection.
 * - `POST /sim/refuse-connections` `{ "durationMs": N }`: stop listening for N ms (connection refused).
 * - `GET /sim/lora`: per rank, adapters loaded in CPU memory and holding GPU slots (least recently used first)
 *   and loads from disk per adapter since start (also `kvroute_sim_lora_loads_total` on /metrics).
 */
export async function simControlRoutes(app: FastifyInstance, options: SimControlRoutesOptions): Promise<void> {
  const { ranks } = options;
  const engine = ranks.engine;

  app.post('/sim/match', async (request) => {
    const body = request.body as Record<string, unknown> | undefined;
    const loraName = body && typeof body.model === 'string' ? options.models.resolve(body.model).lora?.name : undefined;
    // The same checks as the real request, cache_salt included (a salt the engine would refuse is a
    // 400 here too), so the oracle's answer is what cached_tokens would say.
    let prompts: PreparedPrompt[];
    let salt: string | undefined;
    if (body && 'messages' in body) {
      const parsed = parseSaltedBody(ChatCompletionRequest, body, engine.version);
      prompts = prepareChatPrompts(options.codec, parsed.body, options.limits);
      salt = parsed.cacheSalt;
    } else {
      const parsed = parseSaltedBody(CompletionRequest, body, engine.version);
      prompts = prepareCompletionPrompts(options.codec, parsed.body, options.limits);
      salt = parsed.cacheSalt;
    }
    const requested = parseRankHeader(request.headers[DATA_PARALLEL_RANK_HEADER]);
    if (requested !== null) ranks.runnerFor(String(requested)); // 400 when out of range
    const perRank = ranks.loops.map((loop) =>
      prompts.map((prompt) => loop.engine.matchPrefixTokens(prompt.tokens, salt, loraName)),
    );
    const total = (cached: number[]) => cached.reduce((sum, tokens) => sum + tokens, 0);
    const totals = perRank.map(total);
    const chosen = requested ?? totals.indexOf(Math.max(...totals));
    const cached = perRank[chosen] as number[];
    return {
      prompt_tokens: prompts.reduce((sum, prompt) => sum + prompt.tokens.length, 0),
      cached_tokens: total(cached),
      prompts: prompts.map((prompt, index) => ({ prompt_tokens: prompt.tokens.length, cached_tokens: cached[index] })),
      ...(ranks.size > 1 ? { data_parallel_rank: chosen, ranks: totals } : {}),
    };
  });

  app.get('/sim/state', async () => {
    const states = ranks.loops.map(rankState);
    return {
      profile: engine.profile.name,
      engine_version: engine.version,
      ...(states.length === 1 ? states[0] : sumRankStates(states)),
      // Handler entry → first token written (wall ms), and the engine's TTFT for the same requests.
      ttft_requests: options.latency.requests,
      ttft_wall_ms_total: options.latency.wallTtftMsTotal,
      ttft_engine_ms_total: options.latency.engineTtftMsTotal,
      admission_ms_total: options.latency.admissionMsTotal,
      ...(states.length === 1 ? {} : { data_parallel_ranks: states }),
    };
  });

  // Prefill/decode side channel: the decode sim read the blocks of `remote_request_id` (kv-transfer-params.ts).
  app.post('/sim/kv-transfer/done', async (request) => {
    const id = (request.body as { remote_request_id?: unknown } | null)?.remote_request_id;
    if (typeof id !== 'string') throw new EngineError('bad-request', 'remote_request_id must be a string');
    const holder = options.ranks.loops.find((loop) => loop.engine.holds.done(id));
    holder?.nudge();
    return { released: holder !== undefined };
  });

  // SGLang prefill/decode: a decode sim waits here for this prefill sim's room (bootstrap-rooms.ts).
  app.get('/sim/bootstrap/rooms/:room', async (request, reply) => {
    const { room } = request.params as { room: string };
    const open =
      options.bootstrapRooms === undefined ? null : await options.bootstrapRooms.wait(room, BOOTSTRAP_WAIT_MS);
    if (open === null) return reply.code(404).send({ detail: `room ${room} was not opened here` });
    return { remote_request_id: open.requestId, tokens: open.tokens };
  });

  app.get('/sim/lora', async () => ({
    adapters: options.models.list.map((adapter) => ({ name: adapter.name, id: adapter.id, path: adapter.path })),
    ranks: ranks.loops.map((loop) => {
      const lora = loop.engine.lora;
      return lora === null ? null : { loaded: lora.loaded, active: lora.active, loads: Object.fromEntries(lora.loads) };
    }),
  }));

  app.post('/sim/reset-cache', async () => {
    for (const loop of ranks.loops) loop.engine.resetPrefixCache();
    return { status: 'ok' };
  });

  app.get('/sim/faults', async () => options.faults.current);
  app.post('/sim/faults', async (request) => {
    const patch = FaultSettings.partial().safeParse(request.body ?? {});
    if (!patch.success)
      throw new EngineError(
        'bad-request',
        `Invalid fault settings: ${patch.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ')}`,
      );
    return options.faults.update(patch.data);
  });
  app.delete('/sim/faults', async () => {
    options.faults.clear();
    return options.faults.current;
  });

  app.post('/sim/refuse-connections', async (request, reply) => {
    const durationMs = Number((request.body as { durationMs?: unknown } | undefined)?.durationMs);
    if (!Number.isFinite(durationMs) || durationMs <= 0 || durationMs > 600_000) {
      throw new EngineError('bad-request', 'durationMs must be a number of milliseconds in (0, 600000].');
    }
    if (!options.connectionGate)
      throw new EngineError('bad-request', 'This server cannot stop listening (not started by main).');
    // Answer first, then stop listening: the caller learns it worked.
    reply.raw.once('finish', () => void options.connectionGate?.refuseFor(durationMs));
    return { status: 'refusing', durationMs };
  });
}

type RankState = ReturnType<typeof rankState>;

/** One rank's queue, KV and cache figures, and its loop's lag. */
function rankState(loop: EngineLoop) {
  const { engine, lag } = loop;
  return {
    running: engine.runningCount,
    waiting: engine.waitingCount,
    kv_cache_usage: engine.pool.usage(),
    num_gpu_blocks: engine.pool.numGpuBlocks,
    free_blocks: engine.pool.freeCount,
    cached_blocks: engine.pool.cachedBlockCount,
    evicted_blocks: engine.pool.evictions,
    prefix_cache_queries_tokens: engine.stats.prefixQueryTokens,
    prefix_cache_hits_tokens: engine.stats.prefixHitTokens,
    preemptions: engine.stats.preemptions,
    steps: engine.stats.steps,
    // Wall ms by which step results came out after their deadline (timers + this process's CPU).
    loop_lag_steps: lag.steps,
    loop_lag_ms_total: lag.totalMs,
    loop_lag_ms_mean: lag.steps === 0 ? 0 : lag.totalMs / lag.steps,
    loop_lag_ms_max: lag.maxMs,
  };
}

/** The ranks together: counts summed, KV usage and mean lag averaged, the largest lag kept. */
function sumRankStates(states: readonly RankState[]): RankState {
  const sum = { ...(states[0] as RankState) };
  for (const state of states.slice(1))
    for (const key of Object.keys(sum) as Array<keyof RankState>) sum[key] += state[key];
  sum.kv_cache_usage /= states.length;
  sum.loop_lag_ms_mean = sum.loop_lag_steps === 0 ? 0 : sum.loop_lag_ms_total / sum.loop_lag_steps;
  sum.loop_lag_ms_max = Math.max(...states.map((state) => state.loop_lag_ms_max));
  return sum;
}
