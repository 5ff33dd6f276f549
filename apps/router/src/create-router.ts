import { readFileSync } from 'node:fs';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { createLogger, ShutdownStack } from '@kvroute/platform';
import { DEFAULT_BYTES_PER_TOKEN, type RoutingStateStore } from '@kvroute/routing';
import type { BackendAddressPolicy, Listener, ResolveHost } from './admin/backend-address-policy';
import type { BackendRegistry } from './backends/backend-registry';
import { cacheViewOf } from './backends/cache-views';
import { opsHostOf, type RouterConfig } from './config';
import { closeGracefully, type RouterCloseOptions, type RouterCloseReport } from './http/graceful-close';
import type { ShutdownPhase } from './http/request-drain';
import { RouterMetrics } from './router-metrics';
import { wireApps, type AppParts } from './wiring/apps-wiring';
import { wireBackends, type BackendParts } from './wiring/backends-wiring';
import { wireDiscovery, type DiscoveryParts } from './wiring/discovery-wiring';
import type { FlowControl } from './flow/flow-control';
import { wireRequestPath, type RequestPathParts } from './wiring/request-path-wiring';
import { wireTokenRouting } from './wiring/token-routing-wiring';
import { readStartInputs } from './wiring/start-inputs';
import { wireState, type StateParts } from './wiring/state-wiring';
import { wireTenants, type TenantParts } from './wiring/tenants-wiring';

export { CLOSE_TAIL_MS, type RouterCloseOptions, type RouterCloseReport } from './http/graceful-close';

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
  /** Starts model discovery, then listens (ops, then public, then admin listener); returns the public base URL. */
  listen(): Promise<string>;
  /** The admin listener's base URL once listening; null without an admin token, or before `listen`. */
  readonly adminUrl: string | null;
  /** The ops listener's base URL (/metrics, the full /readyz) once listening; null before `listen`. */
  readonly opsUrl: string | null;
  /**
   * Readiness fails from now on and every response carries `Connection: close`; requests are still
   * served. `close` starts with this.
   */
  beginDraining(): void;
  /** The graceful shutdown (SIGTERM): see `close` in `createRouterServer`. Runs once; later calls return the same promise. */
  close(options?: RouterCloseOptions): Promise<RouterCloseReport>;
}

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
 * Builds one router replica from its config, by concern: what is read and checked before anything opens
 * (wiring/start-inputs.ts), routing state (wiring/state-wiring.ts), backends (wiring/backends-wiring.ts)
 * and their discovery, tenants, the request path (wiring/request-path-wiring.ts), then the apps
 * (wiring/apps-wiring.ts). Each part pushes its closers onto one stack as it opens a resource; `close`
 * drains HTTP, then runs the stack (http/graceful-close.ts).
 */
export async function createRouterServer(config: RouterConfig, deps: RouterServerDeps = {}): Promise<RouterServer> {
  const { nowMs, random, logger, requestLogger, readText, env } = runtimeOf(deps);
  const inputs = await readStartInputs(config, { env, resolveHost: deps.resolveHost, readText, logger });
  const { policies, upstreamKeys, adminToken, addressPolicy } = inputs;
  const closers = new ShutdownStack();
  const metrics = new RouterMetrics();

  const state = wireState(config, { nowMs, logger, metrics, state: deps.state }, closers);
  const { redis, engineStates, state: routingState } = state;
  const backends = wireBackends(
    config,
    { nowMs, random, logger, state: routingState, redis, engineStates, metrics, upstreamKeys, addressPolicy },
    closers,
  );
  const { registry, changes } = backends;
  const discoveryDeps = { registry, changes, redis, addressPolicy, metrics, nowMs, logger };
  const discovery = inputs.discovery && wireDiscovery(inputs.discovery, config, discoveryDeps, closers);
  // A pool's prompt estimate for the token limits: the routing text's bytes per token the policy uses now.
  const bytesPerToken = (pool: string): number =>
    policies.costModel(pool).inUse.bytesPerToken ?? DEFAULT_BYTES_PER_TOKEN;
  const tenantsLogger = requestLogger.child({ component: 'tenants' });
  const tenants = wireTenants(
    config,
    { redis, nowMs, logger: tenantsLogger, bytesPerToken, readFile: readText },
    closers,
  );
  const tokenRouting = wireTokenRouting(
    config,
    { metrics, baseModelOf: adapterBaseOf(config, backends.registry) },
    closers,
  );
  const paths = wireRequestPath(config, {
    tokenRouting,
    bytesPerToken,
    state,
    backends,
    tenants,
    policies,
    metrics,
    logger: requestLogger,
    nowMs,
    random,
  });
  readGaugesFrom(metrics, state, backends, paths);
  const apps = await wireApps(
    config,
    {
      state,
      backends,
      tenants,
      paths,
      metrics,
      adminToken,
      addressPolicy,
      // The servers' own lines (Fastify's, errors answered) as `http`; the root logger has no component.
      logger: logger?.child({ component: 'http' }) ?? false,
      requestLogger,
      nowMs,
    },
    closers,
  );
  return routerServerOf(config, {
    apps,
    state,
    backends,
    tenants,
    discovery,
    paths,
    metrics,
    closers,
    logger,
    addressPolicy,
  });
}

/** What a replica runs on (RouterServerDeps with their defaults). */
interface Runtime {
  /** Wall-clock ms. */
  readonly nowMs: () => number;
  readonly random: () => number;
  /** The router's own lines (start, shutdown); undefined: none. */
  readonly logger: FastifyBaseLogger | undefined;
  /** The request path's and the background parts' lines: the router's logger, or a silent one. */
  readonly requestLogger: FastifyBaseLogger;
  readonly readText: (path: string) => string;
  readonly env: Readonly<Record<string, string | undefined>>;
}

