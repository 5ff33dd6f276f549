import { buildInfo } from '@kvroute/platform';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { PollerMetrics } from './poller-metrics';

export interface PollerAppDeps {
  readonly metrics: PollerMetrics;
  /** True once shutdown began: /healthz answers 503 so an orchestrator stops counting on this replica. */
  readonly isClosing: () => boolean;
  /** Whether this replica's scrape worker is running (taking jobs). */
  readonly isWorking: () => boolean;
  readonly logger?: FastifyBaseLogger | false;
}

/**
 * The poller's own tiny HTTP server: `GET /healthz` (200 while its worker takes scrape jobs, 503 before
 * that and once shutting down), `GET /version` (`{ version, commit }`) and `GET /metrics` (its Prometheus registry). Fastify, as every other
 * kvroute server: the same logger, error handling and `inject()` in tests.
 */
export async function buildPollerApp(deps: PollerAppDeps): Promise<FastifyInstance> {
  const app: FastifyInstance =
    deps.logger === false || deps.logger === undefined
      ? Fastify({ logger: false })
      : (Fastify({ loggerInstance: deps.logger }) as unknown as FastifyInstance);
  // Probes and scrapes come every few seconds: their request lines would drown the log.
  const quiet = { logLevel: 'warn' } as const;
  app.get('/healthz', quiet, async (_request, reply) => {
    const working = deps.isWorking() && !deps.isClosing();
    return reply.code(working ? 200 : 503).send({ status: working ? 'ok' : deps.isClosing() ? 'closing' : 'starting' });
  });
  app.get('/version', quiet, async () => buildInfo());
  app.get('/metrics', quiet, async (_request, reply) =>
    reply.type(deps.metrics.registry.contentType).send(await deps.metrics.registry.metrics()),
  );
  await app.ready();
  return app;
}
