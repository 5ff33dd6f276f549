import { AdapterLoader, LocalAdapterLoads } from '../lora/adapter-loader';
import { AdapterRouting } from '../lora/adapter-routing';
import { MAX_PREFILL_PARAMS_BYTES } from '@kvroute/protocols';
import { RedisAdapterLoads, RedisFlowQueue } from '@kvroute/redis-store';
import type { FastifyBaseLogger } from 'fastify';
import { generationLimitsOf, type RouterConfig } from '../config';
import { NODE_TIMERS } from '../one-shot-timers';
import type { FlowSettings } from '../flow/flow-config';
import { FlowControl } from '../flow/flow-control';
import { LocalFlowQueue } from '../flow/local-flow-queue';
import { createLearner, type Learner } from '../pipeline/learn';
import type { QueueDeps } from '../pipeline/queue';
import { requestLineStarter } from '../pipeline/request-log';
import type { RequestPathDeps } from '../pipeline/request-path';
import type { TryDeadlines } from '../pipeline/send';
import { STORED_RESPONSE_HEADERS_TIMEOUT_MS } from '../pipeline/stored-response';
import type { RouterMetrics } from '../router-metrics';
import type { LearnedFigures } from '../routes/debug-routes';
import { HeldLeases } from '../routing/held-leases';
import type { PolicyTable } from '../routing/policy-table';
import type { TokenRoutingDeps } from '../routing/token-routing';
import { ModelAccess } from '../tenants/model-access';
import type { BackendParts } from './backends-wiring';
import type { StateParts } from './state-wiring';
import type { TenantParts } from './tenants-wiring';

export interface RequestPathWiringDeps {
  readonly state: StateParts;
  readonly backends: BackendParts;
  readonly tenants: TenantParts;
  readonly policies: PolicyTable;
  readonly metrics: RouterMetrics;
  /** The request path's logger; each stage logs as a child (`component`). */
  readonly logger: FastifyBaseLogger;
  /** Wall-clock ms (the shared state's clock). */
  readonly nowMs: () => number;
  readonly random: () => number;
  /** Token mode's tokenizers (wiring/token-routing-wiring.ts); absent: byte mode. */
  readonly tokenRouting?: TokenRoutingDeps | undefined;
  /** A pool's bytes per token (the prompt estimate of limits and flow control). */
  readonly bytesPerToken: (pool: string) => number;
}

/** The request path's stages, wired; and what its learn stage taught, as /debug/route shows it. */
export interface RequestPathParts {
  readonly requestPath: RequestPathDeps;
  readonly learned: LearnedFigures;
  /** The leases the request path holds, which the shutdown releases at its deadline. */
  readonly heldLeases: HeldLeases;
  /** Flow control (`/debug/flow`); null when off. */
  readonly flow: FlowControl | null;
}

