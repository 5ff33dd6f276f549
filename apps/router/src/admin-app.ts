import type { AdapterRouting } from './lora/adapter-routing';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { registerAdminAuth } from './admin/admin-auth';
import type { FlowControl } from './flow/flow-control';
import type { AuthFailureLimiter } from './admin/auth-failure-limiter';
import { createSideListenerApp } from './http/side-listener-app';
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
/** An admin request's whole time, ms (they are short). */
const ADMIN_REQUEST_TIMEOUT_MS = 30_000;

/**
 * The admin listener's app, apart from the public one (its own port, loopback by default): the token gate
 * first, then the admin API and /debug/route. The public app does not register these, so the public port
 * answers them 404 like any unknown path.
 */
export async function buildAdminApp(deps: AdminAppDeps): Promise<FastifyInstance> {
  const app = createSideListenerApp({
    bodyLimitBytes: ADMIN_REQUEST_BODY_LIMIT_BYTES,
    requestTimeoutMs: ADMIN_REQUEST_TIMEOUT_MS,
    logger: deps.logger,
    metrics: deps.metrics,
  });
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
