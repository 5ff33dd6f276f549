import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { buildSimApp } from './app';
import type { SimConfig } from './config';
import { Engine } from './engine/engine';
import { EngineLoop, realClock, type LoopClock } from './engine/engine-loop';
import { getProfile } from './engine/profiles';
import { seededRandom } from '@kvroute/workloads';
import { FaultInjector, type ConnectionGate } from './faults';
import { ResponseLatency } from './generation/response-latency';

export interface SimServer {
  readonly app: FastifyInstance;
  readonly engine: Engine;
  readonly loop: EngineLoop;
  readonly faults: FaultInjector;
  readonly servedModel: string;
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
}

/** Builds one simulated backend from its config: engine, real-time loop, fault injector, HTTP app. */
export async function createSimServer(config: SimConfig, deps: SimServerDeps = {}): Promise<SimServer> {
  const profile = getProfile(config.profile);
  const engine = new Engine({
    profile,
    version: config.engineVersion ?? (config.metricsDialect === 'vllm-v0' ? 'v0' : 'v1'),
    ...(config.maxModelLen === undefined ? {} : { maxModelLen: config.maxModelLen }),
    ...(config.numGpuBlocks === undefined ? {} : { numGpuBlocks: config.numGpuBlocks }),
    cacheAt: config.cacheAt,
  });
  const loop = new EngineLoop(engine, deps.clock ?? realClock, config.timeScale);
  const faults = new FaultInjector(seededRandom(config.seed));
  const servedModel = config.model ?? profile.defaultModel;
  let gate: ConnectionGate | null = null;
  let refuseTimer: NodeJS.Timeout | null = null;
  let generationRequestsReceived = 0;

  const app = await buildSimApp({
    loop,
    faults,
    latency: new ResponseLatency(),
    servedModel,
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
    startedAtUnixSeconds: (deps.nowUnixSeconds ?? (() => Date.now() / 1000))(),
    logger: deps.logger ?? false,
    connectionGate: () => gate,
    onGenerationRequest: () => {
      generationRequestsReceived += 1;
    },
  });

  return {
    app,
    engine,
    loop,
    faults,
    servedModel,
    get generationRequestsReceived() {
      return generationRequestsReceived;
    },
    async listen() {
      const address = await app.listen({ host: config.host, port: config.port });
      const port = (app.server.address() as { port: number }).port;
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
      loop.stop();
      await app.close();
    },
  };
}
