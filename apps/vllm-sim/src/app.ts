import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance } from 'fastify';
import type { DataParallelRanks } from './engine/data-parallel';
import type { Engine } from './engine/engine';
import type { EventHashForm } from './kv-events/vllm-block-hash';
import { EngineError, engineErrorBody } from './engine-errors';
import type { ConnectionGate, FaultInjector } from './faults';
import type { ResponseLatency } from './generation/response-latency';
import type { CachedTokensReporting } from './generation/serve-generation';
import type { MetricsDialect } from './metrics/render-metrics';
import type { BootstrapRooms } from './generation/bootstrap-rooms';
import type { PdRole, SideChannel } from './generation/kv-transfer-params';
import { generationRoutes } from './routes/generation-routes';
import { messagesRoutes } from './routes/messages-routes';
import { metricsRoutes } from './routes/metrics-routes';
import { kvCacheDebugRoutes } from './routes/kv-cache-debug-routes';
import type { LoraRegistry } from './lora/lora-registry';
import { loraRoutes } from './routes/lora-routes';
import { modelsRoutes } from './routes/models-routes';
import { poolingRoutes } from './routes/pooling-routes';
import { probesRoutes } from './routes/probes-routes';
import { ResponseStore } from './responses/response-store';
import { responsesRoutes } from './routes/responses-routes';
import { simControlRoutes } from './routes/sim-control-routes';
import type { PromptCodec } from './text/prompt-codec';

/** Everything the HTTP layer needs, resolved from config by the caller. */
export interface SimAppDeps {
  /** The data-parallel ranks (one without --data-parallel-size). */
  readonly ranks: DataParallelRanks;
  /** How KV events name blocks, for the debug endpoint; null when events are off. */
  readonly kvEventHashes: EventHashForm | null;
  readonly faults: FaultInjector;
  readonly latency: ResponseLatency;
  readonly servedModel: string;
  /** Token ids of prompts and outputs: cl100k + ChatML, or the model's (--tokenizer). */
  readonly codec: PromptCodec;
  readonly dialect: MetricsDialect;
  readonly seed: number;
  readonly defaultMaxTokens: number;
  readonly eosRandom: boolean;
  /** Chance that a chat request with tools and tool_choice "auto" calls one. */
  readonly toolCallProbability: number;
  /** Output tokens each chat answer reasons for first (0 = off). */
  readonly reasoningTokens: number;
  readonly cachedTokensReporting: CachedTokensReporting;
  readonly slots: number;
  readonly bodyLimitBytes: number;
  /** Responses API responses kept for `previous_response_id` and `GET` (0: none stored). */
  readonly maxStoredResponses: number;
  readonly startedAtUnixSeconds: number;
  readonly logger: FastifyBaseLogger | false;
  /** Counts valid generation requests as they arrive (createSimServer's `generationRequestsReceived`). */
  readonly onGenerationRequest?: () => void;
  /** Lets `/sim/refuse-connections` stop the listener; null when the server was not started by main. */
  readonly connectionGate: () => ConnectionGate | null;
  /** Prefill/decode role (`--pd-role`) and how a prefill instance names itself to the decode side. */
  readonly pdRole: PdRole;
  readonly sideChannel: SideChannel;
  readonly bootstrapRooms: BootstrapRooms;
  /** The served model and its LoRA adapters (`model` of every request is resolved here). */
  readonly models: LoraRegistry;
  /**
   * Runtime LoRA loading (`POST /v1/load_lora_adapter`, `/v1/unload_lora_adapter`): the wall ms a load takes, or
   * null when not allowed (the routes are then absent, as in vLLM without VLLM_ALLOW_RUNTIME_LORA_UPDATING).
   */
  readonly runtimeLoraLoadWallMs: number | null;
}

/** Engine version string reported by `GET /version`, per dialect. */
const ENGINE_VERSION: Record<MetricsDialect, string> = {
  vllm: '0.11.0',
  'vllm-v0': '0.6.4.post1',
  sglang: '0.5.2',
  llamacpp: 'b6500',
};

/**
 * Builds the simulator's Fastify app: plugins and routes registered explicitly, in order. No listen
 * (main.ts or a test does that).
 */