function runtimeOf(deps: RouterServerDeps): Runtime {
  const logger = deps.logger === false ? undefined : deps.logger;
  return {
    nowMs: deps.nowMs ?? (() => Date.now()),
    random: deps.random ?? Math.random,
    logger,
    requestLogger: logger ?? createLogger({ service: 'kvroute-router', level: 'silent' }),
    readText: (path) => readFileSync(path, 'utf8'),
    env: deps.env ?? {},
  };
}

/** The gauges /metrics reads when scraped: leases in flight, breaker states, whether the state is degraded. */
function readGaugesFrom(
  metrics: RouterMetrics,
  state: StateParts,
  backends: BackendParts,
  paths: RequestPathParts,
): void {
  metrics.readFrom({
    // The state keeps a departed backend's count (0 once its requests ended): shown only while registered
    // or still running requests, so discovered pods that left do not stay in /metrics forever.
    inflight: () =>
      new Map(
        [...state.state.inflightCounts()].filter(([id, count]) => count > 0 || backends.registry.get(id) !== undefined),
      ),
    breakerStates: () => new Map(backends.registry.backends.map((backend) => [backend.id, backend.breaker.stateCode])),
    roles: () => new Map(backends.registry.backends.map((backend) => [backend.id, backend.role])),
    degraded: () => (state.failover?.degraded ? 1 : 0),
    cacheViews: () =>
      new Map(
        backends.registry.backends.map((backend) => [
          backend.id,
          cacheViewOf(
            backends.eventStreams?.isFollowed(backend.id) ?? false,
            paths.learned.reportsCachedTokens(backend.id),
          ),
        ]),
      ),
    ...(paths.flow === null ? {} : { flowQueues: () => (paths.flow as FlowControl).waiting() }),
  });
}

/** A wired replica: what its RouterServer face shows, starts and closes. */
interface WiredReplica {
  readonly apps: AppParts;
  readonly state: StateParts;
  readonly backends: BackendParts;
  readonly tenants: TenantParts;
  /** Null: no `discovery`. */
  readonly discovery: DiscoveryParts | null;
  readonly paths: RequestPathParts;
  readonly metrics: RouterMetrics;
  readonly closers: ShutdownStack;
  readonly logger: FastifyBaseLogger | undefined;
  /** Told the bound listeners after listen: a backend there would be a loop. */
  readonly addressPolicy: BackendAddressPolicy;
}

/** A listen failure saying which listener failed (the cause kept). */
function listenerError(listener: string, error: unknown): Error {
  return new Error(`${listener}: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
}

/** The socket an app listens on (none if it is not listening). */
function boundListener(app: FastifyInstance): Listener[] {
  const bound = app.server.address();
  return bound === null || typeof bound === 'string' ? [] : [{ address: bound.address, port: bound.port }];
}

function routerServerOf(config: RouterConfig, replica: WiredReplica): RouterServer {
  const { app, opsApp, adminApp, drain } = replica.apps;
  const { heldLeases } = replica.paths;
  const closing = { ...replica.apps, heldLeases, upstreams: replica.backends.upstreams, closers: replica.closers };
  let adminUrl: string | null = null;
  let opsUrl: string | null = null;
  let closed: Promise<RouterCloseReport> | undefined;
  return {
    app,
    registry: replica.backends.registry,
    state: replica.state.state,
    metrics: replica.metrics,
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
      // The background parts in order: state, tenants, backends (model discovery), backend discovery.
      await replica.state.start();
      await replica.tenants.start();
      await replica.backends.start();
      await replica.discovery?.start();
      // The ops listener first: probes and metrics are there by the time the public port takes traffic
      // (readiness stays 503 until the public listener is up: routes/readiness.ts). A port already
      // taken must not leave a listener serving without the others: those opened so far close, and
      // the start fails. Named, since 9464 is also the poller's default: `listen EADDRINUSE` alone
      // would not say which listener.
      opsUrl = await opsApp
        .listen({ host: opsHostOf(config), port: config.opsPort })
        .catch((error: unknown) => Promise.reject(listenerError('ops listener (opsPort)', error)));
      const opened: FastifyInstance[] = [opsApp];
      const closeOpened = async (error: unknown): Promise<never> => {
        for (const listener of opened) await listener.close();
        throw error;
      };
      const url = await app.listen({ host: config.host, port: config.port }).catch(closeOpened);
      opened.push(app);
      if (adminApp !== null)
        adminUrl = await adminApp.listen({ host: config.adminHost, port: config.adminPort }).catch(closeOpened);
      const listeners = [app, opsApp, ...(adminApp === null ? [] : [adminApp])];
      replica.addressPolicy.denyOwnListeners(listeners.flatMap(boundListener));
      return url;
    },
    get adminUrl() {
      return adminUrl;
    },
    get opsUrl() {
      return opsUrl;
    },
    beginDraining() {
      drain.beginDraining();
    },
    close(options = {}) {
      closed ??= closeGracefully(
        { ...closing, defaultGraceMs: config.shutdownGraceMs, logger: replica.logger },
        options,
      );
      return closed;
    },
  };
}

/** Token mode's view of LoRA adapters: the base model of one a backend lists or the router may load; null: none. */
function adapterBaseOf(config: RouterConfig, registry: BackendRegistry): (model: string) => string | null {
  if (!config.loraRouting) return () => null;
  const loadable = new Map(config.loraAdapters.map((adapter) => [adapter.name, adapter.base]));
  return (model) => registry.baseModelOf(model) ?? loadable.get(model) ?? null;
}
