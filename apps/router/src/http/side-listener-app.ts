import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { RouterMetrics } from '../router-metrics';
import { registerErrorHandler } from './error-handler';

/**
 * The Fastify app of a listener beside the public one (ops-app.ts, admin-app.ts): bounded bodies and request time,
 * no per-request log lines, the router's error shape. `forceCloseConnections`: its requests are short, and one
 * half-sent (or a slow scraper) must not hold the shutdown past its deadline, which would skip the resources after
 * it in the close order.
 */
export function createSideListenerApp(options: {
  readonly bodyLimitBytes: number;
  readonly requestTimeoutMs: number;
  readonly logger: FastifyBaseLogger | false;
  readonly metrics: RouterMetrics;
}): FastifyInstance {
  const serverOptions = {
    bodyLimit: options.bodyLimitBytes,
    requestTimeout: options.requestTimeoutMs,
    forceCloseConnections: true,
    logController: new LogController({ disableRequestLogging: true }),
  };
  const app: FastifyInstance =
    options.logger === false
      ? Fastify({ ...serverOptions, logger: false })
      : (Fastify({ ...serverOptions, loggerInstance: options.logger }) as unknown as FastifyInstance);
  registerErrorHandler(app, options.metrics);
  return app;
}