export async function buildSimApp(deps: SimAppDeps): Promise<FastifyInstance> {
  const engine: Engine = deps.ranks.engine;
  const engines = deps.ranks.loops.map((loop) => loop.engine);
  const serverOptions = {
    bodyLimit: deps.bodyLimitBytes,
    // Streams and long prefills can take minutes; the engine, not the HTTP server, decides.
    requestTimeout: 0,
    keepAliveTimeout: 65_000,
    // One log line per request would cost more than simulating it; errors are still logged.
    logController: new LogController({ disableRequestLogging: true }),
  };
  const app: FastifyInstance =
    deps.logger === false
      ? Fastify({ ...serverOptions, logger: false })
      : (Fastify({ ...serverOptions, loggerInstance: deps.logger }) as unknown as FastifyInstance);

  app.setErrorHandler((error: FastifyError | EngineError, request, reply) => {
    const engineError = toEngineError(error);
    if (engineError.status >= 500 && !(error instanceof EngineError))
      request.log.error({ err: error }, 'unexpected error');
    return reply.code(engineError.status).send(engineErrorBody(deps.dialect, engineError));
  });
  app.setNotFoundHandler((_request, reply) => reply.code(404).send({ detail: 'Not Found' }));

  const limits = { maxModelLen: engine.maxModelLen, defaultMaxTokens: deps.defaultMaxTokens };
  const generation = {
    loop: deps.ranks.size === 1 ? deps.ranks.loop(0) : deps.ranks,
    ranks: deps.ranks,
    codec: deps.codec,
    seed: deps.seed,
    eosRandom: deps.eosRandom,
    cachedTokensReporting: deps.cachedTokensReporting,
    faults: deps.faults,
    latency: deps.latency,
    sideChannel: deps.sideChannel,
    bootstrapRooms: deps.bootstrapRooms,
    models: deps.models,
  };
  // One agent plan for chat, Responses and Messages turns (generation/agent-turn.ts).
  const agent = {
    seed: deps.seed,
    toolCallProbability: deps.toolCallProbability,
    reasoningTokens: deps.reasoningTokens,
  };
  await app.register(generationRoutes, {
    servedModel: deps.servedModel,
    limits,
    faults: deps.faults,
    agent,
    pdRole: deps.pdRole,
    ...(deps.onGenerationRequest === undefined ? {} : { onGenerationRequest: deps.onGenerationRequest }),
    generation,
  });
  await app.register(messagesRoutes, { servedModel: deps.servedModel, limits, faults: deps.faults, generation, agent });
  await app.register(poolingRoutes, {
    servedModel: deps.servedModel,
    maxModelLen: engine.maxModelLen,
    codec: deps.codec,
    bodyLimitBytes: deps.bodyLimitBytes,
  });
  await app.register(responsesRoutes, {
    servedModel: deps.servedModel,
    limits,
    generation,
    faults: deps.faults,
    store: new ResponseStore(deps.maxStoredResponses),
    agent,
  });
  await app.register(modelsRoutes, {
    servedModel: deps.servedModel,
    maxModelLen: engine.maxModelLen,
    createdUnixSeconds: deps.startedAtUnixSeconds,
    models: deps.models,
  });
  if (deps.runtimeLoraLoadWallMs !== null)
    await app.register(loraRoutes, { models: deps.models, loadWallMs: deps.runtimeLoraLoadWallMs });
  await app.register(probesRoutes, {
    dialect: deps.dialect,
    faults: deps.faults,
    version: ENGINE_VERSION[deps.dialect],
  });
  await app.register(metricsRoutes, {
    engines,
    dialect: deps.dialect,
    servedModel: deps.servedModel,
    startedAtUnixSeconds: deps.startedAtUnixSeconds,
    slots: deps.slots,
  });
  await app.register(kvCacheDebugRoutes, { engines, hashForm: deps.kvEventHashes });
  await app.register(simControlRoutes, {
    ranks: deps.ranks,
    latency: deps.latency,
    models: deps.models,
    limits,
    codec: deps.codec,
    faults: deps.faults,
    bootstrapRooms: deps.bootstrapRooms,
    get connectionGate() {
      return deps.connectionGate();
    },
  });
  return app;
}

/** Fastify's own 4xx errors (bad JSON, body too large, wrong content type) keep their status. */
function toEngineError(error: FastifyError | EngineError): EngineError {
  if (error instanceof EngineError) return error;
  const status = error.statusCode ?? 500;
  if (status === 413) return new EngineError('too-large', `Request body is too large: ${error.message}`, 413);
  if (status >= 400 && status < 500) return new EngineError('bad-request', error.message, status);
  return new EngineError('internal', 'Internal server error.');
}
