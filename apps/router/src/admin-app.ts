import type { AdapterRouting } from './lora/adapter-routing';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { registerAdminAuth } from './admin/admin-auth';
import type { FlowControl } from './flow/flow-control';
import type { AuthFailureLimiter } from './admin/auth-failure-limiter';
import { registerErrorHandler } from './http/error-handler';
import { registerBodyParser } from './pipeline/parse';
import type { ParseOptions } from './pipeline/parse';
import type { RouteDeps } from './pipeline/route';
import type { RouterMetrics } from './router-metrics';
import { adminRoutes, type AdminRoutesOptions } from './routes/admin-routes';
import type { PrefillDeps } from './pipeline/prefill';
import { debugRoutes, type LearnedFigures } from './routes/debug-routes';

export interface AdminAppDeps {
  /** The bearer token every request must carry (`adminToken` / `adminTokenFile`). */
  readonly token: string;
  readonly limiter: AuthFailureLimiter;
  /** Audit lines (one per change and per refused attempt) go here: `component: admin-audit`. */
  readonly audit: FastifyBaseLogger;
  readonly admin: Omit<AdminRoutesOptions, 'audit'>;
  /** /debug/route's needs; null = not served (`debugRoutes` off). */
  readonly debug: {
    readonly route: RouteDeps;
    readonly parse: ParseOptions;
    readonly learned: LearnedFigures;
    /** A disaggregated model's prefill leg, explained too. */
    readonly prefill?: PrefillDeps;
    /** LoRA adapters, explained as routed; null: adapter-blind. */
    readonly adapters?: AdapterRouting | null;
  } | null;
  readonly metrics: RouterMetrics;
  readonly logger: FastifyBaseLogger | false;
  /** Flow control, for `GET /debug/flow`; null: off (not served). */
  readonly flow: FlowControl | null;
}

/** An admin body is one backend spec, a debug body one generation request: the public limit would do, but this listener need not accept 16 MiB. */
const ADMIN_REQUEST_BODY_LIMIT_BYTES = 4 * 1024 * 1024;

/**
 * The admin listener's app, apart from the public one (its own port, loopback by default): the token gate
 * first, then the admin API and /debug/route. The public app does not register these, so the public port
 * answers them 404 like any unknown path.
 */
export async function buildAdminApp(deps: AdminAppDeps): Promise<FastifyInstance> {
  const serverOptions = {
    bodyLimit: ADMIN_REQUEST_BODY_LIMIT_BYTES,
    requestTimeout: 30_000,
    // Admin requests are short; one half-sent must not hold the shutdown past its deadline (the
    // resources after it in the close order would be skipped): close ends every connection at once.
    forceCloseConnections: true,
    logController: new LogController({ disableRequestLogging: true }),
  };
  const app: FastifyInstance =
    deps.logger === false
      ? Fastify({ ...serverOptions, logger: false })
      : (Fastify({ ...serverOptions, loggerInstance: deps.logger }) as unknown as FastifyInstance);
  registerErrorHandler(app, deps.metrics);
  registerAdminAuth(app, { token: deps.token, limiter: deps.limiter, audit: deps.audit });
  await app.register(adminRoutes, { ...deps.admin, audit: deps.audit });
  const flow = deps.flow;
  // Flow control's queues, read only: served whenever flow control is on (the admin token guards it).
  if (flow !== null) app.get('/debug/flow', () => flow.describe());
  const debug = deps.debug;
  if (debug !== null) {
    // The request path's own body parser, so /debug/route parses exactly what a real request would.
    await app.register(async (scope) => {
      registerBodyParser(scope, ADMIN_REQUEST_BODY_LIMIT_BYTES, debug.parse.maxJsonDepth);
      await scope.register(debugRoutes, debug);
    });
  }
  return app;
}
