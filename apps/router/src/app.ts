import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { MAX_RESPONSE_ID_CHARS } from '@kvroute/protocols';
import type { BackendRegistry } from './backends/backend-registry';
import { canonicalUrl } from './http/canonical-path';
import { createClientErrorHandler } from './http/client-error';
import { lingerBeforeClose } from './http/lingering-close';
import { createFrameworkErrorHandler, registerErrorHandler } from './http/error-handler';
import type { ClientConnections } from './http/client-connections';
import type { RequestDrain } from './http/request-drain';
import { registerAdmit } from './pipeline/admit';
import { acceptProxyProtocol } from './http/proxy-protocol';
import { registerBodyParser } from './pipeline/parse';
import { createRequestPath, type RequestPathDeps } from './pipeline/request-path';
import { createStoredResponsePath } from './pipeline/stored-response';
import {
  STORED_RESPONSE_SEARCH_MAX_PARALLEL,
  STORED_RESPONSE_SEARCH_TIMEOUT_MS,
} from './pipeline/stored-response-search';
import type { RouterMetrics } from './router-metrics';
import type { Authenticator } from './tenants/authenticate';
import { generationRoutes, requestIdFrom } from './routes/generation-routes';
import { modelsRoutes } from './routes/models-routes';
import { probesRoutes } from './routes/probes-routes';
import type { ReadinessReport } from './routes/readiness';
import { responsesRoutes } from './routes/responses-routes';

declare module 'fastify' {
  interface FastifyRequest {
    /** performance.now() when the request arrived (TTFT and latency are measured from here). */
    arrivedAtMs: number;
  }
}

/** How the HTTP server treats clients: every bound a hostile client could otherwise stretch. */
export interface ClientLimits {
  readonly requestBodyLimitBytes: number;
  /** Headers and body must have arrived within this long (Node's requestTimeout): a slow body gets 408. */
  readonly requestBodyTimeoutMs: number;
  readonly requestHeadersTimeoutMs: number;
  readonly keepAliveTimeoutMs: number;
  readonly maxHeaderBytes: number;
  readonly maxConnections: number;
  /** Connections one client address may hold (admit.ts, pipeline/connection-caps.ts). */
  readonly maxConnectionsPerPeer: number;
  readonly maxInflightRequests: number;
  /** A caller's share of maxInflightRequests (admit.ts). */
  readonly maxInflightPerCaller: number;
  /** Balancers whose connections start with a PROXY header (http/proxy-protocol.ts); empty: off. */
  readonly proxyProtocolFrom: readonly string[];
  readonly proxyProtocolTimeoutMs: number;
}

export interface RouterAppDeps {
  readonly registry: BackendRegistry;
  readonly requestPath: RequestPathDeps;
  readonly metrics: RouterMetrics;
  readonly limits: ClientLimits;
  /** Readiness (routes/readiness.ts): the public /readyz answers its status only. */
  readonly readiness: () => ReadinessReport;
  /** Who a `/v1/*` request is (admit stage). */
  readonly authenticator: Authenticator;
  readonly logger: FastifyBaseLogger | false;
  /** Shutdown phase and requests in flight: readiness, `Connection: close` while draining. */
  readonly drain: RequestDrain;
  /** The client connections, closed at shutdown only once quiet (http/client-connections.ts). */
  readonly connections: ClientConnections;
  readonly startedAtUnixSeconds: number;
}

/**
 * The router's Fastify app, its table of contents: server bounds, then the request path's admit hook and
 * body parser, the error handlers, then routes, registered explicitly in order. No listen.
 */
