import { lookup } from 'node:dns/promises';
import { readFileSync } from 'node:fs';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { createLogger, loadUpstreamKeys, settlesWithin, ShutdownStack } from '@kvroute/platform';
import { policyParamsFromSettings, type RoutingStateStore } from '@kvroute/routing';
import { buildAdminApp } from './admin-app';
import { AuthFailureLimiter } from './admin/auth-failure-limiter';
import { BackendAddressPolicy, type ResolveHost } from './admin/backend-address-policy';
import { buildRouterApp } from './app';
import type { BackendRegistry } from './backends/backend-registry';
import { adminTokenOf, generationLimitsOf, type RouterConfig } from './config';
import { RequestDrain, type ShutdownPhase } from './http/request-drain';
import type { RequestPathDeps } from './pipeline/request-path';
import type { LearnedFigures } from './routes/debug-routes';
import { createLearner } from './pipeline/learn';
import { STORED_RESPONSE_HEADERS_TIMEOUT_MS } from './pipeline/stored-response';
import { PolicyTable } from './routing/policy-table';
import { NODE_TIMERS } from './one-shot-timers';
import { RouterMetrics } from './router-metrics';
import { HeldLeases } from './routing/held-leases';
import { wireBackends } from './wiring/backends-wiring';
import { readDiscoverySettings, wireDiscovery } from './wiring/discovery-wiring';
import { wireState } from './wiring/state-wiring';
import { wireTenants } from './wiring/tenants-wiring';

export interface RouterServer {
  readonly app: FastifyInstance;
  readonly registry: BackendRegistry;
  readonly state: RoutingStateStore;
  readonly metrics: RouterMetrics;
  /** Where the replica is in its shutdown (`serving` until `beginDraining` or `close`). */
  readonly phase: ShutdownPhase;
  /** HTTP requests in flight. */
  readonly inflightRequests: number;
  /** In-flight leases this replica holds. */
  readonly heldLeases: number;
  /** Starts model discovery, then listens (public, then admin listener); returns the public base URL. */
  listen(): Promise<string>;
  /** The admin listener's base URL once listening; null without an admin token, or before `listen`. */
  readonly adminUrl: string | null;
  /**
   * Readiness fails from now on and every response carries `Connection: close`; requests are still
   * served. `close` starts with this.
   */
  beginDraining(): void;
  /** The graceful shutdown (SIGTERM): see `close` in `createRouterServer`. Runs once; later calls return the same promise. */
  close(options?: RouterCloseOptions): Promise<RouterCloseReport>;
}

export interface RouterCloseOptions {
  /** How long to go on serving, draining, before the listener closes (main.ts: `shutdownDrainDelayMs`). Default 0. */
  readonly drainDelayMs?: number;
  /** How long in-flight requests may take once the listener is closed. Default `shutdownGraceMs`. */
  readonly graceMs?: number;
}

export interface RouterCloseReport {
  /** Requests in flight when the listener closed, after the drain delay. */
  readonly inflightAtClose: number;
  /** Requests aborted at the grace deadline (0: every request finished). */
  readonly aborted: number;
  /** Leases the shutdown itself released (requests aborted before their own release ran). */
  readonly leasesReleasedAtDeadline: number;
  /** False if some lease release calls had not ended when the connections to the state store closed. */
  readonly releasesSettled: boolean;
  readonly elapsedMs: number;
}

/** Bytes per token of a routing text when the policy has no such figure (cacheaware's default is 4). */
const DEFAULT_BYTES_PER_TOKEN = 4;
/** After the last request: how long the release calls under way may take before Redis closes anyway. */
const RELEASE_SETTLE_MS = 2_000;
/** After the deadline's abort: how long aborted streams get to write their error event before their connections are cut. */
const ABORT_FLUSH_MS = 250;
/** A connection whose response just ended may carry one more request: how long no request must run before the idle ones close. */
const QUIET_BEFORE_CLOSE_MS = 200;
/** Peers whose wrong admin tokens are remembered at once (admin/auth-failure-limiter.ts): ~100 B each. */
const ADMIN_MAX_TRACKED_PEERS = 10_000;
/** What the background loops and connections get to close, after the requests (see CLOSE_TAIL_MS). */
const RESOURCES_CLOSE_MS = 2_500;

/**
 * Upper bound of what `close` takes after its drain delay and grace (abort and flush, lease releases,
 * the closers stack: ABORT_FLUSH_MS + RELEASE_SETTLE_MS + RESOURCES_CLOSE_MS and room).
 * main.ts gives the shutdown stack drain + grace + this.
 */
