import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { ShutdownStack } from '@kvroute/platform';
import { buildAdminApp } from '../admin-app';
import { AuthFailureLimiter } from '../admin/auth-failure-limiter';
import type { BackendAddressPolicy } from '../admin/backend-address-policy';
import { buildRouterApp, type ClientLimits } from '../app';
import { buildOpsApp } from '../ops-app';
import { readinessReport, type ReadinessReport } from '../routes/readiness';
import type { RouterConfig } from '../config';
import { RESOURCES_CLOSE_MS } from '../http/graceful-close';
import { ClientConnections } from '../http/client-connections';
import { RequestDrain } from '../http/request-drain';
import type { RouterMetrics } from '../router-metrics';
import type { BackendParts } from './backends-wiring';
import type { RequestPathParts } from './request-path-wiring';
import type { StateParts } from './state-wiring';
import { cacheViewOf } from '../backends/cache-views';
import type { TenantParts } from './tenants-wiring';

/** Peers whose wrong admin tokens are remembered at once (admin/auth-failure-limiter.ts): ~100 B each. */
const ADMIN_MAX_TRACKED_PEERS = 10_000;

export interface AppsWiringDeps {
  readonly state: StateParts;
  readonly backends: BackendParts;
  readonly tenants: TenantParts;
  readonly paths: RequestPathParts;
  readonly metrics: RouterMetrics;
  /** The admin listener's token (null: no admin listener). */
  readonly adminToken: string | null;
  readonly addressPolicy: BackendAddressPolicy;
  /** The apps' own logger (false: none). */
  readonly logger: FastifyBaseLogger | false;
  /** The admin API's audit lines go to a child of this one (`component: admin-audit`). */
  readonly requestLogger: FastifyBaseLogger;
  /** Wall-clock ms. */
  readonly nowMs: () => number;
}

export interface AppParts {
  /** The public app: the request path and the other public routes. */
  readonly app: FastifyInstance;
  /** The public app's shutdown phase and requests in flight (readiness, `Connection: close` while draining). */
  readonly drain: RequestDrain;
  /** The public app's client connections (closed at shutdown once quiet). */
  readonly connections: ClientConnections;
  /** The ops listener (/metrics, the full /readyz, /healthz): always there, on `opsHost`:`opsPort`. */
  readonly opsApp: FastifyInstance;
  /** The admin listener (admin API, /debug/route); null without an admin token. */
  readonly adminApp: FastifyInstance | null;
}

/**
 * The public app, then the ops listener and the admin listener, each its own server: they close with
 * the other resources (pushed onto `closers`, so the admin listener first, then ops), after the public
 * requests, so an operator can still drain or inspect and Prometheus still scrape during the shutdown.
 * If one fails to build, what the wiring opened (Redis connections, pools) is closed before the error
 * goes on: it must not outlive a router that never started.
 */
export async function wireApps(config: RouterConfig, deps: AppsWiringDeps, closers: ShutdownStack): Promise<AppParts> {
  const { paths, backends, metrics } = deps;
  const drain = new RequestDrain();
  const connections = new ClientConnections();
  const closeAndThrow = async (error: unknown): Promise<never> => {
    await closers.closeAll({ deadlineMs: RESOURCES_CLOSE_MS });
    throw error;
  };
  const readiness = (): ReadinessReport =>
    readinessReport({
      registry: backends.registry,
      isShuttingDown: () => drain.isShuttingDown,
      // `app` is assigned below, before anything can ask (the listeners open after wireApps returns).
      isListening: () => app.server.listening,
      reportsCachedTokens: (backendId) => paths.learned.reportsCachedTokens(backendId),
      cacheViewOf: (backendId) =>
        cacheViewOf(
          backends.eventStreams?.isFollowed(backendId) ?? false,
          paths.learned.reportsCachedTokens(backendId),
        ),
      degradedReasons: () => deps.state.degradedReasons(),
    });
  const app = await buildRouterApp({
    registry: backends.registry,
    requestPath: paths.requestPath,
    metrics,
    limits: clientLimitsOf(config),
    readiness,
    authenticator: deps.tenants.authenticator,
    logger: deps.logger,
    drain,
    connections,
    startedAtUnixSeconds: Math.floor(Date.now() / 1000),
  }).catch(closeAndThrow);
  const opsApp = await buildOpsApp({ metrics, readiness, logger: deps.logger }).catch(async (error: unknown) => {
    await app.close();
    return closeAndThrow(error);
  });
  closers.push('ops listener', () => opsApp.close());
  if (deps.adminToken === null) return { app, drain, connections, opsApp, adminApp: null };
  const adminApp = await buildAdminApp({
    token: deps.adminToken,
    limiter: new AuthFailureLimiter({
      maxFailures: config.adminMaxAuthFailures,
      windowMs: config.adminAuthWindowMs,
      maxPeers: ADMIN_MAX_TRACKED_PEERS,
      nowMs: deps.nowMs,
    }),
    audit: deps.requestLogger.child({ component: 'admin-audit' }),
    admin: {
      addressPolicy: deps.addressPolicy,
      registry: backends.registry,
      changes: backends.changes,
      inflight: () => deps.state.state.inflightCounts(),
      sharedVersion: backends.sharedVersion,
      apiKeys: deps.tenants.apiKeys,
      nowMs: deps.nowMs,
    },
    debug: config.debugRoutes
      ? {
          route: paths.requestPath.route,
          parse: paths.requestPath.parse,
          learned: paths.learned,
          prefill: paths.requestPath.prefill,
          adapters: paths.requestPath.adapters,
        }
      : null,
    flow: paths.flow,
    metrics,
    logger: deps.logger,
  }).catch(async (error: unknown) => {
    await app.close();
    return closeAndThrow(error);
  });
  closers.push('admin listener', () => adminApp.close());
  return { app, drain, connections, opsApp, adminApp };
}

/** The public server's bounds on its clients (app.ts ClientLimits), from config. */
function clientLimitsOf(config: RouterConfig): ClientLimits {
  return {
    requestBodyLimitBytes: config.requestBodyLimitBytes,
    requestBodyTimeoutMs: config.requestBodyTimeoutMs,
    requestHeadersTimeoutMs: config.requestHeadersTimeoutMs,
    keepAliveTimeoutMs: config.keepAliveTimeoutMs,
    maxHeaderBytes: config.maxHeaderBytes,
    maxConnections: config.maxConnections,
    maxConnectionsPerPeer: connectionsPerPeerOf(config),
    maxInflightRequests: config.maxInflightRequests,
    maxInflightPerCaller: inflightPerCallerOf(config),
    proxyProtocolFrom: config.proxyProtocolFrom,
    proxyProtocolTimeoutMs: config.proxyProtocolTimeoutMs,
  };
}

/** A caller's share of the replica's in-flight requests: as configured, else half (at least one). */
export function inflightPerCallerOf(config: RouterConfig): number {
  return config.maxInflightPerCaller > 0
    ? config.maxInflightPerCaller
    : Math.max(1, Math.floor(config.maxInflightRequests / 2));
}

/** Connections one client address may hold: as configured, else a quarter of maxConnections (at least one). */
export function connectionsPerPeerOf(config: RouterConfig): number {
  return config.maxConnectionsPerPeer > 0
    ? config.maxConnectionsPerPeer
    : Math.max(1, Math.floor(config.maxConnections / 4));
}
