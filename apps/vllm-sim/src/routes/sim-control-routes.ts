import type { FastifyInstance } from 'fastify';
import { ChatCompletionRequest, CompletionRequest } from '@kvroute/protocols';
import type { Engine } from '../engine/engine';
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
import { checkModel, parseSaltedBody } from './generation-routes';

export interface SimControlRoutesOptions {
  readonly engine: Engine;
  readonly loop: EngineLoop;
  readonly latency: ResponseLatency;
  readonly servedModel: string;
  readonly limits: PromptLimits;
  readonly faults: FaultInjector;
  readonly connectionGate: ConnectionGate | null;
}

/**
 * Simulator-only endpoints under `/sim/…`, off the OpenAI paths:
 * - `POST /sim/match`: what the bench's oracles ask. Takes a chat or completion body and returns the
 *   prompt tokens this backend would serve from its cache right now (what `cached_tokens` of the same
 *   request would say if it were sent now): the true match a placement can be chosen on. (The most
 *   reuse any placement could get is the bench's compulsory-miss bound, not this.)
 * - `GET /sim/state`: queue, KV and cache figures as JSON.
 * - `POST /sim/reset-cache`: forget every cached prefix (a cold start without a restart).
 * - `GET|POST|DELETE /sim/faults`: read, change (partial update) or clear fault injection.
 * - `POST /sim/refuse-connections` `{ "durationMs": N }`: stop listening for N ms (connection refused).
 */
export async function simControlRoutes(app: FastifyInstance, options: SimControlRoutesOptions): Promise<void> {
  const { engine } = options;

  app.post('/sim/match', async (request) => {
    const body = request.body as Record<string, unknown> | undefined;
    if (body && typeof body.model === 'string') checkModel(body.model, options.servedModel);
    // The same checks as the real request, cache_salt included (a salt the engine would refuse is a
    // 400 here too), so the oracle's answer is what cached_tokens would say.
    let prompts: PreparedPrompt[];
    let salt: string | undefined;
    if (body && 'messages' in body) {
      const parsed = parseSaltedBody(ChatCompletionRequest, body, engine.version);
      prompts = prepareChatPrompts(parsed.body, options.limits);
      salt = parsed.cacheSalt;
    } else {
      const parsed = parseSaltedBody(CompletionRequest, body, engine.version);
      prompts = prepareCompletionPrompts(parsed.body, options.limits);
      salt = parsed.cacheSalt;
    }
    const perPrompt = prompts.map((prompt) => ({
      prompt_tokens: prompt.tokens.length,
      cached_tokens: engine.matchPrefixTokens(prompt.tokens, salt),
    }));
    return {
      prompt_tokens: perPrompt.reduce((sum, entry) => sum + entry.prompt_tokens, 0),
      cached_tokens: perPrompt.reduce((sum, entry) => sum + entry.cached_tokens, 0),
      prompts: perPrompt,
    };
  });

  app.get('/sim/state', async () => ({
    profile: engine.profile.name,
    engine_version: engine.version,
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
    loop_lag_steps: options.loop.lag.steps,
    loop_lag_ms_total: options.loop.lag.totalMs,
    loop_lag_ms_mean: options.loop.lag.steps === 0 ? 0 : options.loop.lag.totalMs / options.loop.lag.steps,
    loop_lag_ms_max: options.loop.lag.maxMs,
    // Handler entry → first token written (wall ms), and the engine's TTFT for the same requests.
    ttft_requests: options.latency.requests,
    ttft_wall_ms_total: options.latency.wallTtftMsTotal,
    ttft_engine_ms_total: options.latency.engineTtftMsTotal,
    admission_ms_total: options.latency.admissionMsTotal,
  }));

  app.post('/sim/reset-cache', async () => {
    engine.resetPrefixCache();
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