export async function buildRouterApp(deps: RouterAppDeps): Promise<FastifyInstance> {
  const { limits } = deps;
  const serverOptions = serverOptionsOf(deps);
  const app: FastifyInstance =
    deps.logger === false
      ? Fastify({ ...serverOptions, logger: false })
      : (Fastify({ ...serverOptions, loggerInstance: deps.logger }) as unknown as FastifyInstance);

  // A connection ended after an answer is half-closed and read for a while, so that a client still sending
  // (a 413's body) reads the answer rather than a reset.
  lingerBeforeClose(app.server);
  deps.connections.attach(app.server);
  app.decorateRequest('arrivedAtMs', 0);
  app.addHook('onRequest', (request, reply, done) => {
    request.arrivedAtMs = performance.now();
    deps.drain.track(reply.raw);
    deps.connections.track(reply.raw);
    done();
  });
  registerAdmit(app, {
    drain: deps.drain,
    maxInflightRequests: limits.maxInflightRequests,
    maxConnections: limits.maxConnections,
    maxConnectionsPerPeer: limits.maxConnectionsPerPeer,
    onIdleConnectionClosed: () => deps.metrics.recordClientConnectionClosed('idle_for_room'),
    authenticator: deps.authenticator,
    maxInflightPerCaller: limits.maxInflightPerCaller,
    tenantConcurrency: (tenant) => deps.requestPath.tenants.limitsOf(tenant)?.concurrentRequests,
  });
  // After every other `connection` listener (the parser's, admit's connection caps): they see the real client.
  acceptProxyProtocol(app.server, {
    trustedFrom: limits.proxyProtocolFrom,
    timeoutMs: limits.proxyProtocolTimeoutMs,
    onRefused: (reason, balancer) => {
      deps.metrics.recordClientConnectionClosed('proxy_header');
      app.log.warn({ balancer, reason }, 'connection closed: no valid PROXY header');
    },
  });
  registerBodyParser(
    app,
    limits.requestBodyLimitBytes,
    deps.requestPath.parse.maxJsonDepth,
    deps.requestPath.parse.multipartBodyLimitBytes,
  );
  registerErrorHandler(app, deps.metrics);

  await app.register(generationRoutes, { handlerFor: createRequestPath(deps.requestPath) });
  await app.register(responsesRoutes, {
    handlerFor: createStoredResponsePath({
      owners: deps.requestPath.responses.owners,
      registry: deps.registry,
      tenants: deps.requestPath.tenants,
      send: deps.requestPath.send,
      deadline: deps.requestPath.deadlines.storedResponse,
      metrics: deps.metrics,
      logger: deps.requestPath.responses.logger,
      search: {
        upstreams: deps.requestPath.send.upstreams,
        maxParallel: STORED_RESPONSE_SEARCH_MAX_PARALLEL,
        timeoutMs: STORED_RESPONSE_SEARCH_TIMEOUT_MS,
      },
    }),
  });
  await app.register(modelsRoutes, {
    registry: deps.registry,
    createdUnixSeconds: deps.startedAtUnixSeconds,
    access: deps.requestPath.models,
    adapters: deps.requestPath.adapters,
  });
  // /healthz and a /readyz with its status only: what an L4 balancer checks. The full readiness and
  // /metrics are on the ops listener (ops-app.ts): backend addresses and load stay off the public port.
  await app.register(probesRoutes, { readiness: deps.readiness, detail: 'status' });
  // The admin API and /debug/route are not here: they have a listener of their own (admin-app.ts).
  return app;
}

/** The public server's options: every bound a client could stretch, errors in the OpenAI shape, request ids. */
function serverOptionsOf(deps: RouterAppDeps) {
  const { limits } = deps;
  return {
    bodyLimit: limits.requestBodyLimitBytes,
    // Node's requestTimeout bounds receiving the request (headers and body), not the response: streams
    // last as long as generation does, bounded by the upstream timeouts.
    requestTimeout: limits.requestBodyTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    http: {
      headersTimeout: Math.min(limits.requestHeadersTimeoutMs, limits.requestBodyTimeoutMs),
      maxHeaderSize: limits.maxHeaderBytes,
      // How often Node checks those two timeouts (its default, 30 s, would let a slow body overstay by that much).
      connectionsCheckingInterval: Math.max(25, Math.min(1_000, Math.floor(limits.requestBodyTimeoutMs / 10))),
    },
    clientErrorHandler: createClientErrorHandler(deps.metrics),
    // Paths Fastify's router refuses itself (bad escapes, over-long parameters) answered in the OpenAI shape.
    frameworkErrors: createFrameworkErrorHandler(deps.metrics),
    // The one path parameter is a response id (`/v1/responses/{id}`): as long as a valid one may be, so a
    // 101–128 character id is served, and a longer one is refused (400) before the handler runs.
    routerOptions: { maxParamLength: MAX_RESPONSE_ID_CHARS },
    // While closing, requests already on an open connection are served (with `Connection: close`), not
    // answered 503: the balancer sent them before the replica left the rotation (RequestDrain).
    return503OnClosing: false,
    genReqId: (request: { headers: Record<string, string | string[] | undefined> }) =>
      requestIdFrom(request.headers['x-request-id']),
    // One spelling per endpoint before routing (trailing slash, letter case): http/canonical-path.ts.
    rewriteUrl: (request: { url?: string }) => canonicalUrl(request.url ?? '/'),
    // Per-request access logs would cost more than routing; decisions are logged at debug.
    logController: new LogController({ disableRequestLogging: true }),
  };
}