/** The request path (pipeline/request-path.ts), each stage given its part of the config and of the replica. */
export function wireRequestPath(config: RouterConfig, deps: RequestPathWiringDeps): RequestPathParts {
  const { state, backends, tenants, metrics, logger } = deps;
  const learner = wireLearner(config, deps);
  const heldLeases = new HeldLeases();
  const queue = config.flowControl ? wireQueue(config, deps) : null;
  const routeDeps = {
    registry: backends.registry,
    state: state.state,
    policyFor: deps.policies.policyFor,
    nowMs: deps.nowMs,
    random: deps.random,
    leaseRenewIntervalMs: state.leaseRenewIntervalMs,
    prefillDoneDelayMs: state.prefillDoneDelayMs,
    nonStreamingPrefillDoneFactor: config.nonStreamingPrefillDoneFactor,
    engineStates: state.engineStates,
    heldLeases,
    metrics,
    logger: logger.child({ component: 'route' }),
  };
  const adapters = config.loraRouting ? wireAdapters(config, deps) : null;
  const requestPath: RequestPathDeps = {
    parse: {
      blockSizeBytes: config.blockSizeBytes,
      maxRoutedBlocks: config.maxRoutedBlocks,
      maxJsonDepth: config.maxJsonDepth,
      requestStreamUsage: config.requestStreamUsage,
      limits: generationLimitsOf(config),
      salter: tenants.salter,
      servedModels: () => backends.registry.models(),
      multipartBodyLimitBytes: config.multipartBodyLimitBytes,
      ...(deps.tokenRouting === undefined ? {} : { tokenRouting: deps.tokenRouting }),
    },
    route: routeDeps,
    send: {
      upstreams: backends.upstreams,
      connectionLostRetryMs: config.connectionLostRetryMs,
      timers: NODE_TIMERS,
      metrics,
      logger: logger.child({ component: 'proxy' }),
    },
    deadlines: tryDeadlinesOf(config),
    learn: learner,
    retry: { maxAttempts: config.maxAttempts, retryBackoffMs: config.retryBackoffMs, random: deps.random },
    metrics,
    limit: tenants.limit,
    queue,
    tenants: tenants.tenants,
    models: new ModelAccess(
      tenants.tenants,
      (model) => adapters?.baseOf(model) ?? backends.registry.baseModelOf(model),
    ),
    routingHeaders: config.routingHeaders,
    requestLine: requestLineStarter(logger.child({ component: 'requests' }), config.logRequests),
    responses: { owners: state.responseOwners, logger: logger.child({ component: 'responses' }), metrics },
    adapters,
    prefill: {
      settings: {
        protocol: config.pdProtocol,
        minUncachedTokens: config.pdMinUncachedTokens,
        prefillTimeoutMs: config.pdPrefillTimeoutMs,
        prefillTries: config.pdPrefillTries,
        maxAnswerBytes: PREFILL_ANSWER_MAX_BYTES,
        bytesPerToken: deps.bytesPerToken,
      },
      // The prefill backend is chosen by its own policy, leased and recorded like any try.
      route: { ...routeDeps, policyFor: (pool) => deps.policies.prefillPolicyFor(pool) },
      upstreams: backends.upstreams,
      learn: learner,
      metrics,
      logger: logger.child({ component: 'prefill' }),
      random: deps.random,
    },
  };
  const learned: LearnedFigures = {
    costModel: (pool) => deps.policies.costModel(pool),
    retentionMs: (backendId) => learner.retentionMs(backendId),
    reportsCachedTokens: (backendId) => learner.reportsCachedTokens(backendId),
  };
  return { requestPath, learned, heldLeases, flow: queue?.flow ?? null };
}

/** Largest prefill answer read (its params at most MAX_PREFILL_PARAMS_BYTES, plus one token's choice and usage). */
const PREFILL_ANSWER_MAX_BYTES = 2 * MAX_PREFILL_PARAMS_BYTES;

/**
 * Flow control (`flowControl`; flow/flow-control.ts): the pools' queues shared in Redis (the request
 * path's connection), with this replica's own queue while Redis is away, or alone without Redis.
 */
function wireQueue(config: RouterConfig, deps: RequestPathWiringDeps): QueueDeps {
  const settings: FlowSettings = {
    maxInflightPerBackend: config.flowMaxInflightPerBackend,
    expressShare: config.flowExpressShare,
    saturationWaiting: config.flowSaturationWaiting,
    saturationKvUsage: config.flowSaturationKvUsage,
    maxQueueWaitMs: config.flowMaxQueueWaitMs,
    maxQueuedRequests: config.flowMaxQueuedRequests,
    maxQueuedBytes: config.flowMaxQueuedBytes,
    pollMs: config.flowPollMs,
    leaseTtlMs: config.leaseTtlMs,
    sharedRetryMs: 1_000,
  };
  const clockMs = (): number => performance.now();
  const flow = new FlowControl({
    settings,
    shared: deps.state.redis === null ? null : new RedisFlowQueue({ redis: deps.state.redis }),
    local: new LocalFlowQueue(clockMs),
    nowMs: clockMs,
    metrics: deps.metrics,
    logger: deps.logger.child({ component: 'queue' }),
    liveReplicas: deps.tenants.liveReplicas,
  });
  return {
    flow,
    settings,
    engineStates: deps.state.engineStates,
    tenants: deps.tenants.tenants,
    bytesPerToken: deps.bytesPerToken,
    reservedCompletionTokens: config.reservedCompletionTokens,
  };
}