export const CLOSE_TAIL_MS = 5_000;

export interface RouterServerDeps {
  readonly logger?: FastifyBaseLogger | false;
  readonly nowMs?: () => number;
  readonly random?: () => number;
  /** Routing state (default: in memory, for a single replica). */
  readonly state?: RoutingStateStore;
  /** How backend host names are resolved for the SSRF check (default: the system resolver, every address). */
  readonly resolveHost?: ResolveHost;
  /** Where `apiKeyEnv`/`upstreamApiKeyEnv` are read (main.ts: `process.env`; default: none set). */
  readonly env?: Readonly<Record<string, string | undefined>>;
}

/**
 * Builds one router replica from its config, by concern: routing state (wiring/state-wiring.ts),
 * backends (wiring/backends-wiring.ts), policies, then the app and its request path (app.ts). Each part
 * pushes its closers onto one stack as it opens a resource; `close` drains HTTP, then runs the stack.
 */
export async function createRouterServer(config: RouterConfig, deps: RouterServerDeps = {}): Promise<RouterServer> {
  const nowMs = deps.nowMs ?? (() => Date.now());
  const random = deps.random ?? Math.random;
  const logger = deps.logger === false ? undefined : deps.logger;
  const requestLogger = logger ?? createLogger({ service: 'kvroute-router', level: 'silent' });
  // Policies first: pure, and a parameter out of range fails here, before anything is opened.
  const policies = new PolicyTable({
    policy: config.policy,
    passthroughPolicy: config.passthroughPolicy,
    params: policyParamsFromSettings(config),
    calibratedFigures: config.calibrateCostModel ? config.calibratedFigures : [],
  });
  // Upstream keys next: a named key file or variable that cannot be read fails the start before anything opens.
  const upstreamKeys = loadUpstreamKeys(config, { env: deps.env ?? {} });
  const adminToken = adminTokenOf(config, (path) => readFileSync(path, 'utf8'));
  const discoverySettings = readDiscoverySettings(config, deps.env ?? {}, (path) => readFileSync(path, 'utf8'));
  const addressPolicy = new BackendAddressPolicy({
    allowlist: config.backendAllowlist,
    redisUrl: config.redisUrl,
    resolve: deps.resolveHost ?? resolveAll,
  });
  await refuseDeniedBackends(config, addressPolicy, logger);
  const closers = new ShutdownStack();
  const metrics = new RouterMetrics();

  const state = wireState(config, { nowMs, logger, metrics, state: deps.state }, closers);
  const backends = wireBackends(
    config,
    {
      nowMs,
      random,
      logger,
      state: state.state,
      redis: state.redis,
      engineStates: state.engineStates,
      metrics,
      upstreamKeys,
      addressPolicy,
    },
    closers,
  );
  const discovery =
    discoverySettings &&
    wireDiscovery(
      discoverySettings,
      config,
      {
        registry: backends.registry,
        changes: backends.changes,
        redis: state.redis,
        addressPolicy,
        metrics,
        nowMs,
        logger,
      },
      closers,
    );
  metrics.readFrom({
    // The state keeps a departed backend's count (0 once its requests ended): shown only while registered
    // or still running requests, so discovered pods that left do not stay in /metrics forever.
    inflight: () =>
      new Map(
        [...state.state.inflightCounts()].filter(([id, count]) => count > 0 || backends.registry.get(id) !== undefined),
      ),
    breakerStates: () => new Map(backends.registry.backends.map((backend) => [backend.id, backend.breaker.stateCode])),
    degraded: () => (state.failover?.degraded ? 1 : 0),
  });

  const tenants = wireTenants(
    config,
    {
      redis: state.redis,
      nowMs,
      logger: requestLogger.child({ component: 'tenants' }),
      bytesPerToken: (pool) => policies.costModel(pool).inUse.bytesPerToken ?? DEFAULT_BYTES_PER_TOKEN,
      readFile: (path) => readFileSync(path, 'utf8'),
    },
    closers,
  );
  const learner = createLearner({
    metrics,
    state: state.state,
    logger: requestLogger.child({ component: 'learn' }),
    clockMs: () => performance.now(),
    correctOwnership: config.learnFromResponses,
    calibrate: config.calibrateCostModel,
    calibrationFlushMs: config.calibrationFlushMs,
    prefillMsPerToken: (pool) => policies.prefillMsPerToken(pool),
    onLearned: (pool, learned) => policies.applyLearned(pool, learned),
    lastRestartMs: (backendId) => state.engineStates?.lastRestartMs(backendId) ?? null,
  });
  const drain = new RequestDrain();
  const heldLeases = new HeldLeases();
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
    },
    route: {
      registry: backends.registry,
      state: state.state,
      policyFor: policies.policyFor,
      nowMs,
      random,
      leaseRenewIntervalMs: state.leaseRenewIntervalMs,
      prefillDoneDelayMs: state.prefillDoneDelayMs,
      engineStates: state.engineStates,
      heldLeases,
      metrics,
      logger: requestLogger.child({ component: 'route' }),
    },
    send: {
      upstreams: backends.upstreams,
      connectionLostRetryMs: config.connectionLostRetryMs,
      timers: NODE_TIMERS,
      metrics,
      logger: requestLogger.child({ component: 'proxy' }),
    },
    deadlines: {
      stream: { until: 'first-output', ms: config.streamFirstByteTimeoutMs },
      whole: { until: 'end', ms: config.generationTimeoutMs },
      storedResponse: {
        until: 'headers',
        ms: Math.min(config.streamFirstByteTimeoutMs, STORED_RESPONSE_HEADERS_TIMEOUT_MS),
      },
    },
    learn: learner,
    retry: { maxAttempts: config.maxAttempts, retryBackoffMs: config.retryBackoffMs, random },
    metrics,
    limit: tenants.limit,
    tenants: tenants.tenants,
    routingHeaders: config.routingHeaders,
    responses: { owners: state.responseOwners, logger: requestLogger.child({ component: 'responses' }), metrics },
  };
  const learned: LearnedFigures = {
    costModel: (pool) => policies.costModel(pool),
    retentionMs: (backendId) => learner.retentionMs(backendId),
    reportsCachedTokens: (backendId) => learner.reportsCachedTokens(backendId),
  };
  const app = await buildRouterApp({
    registry: backends.registry,
    requestPath,
    metrics,
    limits: {
      requestBodyLimitBytes: config.requestBodyLimitBytes,
      requestBodyTimeoutMs: config.requestBodyTimeoutMs,
      requestHeadersTimeoutMs: config.requestHeadersTimeoutMs,
      keepAliveTimeoutMs: config.keepAliveTimeoutMs,
      maxHeaderBytes: config.maxHeaderBytes,
      maxConnections: config.maxConnections,
      maxInflightRequests: config.maxInflightRequests,
    },
    learned,
    authenticator: tenants.authenticator,
    logger: deps.logger ?? false,
    drain,
    startedAtUnixSeconds: Math.floor(Date.now() / 1000),
  }).catch(async (error: unknown) => {
    // What the wiring opened (Redis connections, pools) must not outlive a router that never started.
    await closers.closeAll({ deadlineMs: RESOURCES_CLOSE_MS });
    throw error;
  });

  // The admin listener (admin API, /debug/route) is its own server; it closes with the other resources,
  // after the public requests, so an operator can still drain or inspect during the shutdown.
  const adminApp =
    adminToken === null
      ? null
      : await buildAdminApp({
          token: adminToken,
          limiter: new AuthFailureLimiter({
            maxFailures: config.adminMaxAuthFailures,
            windowMs: config.adminAuthWindowMs,
            maxPeers: ADMIN_MAX_TRACKED_PEERS,
            nowMs,
          }),
          audit: requestLogger.child({ component: 'admin-audit' }),
          admin: {
            addressPolicy,
            registry: backends.registry,
            changes: backends.changes,
            inflight: () => state.state.inflightCounts(),
            sharedVersion: backends.sharedVersion,
            apiKeys: tenants.apiKeys,
            nowMs,
          },
          debug: config.debugRoutes ? { route: requestPath.route, parse: requestPath.parse, learned } : null,
          metrics,
          logger: deps.logger ?? false,
        }).catch(async (error: unknown) => {
          await app.close();
          await closers.closeAll({ deadlineMs: RESOURCES_CLOSE_MS });
          throw error;
        });
  if (adminApp !== null) closers.push('admin listener', () => adminApp.close());
  let adminUrl: string | null = null;

  /**
   * The graceful shutdown, in order:
   * 1. drain: /readyz answers 503 at once and every response carries `Connection: close`, while
   *    requests are still served for `drainDelayMs`, long enough for the balancer's health check to take
   *    the replica out and for active keep-alive clients to move to other replicas;
   * 2. the listener closes (idle connections with it); requests under way, and any a client sends on a
   *    connection still open, are served to their end for up to `graceMs`;
   * 3. at that deadline, what still runs is aborted (streams end with the router's error event and
   *    `[DONE]`) and every lease left is released;
   * 4. the lease releases under way are awaited (bounded), then the closers stack runs: background
   *    loops stop, connection pools close, Redis last (QUIT), so no in-flight count is left behind.
   */
  const closeOnce = async (options: RouterCloseOptions): Promise<RouterCloseReport> => {
    const startedAt = performance.now();
    const drainDelayMs = options.drainDelayMs ?? 0;
    const graceMs = options.graceMs ?? config.shutdownGraceMs;
    drain.beginDraining();
    if (drainDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, drainDelayMs));
    drain.beginClosing();
    const inflightAtClose = drain.inflight;
    const serverClosed = app.close();
    const graceEndsAt = performance.now() + graceMs;
    let finished = await drain.waitUntilIdle(graceMs, QUIET_BEFORE_CLOSE_MS);
    if (finished) {
      // Every connection left is idle: close them (a request arriving meanwhile keeps its connection
      // open, and is served until the deadline).
      app.server.closeIdleConnections();
      finished = await settlesWithin(serverClosed, Math.max(graceEndsAt - performance.now(), QUIET_BEFORE_CLOSE_MS));
    }
    let aborted = 0;
    let leasesReleasedAtDeadline = 0;
    if (!finished) {
      aborted = drain.inflight;
      drain.beginAborting();
      logger?.warn({ requests: aborted, graceMs }, 'shutdown grace passed: aborting the requests still in flight');
      await backends.upstreams.destroy();
      leasesReleasedAtDeadline = heldLeases.releaseAll();
      await drain.waitUntilIdle(ABORT_FLUSH_MS);
      app.server.closeAllConnections();
    }
    await serverClosed;
    leasesReleasedAtDeadline += heldLeases.releaseAll();
    const releasesSettled = await heldLeases.settled(RELEASE_SETTLE_MS);
    await closers.closeAll({ deadlineMs: RESOURCES_CLOSE_MS, ...(logger ? { logger } : {}) });
    return {
      inflightAtClose,
      aborted,
      leasesReleasedAtDeadline,
      releasesSettled,
      elapsedMs: Math.round(performance.now() - startedAt),
    };
  };
  let closing: Promise<RouterCloseReport> | undefined;

  return {
    app,
    registry: backends.registry,
    state: state.state,
    metrics,
    get phase() {
      return drain.phase;
    },
    get inflightRequests() {
      return drain.inflight;
    },
    get heldLeases() {
      return heldLeases.size;
    },
    async listen() {
      await state.start();
      await tenants.start();
      await backends.start();
      await discovery?.start();
      const url = await app.listen({ host: config.host, port: config.port });
      if (adminApp !== null) {
        // An admin port already taken must not leave the public listener serving without it.
        adminUrl = await adminApp
          .listen({ host: config.adminHost, port: config.adminPort })
          .catch(async (error: unknown) => {
            await app.close();
            throw error;
          });
      }
      return url;
    },
    get adminUrl() {
      return adminUrl;
    },
    beginDraining() {
      drain.beginDraining();
    },
    close(options = {}) {
      closing ??= closeOnce(options);
      return closing;
    },
  };
}

/** Every address of a name, as the system resolver (and so a connection) would see them. */
const resolveAll: ResolveHost = async (hostname) =>
  (await lookup(hostname, { all: true })).map((entry) => ({
    address: entry.address,
    family: entry.family === 6 ? 6 : 4,
  }));

/**
 * The configured backends pass the same address check as admin adds: a denied one fails the start before
 * anything connects. A name that does not resolve yet (DNS not ready at start) is let through, as before.
 */
async function refuseDeniedBackends(
  config: RouterConfig,
  policy: BackendAddressPolicy,
  logger: FastifyBaseLogger | undefined,
): Promise<void> {
  for (const backend of config.backends) {
    const verdict = await policy.check(backend.url);
    if (verdict.allowed) continue;
    if (verdict.unresolved === true) {
      logger?.warn(
        { url: backend.url, reason: verdict.reason },
        'backend address not checked: it does not resolve yet',
      );
      continue;
    }
    throw new Error(`backends: ${backend.url} is not an allowed backend: ${verdict.reason} (backendAllowlist)`);
  }
}
