import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { createSideListenerApp } from './http/side-listener-app';
import type { RouterMetrics } from './router-metrics';
import { metricsRoutes } from './routes/metrics-routes';
import { probesRoutes } from './routes/probes-routes';
import type { ReadinessReport } from './routes/readiness';

export interface OpsAppDeps {
  readonly metrics: RouterMetrics;
  /** The public app's readiness (its drain phase decides it): the same reading, in full here. */
  readonly readiness: () => ReadinessReport;
  readonly logger: FastifyBaseLogger | false;
}

/** Scrapes and probes send no body; anything larger is not one of them. */
const OPS_REQUEST_BODY_LIMIT_BYTES = 16 * 1024;
/** A scrape of the whole registry takes milliseconds; a request still arriving after this is not a scraper. */
const OPS_REQUEST_TIMEOUT_MS = 10_000;

/**
 * The ops listener's app (`opsHost`:`opsPort`, 9464 by default): what Prometheus and the orchestrator
 * read, off the public port. `GET /metrics`, the full `GET /readyz` (backend addresses, cache views,
 * why degraded) and `GET /healthz`. No auth: the port is meant for the cluster's network (a
 * NetworkPolicy or the host's firewall keep it there), not for clients.
 */
export async function buildOpsApp(deps: OpsAppDeps): Promise<FastifyInstance> {
  const app = createSideListenerApp({
    bodyLimitBytes: OPS_REQUEST_BODY_LIMIT_BYTES,
    requestTimeoutMs: OPS_REQUEST_TIMEOUT_MS,
    logger: deps.logger,
    metrics: deps.metrics,
  });
  await app.register(probesRoutes, { readiness: deps.readiness, detail: 'full' });
  await app.register(metricsRoutes, { metrics: deps.metrics });
  return app;
}