/** The learn stage: what responses say corrects the routing state and calibrates the policies' cost model. */
function wireLearner(config: RouterConfig, deps: RequestPathWiringDeps): Learner {
  const { policies, state } = deps;
  return createLearner({
    metrics: deps.metrics,
    state: state.state,
    logger: deps.logger.child({ component: 'learn' }),
    clockMs: () => performance.now(),
    correctOwnership: config.learnFromResponses,
    calibrate: config.calibrateCostModel,
    calibrationFlushMs: config.calibrationFlushMs,
    prefillMsPerToken: (pool) => policies.prefillMsPerToken(pool),
    onLearned: (pool, learned) => policies.applyLearned(pool, learned),
    lastRestartMs: (backendId) => state.engineStates?.lastRestartMs(backendId) ?? null,
  });
}

/** Each try's deadline by what it waits for, built once (a request picks one, allocating nothing). */
function tryDeadlinesOf(config: RouterConfig): TryDeadlines {
  return {
    stream: { until: 'first-output', ms: config.streamFirstByteTimeoutMs },
    whole: { until: 'end', ms: config.generationTimeoutMs },
    // A stored response's call bounded like a stream's first byte, but a dictionary read needs no more than 30 s.
    storedResponse: {
      until: 'headers',
      ms: Math.min(config.streamFirstByteTimeoutMs, STORED_RESPONSE_HEADERS_TIMEOUT_MS),
    },
  };
}

/** LoRA adapter routing (lora/adapter-routing.ts), with on-demand loads when `loraAdapters` lists any. */
function wireAdapters(config: RouterConfig, deps: RequestPathWiringDeps): AdapterRouting {
  const { state, backends } = deps;
  const residencyOf = (engineId: string) => state.engineStates?.loraAdapters(engineId) ?? null;
  const loader =
    config.loraAdapters.length === 0
      ? null
      : new AdapterLoader({
          adapters: config.loraAdapters,
          book:
            state.redis === null ? new LocalAdapterLoads(deps.nowMs) : new RedisAdapterLoads({ redis: state.redis }),
          upstreams: backends.upstreams,
          times: {
            claimMs: config.loraLoadTimeoutMs,
            spacingMs: config.loraLoadSpacingMs,
            unavailableMs: config.loraUnavailableMs,
            loadedTtlMs: ADAPTER_LOADED_TTL_MS,
          },
          maxAdaptersPerBackend: config.loraMaxAdaptersPerBackend,
          adaptersOn: (backend) => backends.registry.modelsOf(backend.id),
          refreshModelsOf: (backend) => backends.registry.refreshModelsOf(backend),
          runs: (backend, adapter) => residencyOf(backend.engineId)?.running.includes(adapter) ?? false,
          lastSentMs: (adapter, backend) => routing.lastSentMs(adapter, backend.id),
          nowMs: deps.nowMs,
          sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
          logger: deps.logger.child({ component: 'lora' }),
          metrics: deps.metrics,
        });
  const routing: AdapterRouting = new AdapterRouting({
    registry: backends.registry,
    loader,
    residencyOf,
    prices: { loadMs: config.loraLoadMs, slotWaitMs: config.loraSlotWaitMs, recentMs: config.loraRecentMs },
    nowMs: deps.nowMs,
  });
  return routing;
}

/** Where routers loaded an adapter is remembered this long after its last load (an engine restart forgets it sooner). */
const ADAPTER_LOADED_TTL_MS = 3_600_000;
