import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { RoutingPolicy } from '@kvroute/routing';
import type { BackendRegistry } from './backends/backend-registry';
import { registerErrorHandler } from './http/error-handler';
import { registerJsonBodyParser } from './http/json-body';
import type { RequestDrain } from './http/request-drain';
import type { UpstreamPools } from './proxy/upstream-pool';
import type { RouterMetrics } from './router-metrics';
import type { RouteContext } from './routing/route-request';
import { adminRoutes, type AdminRoutesOptions } from './routes/admin-routes';
import { debugRoutes } from './routes/debug-routes';
import { generationRoutes, requestIdFrom } from './routes/generation-routes';
import { metricsRoutes } from './routes/metrics-routes';
import { modelsRoutes } from './routes/models-routes';
import { probesRoutes } from './routes/probes-routes';

declare module 'fastify' {
  interface FastifyRequest {
    /** performance.now() when the request arrived (TTFT and latency are measured from here). */
    arrivedAtMs: number;
  }
}

export interface RouterAppDeps {
  readonly registry: BackendRegistry;
  readonly upstreams: UpstreamPools;
  readonly routing: RouteContext;
  readonly metrics: RouterMetrics;
  readonly policyFor: (pool: string, kind: 'generation' | 'passthrough') => RoutingPolicy;
  readonly blockSizeBytes: number;
  readonly requestBodyLimitBytes: number;
  readonly maxAttempts: number;
  readonly retryBackoffMs: number;
  readonly debugRoutes: boolean;
  /** The admin API's options (token, backend changes); null = no admin API (`adminToken` unset). */
  readonly admin: AdminRoutesOptions | null;
  readonly logger: FastifyBaseLogger | false;
  /** Shutdown phase and requests in flight: readiness, `Connection: close` while draining. */
  readonly drain: RequestDrain;
  readonly startedAtUnixSeconds: number;
}

/** The router's Fastify app: body parser, error handler, then routes, registered explicitly in order. No listen. */
export async function buildRouterApp(deps: RouterAppDeps): Promise<FastifyInstance> {
  const serverOptions = {
    bodyLimit: deps.requestBodyLimitBytes,
    // Streams last as long as generation does; upstream timeouts, not the server's, bound a request.
    requestTimeout: 0,
    keepAliveTimeout: 65_000,
    // While closing, requests already on an open connection are served (with `Connection: close`), not
    // answered 503: the balancer sent them before the replica left the rotation (RequestDrain).
    return503OnClosing: false,
    genReqId: (request: { headers: Record<string, string | string[] | undefined> }) => requestIdFrom(request.headers['x-request-id']),
    // Per-request access logs would cost more than routing; decisions are logged at debug.
    logController: new LogController({ disableRequestLogging: true }),
  };
  const app: FastifyInstance =
    deps.logger === false ? Fastify({ ...serverOptions, logger: false }) : (Fastify({ ...serverOptions, loggerInstance: deps.logger }) as unknown as FastifyInstance);
  const logger = deps.logger === false ? app.log : deps.logger;

  app.decorateRequest('arrivedAtMs', 0);
  app.addHook('onRequest', (request, reply, done) => {
    request.arrivedAtMs = performance.now();
    deps.drain.track(reply.raw);
    done();
  });
  registerJsonBodyParser(app, deps.requestBodyLimitBytes);
  registerErrorHandler(app, deps.metrics);

  await app.register(generationRoutes, {
    registry: deps.registry,
    policyFor: deps.policyFor,
    blockSizeBytes: deps.blockSizeBytes,
    refusesRequests: () => deps.drain.phase === 'aborting',
    forward: {
      upstreams: deps.upstreams,
      routing: deps.routing,
      metrics: deps.metrics,
      logger: logger.child({ component: 'proxy' }),
      maxAttempts: deps.maxAttempts,
      retryBackoffMs: deps.retryBackoffMs,
    },
  });
  await app.register(modelsRoutes, { registry: deps.registry, createdUnixSeconds: deps.startedAtUnixSeconds });
  await app.register(probesRoutes, { registry: deps.registry, isShuttingDown: () => deps.drain.isShuttingDown });
  await app.register(metricsRoutes, { metrics: deps.metrics });
  if (deps.debugRoutes) {
    await app.register(debugRoutes, { registry: deps.registry, routing: deps.routing, policyFor: deps.policyFor, blockSizeBytes: deps.blockSizeBytes });
  }
  if (deps.admin) await app.register(adminRoutes, deps.admin);
  return app;
}
